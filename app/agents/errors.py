"""`SettingError`: a setting that validates alone but cannot work, found at start-up.

It lives here, not with the settings, so the agents (which never import the settings) raise the same
error the rest of the server does; `settings.py` re-exports it.
"""

from __future__ import annotations


class SettingError(ValueError):
    """A setting that validates alone but cannot work (with the others, or on disk); found at start-up.
    `name` is the setting to fix (e.g. `AGENT_SANDBOX_READ`, or `AGENTS` for a role's entry); the message
    is one line."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
