"""No import loop between the modules of `app/api/`, counting the imports of `if TYPE_CHECKING:` blocks and
those inside functions: every import is read from the source, none is run (docs/ARCHITECTURE.md, Rooms)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import app

ROOT = Path(app.__file__).parent.parent


def api_imports(root: Path) -> dict[str, set[str]]:
    """Each module of `app/api/` (dotted name) and the modules of `app/api/` it imports anywhere in it."""
    files = {}
    for path in sorted((root / "app" / "api").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A loop of imports (each module imports the next), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))  # the sorter reports it the other way: each needed by the next
    return None


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = api_imports(ROOT)
    assert "app.api.card" in graph["app.api.deps"]  # in `if TYPE_CHECKING:`
    assert "app.api.deps" in graph["app.api.card_routes"]  # `from .deps import components`
    assert "app.api.card_signing" in graph["app.api.card"]  # `from . import card_signing`


def test_a_loop_is_found() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_loop_in_api() -> None:
    found = cycle(api_imports(ROOT))
    assert found is None, "import loop in app/api: " + " -> ".join(found or [])
