"""The shape of the packages: no import circle inside `app/` or `engine/`, and nothing shipped imports `tests`.

Every `import` counts, at the top of a module or inside a function: a late import hides a
circle from Python, not from the reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "engine")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Absolute names of every module `path` imports (relative imports resolved, `from m import x` as m and m.x)."""
    name = module_name(path).split(".")
    return names_in(path.read_text(encoding="utf-8"), name if path.name == "__init__.py" else name[:-1])


def names_in(source: str, package: list[str]) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def import_graph(packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports (a name that is not a module, such as a class, drops out)."""
    paths = [p for package in packages for p in (ROOT / package).rglob("*.py")]
    modules = {module_name(p): p for p in paths}
    return {name: {m for m in imported_names(path) if m in modules and m != name} for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_a_late_import_circle():
    graph = {"app.a": {"app.b"}, "app.b": {"app.c"}, "app.c": {"app.a"}, "app.d": {"app.a"}}
    assert circles(graph) == [["app.a", "app.b", "app.c"]]
    late = names_in("def f():\n    from .store import SessionStore\n", ["app"])
    assert {"app.store", "app.store.SessionStore"} <= late


def test_no_import_circle_in_app_or_engine():
    assert circles(import_graph()) == []


def test_no_shipped_module_imports_tests():
    for path in (p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        bad = {m for m in imported_names(path) if m == "tests" or m.startswith("tests.")}
        assert not bad, f"{module_name(path)} imports {sorted(bad)}"


def test_the_kv_layer_imports_neither_the_runner_nor_the_search():
    """Policies receive a decode callable (engine/kv/policy.py): the KV layer sits below the decode loop."""
    upward = ("engine.runner", "engine.search")
    for name, imported in import_graph(("engine",)).items():
        if name == "engine.kv" or name.startswith("engine.kv."):
            bad = {m for m in imported if m in upward}
            assert not bad, f"{name} imports {sorted(bad)}"
