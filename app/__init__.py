"""Beamwise application layer: CLI, session store and export (no Qt outside app/gui)."""
