"""The agent card: content that matches what works, both paths, caching headers, CORS."""

from __future__ import annotations


async def test_card_content(client, server):
    resp = await client.get("/.well-known/agent-card.json")
    assert resp.status_code == 200
    card = resp.json()
    assert card["protocolVersion"] == "0.3.0"
    assert card["name"] == "Scripted Test Agent"
    assert card["url"] == f"{server.base_url}/a2a/jsonrpc"
    assert card["preferredTransport"] == "JSONRPC"
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": True,
        "stateTransitionHistory": True,
    }
    assert card["supportsAuthenticatedExtendedCard"] is False
    assert card["defaultInputModes"] == ["text/plain"]
    assert card["defaultOutputModes"] == ["text/plain"]
    assert card["skills"] and card["skills"][0]["id"] == "script"
    for key in ("name", "description", "url", "version", "protocolVersion", "capabilities", "skills"):
        assert card[key] not in (None, "", [])
    # GRPC_PORT=0 (the harness's default): no gRPC, so the card does not offer it.
    assert "GRPC" not in {i["protocolBinding"] for i in card["supportedInterfaces"]}
    assert "GRPC" not in {i["transport"] for i in card["additionalInterfaces"]}


async def test_alias_is_identical(client):
    a = await client.get("/.well-known/agent-card.json")
    b = await client.get("/.well-known/agent.json")
    assert a.content == b.content
    assert a.headers["etag"] == b.headers["etag"]


async def test_caching_headers_and_304(client):
    resp = await client.get("/.well-known/agent-card.json")
    etag = resp.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"')
    assert "max-age=" in resp.headers["cache-control"]
    assert resp.headers["last-modified"].endswith("GMT")
    again = await client.get("/.well-known/agent-card.json", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag
    weak = await client.get("/.well-known/agent.json", headers={"If-None-Match": f'"other", W/{etag}'})
    assert weak.status_code == 304
    other = await client.get("/.well-known/agent-card.json", headers={"If-None-Match": '"stale"'})
    assert other.status_code == 200


async def test_cors(client):
    resp = await client.get("/.well-known/agent-card.json", headers={"Origin": "https://app.example"})
    assert resp.headers["access-control-allow-origin"] == "*"
    pre = await client.options(
        "/.well-known/agent-card.json",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "GET"},
    )
    assert pre.status_code == 204
    assert "GET" in pre.headers["access-control-allow-methods"]


async def test_public_url_setting(tmp_path):
    """PUBLIC_URL names the HTTP interfaces; the gRPC one (when GRPC_PORT is set) is its host and GRPC_PORT,
    for v1.0 and v0.3 clients, in both card variants."""
    import httpx

    from tests.conftest import make_server
    from tests.support.server import free_port

    grpc_port = free_port()
    srv = await make_server(
        "sqlite",
        tmp_path,
        PUBLIC_URL="https://agents.example.com/",
        AGENT_ADAPTER="echo",
        GRPC_PORT=str(grpc_port),
    )
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            card = (await client.get("/.well-known/agent-card.json")).json()
            v10 = (await client.get("/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})).json()
        assert card["url"] == "https://agents.example.com/a2a/jsonrpc"
        assert card["name"] == "Echo Agent"
        address = f"agents.example.com:{grpc_port}"
        grpc = [i for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
        assert grpc == [
            {"url": address, "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": address, "protocolBinding": "GRPC", "protocolVersion": "0.3"},
        ]
        assert {"url": address, "transport": "GRPC"} in card["additionalInterfaces"]
        assert card["preferredTransport"] == "JSONRPC"
        assert [i for i in v10["supportedInterfaces"] if i["protocolBinding"] == "GRPC"] == grpc
        assert "additionalInterfaces" not in v10
    finally:
        srv.stop()
