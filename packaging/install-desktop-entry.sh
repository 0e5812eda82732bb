#!/bin/sh
# Adds Beamwise to the desktop's application menu for this user (run it from the unpacked folder).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
target="${XDG_DATA_HOME:-$HOME/.local/share}/applications"
mkdir -p "$target"
sed "s|@APPDIR@|$here|g" "$here/beamwise.desktop.in" > "$target/beamwise.desktop"
echo "Beamwise is in the application menu ($target/beamwise.desktop)"
