"""The frozen app's console entry point: `beamwise ...`, exactly the `beamwise` command of a source install."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
