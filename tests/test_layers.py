"""The layers of ARCHITECTURE.md: engine knows no Qt, no SQLite and no app; only app/gui imports Qt."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_engine_imports_neither_qt_nor_sqlite_nor_app():
    for path in (ROOT / "engine").rglob("*.py"):
        bad = imported_modules(path) & {"PySide6", "sqlite_utils", "sqlite3", "app", "pyqtgraph"}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_only_app_gui_imports_qt():
    for path in (ROOT / "app").rglob("*.py"):
        if "gui" in path.relative_to(ROOT / "app").parts:
            continue
        bad = imported_modules(path) & {"PySide6", "pyqtgraph"}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_importing_the_engine_loads_no_qt_module(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys, engine.search, engine.models, app.cli, app.store; "
        "print(sorted(m for m in sys.modules if m.startswith(('PySide6', 'sqlite_utils'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "PySide6" not in out.stdout
