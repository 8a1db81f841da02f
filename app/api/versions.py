"""The `A2A-Version` a request names: read in one place (`version_header`), for every binding.

HTTP reads the header, else the query parameter; gRPC the metadata. Any 1.x is served as 1.0, 0.3 as 0.3;
no version means 0.3, and any other is refused (`VersionNotSupportedError`).
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import Request

from app.protocol.errors import VersionNotSupportedError

SUPPORTED_MAJORS = {"0": "0.3", "1": "1.0"}


def version_header(headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> str:
    """The `A2A-Version` a request names, as sent (stripped): the header (gRPC: the metadata), else the query
    parameter; '' when it names none. The one place the version is read."""
    return (
        headers.get("a2a-version") or (query.get("A2A-Version") if query is not None else None) or ""
    ).strip()


def raw_version(request: Request) -> str:
    """`version_header` of an HTTP request (its query parsed only when it has one)."""
    return version_header(
        request.headers, request.query_params if request.scope.get("query_string") else None
    )


def requested_version(request: Request) -> str:
    """The `A2A-Version` header (or query parameter) as `Major.Minor`; missing or empty means 0.3."""
    return parse_version(raw_version(request))


def parse_version(raw: str) -> str:
    """An `A2A-Version` value as `Major.Minor`; empty means 0.3.

    Any 1.x is served as 1.0 (minor versions are compatible); other majors raise VersionNotSupported.
    """
    raw = raw.strip()
    if not raw:
        return "0.3"
    major, _, minor = raw.partition(".")
    version = SUPPORTED_MAJORS.get(major)
    if version is None or (major == "0" and minor.split(".")[0] != "3"):
        raise VersionNotSupportedError(
            f"A2A-Version {raw} is not supported; this server speaks 0.3 and 1.0", {"version": raw}
        )
    return version
