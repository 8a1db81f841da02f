"""Roles from the settings (`app/roles.py`): AGENTS or AGENTS_FILE (YAML or JSON), the default role, which
roles this process runs, each role's agent options over the server-wide ones, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app import roles
from app.settings import SettingError, Settings


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


def test_without_agents_the_adapter_is_the_role_default():
    got = roles.load(settings(agent_adapter="scripted", agent_options={"x": 1}, max_concurrent_tasks=3))
    assert list(got) == ["default"]
    role = got["default"]
    assert (role.entry.adapter, role.entry.options, role.slots, role.path, role.default, role.runs_here) == (
        "scripted",
        {"x": 1},
        3,
        "/agents/default",
        True,
        True,
    )


def test_the_role_named_default_else_the_first_is_served_at_the_root():
    first = roles.load(settings(agents={"b": {"adapter": "echo"}, "a": {"adapter": "echo"}}))
    assert list(first) == ["b", "a"] and first["b"].default and not first["a"].default
    named = roles.load(settings(agents={"b": {"adapter": "echo"}, "default": {"adapter": "echo"}}))
    assert list(named) == ["default", "b"] and named["default"].default and not named["b"].default


def test_a_roles_path_is_its_name_whatever_its_place_in_agents():
    """Reordering AGENTS moves the root alias, never a role's own endpoints."""
    one = roles.load(settings(agents={"b": {"adapter": "echo"}, "a": {"adapter": "echo"}}))
    other = roles.load(settings(agents={"a": {"adapter": "echo"}, "b": {"adapter": "echo"}}))
    assert {n: r.path for n, r in one.items()} == {n: r.path for n, r in other.items()}
    assert one["a"].path == "/agents/a" and one["b"].path == "/agents/b"


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_agents_file_in_yaml_or_json(tmp_path: Path, suffix: str):
    entries = {"agents": {"reviewer": {"adapter": "echo", "slots": 2, "card": {"name": "Reviewer"}}}}
    path = tmp_path / f"agents{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(entries))
    else:
        path.write_text("agents:\n  reviewer:\n    adapter: echo\n    slots: 2\n    card: {name: Reviewer}\n")
    got = roles.load(settings(agents_file=str(path), max_concurrent_tasks=9))
    assert got["reviewer"].slots == 2 and got["reviewer"].entry.card.name == "Reviewer"


def test_a_roles_models_are_its_own_model_and_its_list_else_agent_models():
    entries = {
        "a": {"adapter": "echo", "model": "big", "models": ["small", "big"], "timeout_s": 60},
        "b": {"adapter": "echo"},
        "c": {"adapter": "echo", "models": []},
    }
    got = roles.load(settings(agents=entries, agent_model="house", agent_models="x, y", agent_timeout_s=90))
    assert (got["a"].models, got["a"].timeout_s) == (("big", "small"), 60)
    assert (got["b"].models, got["b"].timeout_s) == (("house", "x", "y"), 90)
    assert got["c"].models == ("house",), "an empty list: the role's own model alone"
    assert roles.load(settings(agent_adapter="echo"))["default"].models == (), "no model: no choice"


def test_agent_roles_picks_what_this_process_runs():
    got = roles.load(settings(agents={"a": {"adapter": "echo"}, "b": {"adapter": "echo"}}, agent_roles="b"))
    assert [r.name for r in got.values() if r.runs_here] == ["b"]


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"agents": {"a": {"adapter": "echo", "slots": 0}}}, "role 'a', field slots:"),
        ({"agents": {"a": {"adapter": "echo", "card": {"colour": 1}}}}, "role 'a', field card.colour:"),
        ({"agents": {"a": {}}}, "role 'a', field adapter:"),
        ({"agents": {"A b": {"adapter": "echo"}}}, "role name 'A b'"),
        ({"agents": {"a": {"adapter": "echo"}}, "agent_roles": "a,z"}, "AGENT_ROLES names z"),
        ({"agents": {"a": {"adapter": "echo"}}, "agents_file": "/x.yaml"}, "not both"),
        ({"agents_file": "/nonexistent/agents.yaml"}, "cannot read"),
        ({"agents": {"a": {"adapter": "echo", "models": ["ok", " padded"]}}}, "role 'a', field models.1:"),
        ({"agents": {"a": {"adapter": "echo", "models": "one"}}}, "role 'a', field models:"),
    ],
)
def test_a_bad_entry_is_one_line_naming_role_and_field(values: dict[str, Any], says: str):
    with pytest.raises(SettingError) as err:
        roles.load(settings(**values))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_bad_file_is_named(tmp_path: Path):
    path = tmp_path / "agents.yaml"
    path.write_text("reviewer: [unclosed\n")
    with pytest.raises(SettingError, match="not valid YAML or JSON"):
        roles.load(settings(agents_file=str(path)))
