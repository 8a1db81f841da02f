"""Interop: extensions and signed cards through the official JavaScript client (`@a2a-js/sdk` 1.3.0).

`tests/support/js/interop.mjs` (as in test_interop_js.py) runs two more steps:
- `extensions`, against the server of tests/e2e/test_extensions.py (its default role requires two
  extensions): a send and a stream without them get the SDK's `ExtensionSupportRequiredError`; with them
  (`withA2AExtensions`, the SDK's own way to ask) both complete, the agent saw the activated set, and the
  response echoes it (`A2A-Extensions`; gRPC: initial metadata). Every binding the SDK has, both versions.
- `signed_card`, against a server signing its cards (as tests/interop/test_interop_signed_card.py): the SDK's
  verifier (`verifyAgentCardSignature`: jose over the JCS of the card as the v1.0 `AgentCard` sees it)
  passes the card the SDK resolved, the hybrid card and the extended card fetched through the client's
  `getAgentCard`, for each algorithm; a tampered card and a key that did not sign fail it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from tests.api.test_card_signing import new_key, write_key
from tests.conftest import BACKENDS
from tests.e2e.test_extensions import DECLARED, OP_OPTIONAL, REQUIRED, UNKNOWN, ext_server  # noqa: F401
from tests.interop.test_interop_js import (
    Run,
    Variant,
    node,  # noqa: F401 - the fixture: node with tests/support/js's packages installed
    run_interop,
)
from tests.interop.test_interop_signed_card import KEYS_BY_ALG, signing_server
from tests.support.auth import KEYS
from tests.support.server import ServerProcess

ASKED = [*REQUIRED["coder"], OP_OPTIONAL, UNKNOWN]
ACTIVE = [u for u in ASKED if u in DECLARED["coder"]]
CREDENTIAL = ("--header", f"X-API-Key={KEYS['alice']}")
BINDINGS = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}


def variant(binding: str, version: str, step: str, *more: str) -> Any:
    args = ("--transport", BINDINGS[binding], "--protocol", version, "--steps", step, *CREDENTIAL, *more)
    return pytest.param(
        Variant(args, BINDINGS[binding], version), id=f"v{version.replace('.', '')}-{binding}"
    )


# ---- extensions ---------------------------------------------------------------------------------

EXT_VARIANTS = [
    variant(b, v, "extensions", "--extensions", ",".join(ASKED)) for v in ("1.0", "0.3") for b in BINDINGS
]


@pytest.fixture(scope="module", params=EXT_VARIANTS)
async def ext_run(request: pytest.FixtureRequest, ext_server: ServerProcess, node: str) -> Run:  # noqa: F811
    return await run_interop(node, ext_server.base_url, request.param)


def test_without_the_required_extensions_the_js_client_gets_its_error(ext_run: Run) -> None:
    step = ext_run.step("extensions")
    for refused in (step["refused"], step["streamRefused"]):
        assert refused["name"].endswith("ExtensionSupportRequiredError"), refused
        for uri in REQUIRED["coder"]:
            assert uri in refused["message"], refused
    sent = [call for call in step["wire"] if call.get("extensions") is None]
    assert len(sent) == 2, "the two refused calls named no extension"
    assert all(call["echo"] is None for call in sent), "nothing activated, nothing echoed"


def test_with_them_the_js_client_is_served_and_sees_the_echo(ext_run: Run) -> None:
    step = ext_run.step("extensions")
    assert step["whoami"]["activeExtensions"] == ACTIVE
    assert step["streamWhoami"]["activeExtensions"] == ACTIVE
    assert sorted(step["whoami"]["extensions"]) == sorted(ASKED)
    asked = [call for call in step["wire"] if call.get("extensions") is not None]
    assert len(asked) == 2, step["wire"]
    for call in asked:
        assert call["extensions"].split(",") == ASKED
        # v0.3 transports send the v0.3 name, v1.0 ones the v1.0 name (gRPC metadata: lower case)
        legacy = ext_run.variant.version == "0.3"
        assert call["extensionsHeader"].lower() == ("x-a2a-extensions" if legacy else "a2a-extensions")
        assert call["echo"] == ",".join(ACTIVE)


# ---- signed cards -------------------------------------------------------------------------------

ALGORITHMS = list(KEYS_BY_ALG)
SIGNED = [(b, a) for b in BACKENDS for a in ALGORITHMS]


def public_jwk(key: Any) -> dict[str, Any]:
    public = key.public_key()
    if isinstance(public, ec.EllipticCurvePublicKey):
        return ECAlgorithm.to_jwk(public, as_dict=True)
    if isinstance(public, rsa.RSAPublicKey):
        return RSAAlgorithm.to_jwk(public, as_dict=True)
    return OKPAlgorithm.to_jwk(public, as_dict=True)


@pytest.fixture(scope="module", params=SIGNED, ids="-".join)
async def signed_js(
    request: pytest.FixtureRequest, tmp_path_factory: Any
) -> AsyncIterator[tuple[ServerProcess, Path]]:
    """A server signing with a key of the algorithm (kid: the algorithm's name), and the file of public
    JWKs the script verifies with: that key's, and under `wrong` one that signed nothing."""
    backend, alg = request.param
    tmp = tmp_path_factory.mktemp(f"signed-js-{backend}-{alg}")
    key = new_key(alg)
    srv = await signing_server(backend, tmp, str(write_key(tmp / f"key.{KEYS_BY_ALG[alg]}", key, "pem")), alg)
    jwks = tmp / "public.json"
    jwks.write_text(json.dumps({alg: public_jwk(key), "wrong": public_jwk(new_key(alg))}))
    yield srv, jwks
    srv.stop()


@pytest.fixture(scope="module", params=list(BINDINGS))
async def signed_run(request: pytest.FixtureRequest, signed_js: tuple[ServerProcess, Path], node: str) -> Run:  # noqa: F811
    srv, jwks = signed_js
    (param,) = variant(request.param, "1.0", "signed_card", "--card-jwk", str(jwks)).values
    return await run_interop(node, srv.base_url, param)


def test_the_js_sdk_verifies_every_signed_card(signed_run: Run) -> None:
    step = signed_run.step("signed_card")
    (jwks,) = [a for a in signed_run.variant.args if a.endswith("public.json")]
    assert step["kids"] == [kid for kid in json.loads(Path(jwks).read_text()) if kid != "wrong"]
    assert step["verified"] == ["1.0", "hybrid", "resolved", "extended"]
    assert step["extendedSignatures"] == 1 and "admin" in step["extendedSkills"]
    assert signed_run.returncode == 0, signed_run.describe()


def test_a_tampered_card_or_another_key_fails_the_js_sdk_verifier(signed_run: Run) -> None:
    step = signed_run.step("signed_card")
    for failed in ("tampered", "wrongKey", "extendedTampered"):
        assert step[failed]["message"] == "No valid signatures found on agent card.", step[failed]


@pytest.mark.xfail(
    strict=True,
    reason="@a2a-js/sdk 1.3.0 canonicalizeAgentCard runs AgentCard.fromJSON on the card it is given: a card"
    " the SDK parsed itself (the resolver's, a transport's) loses its security schemes (oneofs) and fails",
)
def test_the_js_sdk_verifies_the_card_its_resolver_parsed(signed_run: Run) -> None:
    assert signed_run.step("signed_card")["parsedAsIs"] == {"ok": True}
