#!/bin/sh
# Adds Beamwise to the desktop's application menu for this user (run it from the unpacked folder).
# Any folder name works (spaces, & | % $ " ` \): no sed, the folder is escaped as the Desktop Entry
# specification asks, and the entry is written to a temporary file that replaces the old one only when complete.
set -eu
here=$(cd "$(dirname -- "$0")" && pwd)
target="${XDG_DATA_HOME:-$HOME/.local/share}/applications"
case $here in
    *"
"*) echo "install-desktop-entry.sh: the folder name $here has a line break; move Beamwise to another folder" >&2
        exit 1 ;;
esac

# replace_all TEXT FROM TO: TEXT with every FROM replaced by TO, both taken literally.
replace_all() {
    rest=$1
    out=
    while :; do
        case $rest in
            *"$2"*) out=$out${rest%%"$2"*}$3; rest=${rest#*"$2"} ;;
            *) printf '%s' "$out$rest"; return ;;
        esac
    done
}

# Icon= is a string: only the backslash is escaped. Exec= quotes its argument: \ " ` $ take a backslash inside
# the quotes, then the string's own escaping doubles every backslash, and % (a field code) is written %%.
icon_dir=$(replace_all "$here" '\' '\\')
exec_dir=$(replace_all "$here" '\' '\\')
for special in '"' '`' '$'; do
    exec_dir=$(replace_all "$exec_dir" "$special" "\\$special")
done
exec_dir=$(replace_all "$exec_dir" '\' '\\')
exec_dir=$(replace_all "$exec_dir" '%' '%%')

mkdir -p "$target"
partial="$target/.beamwise.desktop.$$"
trap 'rm -f "$partial"' EXIT
trap 'exit 1' HUP INT TERM
while IFS= read -r line || [ -n "$line" ]; do
    case $line in
        Exec=*) replace_all "$line" @APPDIR@ "$exec_dir" ;;
        *) replace_all "$line" @APPDIR@ "$icon_dir" ;;
    esac
    echo
done < "$here/beamwise.desktop.in" > "$partial"
mv -f "$partial" "$target/beamwise.desktop"
case $here in
    *%*) echo "install-desktop-entry.sh: note: menus built on GLib (GNOME's) cannot start a program in a folder" \
              "whose name has %; if Beamwise does not start from the menu, move it to another folder and run this" \
              "again" >&2 ;;
esac
echo "Beamwise is in the application menu ($target/beamwise.desktop)"
