"""An HTTP client for hostile-input tests that counts what the issue asks about: requests sent, answers
with a 5xx status, and connections the server dropped (an error mid-response, or a keep-alive connection
closed after an answer).

It holds one keep-alive connection. A request that finds the previous connection gone (the client had to
open a new one) counts as one drop, charged to the request before it, unless the connection had been idle
long enough for the server to close it, as it should (a busy machine, or a test building its next input).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

# The v0.3 REST binding's deliberate "not implemented" (a2a-python 0.3's status table), not a failure.
NOT_IMPLEMENTED = {"PushNotificationNotSupportedError", "UnsupportedOperationError"}
IDLE_S = 4.0
"""A connection idle this long may be closed by the server (uvicorn's keep-alive timeout, 5 s by default):
a new connection after it is no drop."""


@dataclass
class Tally:
    sent: int = 0
    server_errors: int = 0
    not_implemented: int = 0
    dropped: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.sent += other.sent
        self.server_errors += other.server_errors
        self.not_implemented += other.not_implemented
        self.dropped += other.dropped
        self.problems += other.problems

    def line(self, label: str) -> str:
        return (
            f"{label}: {self.sent} requests, {self.server_errors} answered 5xx, {self.dropped} dropped "
            f"connections ({self.not_implemented} deliberate 501s of the v0.3 REST binding)"
        )


def _describe(method: str, url: str, kwargs: dict[str, Any]) -> str:
    body = kwargs.get("content")
    if body is None and "json" in kwargs:
        body = repr(kwargs["json"])
    extra = f" headers={kwargs['headers']}" if kwargs.get("headers") else ""
    return f"{method} {url[:200]}{extra} body={str(body)[:300]!r}"


class CountingClient:
    """`request()` like httpx's, counting into `tally`; a dropped connection answers None."""

    def __init__(self, base_url: str, headers: dict[str, str], tally: Tally, timeout: float = 60) -> None:
        self.tally = tally
        self._client = httpx.Client(
            base_url=base_url,
            headers=headers,
            timeout=timeout,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )
        self._addr: Any = None
        self._last = ""
        self._answered = 0.0
        """When the last answer was read (monotonic)."""

    def request(
        self, method: str, url: str, *, cut_streams: bool = False, **kwargs: Any
    ) -> httpx.Response | None:
        """With `cut_streams`, an open-ended event stream is closed at its headers (its body is not read):
        for requests that must not start one, against a task that would keep it open. A stream of a known
        length (one error event) is read."""
        what = _describe(method, url, kwargs)
        self.tally.sent += 1
        if time.monotonic() - self._answered >= IDLE_S:
            self._addr = None  # the server may have closed it for its idleness
        try:
            resp = self._client.send(self._client.build_request(method, url, **kwargs), stream=True)
            streaming = resp.headers.get("content-type", "").startswith("text/event-stream")
            if cut_streams and streaming and "content-length" not in resp.headers:
                resp.close()
                self._addr = None  # closed by us, not dropped by the server
                return resp
            resp.read()
            self._answered = time.monotonic()
        except httpx.LocalProtocolError:
            self.tally.sent -= 1  # the client would not send it (e.g. an illegal header): not the server's
            raise
        except httpx.TransportError as exc:
            self._drop(f"{what}: {exc!r}")
            self._addr = None
            return None
        try:
            addr = resp.extensions["network_stream"].get_extra_info("client_addr")
        except OSError:  # the server closed the connection as it answered
            addr = None
        if addr is None:
            self._drop(f"the connection was closed after {what}")
        elif self._addr is not None and addr != self._addr:
            self._drop(f"the connection was closed after {self._last}")
        self._addr, self._last = addr, what
        if resp.status_code >= 500:
            if resp.status_code == 501 and _error_type(resp) in NOT_IMPLEMENTED:
                self.tally.not_implemented += 1
            else:
                self.tally.server_errors += 1
                self.tally.problems.append(f"{resp.status_code} for {what}: {resp.text[:300]}")
        if "Traceback" in resp.text:
            self.tally.problems.append(f"a traceback in the answer to {what}")
        return resp

    def post(self, url: str, **kwargs: Any) -> httpx.Response | None:
        return self.request("POST", url, **kwargs)

    def _drop(self, what: str) -> None:
        self.tally.dropped += 1
        self.tally.problems.append(f"dropped connection: {what}")

    def close(self) -> None:
        self._client.close()


def _error_type(resp: httpx.Response) -> Any:
    try:
        return resp.json().get("type")
    except ValueError:
        return None
