"""A run's new child meets the checks its role makes of a client's message (`wiring._admit_child`, given to
`CallsFactory` as `admit`): the media types the role takes and, for a role that takes files (a coding agent's
`RepoPolicy`), the files' names, sizes and URLs; each refusal is the protocol's error, as a client gets it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.agents.repos.policy import RepoPolicy
from app.protocol.errors import ContentTypeNotSupportedError, InvalidParamsError
from app.protocol.model import Message, Part, Role, new_id
from app.wiring import _admit_child

CODER = SimpleNamespace(input_modes=("text/plain", "*/*"), repos=RepoPolicy(max_attachment_bytes=10))
REVIEWER = SimpleNamespace(input_modes=("text/plain",), repos=None)
EVERY = {"coder": CODER, "reviewer": REVIEWER}


def child(*files: Part) -> Message:
    return Message(message_id=new_id(), role=Role.USER, parts=[Part(text="look"), *files])


def test_a_file_the_role_does_not_take_is_refused_with_its_media_type():
    png = Part(raw=b"x", filename="a.png", media_type="image/png")
    with pytest.raises(ContentTypeNotSupportedError, match="does not accept image/png"):
        _admit_child(EVERY, "reviewer", child(png))
    _admit_child(EVERY, "coder", child(png))


@pytest.mark.parametrize(
    ("part", "why"),
    [
        (Part(raw=b"x" * 11, filename="big.txt"), "has 11 bytes, over the limit of 10"),
        (Part(raw=b"x", filename="../escape.txt"), "escape.txt"),
        (Part(url="http://127.0.0.1:9/secret.txt", filename="secret.txt"), "secret.txt"),
    ],
)
def test_a_coding_roles_file_limits_hold_for_a_child(part: Part, why: str):
    with pytest.raises(InvalidParamsError, match=why) as refused:
        _admit_child(EVERY, "coder", child(part))
    assert refused.value.data == {"field": "parts"}


def test_a_role_that_takes_files_takes_a_childs_within_its_limits_and_an_unknown_role_is_left_to_the_call():
    _admit_child(EVERY, "coder", child(Part(raw=b"ok", filename="notes/a.txt")))
    _admit_child(EVERY, "nobody", child(Part(raw=b"x", media_type="image/png")))
