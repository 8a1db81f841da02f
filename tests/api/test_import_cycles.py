"""No import loop between the modules of `app/`, counting the imports of `if TYPE_CHECKING:` blocks and those
inside functions: every import is read from the source, none is run (docs/ARCHITECTURE.md, Rooms)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import app

ROOT = Path(app.__file__).parent.parent


def imports(root: Path, room: str = "app") -> dict[str, set[str]]:
    """Each module under `root/room` (dotted name) and the modules there it imports anywhere in it."""
    files = {}
    for path in sorted((root / room).rglob("*.py")):
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
    """A loop of imports (each module imports the next, the first again last), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))  # the sorter reports it the other way: each needed by the next
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every loop, so a failure names them all: each found has its first arrow dropped to find the next."""
    graph = {name: set(found) for name, found in graph.items()}
    loops = []
    while (loop := cycle(graph)) is not None:
        loops.append(loop)
        graph[loop[0]].discard(loop[1])
    return loops


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = imports(ROOT)
    assert "app.api.card" in graph["app.api.deps"]  # in `if TYPE_CHECKING:`
    assert "app.api.deps" in graph["app.api.card_routes"]  # `from .deps import components`
    assert "app.api.card_signing" in graph["app.api.card"]  # `from . import card_signing`
    assert "app.tasks.live" in graph["app.api.deps"]  # `from app.tasks.live import ...`, another room


def test_a_loop_is_found() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert len(cycles({"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}})) == 2


def test_no_import_loop_in_app() -> None:
    found = cycles(imports(ROOT))
    assert not found, "import loops in app/ (each module imports the next):\n" + "\n".join(
        " -> ".join(loop) for loop in found
    )
