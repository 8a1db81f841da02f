"""The official Python SDK's reference server (a2a-sdk 1.3.0) with an echo agent, for comparison.

`python -m bench.reference_server --database-url URL --port N` serves JSON-RPC at `/a2a/jsonrpc`, with
v0.3 compatibility on, so the same v0.3 `message/send` request works against it and against ours. Tasks
live in the SDK's `DatabaseTaskStore` on the given database; one uvicorn worker, as for our server.

`--cluster` runs the SDK's cluster mode instead (`a2a.server.cluster`): a `VersionedDatabaseTaskStore`
(tasks plus a `task_versions` table and the `task_events` log, written in one transaction) and a
`DatabaseTaskEventStream`, through which a replica serving `tasks/resubscribe` for a task running on another
replica polls `task_events` every 0.5 s (its default). Several such processes on one database are replicas.

A message text `stamp:<count>:<interval_ms>:<delay_ms>` (bench/stamp.py) makes the executor emit that many
artifact chunks stamped with `time.time_ns()` at emission, as our bench agent does; any other text is echoed.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from a2a.helpers import get_message_text, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster import DatabaseTaskEventStream, VersionedDatabaseTaskStore
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import DatabaseTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from .stamp import STAMP, parse_stamp

RPC_URL = "/a2a/jsonrpc"


class EchoExecutor(AgentExecutor):
    """Our echo agent's equivalent: the task, working, an artifact with the user's text, completed."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        text = get_message_text(context.message)
        if text.startswith(STAMP):
            await self._stamp(updater, text)
        else:
            await updater.add_artifact([new_text_part(text)], name="assistant-response")
        await updater.complete()

    @staticmethod
    async def _stamp(updater: TaskUpdater, text: str) -> None:
        """Artifact chunks stamped with the wall clock (ns) at emission, on a fixed schedule."""
        count, interval, delay = parse_stamp(text)
        loop = asyncio.get_running_loop()
        start = loop.time() + delay
        for i in range(count):
            wait = start + i * interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            await updater.add_artifact(
                [new_text_part(str(time.time_ns()))],
                artifact_id="assistant-response",
                name="assistant-response",
                append=i > 0,
                last_chunk=i == count - 1,
            )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def agent_card(port: int) -> AgentCard:
    return AgentCard(
        name="Echo Agent (a2a-sdk reference)",
        description="Answers every message with its own text.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}{RPC_URL}", protocol_binding="JSONRPC", protocol_version="0.3"
            )
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Repeats the text.", tags=["echo"])],
    )


def create_app(database_url: str, port: int, cluster: bool = False) -> Starlette:
    """The reference app: DefaultRequestHandler over DatabaseTaskStore (or the cluster-mode stores)."""
    # The same pool as our server's engine (app/store/db.py), so neither waits on a smaller pool.
    engine = create_async_engine(database_url, pool_size=10, max_overflow=10)
    store: DatabaseTaskStore | VersionedDatabaseTaskStore
    stream: DatabaseTaskEventStream | None = None
    if cluster:
        store = VersionedDatabaseTaskStore(engine)
        stream = DatabaseTaskEventStream(engine)
        handler = DefaultRequestHandler(
            agent_executor=EchoExecutor(), task_store=store, agent_card=agent_card(port), event_stream=stream
        )
    else:
        store = DatabaseTaskStore(engine)
        handler = DefaultRequestHandler(
            agent_executor=EchoExecutor(), task_store=store, agent_card=agent_card(port)
        )

    async def ready(_request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await store.initialize()
        if stream is not None:
            await stream.initialize()
        yield
        await handler.aclose()
        await engine.dispose()

    routes = [
        *create_jsonrpc_routes(handler, rpc_url=RPC_URL, enable_v0_3_compat=True),
        Route("/readyz", ready),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--cluster", action="store_true", help="the SDK's cluster mode (see above)")
    args = parser.parse_args()
    app = create_app(args.database_url, args.port, args.cluster)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level=args.log_level, workers=1)


if __name__ == "__main__":
    main()
