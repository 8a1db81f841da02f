"""No import loop between the modules of `app/`, counting the imports of `if TYPE_CHECKING:` blocks and those
inside functions: every import is read from the source, none is run; each room of `app/api/` imports only
what its `__init__.py` says it may; and neither `app/api/` nor `app/limits/` imports the settings
(docs/ARCHITECTURE.md, Rooms)."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import app

ROOT = Path(app.__file__).parent.parent


LEAVES = {"paths", "versions", "errors", "extensions", "sanity", "faults"}
"""The modules at the top of `app/api/` but `deps`: any room may import them; they import none of `api/`."""
MAY_IMPORT: dict[str, set[str]] = {
    "leaves": set(),
    "deps": {"edge.auth", "edge.metrics", "card.build"},
    "edge": {"edge", *LEAVES},
    "card": {"card", "deps", "edge.auth", *LEAVES},
    "ops": {"ops", "deps", "card", *LEAVES},
    "bindings": {"bindings", "deps", "edge", "card", "ops", *LEAVES},
    "endpoints": {"endpoints", "deps", "edge.auth", *LEAVES},
}
"""What each room's modules may import (a module, or a package and everything in it), below `app.api`: the
rule each `__init__.py` states. `deps` names the card and the metrics for types only."""


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


def room(module: str) -> str:
    """The room of `app/api/` a module is in: its sub-package, `deps`, or the leaves at the top."""
    first = module.removeprefix("app.api").removeprefix(".").split(".")[0]
    if first in MAY_IMPORT or first == "deps":
        return first
    return "leaves"


def may_import(module: str, imported: str) -> bool:
    below = imported.removeprefix("app.api.")
    return any(below == allowed or below.startswith(allowed + ".") for allowed in MAY_IMPORT[room(module)])


def api_imports() -> dict[str, set[str]]:
    """The modules of `app/api/` and those of `app/api/` each imports."""
    return {
        m: {i for i in found if i.startswith("app.api")}
        for m, found in imports(ROOT).items()
        if m.startswith("app.api")
    }


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = imports(ROOT)
    assert "app.api.card.build" in graph["app.api.deps"]  # in `if TYPE_CHECKING:`
    assert "app.api.deps" in graph["app.api.card.routes"]  # `from ..deps import components`
    assert "app.api.card.signing" in graph["app.api.card.build"]  # `from . import signing`
    assert "app.api.ops.v03" in graph["app.api.bindings.jsonrpc"]  # `from ..ops import v03 as ops_v03`
    assert "app.api.edge.auth" in graph["app.api.edge.auth_guard"]  # `from .auth import ...`
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


def test_each_room_imports_only_what_it_may() -> None:
    graph = api_imports()
    assert {room(m) for m in graph} == set(MAY_IMPORT)  # every sub-package is walked
    top = {m for m in graph if room(m) == "leaves"}
    assert top == {"app.api", *(f"app.api.{leaf}" for leaf in LEAVES)}, "a new module at the top of app/api/"
    wrong = sorted(f"{m} -> {i}" for m, imported in graph.items() for i in imported if not may_import(m, i))
    assert not wrong, "imports against the rooms' rules (their __init__.py): " + ", ".join(wrong)


def test_the_edge_and_the_limits_never_import_the_settings() -> None:
    """The rule of docs/ARCHITECTURE.md: `grep -rn app.settings app/api app/limits` is empty. They get options
    objects built from the settings where the app is assembled (`AuthOptions`, `CardOptions`, `GrpcOptions`,
    `LimitOptions`, the plain values of `Components`), as the agents get their `AgentOptions`."""
    graph = imports(ROOT)
    below = ("app.api", "app.limits")
    wrong = sorted(
        f"{m} -> {i}"
        for m, imported in graph.items()
        if m.startswith(below)
        for i in imported
        if i.startswith("app.settings")
    )
    assert not wrong, "modules of app/api or app/limits import the settings: " + ", ".join(wrong)
    named = [
        f"{p.relative_to(ROOT)}:{n}"
        for room in ("api", "limits")
        for p in sorted((ROOT / "app" / room).rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"app\.settings|get_settings", line)
    ]
    assert named == []
