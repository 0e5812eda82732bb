"""The frozen app's window entry point (the Start-menu and desktop entry): `beamwise gui [options]`."""

import sys

from app.cli import exit_with, main

if __name__ == "__main__":
    exit_with(main(["gui", *sys.argv[1:]]))
