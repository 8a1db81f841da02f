"""v0.3 input takes each field by its JSON name or the proto's snake_case name; a request that names one
field both ways with different values is refused (-32602), for every renamed field, not only `messageId`:
checked on the models themselves (no model with a renamed field may skip the check) and through the
decoders, at every level of a request."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.protocol import json_v03
from app.protocol.errors import InvalidParamsError


def models() -> list[type]:
    found: list[type] = []
    todo = [json_v03._In]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def test_every_model_with_a_renamed_field_refuses_both_names_with_different_values() -> None:
    renamed = {m: json_v03._renamed(m) for m in models() if json_v03._renamed(m)}
    names = {name for fields in renamed.values() for name, _ in fields}
    assert {"messageId", "contextId", "taskId", "historyLength", "acceptedOutputModes", "mimeType"} <= names
    for model, fields in renamed.items():
        assert issubclass(model, json_v03._Renamed), f"{model.__name__} has renamed fields {fields}"
        for name, alias in fields:
            with pytest.raises(ValueError, match=f"{name} and {alias} differ"):
                model._one_name_each({name: "one", alias: "two"})
            assert model._one_name_each({name: "same", alias: "same"}) == {name: "same", alias: "same"}


SEND = {
    "message": {
        "kind": "message",
        "messageId": "m-1",
        "role": "user",
        "contextId": "c-1",
        "parts": [
            {"kind": "text", "text": "hi"},
            {"kind": "file", "file": {"uri": "https://example.com/a.txt", "mimeType": "text/plain"}},
        ],
    },
    "configuration": {"historyLength": 2, "acceptedOutputModes": ["text/plain"]},
}


def at(params: dict[str, Any], path: tuple[Any, ...]) -> Any:
    for key in path:
        params = params[key]
    return params


@pytest.mark.parametrize(
    ("path", "name", "alias", "other"),
    [
        (("message",), "messageId", "message_id", "m-2"),
        (("message",), "contextId", "context_id", "c-2"),
        (("message", "parts", 1, "file"), "mimeType", "mime_type", "text/html"),
        (("configuration",), "historyLength", "history_length", 3),
        (("configuration",), "acceptedOutputModes", "accepted_output_modes", ["application/json"]),
    ],
)
def test_a_send_naming_a_field_both_ways_differently_is_invalid_params(
    path: tuple[Any, ...], name: str, alias: str, other: Any
) -> None:
    params = copy.deepcopy(SEND)
    at(params, path)[alias] = other
    with pytest.raises(InvalidParamsError, match=f"{name} and {alias} differ") as info:
        json_v03.decode_send(params)
    assert info.value.code == -32602
    same = copy.deepcopy(SEND)
    node = at(same, path)
    node[alias] = node[name]
    json_v03.decode_send(same)  # the same value under both names is one field


def test_get_naming_history_length_both_ways_differently_is_invalid_params() -> None:
    with pytest.raises(InvalidParamsError):
        json_v03.decode_task_query({"id": "t-1", "historyLength": 1, "history_length": 5})
    assert json_v03.decode_task_query({"id": "t-1", "historyLength": 1, "history_length": 1}) == ("t-1", 1)
