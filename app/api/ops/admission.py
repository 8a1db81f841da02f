"""Per-message and per-principal limits: parts and text per message, new tasks per minute, open streams, the
day's budget (BUDGET_DAY_USD, `protocol.budget`); a task's own options within its role's (`metadata.model`,
`metadata.timeoutS`, `metadata.budgetUsd`: `protocol.task_options`); its approval mode (`metadata.force`,
never looser than its role's) and an approval answer's data part (`agents.approvals`); and a coding agent's
repository and attached files (`metadata.repository`, REPO_ALLOW, `agents.repos.policy`).

The per-principal limits live in `app.limits`: in memory for one process, in Redis when `REDIS_URL` is set,
so that behind a load balancer every replica counts against the same numbers. Every limit answers with its
own clear error, before anything is stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from app.agents.approvals import OPTIONS, answer_error, force_error
from app.agents.repos.errors import RepoError
from app.agents.repos.policy import METADATA_KEY
from app.limits import Limits, Slot
from app.protocol.budget import check_day
from app.protocol.errors import InvalidParamsError
from app.protocol.model import TREE_KEYS, Message
from app.protocol.task_options import OPTION_KEYS

from .calls import Call, Item, Stream, accept_message


async def admit(message: Message, call: Call) -> Message:
    """Everything a message must pass before it is stored: media types, size, the task tree's metadata
    (the server's own), the principal's day budget, and the task rate."""
    accept_message(message, call)
    tree(message)
    approvals(message, call)
    limits: Limits = call.c.limits
    if len(message.parts) > limits.max_parts:
        raise InvalidParamsError(
            f"A message may have at most {limits.max_parts} parts; this one has {len(message.parts)}",
            {"maxParts": limits.max_parts},
        )
    text = sum(len(p.text) for p in message.parts if p.text)
    if text > limits.max_text:
        raise InvalidParamsError(
            f"A message may carry at most {limits.max_text} characters of text; this one has {text}",
            {"maxTextChars": limits.max_text},
        )
    await options(message, call)
    await repository(message, call)
    if not message.task_id:
        await day_budget(call)
        await limits.rate.take(call.owner)
    return message


async def day_budget(call: Call) -> None:
    """Refuse a new task while the caller's spend today (UTC) has reached BUDGET_DAY_USD: -32092, 429
    with `Retry-After` until midnight. An answer to a waiting task goes on, within that task's own cap: a
    question or an approval is never left waiting until midnight. The spend is the database's, so every
    replica reads the same."""
    cap, usage = call.c.day_budget_usd, call.c.usage
    if cap is None or usage is None:
        return
    await check_day(usage.day_cost, call.owner, cap)


def tree(message: Message) -> None:
    """A client never names a task's parent, depth or path (`TREE_KEYS`): the server writes them when a run
    starts a task (`runner/calls.py`), and a run's calls are checked against them."""
    for key in TREE_KEYS:
        if key in (message.metadata or {}):
            raise InvalidParamsError(
                f"metadata.{key} is set by the server alone, for a task an agent's run started; a message "
                "may not carry it",
                {"field": f"metadata.{key}"},
            )


def approvals(message: Message, call: Call) -> None:
    """A task may ask a stricter approval mode than its role's (`metadata.force: false`), never a looser
    one; an approval answer's data part names a call and one of the options."""
    if (why := force_error(message.metadata, call.c.force)) is not None:
        raise InvalidParamsError(why, {"field": "metadata.force", "roleForce": call.c.force})
    for i, part in enumerate(message.parts):
        if (why := answer_error(part.data)) is not None:
            raise InvalidParamsError(why, {"field": f"parts[{i}].data", "options": list(OPTIONS)})


async def options(message: Message, call: Call) -> None:
    """The model, timeout and budget a message names, within its role's limits; a later message of a task may
    only repeat its task's (read only when it names one)."""
    metadata = message.metadata or {}
    call.c.task_limits.check(metadata)
    if message.task_id and any(k in metadata for k in OPTION_KEYS):
        task = await call.c.service.get(call.owner, message.task_id, history_length=0)
        call.c.task_limits.same(task.metadata, metadata)


async def repository(message: Message, call: Call) -> None:
    """The repository the message names (allowed by REPO_ALLOW, the one of its context), whether it may ask
    its branch pushed (the role's `push`), and its inline files (names, sizes), refused (-32602) before
    anything is stored. A RepoError is the agents' own, turned into the protocol's error here."""
    policy = call.c.repos
    metadata = message.metadata or {}
    named = metadata.get(METADATA_KEY) is not None
    field = f"metadata.{METADATA_KEY}"
    try:
        if policy is None:
            if named:
                raise RepoError(
                    "this agent works on no repository (metadata.repository): only the coding-agent CLIs "
                    "and Python agents that declare a workspace do, with the sources the server's "
                    "REPO_ALLOW lists"
                )
            return
        source = policy.named(metadata)
        asked = policy.push_asked(metadata)
        if (
            asked
            and source is None
            and policy.default is None
            and not (message.context_id or message.task_id)
        ):
            raise RepoError("metadata.repository.push needs a repository: name its url")
        if named and (message.context_id or message.task_id):
            first = await call.c.service.opening(call.owner, message.context_id, message.task_id)
            if first is not None:
                policy.same_repository(first.metadata, metadata)
        field = "parts"
        policy.attachments(message.parts)
    except RepoError as exc:
        raise InvalidParamsError(str(exc), {"field": field}) from None


class _HeldStream:
    """The stream's items; the slot is freed exactly once, when they end or are closed (even unstarted)."""

    def __init__(self, items: AsyncIterator[Item], release: Callable[[], None]) -> None:
        self._items = items
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> _HeldStream:
        return self

    async def __anext__(self) -> Item:
        try:
            return await anext(self._items)
        except BaseException:
            self._free()
            raise

    def _free(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    async def aclose(self) -> None:
        self._free()
        await self._items.aclose()  # type: ignore[attr-defined]


async def open_stream(call: Call, start: Callable[[], Awaitable[Stream]]) -> Stream:
    """Start a stream within the caller's cap; the slot is freed when the stream ends or fails to start."""
    slot: Slot = await call.c.limits.streams.acquire(call.owner)
    try:
        items, encode = await start()
    except BaseException:
        slot.release()
        raise
    return _HeldStream(items, slot.release), encode
