"""The frozen app's window entry point (the Start-menu and desktop entry): `beamwise gui [options]`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["gui", *sys.argv[1:]]))
