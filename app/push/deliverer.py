"""The delivery worker: every replica runs one; each webhook is delivered by one replica at a time.

It claims webhooks with waiting notifications (`Outbox.claim`), and for each runs one asyncio task that
posts the queue in order through one pooled aiohttp client (keep-alive HTTP/1.1; httpx's pool costs
O(connections) per request, which capped delivery near 100/s at 64 webhooks in flight). Outcomes:

- 2xx: delivered, the row leaves the queue;
- network error, timeout, 5xx, 429: retried after an exponential backoff with full jitter (or the
  `Retry-After` the receiver asked for), the queue held back meanwhile, until `max_attempts`, then given up;
- any other status (4xx, or a 3xx: redirects are never followed) and a URL the SSRF guard now refuses:
  given up at once, without retry.

Every attempt is logged and counted on the webhook's row (visible in the config's `metadata.delivery`) and
in this process's counters (`/healthz`). The task never waits for any of this: events only add rows
(pointers to the event), and the bodies are built here, as each is sent (`app.push.payloads`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import orjson
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from app import ssrf
from app.options import from_attributes
from app.protocol.model import utcnow
from app.store.outage import OutageLog
from app.telemetry import logs, traces

from . import payloads
from .outbox import Hook, Outbox, Pending, Run, Tally

log = logging.getLogger(__name__)

WAKE_COALESCE_S = 0.05
"""After a doorbell, how long the deliverer waits for more before claiming (bounds the added latency)."""
REFILL_DIVISOR = 4
"""While a backlog lasts, the next claim is made once 1/REFILL_DIVISOR of the call slots are free again (a
claim per freed slot would cost a transaction each), without the doorbell's coalescing wait."""
BATCH = 64
"""Notifications read (and settled) per database round trip for one webhook."""
SETTLERS = 2
"""Group settle transactions in flight at once: while one commits, the next one gathers."""
POOL = SETTLERS + 2
"""Database connections the deliverer uses at once: the settlers', the claim's and the heartbeat's."""
OUTAGE_POLL_S = 5.0
"""Longest wait between claims while the database is away (the first after it is back picks up the work)."""
RESPONSE_READ = 65536
"""Bytes of a webhook's answer read (and dropped) so its connection can be reused; the rest is not read."""


@dataclass(slots=True, frozen=True)
class Options:
    policy: ssrf.Policy
    max_attempts: int = 8
    backoff_s: float = 1.0
    backoff_max_s: float = 300.0
    timeout_s: float = 10.0
    claim_ttl_s: float = 30.0
    poll_s: float = 1.0
    max_in_flight: int = 64


@dataclass(slots=True, frozen=True)
class Outcome:
    """One attempt's result: `done` leaves the queue (delivered or given up), else retry (`retry_in`)."""

    text: str
    delivered: bool = False
    done: bool = True
    retry_in: float | None = None


def headers(hook: Hook) -> dict[str, str]:
    """`Authorization: <scheme> <secret>` (the token wins over credentials) and the token header."""
    out = {"Content-Type": "application/json"}
    secret = hook.token or hook.credentials
    if secret:
        out["Authorization"] = f"{hook.scheme or 'Bearer'} {secret}"
    if hook.token:
        out["X-A2A-Notification-Token"] = hook.token
    return out


def retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - utcnow()).total_seconds())


