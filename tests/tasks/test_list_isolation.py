"""ListTasks shows only the caller's own tasks, whatever the filters (a service-level check; tests/e2e/
test_isolation.py checks every route over HTTP with two principals)."""

from __future__ import annotations

import pytest

from app.agents.echo import EchoAgent
from app.bus.memory import MemoryBus
from app.protocol.model import Message, Part, Role, SendConfig
from app.runner.runner import Runner
from app.settings import Settings
from app.store.db import create_engine
from app.store.writer import Writer
from app.tasks.live import LiveTasks
from app.wiring import role_parts, role_stack
from tests.conftest import BACKENDS, migrated_database_url


@pytest.mark.parametrize("backend", BACKENDS)
async def test_each_owner_sees_only_their_tasks(backend, tmp_path):
    url = await migrated_database_url(backend, tmp_path)
    engine = create_engine(url)
    writer = Writer(engine)
    writer.start()
    settings = Settings(_env_file=None, blocking_timeout_s=5)
    parts = role_parts(settings, engine, writer, MemoryBus("r"), "default", several=False)

    def no_slots(tasks: LiveTasks) -> Runner:
        """No slots: the tasks stay queued, as with no runner at all."""
        return Runner(tasks, parts.leases, parts.bus, EchoAgent(), 0, timeout_s=5, cancel_grace_s=1)

    _, _, service = role_stack(parts, no_slots, settings, engine)
    try:
        for owner, n in (("alice", 3), ("bob", 2)):
            for i in range(n):
                msg = Message(f"{owner}-{i}", Role.USER, [Part(text="x")], context_id=f"{owner}-ctx")
                await service.send(owner, msg, SendConfig(blocking=False))
        alice = await service.list("alice", context_id="alice-ctx")
        assert (await service.list("bob", context_id="alice-ctx")).total == 0
        bob = await service.list("bob")
        assert alice.total == 3 and len(alice.tasks) == 3
        assert bob.total == 2 and len(bob.tasks) == 2
        assert {m.message_id for t in alice.tasks for m in t.history} == {"alice-0", "alice-1", "alice-2"}
        assert (await service.list("mallory")).total == 0
    finally:
        await writer.stop()
        await engine.dispose()
