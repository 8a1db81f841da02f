"""The v1.0 gRPC service `lf.a2a.v1.A2AService`: each RPC runs the v1.0 op of the same name.

The request protos are the messages the REST binding builds from path, query and body, so their ProtoJSON
is the op's params as they are (`tenant` included).
"""

from __future__ import annotations

from a2a.types import a2a_pb2

from ..ops import v10 as ops_v10
from .grpc_server import Service

SERVICE = Service.of(
    a2a_pb2.DESCRIPTOR.services_by_name["A2AService"],
    "1.0",
    {**ops_v10.METHODS, **ops_v10.STREAMING},
)