class Deliverer:
    def __init__(
        self, engine: AsyncEngine, replica_id: str, options: Options, async_commit: bool = False
    ) -> None:
        """`async_commit`: `engine`'s PostgreSQL sessions commit without waiting for the WAL flush
        (`Outbox._begin`)."""
        self.options = options
        self.outbox = Outbox(engine, replica_id, options.claim_ttl_s, async_commit)
        self.counters: dict[str, int] = {
            "attempts": 0,
            "delivered": 0,
            "retried": 0,
            "failed": 0,
            "refused": 0,
        }
        self._session: aiohttp.ClientSession | None = None
        self._wake = asyncio.Event()
        self._rung = False
        self._more = False
        self._refill = max(1, options.max_in_flight // REFILL_DIVISOR)
        self._active: dict[int, asyncio.Task[None]] = {}
        """The webhooks claimed here, each delivered by its task (calling, or waiting for its settle)."""
        self._calling = 0
        """Webhooks of `_active` that call (or wait for a call slot): at most `max_in_flight` hold one."""
        self._slots = asyncio.Semaphore(options.max_in_flight)
        self._loops: list[asyncio.Task[None]] = []
        self._settles: list[tuple[Run, asyncio.Future[list[Pending]]]] = []
        self._settle_wake = asyncio.Event()
        self._outage = OutageLog("push deliverer")

    def ring(self) -> None:
        """New notifications were committed here: look for work now."""
        self._rung = True
        self._wake.set()

    def _client(self) -> aiohttp.ClientSession:
        """The pooled session, made on first use (it binds to the running loop)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.options.max_in_flight * 2, use_dns_cache=False),
                timeout=aiohttp.ClientTimeout(total=self.options.timeout_s),
                auto_decompress=False,
            )
        return self._session

    def start(self) -> None:
        self._loops = [
            asyncio.create_task(self._run(), name="push-deliverer"),
            asyncio.create_task(self._heartbeat(), name="push-heartbeat"),
            *(asyncio.create_task(self._settler(), name=f"push-settler-{i}") for i in range(SETTLERS)),
        ]

    async def stop(self) -> None:
        """Stop delivering and give the claims up, so another replica (or the next start) goes on."""
        for t in self._loops:
            t.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        held = list(self._active)
        for t in self._active.values():
            t.cancel()
        await asyncio.gather(*self._active.values(), return_exceptions=True)
        try:
            await self.outbox.release(held)
        except (OSError, SQLAlchemyError):
            log.warning("could not release %d webhook claims; they expire on their own", len(held))
        if self._session is not None:
            await self._session.close()

    # ---- the loops ----------------------------------------------------------------------------

    async def _run(self) -> None:
        """Claim webhooks while there is room. While a backlog lasts (the last claim filled every free
        slot, or there was none), room freed by finished deliveries is filled as soon as a quarter of the
        slots are free; otherwise the loop waits for a doorbell (coalesced) or the poll."""
        delay = self.options.poll_s
        while True:
            self._wake.clear()
            self._rung = False
            free = self.options.max_in_flight - self._calling
            hooks: list[tuple[Hook, list[Pending]]] = []
            failed = False
            if free > 0:
                try:
                    hooks = await self.outbox.claim(free, BATCH)
                    delay = self.options.poll_s
                    self._outage.ok()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._outage.failed_or_bug(exc, log, "claiming webhook deliveries failed; retrying")
                    failed = True
                    delay = min(delay * 2, OUTAGE_POLL_S)
            for hook, rows in hooks:
                task = asyncio.create_task(self._deliver(hook, rows), name=f"push-{hook.pk}")
                self._active[hook.pk] = task
                self._calling += 1
                task.add_done_callback(lambda _t, pk=hook.pk: self._finished(pk))
            self._more = not failed and len(hooks) >= free
            if self._more and self.options.max_in_flight > self._calling:
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                continue
            if self._rung and not self._more:
                # Let the doorbells of a burst of commits pile up: one claim then serves them all, and the
                # claim's work runs beside the tasks' own commits less often.
                await asyncio.sleep(WAKE_COALESCE_S)

    def _finished(self, pk: int) -> None:
        self._active.pop(pk, None)

    def _calls_done(self) -> None:
        """A webhook stopped calling (its run went to be settled, or it ended): room for another."""
        self._calling -= 1
        if self._more and self.options.max_in_flight - self._calling >= self._refill:
            self._wake.set()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.options.claim_ttl_s / 3)
            try:
                await self.outbox.renew(list(self._active))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._outage.failed_or_bug(exc, log, "renewing webhook claims failed")

    # ---- one webhook --------------------------------------------------------------------------

    async def _deliver(self, hook: Hook, rows: list[Pending]) -> None:
        """Post the webhook's queue in order until it is empty or its head must wait for a retry. It
        counts as calling (`_calling`, one of `max_in_flight`) only while it calls: while a run waits for
        its settle, which is most of a short queue's time on a busy database, another webhook calls."""
        logs.scope(task_id=hook.task_id)
        calling = True  # counted by `_run` when it claimed the webhook
        try:
            while True:
                if rows:
                    if not calling:
                        self._calling += 1
                        calling = True
                    async with self._slots:
                        run = await self._post_run(hook, rows)
                else:
                    run = Run(hook.pk, [], Tally())
                calling = False
                self._calls_done()
                rows = await self._settle(run)
                if not rows:
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Either way the claim, no longer renewed, expires and the queue is taken up again.
            self._outage.failed_or_bug(exc, log, "webhook %s: delivery failed unexpectedly", hook.config_id)
        finally:
            if calling:
                self._calls_done()

    async def _post_run(self, hook: Hook, rows: list[Pending]) -> Run:
        """Post `rows` in order, each only once the one before left the queue (delivered or given up);
        stop at the first that must be retried. The URL is checked (and its address pinned) once per run."""
        run = Run(hook.pk, [], Tally())
        tally = run.tally
        try:
            target: ssrf.Target | ssrf.Refused = await ssrf.check(hook.url, self.options.policy)
        except ssrf.Refused as exc:
            target = exc
        for row in rows:
            if traces.ENABLED:
                outcome = await self._traced_attempt(hook, target, row)
            else:
                outcome = await self._attempt(hook, target, row)
            now = utcnow()
            tally.attempts += 1
            tally.last_outcome = outcome.text
            tally.last_attempt_at = now
            attempts = row.attempts + 1
            if outcome.delivered:
                tally.delivered += 1
                tally.last_delivered_at = now
                run.done.append(row.id)
                continue
            if not outcome.done and attempts < self.options.max_attempts:
                self.counters["retried"] += 1
                wait = outcome.retry_in if outcome.retry_in is not None else self.backoff(attempts)
                wait = min(wait, self.options.backoff_max_s)
                log.warning(
                    "webhook %s of task %s: event %d attempt %d: %s; retry in %.1fs",
                    hook.config_id,
                    hook.task_id,
                    row.seq,
                    attempts,
                    outcome.text,
                    wait,
                )
                run.retry = (row.id, attempts, now + timedelta(seconds=wait))
                break
            self.counters["failed"] += 1
            tally.failed += 1
            run.done.append(row.id)
            log.warning(
                "webhook %s of task %s: event %d given up after attempt %d: %s",
                hook.config_id,
                hook.task_id,
                row.seq,
                attempts,
                outcome.text,
            )
        return run

    async def _settle(self, run: Run) -> list[Pending]:
        """Hand the run to the group settle and wait for its commit: the webhook's next notifications."""
        fut: asyncio.Future[list[Pending]] = asyncio.get_running_loop().create_future()
        self._settles.append((run, fut))
        self._settle_wake.set()
        return await fut

    async def _settler(self) -> None:
        """Group commit of settles: everything handed in while the last transaction ran goes in the next
        one, so the database cost per notification falls as the load rises."""
        while True:
            await self._settle_wake.wait()
            self._settle_wake.clear()
            if not self._settles:
                continue
            batch = sorted(self._settles, key=lambda item: item[0].pk)
            self._settles = []
            try:
                following = await self.outbox.settle_many([run for run, _ in batch], BATCH)
            except Exception as exc:  # each run's task logs it (once per outage when the database is away)
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for run, fut in batch:
                if not fut.done():
                    fut.set_result(following[run.pk])

    def backoff(self, attempts: int) -> float:
        """Exponential with jitter: between half and all of base * 2^(attempts-1), capped; the jitter
        spreads the retries of many webhooks that failed together."""
        ceiling = min(self.options.backoff_max_s, self.options.backoff_s * 2 ** (attempts - 1))
        return random.uniform(ceiling / 2, ceiling)

    async def _traced_attempt(self, hook: Hook, target: ssrf.Target | ssrf.Refused, row: Pending) -> Outcome:
        """`_attempt` in a span continuing the trace the task was created in; the webhook gets the span's
        context as its `traceparent` header."""
        attributes = {
            "a2a.task_id": hook.task_id,
            "a2a.push.config_id": hook.config_id,
            "a2a.seq": row.seq,
            "a2a.push.attempt": row.attempts + 1,
        }
        with traces.span(
            "push.deliver", traceparent=row.traceparent, kind=traces.SpanKind.CLIENT, attributes=attributes
        ) as span:
            outcome = await self._attempt(hook, target, row, traces.traceparent(span))
            if span is not None:
                span.set_attribute("a2a.push.outcome", outcome.text)
                if not outcome.delivered:
                    traces.error(span, outcome.text)
            return outcome

    async def _attempt(
        self, hook: Hook, target: ssrf.Target | ssrf.Refused, row: Pending, traceparent: str | None = None
    ) -> Outcome:
        self.counters["attempts"] += 1
        if isinstance(target, ssrf.Refused):
            self.counters["refused"] += 1
            return Outcome(f"refused: {target}")
        body = _body(row)
        if body is None:
            return Outcome(f"event {row.seq} is no longer in the task's log: not sent")
        request_headers = headers(hook)
        if traceparent:
            request_headers["traceparent"] = traceparent
        server_hostname: str | None = None
        if target.ip is not None:
            request_headers["Host"] = target.host_header()
            if target.url.scheme == "https":
                server_hostname = target.host
        started = time.monotonic()
        try:
            async with self._client().post(
                str(target.request_url()),
                data=orjson.dumps(body),
                headers=request_headers,
                allow_redirects=False,
                server_hostname=server_hostname,
            ) as resp:
                code = resp.status
                wait = retry_after(resp.headers.get("retry-after"))
                await resp.content.read(RESPONSE_READ)
        except TimeoutError:
            return Outcome(f"timeout after {time.monotonic() - started:.1f}s", done=False)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return Outcome(f"network error: {type(exc).__name__}: {exc}"[:300], done=False)
        if 200 <= code < 300:
            self.counters["delivered"] += 1
            return Outcome(f"HTTP {code}", delivered=True)
        if code == 429 or code >= 500:
            return Outcome(f"HTTP {code}", done=False, retry_in=wait)
        if 300 <= code < 400:
            return Outcome(f"HTTP {code}: redirect not followed")
        return Outcome(f"HTTP {code}: not retried")

    def stats(self) -> dict[str, Any]:
        return {**self.counters, "inFlight": len(self._active)}


def _body(row: Pending) -> dict[str, Any] | None:
    """The notification's body: stored (queued by an older version), or built from its event now: the
    Task as of the event for a v0.3 webhook (its queue's view), the StreamResponse for a v1.0 one."""
    if row.body is not None:
        return row.body
    if row.event is None:
        return None
    if row.view is not None:
        return row.view.task_body(row.seq, row.history_len)
    return payloads.v10_body(row.event)


def options_from(settings: Any) -> Options:
    """The worker's options from the app settings: each option but the policy is the setting
    `PUSH_<OPTION>` (e.g. `max_attempts` is PUSH_MAX_ATTEMPTS)."""
    return from_attributes(Options, settings, prefix="push_", policy=policy_from(settings))


def policy_from(settings: Any) -> ssrf.Policy:
    return ssrf.Policy(
        allow_http=settings.push_notification_allow_http,
        allowed_hosts=settings.push_allowed_hosts,
        allowed_cidrs=settings.push_allowed_cidrs,
    )
