"""The installed tool has no import cycle, counting the imports written inside functions too: a
cycle hidden by a late import is still two modules that each need the other."""

from __future__ import annotations

import ast
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "leaklab"


def _imports(path: Path) -> set[str]:
    """The tool's modules that ``path`` imports, wherever in the file the import is written."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "leaklab":
                found |= {f"leaklab.{alias.name}" for alias in node.names}
            elif node.module.startswith("leaklab."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("leaklab.")}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {f"leaklab.{path.stem}": path for path in TOOL.glob("*.py") if path.stem not in ("__init__", "__main__")}
    return {name: {target for target in _imports(path) if target in modules} for name, path in modules.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_the_tool_has_no_import_cycle():
    found = cycle(import_graph())
    assert found is None, f"import cycle: {' -> '.join(found)}"


def test_the_cycle_finder_finds_one():
    """The check above could not fail if the finder missed cycles."""
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None
