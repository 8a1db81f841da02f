"""What the CLI tests share: the fake Anthropic API the real Claude Code talks to, one per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clis import install_clis
from tests.support.fakes.anthropic import FakeAnthropic


@pytest.fixture(scope="module")
def fake_api() -> Iterator[FakeAnthropic]:
    """The pinned CLIs installed, and a fake Anthropic API for this module's Claude Code runs."""
    install_clis()
    fake = FakeAnthropic().start()
    yield fake
    fake.stop()
