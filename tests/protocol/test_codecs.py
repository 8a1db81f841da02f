"""Both wire codecs, round trip: domain → wire checked against the normative definitions (the v0.3 JSON
Schema, the v1.0 proto through the official SDK's compiled types) → domain again, unchanged."""

from __future__ import annotations

import json

import jsonschema
import pytest
from a2a.types import Message as PbMessage, StreamResponse as PbStreamResponse, Task as PbTask
from google.protobuf.json_format import MessageToDict, ParseDict

from app.protocol import json_v03, protojson_v10
from app.protocol.events import ArtifactUpdate, StatusUpdate
from app.protocol.model import Artifact, Message, Part, Role, StateTransition, Task, TaskState, TaskStatus
from tests.support.server import ROOT

SCHEMA = json.loads((ROOT / "tests" / "support" / "data" / "a2a-v0.3.0.schema.json").read_text())


def v03_valid(instance: dict, definition: str) -> None:
    jsonschema.validate(instance, {**SCHEMA, "$ref": f"#/definitions/{definition}"})


def rich_message(role: Role = Role.USER) -> Message:
    return Message(
        message_id="m-1",
        role=role,
        parts=[
            Part(text="hello", metadata={"lang": "en"}),
            Part(raw=b"\x89PNG\r\n", media_type="image/png", filename="a.png"),
            Part(url="https://files.example/x.pdf", media_type="application/pdf", filename="x.pdf"),
            Part(data={"k": [1, 2, {"z": None}]}),
        ],
        context_id="c-1",
        task_id="t-1",
        reference_task_ids=["t-0"],
        extensions=["https://ext.example/v1"],
        metadata={"trace": "abc"},
    )


def rich_task() -> Task:
    status = TaskStatus(TaskState.INPUT_REQUIRED, "2026-11-25T10:00:00.123Z", rich_message(Role.AGENT))
    return Task(
        id="t-1",
        context_id="c-1",
        status=status,
        history=[rich_message(), rich_message(Role.AGENT)],
        artifacts=[
            Artifact("a-1", [Part(text="out")], name="assistant-response", description="d", metadata={"x": 1})
        ],
        metadata={"owner": "me"},
        transitions=[StateTransition(TaskState.SUBMITTED, "2026-11-25T09:59:59.000Z")],
    )


def test_v10_message_round_trip_through_the_proto():
    original = rich_message()
    wire = protojson_v10.encode_message(original)
    proto = ParseDict(wire, PbMessage())  # strict: unknown or misspelt fields fail
    back, _, _ = protojson_v10.decode_send({"message": MessageToDict(proto)})
    assert back == original


def test_v10_task_and_events_parse_as_the_proto():
    task = protojson_v10.encode_task(rich_task())
    assert MessageToDict(ParseDict(task, PbTask())) == task
    status = protojson_v10.encode_event(StatusUpdate("t-1", "c-1", rich_task().status, final=False))
    artifact = protojson_v10.encode_event(
        ArtifactUpdate("t-1", "c-1", Artifact("a-1", [Part(text="x")]), append=True, last_chunk=True)
    )
    for event in (status, artifact, {"task": task}):
        assert MessageToDict(ParseDict(event, PbStreamResponse())) == event


def test_v03_message_round_trip_through_the_schema():
    original = rich_message()
    wire = json_v03.encode_message(original)
    v03_valid(wire, "Message")
    back, _, _ = json_v03.decode_send({"message": wire})
    assert back == original


def test_v03_task_and_events_validate_against_the_schema():
    v03_valid(json_v03.encode_task(rich_task()), "Task")
    v03_valid(
        json_v03.encode_event(StatusUpdate("t-1", "c-1", rich_task().status, final=True)),
        "TaskStatusUpdateEvent",
    )
    update = ArtifactUpdate("t-1", "c-1", Artifact("a-1", [Part(text="x")]), append=True, last_chunk=False)
    v03_valid(json_v03.encode_event(update), "TaskArtifactUpdateEvent")


@pytest.mark.parametrize("state", list(TaskState))
def test_every_state_has_a_name_in_both_versions(state):
    status = TaskStatus(state, "2026-11-25T10:00:00.000Z")
    v03_valid(json_v03.encode_status(status), "TaskStatus")
    assert protojson_v10.parse_state(protojson_v10.encode_status(status)["state"]) is state
