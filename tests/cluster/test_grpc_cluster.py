"""gRPC through the cluster: nginx's HTTP/2 `grpc_pass` server in front of the replicas' gRPC ports.

The card (from any replica) advertises nginx's gRPC address; the official SDK client made from it sends and
streams through nginx; a cancel sent to a replica that does not hold the task is forwarded to the one
that does, as for HTTP.
"""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    TaskNotCancelableError,
    TaskState,
    a2a_pb2,
    a2a_pb2_grpc,
)
from a2a.utils.constants import TransportProtocol

from tests.conftest import ClusterFactory
from tests.interop.test_interop_sdk import RESPONSE, WAIT_S, fold, kind, send_request, user_message


def request(text: str, **config: bool) -> a2a_pb2.SendMessageRequest:
    message = a2a_pb2.Message(message_id=f"m-{text}", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)])
    return a2a_pb2.SendMessageRequest(
        message=message, configuration=a2a_pb2.SendMessageConfiguration(**config)
    )


async def test_grpc_through_nginx_and_forwarded_to_the_holder(cluster_factory: ClusterFactory) -> None:
    cluster = await cluster_factory(replicas=2, grpc=True)
    nginx_grpc = f"127.0.0.1:{cluster.grpc_port}"
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        card = await A2ACardResolver(http, cluster.nginx_url).get_agent_card()
        assert ("GRPC", "1.0", nginx_grpc) in {
            (i.protocol_binding, i.protocol_version, i.url) for i in card.supported_interfaces
        }
        config = ClientConfig(
            httpx_client=http,
            streaming=True,
            supported_protocol_bindings=[TransportProtocol.GRPC],
            grpc_channel_factory=grpc.aio.insecure_channel,
        )
        client = ClientFactory(config).create(card)
        try:
            async with asyncio.timeout(WAIT_S):
                events = [e async for e in client.send_message(send_request(user_message("chunks:3")))]
            assert kind(events[0]) == "task"
            state, texts = fold(events)
            assert state == TaskState.TASK_STATE_COMPLETED
            assert texts[RESPONSE] == "chunk-0 chunk-1 chunk-2 "

            # A task running on replica 1, canceled through replica 2: forwarded to its holder.
            first, second = (f"127.0.0.1:{r.grpc_port}" for r in cluster.replicas)
            async with grpc.aio.insecure_channel(first) as ch1, grpc.aio.insecure_channel(second) as ch2:
                sent = await a2a_pb2_grpc.A2AServiceStub(ch1).SendMessage(
                    request("sleep:300", return_immediately=True)
                )
                assert sent.task.status.state in (a2a_pb2.TASK_STATE_SUBMITTED, a2a_pb2.TASK_STATE_WORKING)
                canceled = await a2a_pb2_grpc.A2AServiceStub(ch2).CancelTask(
                    a2a_pb2.CancelTaskRequest(id=sent.task.id)
                )
                assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
            got = await client.get_task(GetTaskRequest(id=sent.task.id))
            assert got.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError):  # the ErrorInfo trailer passes nginx
                await client.cancel_task(CancelTaskRequest(id=sent.task.id))
        finally:
            await client.close()
