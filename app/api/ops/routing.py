"""Which role a call at the root endpoints runs on: by the skill a send names, or by the task a call names.

The root endpoints are the default role's alias. A send there naming a skill (`metadata.skill` of the
message or of the request) runs on the first role whose card declares it (the default role first, then
the order of AGENTS); a skill no role declares is -32602 listing every role's skills. At a role's own
endpoints (`/agents/{role}/`, and gRPC with `a2a-role`) the skill must be one of that role's, or -32602.
A2A (v1.0, and the v1.1 candidates) has no field of its own for it yet: `metadata.skill` is this server's.

A task id at the root (get, cancel, subscribe, push configs, a send continuing a task) finds the caller's
task on whichever role it runs, so a task a skill sent elsewhere is followed where it was sent; so does a
message naming only the context of a task waiting for input. A role's own endpoints see only that role's
tasks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from app.protocol.errors import InvalidParamsError
from app.protocol.model import Message
from app.protocol.task_options import SKILL_KEY

from ..deps import Components
from .calls import Call


async def by_task(call: Call, task_id: str | None) -> Call:
    """The call on the role of the caller's task `task_id` when made at the root of several roles; else
    `call` as it is (an unknown task is then not found by the default role, as before)."""
    c = call.c
    if not task_id or not c.at_root or c.task_role is None:
        return call
    role = await c.task_role(call.owner, task_id)
    if role is None or role == c.role or role not in c.roles:
        return call
    return on(call, c.roles[role])


async def by_context(call: Call, message: Message) -> Call:
    """At the root of several roles, a message naming only its context goes to the role its context's
    waiting task is on (that role's service then answers it); tasks waiting on several roles are -32602."""
    c = call.c
    if message.task_id or not message.context_id or not c.at_root or c.waiting_roles is None:
        return call
    roles = await c.waiting_roles(call.owner, message.context_id)
    if len(roles) > 1:
        raise InvalidParamsError(
            f"Context {message.context_id} has tasks waiting for input on the roles {', '.join(roles)}; name "
            "the one this message answers in message.taskId",
            {"contextId": message.context_id, "roles": ",".join(roles)},
        )
    if not roles or roles[0] == c.role or roles[0] not in c.roles:
        return call
    return on(call, c.roles[roles[0]])


def on(call: Call, c: Components) -> Call:
    """`call` on the role of `c`: the extensions it activates are that role's card's (refused, -32008, when
    the role requires one the call does not name)."""
    return dataclasses.replace(call, c=c, active=c.card.extensions.activate(call.extensions))


async def for_send(params: Any, message: Message, call: Call, named: str | None = None) -> Call:
    """The call a send runs as: on its task's role when it continues one at the root (`message.taskId`, or
    a legacy `tasks/send`'s `id`: `named`), else on the role declaring its skill; refused (-32602) when that
    role does not declare the skill it names. The skill given in the request's metadata alone is copied into
    the message's, so the task keeps it."""
    skill = skill_of(params, message)
    task_id = message.task_id or named
    call = await by_task(call, task_id)
    if skill is None:
        return call if named else await by_context(call, message)
    if message.metadata is None or SKILL_KEY not in message.metadata:
        message.metadata = {**(message.metadata or {}), SKILL_KEY: skill}
    c = call.c
    if skill in c.skills:
        return call
    if c.at_root and not message.task_id:
        for role in c.roles.values():
            if skill in role.skills:
                return on(call, role)
        known = sorted({s for role in (c.roles or {c.role: c}).values() for s in role.skills})
        raise InvalidParamsError(
            f"No agent here declares the skill {skill!r} (metadata.skill); the skills are: "
            f"{', '.join(known) or 'none'}",
            {"skill": skill, "skills": ",".join(known)},
        )
    raise InvalidParamsError(
        f"The role {c.role!r} does not declare the skill {skill!r} (metadata.skill); its skills are: "
        f"{', '.join(c.skills) or 'none'}",
        {"skill": skill, "role": c.role, "skills": ",".join(c.skills)},
    )


def skill_of(params: Any, message: Message) -> str | None:
    """The skill a send names: `metadata.skill` of its message or of the request (both: the same one)."""
    given = [
        m[SKILL_KEY]
        for m in (message.metadata, params.get("metadata") if isinstance(params, dict) else None)
        if isinstance(m, dict) and m.get(SKILL_KEY) is not None
    ]
    for value in given:
        if not isinstance(value, str) or not value.strip():
            raise InvalidParamsError(
                "metadata.skill must be a skill id: a non-empty string", {"field": "metadata.skill"}
            )
    if len(set(given)) > 1:
        raise InvalidParamsError(
            f"The message's metadata.skill {given[0]!r} and the request's {given[1]!r} differ",
            {"field": "metadata.skill"},
        )
    return given[0] if given else None
