"""Set up Beamwise in ./.venv and run it: `python packaging/bootstrap.py run|test|setup` (`--help` says more).

This file only checks the Python that runs it, and is written so that every Python from 2.7 on can read it (no
f-strings, no annotations, no `:=`): an older Python is refused in one line, not with a SyntaxError from code it
cannot parse. The set-up itself, which needs Python 3.11, is packaging/venv_setup.py.
"""

import os
import sys

MIN_PYTHON = (3, 11)  # venv_setup.MIN_PYTHON, which the .venv's Python is held to, is the same (a test compares)


def running_version():
    return tuple(sys.version_info[:3])


def python_problem(version):
    """Refuse an old Python before anything is created or downloaded."""
    if tuple(version[:2]) >= MIN_PYTHON:
        return None
    dotted = ".".join(str(part) for part in version)
    return "Beamwise needs Python 3.11 or newer; this is " + dotted + ": run it with python3.11 (Windows: py -3.11)"


def load_setup():
    """packaging/venv_setup.py, found beside this file whatever sys.path holds (`python -P`, PYTHONSAFEPATH)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "venv_setup.py")
    spec = importlib.util.spec_from_file_location("beamwise_venv_setup", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv):
    problem = python_problem(running_version())
    if problem:
        sys.stderr.write("bootstrap: " + problem + "\n")
        return 1
    return load_setup().main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
