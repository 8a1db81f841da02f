"""A file part's bytes on the v0.3 proto wire (HTTP+JSON `/v1/...` and gRPC `a2a.v1`), checked through the
official Python SDK's own v0.3 conversions: what the server writes, the SDK reads back byte for byte, and
what the SDK writes, the server reads. @a2a-js/sdk puts the file's own bytes in the proto instead: the
server still reads those (unless they happen to be strict base64 text)."""

from __future__ import annotations

import base64

import pytest
from a2a.compat.v0_3 import a2a_v0_3_pb2, conversions, proto_utils
from a2a.types import Part as PbPart
from google.protobuf.json_format import MessageToDict, ParseDict

from app.protocol import protojson_v03
from app.protocol.model import Part

FILES = [
    b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-1\n+2\n",
    bytes(range(256)),
    b"QUJD",  # strict base64 text itself
    b"",
]


@pytest.mark.parametrize("raw", FILES)
def test_the_sdk_reads_the_bytes_the_server_writes(raw: bytes) -> None:
    wire = protojson_v03.encode_part(Part(raw=raw, media_type="text/x-diff", filename="changes.diff"))
    proto = ParseDict(wire, a2a_v0_3_pb2.Part())
    core = conversions.to_core_part(proto_utils.FromProto.part(proto))
    assert (core.raw, core.media_type, core.filename) == (raw, "text/x-diff", "changes.diff")


@pytest.mark.parametrize("raw", FILES)
def test_the_server_reads_the_bytes_the_sdk_writes(raw: bytes) -> None:
    compat = conversions.to_compat_part(PbPart(raw=raw, media_type="text/plain", filename="a.txt"))
    wire = MessageToDict(proto_utils.ToProto.part(compat))
    message = {"messageId": "m-1", "role": "ROLE_USER", "content": [wire]}
    decoded, _, _ = protojson_v03.decode_send({"message": message})
    (part,) = decoded.parts
    assert (part.raw, part.media_type, part.filename) == (raw, "text/plain", "a.txt")


@pytest.mark.parametrize("raw", [b"hello", bytes(range(256)), b"line\n"])
def test_a_files_own_bytes_in_the_proto_are_read_as_they_are(raw: bytes) -> None:
    """What @a2a-js/sdk sends: ProtoJSON of the file's bytes, one base64 deep."""
    file = {"fileWithBytes": base64.b64encode(raw).decode(), "name": "a.bin"}
    message = {"messageId": "m-1", "role": "ROLE_USER", "content": [{"file": file}]}
    decoded, _, _ = protojson_v03.decode_send({"message": message})
    assert decoded.parts[0].raw == raw
