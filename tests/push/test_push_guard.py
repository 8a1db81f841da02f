"""The SSRF guard: every forbidden range refused with its reason, names resolved before they are trusted,
the allowlists, and the pinned address actually used for the call (a real server and receiver)."""

from __future__ import annotations

import ipaddress

import httpx
import pytest

from app.ssrf import Policy, Refused, check, forbidden
from tests.conftest import make_server
from tests.support.receiver import Receiver
from tests.support.rpc import result, text_message

FORBIDDEN = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "cloud metadata"),
    ("169.254.10.1", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("0.0.0.0", "unspecified"),
    ("[::1]", "loopback"),
    ("[::]", "unspecified"),
    ("[fc00::1]", "private"),
    ("[fd12:3456::1]", "private"),
    ("[fe80::1]", "link-local"),
    ("[ff02::1]", "multicast"),
    ("[::ffff:127.0.0.1]", "IPv4-mapped loopback"),
    ("[::ffff:10.0.0.1]", "IPv4-mapped private"),
    ("[::ffff:169.254.169.254]", "IPv4-mapped link-local"),
    ("[64:ff9b::a00:1]", "NAT64 private"),
    ("[2002:a00:1::1]", "6to4 private"),
    ("[2002:7f00:1::1]", "6to4 loopback"),
    ("[2002:a9fe:a9fe::1]", "6to4 link-local"),
    ("[2002:c0a8:101::1]", "6to4 private"),
]


@pytest.mark.parametrize(("host", "reason"), FORBIDDEN)
async def test_each_forbidden_range_is_refused(host: str, reason: str) -> None:
    with pytest.raises(Refused, match=reason):
        await check(f"https://{host}/hook", Policy())


async def test_public_addresses_pass_and_are_pinned() -> None:
    target = await check("https://93.184.215.14:8443/hook?x=1", Policy())
    assert target.ip == ipaddress.ip_address("93.184.215.14")
    assert str(target.request_url()) == "https://93.184.215.14:8443/hook?x=1"
    v6 = await check("https://[2606:4700:4700::1111]/h", Policy())
    assert forbidden(v6.ip) is None and v6.host_header() == "[2606:4700:4700::1111]"
    sixtofour = await check("https://[2002:5db8:d70e::1]/h", Policy())  # carries 93.184.215.14
    assert forbidden(sixtofour.ip) is None


async def test_a_name_is_checked_by_what_it_resolves_to() -> None:
    with pytest.raises(Refused, match=r"the host localhost points to \S+, a forbidden address \(loopback\)"):
        await check("https://localhost/hook", Policy())
    target = await check(
        "https://localhost:9/hook", Policy(allowed_cidrs=(ipaddress.ip_network("127.0.0.0/8"),))
    )
    assert target.ip is not None and target.ip.is_loopback
    assert target.request_url().host == str(target.ip) and target.host_header() == "localhost:9"


async def test_scheme_and_shape() -> None:
    with pytest.raises(Refused, match="https"):
        await check("http://93.184.215.14/hook", Policy())
    assert (await check("http://93.184.215.14/hook", Policy(allow_http=True))).ip is not None
    for url, why in (
        ("file:///etc/passwd", "scheme"),
        ("gopher://93.184.215.14/", "scheme"),
        ("https:///nohost", "host"),
        ("https://user:pw@93.184.215.14/", "credentials"),
        ("not a url", "scheme"),
    ):
        with pytest.raises(Refused, match=why):
            await check(url, Policy())


async def test_allowlists() -> None:
    trusted = await check("https://workstacean/hook", Policy(allowed_hosts=frozenset({"workstacean"})))
    assert trusted.ip is None and trusted.request_url() == httpx.URL("https://workstacean/hook")
    with pytest.raises(Refused):
        await check("https://workstacean.evil/hook", Policy(allowed_hosts=frozenset({"workstacean"})))
    nets = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("172.16.0.0/12"))
    assert (await check("https://10.9.8.7/h", Policy(allowed_cidrs=nets))).ip is not None
    with pytest.raises(Refused, match="private"):
        await check("https://192.168.0.1/h", Policy(allowed_cidrs=nets))


@pytest.mark.e2e
async def test_delivery_connects_to_the_checked_address_with_the_name_in_host(tmp_path) -> None:
    """A name allowed by network (not by name) is resolved and pinned: the call goes to the address
    checked, and the receiver still sees the name the client registered."""
    rec = Receiver()
    srv = await make_server(
        "sqlite",
        tmp_path,
        PUSH_NOTIFICATION_ALLOW_HTTP="true",
        PUSH_NOTIFICATION_ALLOWED_CIDRS="127.0.0.0/8,::1/128",
        PUSH_POLL_S="0.05",
    )
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
            hook = {"url": rec.url("/pinned", host="localhost")}
            params = {"message": text_message("say:x"), "configuration": {"pushNotificationConfig": hook}}
            task = await result(c, "message/send", params)
            await rec.wait_for(
                lambda: any(x.body["status"]["state"] == "completed" for x in rec.at("/pinned"))
            )
            assert {x.headers["host"] for x in rec.at("/pinned")} == {f"localhost:{rec.port}"}
            assert {x.body["id"] for x in rec.at("/pinned")} == {task["id"]}
    finally:
        srv.stop()
        rec.close()


async def test_a_checked_url_is_resolved_again_at_each_check(monkeypatch):
    """The URL's parse is kept between checks, never its addresses: a name that now points inside (DNS
    rebinding) is refused at the next check, and a passing check pins the address it just resolved."""
    from app import ssrf

    answers = [[ipaddress.ip_address("93.184.216.34")], [ipaddress.ip_address("10.0.0.7")]]
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[ssrf.IPAddress]:
        asked.append(host)
        return answers[len(asked) - 1]

    monkeypatch.setattr(ssrf, "resolve", resolve)
    url = "https://hooks.rebind.example/x"
    first = await check(url, Policy())
    assert first.ip == ipaddress.ip_address("93.184.216.34")
    with pytest.raises(Refused, match=r"10\.0\.0\.7"):
        await check(url, Policy())
    assert asked == ["hooks.rebind.example", "hooks.rebind.example"]
    # A refused form is refused every time (the refusal is not what is kept).
    for _ in range(2):
        with pytest.raises(Refused, match="https"):
            await check("http://hooks.rebind.example/x", Policy())
