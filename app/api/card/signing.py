"""Signed agent cards (A2A v1.0 §8.4): a JWS per configured key over the card's canonical form.

- **What is signed.** The card as the v1.0 `AgentCard` proto sees it, which is what the official verifiers
  check (a2a-sdk's `a2a.utils.signing`, @a2a-js/sdk's `verifyAgentCardSignature`): the card parsed into
  the proto (fields it does not know, the hybrid card's v0.3 ones, are dropped), printed as ProtoJSON,
  `signatures` removed, empty strings, lists and objects removed, then canonicalised by RFC 8785 (JCS,
  the `rfc8785` package). The hybrid and the v1.0-only variants of a card therefore carry the same
  signatures.
- **The JWS.** Protected header `{"alg", "kid", "typ": "JOSE", "jku"?}`, detached payload (RFC 7515
  appendix F): the card carries `{"protected", "signature"}`; a verifier rebuilds the payload from the card.
- **Keys.** `CARD_SIGNING_KEY_FILE`, PEM or JWK: EC P-256 signs ES256 (deterministic ECDSA, RFC 6979),
  RSA RS256, Ed25519 EdDSA; every signature is deterministic, so the same card and keys give the same bytes
  (and ETag) on every replica. Two comma-separated files during a rotation: one signature each.
- **Cost.** Cards are built (and signed) once at start-up; a `Signer` also keeps the signatures per
  canonical payload, so a card built twice is signed once.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import rfc8785
from a2a.types import a2a_pb2
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from google.protobuf import json_format
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from app.agents.errors import SettingError

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
ALGORITHMS = ("ES256", "RS256", "EdDSA")
MIN_RSA_BITS = 2048


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _clean_empty(value: Any) -> Any:
    """The value without empty strings, lists and objects, recursively (None when nothing is left): what
    the official verifiers drop before canonicalising (false and 0 stay)."""
    if isinstance(value, dict):
        cleaned = {k: c for k, v in value.items() if (c := _clean_empty(v)) is not None}
        return cleaned or None
    if isinstance(value, list):
        items = [c for v in value if (c := _clean_empty(v)) is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def canonical(card: dict[str, Any]) -> bytes:
    """The bytes a card's signatures cover: the card as the v1.0 AgentCard proto sees it, canonicalised."""
    try:
        proto = json_format.ParseDict(card, a2a_pb2.AgentCard(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(f"the card is not a v1.0 AgentCard: {exc}") from None
    view = json_format.MessageToDict(proto)
    view.pop("signatures", None)
    return rfc8785.dumps(_clean_empty(view) or {})


@dataclass(frozen=True, slots=True)
class SigningKey:
    kid: str
    alg: str
    key: PrivateKey

    def sign(self, data: bytes) -> bytes:
        if isinstance(self.key, ec.EllipticCurvePrivateKey):
            der = self.key.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
            r, s = decode_dss_signature(der)
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")
        if isinstance(self.key, rsa.RSAPrivateKey):
            return self.key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        return self.key.sign(data)


@dataclass(slots=True)
class Signer:
    """Signs card payloads with every configured key, keeping the signatures per payload."""

    keys: tuple[SigningKey, ...]
    jku: str = ""
    _done: dict[bytes, tuple[dict[str, str], ...]] = field(default_factory=dict)

    def signatures(self, card: dict[str, Any]) -> list[dict[str, str]]:
        """The card's `signatures`: one `{"protected", "signature"}` per key, over `canonical(card)`."""
        payload = canonical(card)
        digest = hashlib.sha256(payload).digest()
        done = self._done.get(digest)
        if done is None:
            encoded = b64url(payload)
            out = []
            for key in self.keys:
                header = {
                    "alg": key.alg,
                    "kid": key.kid,
                    "typ": "JOSE",
                    **({"jku": self.jku} if self.jku else {}),
                }
                protected = b64url(json.dumps(header, separators=(",", ":")).encode())
                signature = key.sign(f"{protected}.{encoded}".encode("ascii"))
                out.append({"protected": protected, "signature": b64url(signature)})
            done = self._done[digest] = tuple(out)
        return [dict(s) for s in done]


def _algorithm(key: object, source: str) -> str:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise SettingError("CARD_SIGNING_KEY_FILE", f"{source}: an EC key must be on P-256 (ES256)")
        return "ES256"
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            raise SettingError(
                "CARD_SIGNING_KEY_FILE", f"{source}: an RSA key needs at least {MIN_RSA_BITS} bits"
            )
        return "RS256"
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "EdDSA"
    raise SettingError(
        "CARD_SIGNING_KEY_FILE", f"{source}: not a private EC P-256, RSA or Ed25519 key (ES256, RS256, EdDSA)"
    )


def load_key(path: str, kid: str) -> SigningKey:
    """A private key from a PEM or JWK file; `kid` empty takes the JWK's own."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise SettingError("CARD_SIGNING_KEY_FILE", f"cannot read {path}: {exc.strerror or exc}") from None
    key: object
    if raw.lstrip().startswith(b"{"):
        try:
            jwk = json.loads(raw)
            if not isinstance(jwk, dict) or "d" not in jwk:
                raise SettingError("CARD_SIGNING_KEY_FILE", f"{path}: the JWK is not a private key (no 'd')")
            key = PyJWK(jwk).key
        except (ValueError, PyJWTError) as exc:
            raise SettingError("CARD_SIGNING_KEY_FILE", f"{path}: not a usable JWK: {exc}") from None
        kid = kid or str(jwk.get("kid") or "")
        alg = _algorithm(key, path)
        if jwk.get("alg") and jwk["alg"] != alg:
            raise SettingError(
                "CARD_SIGNING_KEY_FILE", f"{path}: the JWK says alg {jwk['alg']}, its key signs {alg}"
            )
    else:
        try:
            key = serialization.load_pem_private_key(raw, password=None)
        except TypeError:
            raise SettingError(
                "CARD_SIGNING_KEY_FILE", f"{path}: an encrypted key is not supported"
            ) from None
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise SettingError(
                "CARD_SIGNING_KEY_FILE", f"{path}: not a PEM private key or a JWK ({exc})"
            ) from None
        alg = _algorithm(key, path)
    if not kid:
        raise SettingError("CARD_SIGNING_KID", f"no key id for {path}: set CARD_SIGNING_KID")
    return SigningKey(kid, alg, key)  # type: ignore[arg-type]


@lru_cache
def _signer(files: str, kids: str, jku: str) -> Signer | None:
    paths = [p.strip() for p in files.split(",") if p.strip()]
    if not paths:
        if kids.strip():
            raise SettingError("CARD_SIGNING_KID", "set without CARD_SIGNING_KEY_FILE")
        return None
    ids = [k.strip() for k in kids.split(",")] if kids.strip() else [""] * len(paths)
    if len(ids) != len(paths):
        raise SettingError(
            "CARD_SIGNING_KID", f"{len(ids)} key ids for {len(paths)} key files: give one per file, in order"
        )
    if len(paths) > 2:
        raise SettingError(
            "CARD_SIGNING_KEY_FILE", "at most two keys (the current one and the next, in a rotation)"
        )
    keys = tuple(load_key(p, k) for p, k in zip(paths, ids, strict=True))
    if len({k.kid for k in keys}) != len(keys):
        raise SettingError("CARD_SIGNING_KID", "the two keys need different key ids")
    return Signer(keys, jku)


@dataclass(frozen=True, slots=True)
class SigningOptions:
    """The CARD_SIGNING_* settings, as given (`signer` checks them); part of `build.CardOptions`."""

    key_files: str = ""
    """CARD_SIGNING_KEY_FILE: comma-separated; empty: cards are not signed."""
    kids: str = ""
    """CARD_SIGNING_KID: comma-separated, in the files' order."""
    jku: str = ""


def signer(options: SigningOptions) -> Signer | None:
    """The card signer of these options (loaded once per key set), or None when cards are not signed.
    Raises SettingError, in one line, for a key that cannot sign."""
    return _signer(options.key_files, options.kids, options.jku)
