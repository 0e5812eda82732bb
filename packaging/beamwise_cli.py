"""The frozen app's console entry point: `beamwise ...`, exactly the `beamwise` command of a source install."""


from app.cli import exit_with, main

if __name__ == "__main__":
    exit_with(main())
