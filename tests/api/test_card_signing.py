"""Signed cards, in process: every variant of every card verifies with the official a2a-sdk verifier
(`a2a.utils.signing.create_signature_verifier`, on the card as its resolver parses it), for each algorithm
and key format; a tampered card does not; the ETag follows the keys; two keys sign alike during a rotation;
a key that cannot sign is one clear setting error. Over a real server: tests/e2e/test_card_signing.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import InvalidSignaturesError, NoSignatureError, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from app import roles as roles_
from app.agents.echo import EchoAgent
from app.api.card import build as card, signing as card_signing
from app.api.card.options import CardOptions
from app.settings import SettingError, Settings

ALGORITHMS = ("ES256", "RS256", "EdDSA")
BUILT = datetime(2026, 1, 1, tzinfo=UTC)
SKILLS = [{"id": "admin", "name": "Admin", "description": "Signed-in callers only", "tags": ["x"]}]


def new_key(alg: str) -> Any:
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if alg == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ed25519.Ed25519PrivateKey.generate()


def write_key(path: Path, key: Any, fmt: str, kid: str | None = None) -> Path:
    """The private key as PEM (PKCS#8) or as a JWK (with `kid` when given)."""
    if fmt == "pem":
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    else:
        algo = {
            ec.EllipticCurvePrivateKey: ECAlgorithm,
            rsa.RSAPrivateKey: RSAAlgorithm,
            ed25519.Ed25519PrivateKey: OKPAlgorithm,
        }
        cls = next(a for t, a in algo.items() if isinstance(key, t))
        jwk = cls.to_jwk(key, as_dict=True)
        path.write_text(json.dumps({**jwk, **({"kid": kid} if kid else {})}))
    return path


def verifier(publics: dict[str, Any]) -> Any:
    """The official verifier, knowing only `publics` (kid → public key)."""

    def key_provider(kid: str | None, jku: str | None) -> Any:
        if kid not in publics:
            raise jwt.exceptions.PyJWKError(f"unknown kid {kid}")
        return publics[kid]

    return create_signature_verifier(key_provider, list(ALGORITHMS))


def settings_for(**kw: Any) -> Settings:
    return Settings(
        _env_file=None,
        public_url="https://agent.example",
        grpc_port=50051,
        agents={"coder": {"adapter": "echo"}, "reviewer": {"adapter": "echo"}},
        **kw,
    )


def every_variant(settings: Settings) -> dict[str, bytes]:
    """Every card body the server would serve: per role its hybrid and 1.0 variants, and the extended
    card's (auth on, extra skills)."""
    out = {}
    options = CardOptions.from_settings(settings)
    for name, role in roles_.load(settings).items():
        public = card.build_card(options, EchoAgent(), BUILT, role=role)
        extended = card.build_card(options, EchoAgent(), BUILT, SKILLS, True, role=role)
        for kind, c in (("public", public), ("extended", extended)):
            out[f"{name}/{kind}/hybrid"] = c.hybrid.body
            out[f"{name}/{kind}/1.0"] = c.v10.body
    return out


@pytest.fixture(params=[(a, f) for a in ALGORITHMS for f in ("pem", "jwk")], ids=lambda p: "-".join(p))
def signed(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Settings, Any]:
    """Settings signing with one key of the algorithm, in the format; and the verifier for it."""
    alg, fmt = request.param
    key = new_key(alg)
    path = write_key(tmp_path / f"key.{fmt}", key, fmt)
    settings = settings_for(
        card_signing_key_file=str(path),
        card_signing_kid=f"{alg}-1",
        card_signing_jku="https://agent.example/jwks.json",
        auth_mode="required",
        api_keys={"a" * 64: "alice"},
        card_extensions=[{"uri": "https://ex.example/ext/v1", "required": True, "params": {"n": 1.5}}],
    )
    return settings, verifier({f"{alg}-1": key.public_key()})


def test_every_variant_verifies_with_the_official_verifier(signed):
    settings, verify = signed
    bodies = every_variant(settings)
    assert len(bodies) == 8
    for name, body in bodies.items():
        raw = json.loads(body)
        (sig,) = raw["signatures"]
        header = json.loads(jwt.utils.base64url_decode(sig["protected"]))
        alg = settings.card_signing_kid.split("-")[0]
        assert header == {
            "alg": alg,
            "kid": f"{alg}-1",
            "typ": "JOSE",
            "jku": "https://agent.example/jwks.json",
        }
        verify(parse_agent_card(raw)), name  # raises when no signature verifies


def test_false_and_zero_stay_signed_and_empties_go_in_every_variant(tmp_path: Path) -> None:
    """Extension params holding `false` and `0` beside empty strings, lists and objects: the official
    verifier drops the empties and keeps `false` and `0` when it canonicalises, and so must the signer, or
    no variant verifies."""
    key = new_key("ES256")
    params = {"strict": False, "retries": 0, "ratio": 0.0, "note": "", "tags": [], "opts": {}, "n": 1}
    settings = settings_for(
        card_signing_key_file=str(write_key(tmp_path / "key.pem", key, "pem")),
        card_signing_kid="k1",
        auth_mode="required",
        api_keys={"a" * 64: "alice"},
        card_extensions=[{"uri": "https://ex.example/ext/v1", "params": params}],
    )
    verify = verifier({"k1": key.public_key()})
    for name, body in every_variant(settings).items():
        raw = json.loads(body)
        (ext,) = [e for e in raw["capabilities"]["extensions"] if e["uri"] == "https://ex.example/ext/v1"]
        assert ext["params"]["strict"] is False and ext["params"]["retries"] == 0, name
        verify(parse_agent_card(raw)), name  # raises when no signature verifies
    canonical = json.loads(card_signing.canonical(json.loads(every_variant(settings)["coder/public/1.0"])))
    (signed_ext,) = [
        e for e in canonical["capabilities"]["extensions"] if e["uri"] == "https://ex.example/ext/v1"
    ]
    assert signed_ext["params"] == {"strict": False, "retries": 0, "ratio": 0, "n": 1}


def test_the_hybrid_and_the_10_variant_carry_the_same_signatures(signed):
    settings, _ = signed
    role = roles_.load(settings)["coder"]
    c = card.build_card(CardOptions.from_settings(settings), EchoAgent(), BUILT, role=role)
    hybrid, v10 = json.loads(c.hybrid.body), json.loads(c.v10.body)
    assert hybrid["signatures"] == v10["signatures"]
    assert "url" in hybrid and "url" not in v10


@pytest.mark.parametrize(
    "tamper",
    [
        lambda c: c.update(description="Something else"),
        lambda c: c["capabilities"]["extensions"][0].update(required=False),
        lambda c: c["capabilities"]["extensions"][0]["params"].update(n=2),
        lambda c: c["supportedInterfaces"][0].update(url="https://evil.example/a2a/jsonrpc"),
        lambda c: c["skills"].append({"id": "x", "name": "X", "description": "added", "tags": []}),
        lambda c: c["signatures"][0].update(protected=c["signatures"][0]["protected"][:-2] + "fQ"),
    ],
)
def test_a_tampered_card_fails(signed, tamper):
    settings, verify = signed
    for name, body in every_variant(settings).items():
        raw = json.loads(body)
        tamper(raw)
        with pytest.raises(InvalidSignaturesError):
            verify(parse_agent_card(raw))
        raw.pop("signatures")
        with pytest.raises(NoSignatureError):
            verify(parse_agent_card(raw)), name


def test_the_etag_changes_with_the_key_and_not_from_one_replica_to_another(tmp_path):
    es_key = write_key(tmp_path / "es.pem", new_key("ES256"), "pem")
    other = write_key(tmp_path / "other.pem", new_key("ES256"), "pem")
    role = roles_.load(settings_for())["coder"]

    def etag(**kw: Any) -> str:
        # A fresh signer each time: what another replica (or a restart) with the same settings builds.
        card_signing._signer.cache_clear()
        return card.build_card(
            CardOptions.from_settings(settings_for(**kw)), EchoAgent(), BUILT, role=role
        ).hybrid.etag

    unsigned = etag()
    first = etag(card_signing_key_file=str(es_key), card_signing_kid="k1")
    assert first == etag(card_signing_key_file=str(es_key), card_signing_kid="k1"), "deterministic"
    assert first != unsigned
    assert first != etag(card_signing_key_file=str(other), card_signing_kid="k1")
    assert first != etag(card_signing_key_file=str(es_key), card_signing_kid="k2")


def test_a_rotation_signs_with_both_keys_and_either_verifies(tmp_path):
    old, new = new_key("ES256"), new_key("EdDSA")
    files = (
        f"{write_key(tmp_path / 'old.pem', old, 'pem')},{write_key(tmp_path / 'new.jwk', new, 'jwk', 'new')}"
    )
    settings = settings_for(card_signing_key_file=files, card_signing_kid="old,new")
    for name, body in every_variant(settings).items():
        raw = json.loads(body)
        assert [json.loads(jwt.utils.base64url_decode(s["protected"]))["kid"] for s in raw["signatures"]] == [
            "old",
            "new",
        ]
        verifier({"old": old.public_key()})(parse_agent_card(raw))
        verifier({"new": new.public_key()})(parse_agent_card(raw)), name
        with pytest.raises(InvalidSignaturesError):
            verifier({"old": new_key("ES256").public_key()})(parse_agent_card(raw))


def test_a_jwk_brings_its_own_kid(tmp_path):
    key = new_key("EdDSA")
    settings = settings_for(card_signing_key_file=str(write_key(tmp_path / "k.jwk", key, "jwk", "from-jwk")))
    body = every_variant(settings)["coder/public/1.0"]
    verifier({"from-jwk": key.public_key()})(parse_agent_card(json.loads(body)))


def test_the_signer_signs_a_payload_once(tmp_path):
    path = write_key(tmp_path / "k.pem", new_key("RS256"), "pem")
    signer = card_signing.Signer((card_signing.load_key(str(path), "k"),))
    c = json.loads(every_variant(settings_for())["coder/public/1.0"])
    first = signer.signatures(c)
    assert len(signer._done) == 1
    assert signer.signatures({**c, "signatures": first}) == first, "signatures are not signed"
    assert len(signer._done) == 1


def _unusable(path: Path, says: str) -> tuple[dict[str, str], str, str]:
    """One key file (with its kid) that CARD_SIGNING_KEY_FILE is refused for, the error saying `says`."""
    return {"card_signing_key_file": str(path), "card_signing_kid": "k"}, "CARD_SIGNING_KEY_FILE", says


def _bad_keys(tmp: Path) -> list[tuple[dict[str, str], str, str]]:
    p384 = write_key(tmp / "p384.pem", ec.generate_private_key(ec.SECP384R1()), "pem")
    small = write_key(
        tmp / "small.pem", rsa.generate_private_key(public_exponent=65537, key_size=1024), "pem"
    )
    es = write_key(tmp / "es.pem", new_key("ES256"), "pem")
    public_jwk = tmp / "public.jwk"
    public_jwk.write_text(json.dumps(ECAlgorithm.to_jwk(new_key("ES256").public_key(), as_dict=True)))
    encrypted = tmp / "enc.pem"
    encrypted.write_bytes(
        new_key("ES256").private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    garbage = tmp / "garbage.pem"
    garbage.write_text("not a key")
    wrong_alg = tmp / "wrong.jwk"
    wrong_alg.write_text(json.dumps({**ECAlgorithm.to_jwk(new_key("ES256"), as_dict=True), "alg": "RS256"}))

    return [
        _unusable(tmp / "missing.pem", "cannot read"),
        _unusable(p384, "P-256"),
        _unusable(small, "2048"),
        _unusable(public_jwk, "not a private key"),
        _unusable(encrypted, "encrypted"),
        _unusable(garbage, "not a PEM"),
        _unusable(wrong_alg, "RSA"),
        ({"card_signing_key_file": str(es)}, "CARD_SIGNING_KID", "CARD_SIGNING_KID"),
        (
            {"card_signing_key_file": f"{es},{p384}", "card_signing_kid": "k"},
            "CARD_SIGNING_KID",
            "1 key ids for 2",
        ),
        ({"card_signing_key_file": f"{es},{es}", "card_signing_kid": "k,k"}, "CARD_SIGNING_KID", "different"),
        (
            {"card_signing_key_file": f"{es},{es},{es}", "card_signing_kid": "a,b,c"},
            "CARD_SIGNING_KEY_FILE",
            "two",
        ),
        ({"card_signing_kid": "k"}, "CARD_SIGNING_KID", "without"),
    ]


def test_a_key_that_cannot_sign_is_one_clear_setting_error(tmp_path):
    for kw, name, says in _bad_keys(tmp_path):
        with pytest.raises(SettingError) as caught:
            card_signing.signer(CardOptions.from_settings(settings_for(**kw)).signing)
        assert caught.value.name == name, kw
        assert says in str(caught.value) and "\n" not in str(caught.value), (kw, str(caught.value))
