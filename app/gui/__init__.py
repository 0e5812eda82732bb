"""The Beamwise desktop window (PySide6): the only Qt code in the project."""
