"""A real browser for the console's tests: Debian's Chromium (`/usr/bin/chromium`) driven by Playwright's
Python API (Playwright cannot download its own browsers here), and a `Watch` over one page that records
what a test must be able to see go wrong: dialogs, script errors, requests and API answers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from playwright.async_api import Browser, Dialog, Page, Request, Response, async_playwright

from tests.support.auth import KEYS

CHROMIUM = "/usr/bin/chromium"

__all__ = ["CHROMIUM", "Browser", "Watch", "launch", "sign_in"]


@contextlib.asynccontextmanager
async def launch() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        # Chromium's start on a busy machine: 120 s (Playwright's default is 30).
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], timeout=120_000)
        try:
            yield browser
        finally:
            await browser.close()


@dataclass
class Watch:
    """What happened on a page: every dialog (dismissed), script error, request URL, navigation of the
    main frame, and the bodies of the API answers it read."""

    page: Page
    origin: str
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    navigations: list[str] = field(default_factory=list)
    bodies: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.page.on("dialog", self._dialog)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("request", self._request)
        self.page.on("response", self._response)
        self.page.on(
            "framenavigated", lambda f: self.navigations.append(f.url) if f == self.page.main_frame else None
        )

    async def _dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(dialog.message)
        await dialog.dismiss()

    def _request(self, request: Request) -> None:
        self.requests.append(request.url)

    async def _response(self, response: Response) -> None:
        path = urlsplit(response.url).path
        if "/console/api/" in path or path.endswith("/a2a/jsonrpc") or path == "/agents":
            with contextlib.suppress(Exception):
                self.bodies.append(await response.text())

    def foreign_requests(self) -> list[str]:
        """Requests to anywhere but this origin (blob: and data: URLs are the page's own)."""
        return [
            u
            for u in self.requests
            if not u.startswith((self.origin + "/", "blob:", "data:")) and u != self.origin
        ]


async def sign_in(page: Page, base_url: str, who: str, path: str = "/console") -> None:
    """Open the console and sign in with `who`'s API key, as a person would."""
    await page.goto(base_url + path)
    await page.fill("#credential", KEYS[who])
    await page.click("#sign-in-form button[type=submit]")
    await page.wait_for_selector(f"#who:has-text('{who}')")
