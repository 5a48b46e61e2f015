"""kbctl.serve.oidc: JWTs of an identity provider verified with real keys (RSA, EC), read as a Reader, refused in
every way a forged, stale or malformed token can come; the JWKS URL's cache, refetch limit and bounds."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.padding import PKCS1v15
from cryptography.hazmat.primitives.hashes import SHA256
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from kbctl.errors import AuthError, KbctlError
from kbctl.inputs.access import Reader
from kbctl.serve.oidc import MAX_JWKS_BYTES, OidcVerifier, looks_like_jwt
from kbctl.userconfig import ServeOidc
from tests.support.httpserver import serve
from tests.support.tls import certificates as tls_certificates

ISSUER = "https://idp.example"
AUDIENCE = "kbctl"
JWKS_URL = "https://idp.example/jwks?client_secret=hush"


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def rsa_jwk(key: rsa.RSAPrivateKey, kid: str | None, **extra: str) -> dict[str, Any]:
    jwk: dict[str, Any] = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, **({"kid": kid} if kid else {}), **extra}


def ec_jwk(key: ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid}


@pytest.fixture
def jwks(rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey) -> dict[str, Any]:
    return {"keys": [rsa_jwk(rsa_key, "rsa1", use="sig"), ec_jwk(ec_key, "ec1")]}


def write(tmp_path: Path, document: object) -> str:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(document))
    return str(path)


def config(**fields: Any) -> ServeOidc:
    return ServeOidc.model_validate({"issuer": ISSUER, "audience": AUDIENCE, **fields})


@pytest.fixture
def verifier(tmp_path: Path, jwks: dict[str, Any]) -> OidcVerifier:
    return OidcVerifier(config(jwksFile=write(tmp_path, jwks), labelClaims=["department", "site"]))


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": ISSUER, "aud": AUDIENCE, "sub": "ada", "iat": now, "exp": now + 300, "groups": ["hr", "staff"]}
    return {k: v for k, v in {**base, **overrides}.items() if v is not None}


def sign(key: Any, kid: str | None = "rsa1", algorithm: str = "RS256", **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), key, algorithm=algorithm, headers={"kid": kid} if kid else None)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def handmade(header: dict[str, Any], payload: dict[str, Any], sign_with: Callable[[bytes], bytes] | None) -> str:
    """A JWT built by hand: what pyjwt refuses to produce (alg none, HMAC keyed with a public key)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    return f"{signing_input}.{b64(sign_with(signing_input.encode())) if sign_with else ''}"


def refused(verifier: OidcVerifier, token: str, reason: str) -> AuthError:
    with pytest.raises(AuthError, match=reason) as caught:
        verifier.verify(token)
    assert not token or token not in str(caught.value)
    return caught.value


# ---- accepted ----


def test_a_valid_rs256_token_is_read_as_its_groups_and_label_claims(
    verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey
) -> None:
    token = sign(rsa_key, department="hr", site=["paris", "oslo"], email="ada@example.com")
    reader = verifier.verify(token)
    assert reader == Reader.of(["hr", "staff"], {"department": "hr", "site": ["paris", "oslo"]})
    assert reader.claim_terms() == ["department=hr", "site=oslo", "site=paris"]  # email: not a label claim


def test_a_valid_es256_token_is_accepted(verifier: OidcVerifier, ec_key: ec.EllipticCurvePrivateKey) -> None:
    assert verifier.verify(sign(ec_key, kid="ec1", algorithm="ES256")).groups == {"hr", "staff"}


def test_no_groups_claim_is_a_caller_without_groups(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    assert verifier.verify(sign(rsa_key, groups=None)) == Reader()


def test_the_groups_claim_is_configurable(tmp_path: Path, jwks: dict[str, Any], rsa_key: rsa.RSAPrivateKey) -> None:
    verifier = OidcVerifier(config(jwksFile=write(tmp_path, jwks), groupsClaim="roles"))
    assert verifier.verify(sign(rsa_key, roles=["admin"])).groups == {"admin"}


def test_leeway_allows_a_token_just_expired(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    assert verifier.verify(sign(rsa_key, exp=int(time.time()) - 30)).groups  # default leeway: 60 s


def test_without_a_configured_audience_any_audience_is_accepted(
    tmp_path: Path, jwks: dict[str, Any], rsa_key: rsa.RSAPrivateKey
) -> None:
    verifier = OidcVerifier(config(jwksFile=write(tmp_path, jwks), audience=None))
    assert verifier.verify(sign(rsa_key, aud="someone-else")).groups
    assert verifier.verify(sign(rsa_key, aud=None)).groups


def test_a_token_without_kid_uses_the_only_key_of_its_algorithm(
    tmp_path: Path, jwks: dict[str, Any], rsa_key: rsa.RSAPrivateKey, other_rsa_key: rsa.RSAPrivateKey
) -> None:
    assert OidcVerifier(config(jwksFile=write(tmp_path, jwks))).verify(sign(rsa_key, kid=None)).groups
    two = {"keys": [*jwks["keys"], rsa_jwk(other_rsa_key, "rsa2")]}
    refused(OidcVerifier(config(jwksFile=write(tmp_path, two))), sign(rsa_key, kid=None), "names no key")


def test_an_rsa_key_without_alg_verifies_every_allowed_rsa_algorithm(
    tmp_path: Path, jwks: dict[str, Any], rsa_key: rsa.RSAPrivateKey
) -> None:
    verifier = OidcVerifier(config(jwksFile=write(tmp_path, jwks), algorithms=["RS256", "PS256"]))
    assert verifier.verify(sign(rsa_key, algorithm="PS256")).groups


def test_a_key_bound_to_one_algorithm_verifies_no_other(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    jwks = {"keys": [rsa_jwk(rsa_key, "rsa1", alg="RS256")]}
    verifier = OidcVerifier(config(jwksFile=write(tmp_path, jwks), algorithms=["RS256", "PS256"]))
    refused(verifier, sign(rsa_key, algorithm="PS256"), "no PS256 key 'rsa1'")


# ---- refused ----


def test_a_token_signed_by_another_key_is_refused(verifier: OidcVerifier, other_rsa_key: rsa.RSAPrivateKey) -> None:
    refused(verifier, sign(other_rsa_key), "signature does not verify")


def test_a_tampered_payload_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    header, _, signature = sign(rsa_key).split(".")
    forged = b64(json.dumps(claims(groups=["admin"])).encode())
    refused(verifier, f"{header}.{forged}.{signature}", "signature does not verify")


def test_alg_none_is_refused(verifier: OidcVerifier) -> None:
    token = handmade({"alg": "none", "kid": "rsa1"}, claims(), None)
    refused(verifier, token, "algorithm 'none' is not allowed")
    refused(verifier, handmade({"alg": "none"}, claims(), lambda _: b"x"), "algorithm 'none' is not allowed")


def hmac_sha256(secret: bytes, data: bytes) -> bytes:
    return hmac.new(secret, data, hashlib.sha256).digest()


def test_hs256_keyed_with_the_public_key_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    """Algorithm confusion: an HMAC whose secret is the (public) verification key, as PEM or as the JWK."""
    pem = rsa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for secret in [pem, json.dumps(rsa_jwk(rsa_key, "rsa1")).encode()]:
        token = handmade({"alg": "HS256", "kid": "rsa1"}, claims(), functools.partial(hmac_sha256, secret))
        refused(verifier, token, "algorithm 'HS256' is not allowed")


def test_an_algorithm_outside_the_allow_list_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    refused(verifier, sign(rsa_key, algorithm="RS512"), "algorithm 'RS512' is not allowed")


def test_an_expired_token_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    refused(verifier, sign(rsa_key, exp=int(time.time()) - 3600), "expired")


def test_a_token_not_valid_yet_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    refused(verifier, sign(rsa_key, nbf=int(time.time()) + 3600), "not valid yet")


def test_a_token_without_exp_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    refused(verifier, sign(rsa_key, exp=None), "no 'exp' claim")


@pytest.mark.parametrize(
    ("claim", "value", "reason"),
    [
        ("exp", "1893456000", "'exp' claim must be a number"),  # a string, however numeric: RFC 7519 NumericDate
        ("exp", "2e9", "'exp' claim must be a number|must be an integer"),
        ("exp", True, "'exp' claim must be a number|expired"),  # a bool is no number, whatever Python says
        ("exp", [1893456000], "'exp' claim must be a number|must be an integer"),
        ("exp", {"n": 1893456000}, "'exp' claim must be a number|must be an integer"),
        ("exp", float("nan"), "'exp' claim must be a number|must be an integer"),
        ("exp", float("inf"), "'exp' claim must be a number|must be an integer"),
        ("nbf", "0", "'nbf' claim must be a number"),
        ("nbf", False, "'nbf' claim must be a number"),
        ("nbf", True, "'nbf' claim must be a number"),
        ("iat", "0", "'iat' claim must be a number"),
        ("iat", False, "'iat' claim must be a number"),
        ("iat", None, None),  # an absent iat or nbf is fine (None drops the claim)
        ("nbf", None, None),
        ("exp", 1893456000.5, None),  # a NumericDate may have a fraction
    ],
)
def test_time_claims_must_be_json_numbers(
    verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey, claim: str, value: object, reason: str | None
) -> None:
    """exp, nbf and iat are JSON numbers (RFC 7519 NumericDate): a string, bool or other shape refuses the token,
    even one signed by the real key whose string would read as a date in the future."""
    token = sign(rsa_key, **{claim: value})
    if reason is None:
        assert verifier.verify(token).groups == {"hr", "staff"}
    else:
        refused(verifier, token, reason)


def test_a_token_of_another_issuer_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    refused(verifier, sign(rsa_key, iss="https://evil.example"), "not issued by https://idp.example")
    refused(verifier, sign(rsa_key, iss=None), "no 'iss' claim")


def test_a_token_for_another_audience_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    refused(verifier, sign(rsa_key, aud="another-app"), "not meant for audience kbctl")
    refused(verifier, sign(rsa_key, aud=None), "no 'aud' claim")


def test_an_unknown_kid_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    refused(verifier, sign(rsa_key, kid="rsa9"), "no RS256 key 'rsa9'")


def test_a_kid_that_is_not_a_string_is_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    token = handmade({"alg": "RS256", "kid": ["rsa1"]}, claims(), lambda data: rsa_key.sign(data, PKCS1v15(), SHA256()))
    refused(verifier, token, "kid\\) is not a string")


@pytest.mark.parametrize("groups", ["hr", {"hr": True}, ["hr", 7], ["hr", None], [["hr"]], None])
def test_a_groups_claim_of_unknown_format_is_refused(
    verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey, groups: object
) -> None:
    token = jwt.encode({**claims(), "groups": groups}, rsa_key, algorithm="RS256", headers={"kid": "rsa1"})
    refused(verifier, token, "unknown claim format: 'groups'")


@pytest.mark.parametrize("value", [7, {"hr": 1}, ["hr", 2], None, True])
def test_a_label_claim_of_unknown_format_is_refused(
    verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey, value: object
) -> None:
    token = jwt.encode({**claims(), "department": value}, rsa_key, algorithm="RS256", headers={"kid": "rsa1"})
    refused(verifier, token, "unknown claim format: 'department'")


def test_too_many_or_unusable_groups_are_refused(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    refused(verifier, sign(rsa_key, groups=[f"g{n}" for n in range(1_001)]), "at most 1,000 groups")
    refused(verifier, sign(rsa_key, groups=["hr\nadmin"]), "claims cannot be used")
    refused(verifier, sign(rsa_key, groups=[""]), "claims cannot be used")


def test_an_oversize_token_is_refused_before_it_is_read(verifier: OidcVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    token = sign(rsa_key, padding="x" * 16_384)
    refused(verifier, token, "longer than 16 KiB")


@pytest.mark.parametrize(
    "token",
    ["", "abc", "a.b", "a.b.c.d", "a..c", "a b.c.d", "éé.b.c", "!!!.b.c", "a.b.c", f"{b64(b'[1]')}.e30.c"],
)
def test_what_is_not_a_jwt_is_refused(verifier: OidcVerifier, token: str) -> None:
    refused(verifier, token, "not a JWT|header is not a JSON object")


def test_a_deeply_nested_header_is_refused(verifier: OidcVerifier) -> None:
    refused(verifier, f"{b64(b'[' * 5000)}.e30.c", "header is not a JSON object")


# ---- the JWKS file ----


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ("not json", "not JSON"),
        ({"keys": "nope"}, "not a JSON Web Key Set"),
        ([1, 2], "not a JSON Web Key Set"),
        ({"keys": []}, "no public signing key usable with RS256, ES256"),
        ({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}, "no public signing key"),
        ({"keys": [{"kty": "RSA", "n": "x"}]}, "no public signing key"),
        ({"keys": [{"kty": "EC", "x": "a", "y": "b", "crv": "P-256"}] * 101}, "101 keys, over the limit of 100"),
    ],
)
def test_an_unusable_jwks_file_fails_at_start(tmp_path: Path, document: object, reason: str) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(KbctlError, match=f"^kbctl.yaml: serve.oidc.jwksFile: {path}: {reason}"):
        OidcVerifier(config(jwksFile=str(path)), config_file="kbctl.yaml")


def test_private_and_encryption_keys_are_not_used(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    private: dict[str, Any] = {**RSAAlgorithm.to_jwk(rsa_key, as_dict=True), "kid": "rsa1"}
    document = {"keys": [private, rsa_jwk(rsa_key, "rsa1", use="enc")]}
    with pytest.raises(KbctlError, match="no public signing key"):
        OidcVerifier(config(jwksFile=write(tmp_path, document)))


def test_an_ec_key_of_another_curve_is_not_used_for_es256(tmp_path: Path) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(KbctlError, match="no public signing key"):
        OidcVerifier(config(jwksFile=write(tmp_path, {"keys": [ec_jwk(p384, "ec384")]}), algorithms=["ES256"]))


def test_a_missing_large_or_special_jwks_file_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(KbctlError, match=r"serve\.oidc\.jwksFile: cannot read .*missing\.json: No such file"):
        OidcVerifier(config(jwksFile=str(tmp_path / "missing.json")))
    with pytest.raises(KbctlError, match=r"serve\.oidc\.jwksFile: .*: not a regular file"):
        OidcVerifier(config(jwksFile=str(tmp_path)))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened, it would block the start until a writer came
    with pytest.raises(KbctlError, match="not a regular file"):
        OidcVerifier(config(jwksFile=str(fifo)))
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_JWKS_BYTES + 1))
    with pytest.raises(KbctlError, match="larger than the limit of 1 MiB"):
        OidcVerifier(config(jwksFile=str(big)))


# ---- the JWKS URL ----


class IdP:
    """A JWKS endpoint behind httpx.MockTransport: serves `document` (or `status`), counts requests."""

    def __init__(self, document: object) -> None:
        self.document = document
        self.status = 200
        self.requests: list[httpx.Request] = []
        self.body: Callable[[], Any] | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.body is not None:
            return httpx.Response(self.status, content=self.body())
        return httpx.Response(self.status, json=self.document)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def idp(jwks: dict[str, Any]) -> IdP:
    return IdP(jwks)


def url_verifier(idp: IdP, clock: Clock, **fields: Any) -> OidcVerifier:
    return OidcVerifier(config(jwksURL=JWKS_URL, **fields), transport=httpx.MockTransport(idp), clock=clock)


def test_fetched_keys_are_cached(idp: IdP, clock: Clock, rsa_key: rsa.RSAPrivateKey) -> None:
    verifier = url_verifier(idp, clock, cacheSeconds=300)
    assert idp.requests == []  # nothing fetched before the first token
    for _ in range(5):
        assert verifier.verify(sign(rsa_key)).groups
        clock.now += 10
    assert len(idp.requests) == 1
    request = idp.requests[0]
    assert str(request.url) == JWKS_URL and request.headers["user-agent"].startswith("kbctl/")
    clock.now += 300
    assert verifier.verify(sign(rsa_key)).groups
    assert len(idp.requests) == 2  # stale after cacheSeconds: fetched again


def test_an_unknown_kid_refetches_at_most_once_per_30_seconds(
    idp: IdP, clock: Clock, rsa_key: rsa.RSAPrivateKey
) -> None:
    verifier = url_verifier(idp, clock)
    verifier.verify(sign(rsa_key))
    for n in range(20):  # right after a fetch: no refetch however many made-up kids come
        refused(verifier, sign(rsa_key, kid=f"random{n}"), "no RS256 key")
    assert len(idp.requests) == 1
    clock.now += 30
    refused(verifier, sign(rsa_key, kid="random"), "no RS256 key")
    assert len(idp.requests) == 2
    clock.now += 29
    for n in range(20):
        refused(verifier, sign(rsa_key, kid=f"random{n}"), "no RS256 key")
    assert len(idp.requests) == 2
    assert verifier.verify(sign(rsa_key)).groups  # known keys still serve meanwhile
    assert len(idp.requests) == 2


def test_a_key_rotation_is_picked_up_on_refetch(
    idp: IdP, clock: Clock, rsa_key: rsa.RSAPrivateKey, other_rsa_key: rsa.RSAPrivateKey
) -> None:
    verifier = url_verifier(idp, clock)
    verifier.verify(sign(rsa_key))
    idp.document = {"keys": [rsa_jwk(other_rsa_key, "rsa2")]}
    clock.now += 31
    assert verifier.verify(sign(other_rsa_key, kid="rsa2")).groups == {"hr", "staff"}
    assert len(idp.requests) == 2
    refused(verifier, sign(rsa_key), "no RS256 key 'rsa1'")  # the retired key is gone with the old set


def test_a_server_error_is_refused_and_not_retried_for_30_seconds(
    idp: IdP, clock: Clock, rsa_key: rsa.RSAPrivateKey
) -> None:
    idp.status = 500
    verifier = url_verifier(idp, clock)
    error = refused(verifier, sign(rsa_key), "^the identity provider's keys could not be read: ")
    assert "HTTP 500 Internal Server Error" in str(error)
    assert "https://idp.example/jwks" in str(error) and "hush" not in str(error) and "?" not in str(error)
    clock.now += 29
    refused(verifier, sign(rsa_key), "HTTP 500")
    assert len(idp.requests) == 1
    idp.status = 200
    clock.now += 1
    assert verifier.verify(sign(rsa_key)).groups
    assert len(idp.requests) == 2


def test_stale_keys_are_not_used_when_the_refresh_fails(idp: IdP, clock: Clock, rsa_key: rsa.RSAPrivateKey) -> None:
    verifier = url_verifier(idp, clock, cacheSeconds=60)
    verifier.verify(sign(rsa_key))
    idp.status = 503
    clock.now += 60
    refused(verifier, sign(rsa_key), "could not be read: .*HTTP 503")
    clock.now += 10
    refused(verifier, sign(rsa_key), "could not be read: .*HTTP 503")
    assert len(idp.requests) == 2


def test_redirects_are_not_followed(idp: IdP, clock: Clock, rsa_key: rsa.RSAPrivateKey) -> None:
    def redirect(request: httpx.Request) -> httpx.Response:
        idp.requests.append(request)
        return httpx.Response(302, headers={"location": "https://elsewhere.example/jwks"})

    verifier = OidcVerifier(config(jwksURL=JWKS_URL), transport=httpx.MockTransport(redirect), clock=clock)
    refused(verifier, sign(rsa_key), "HTTP 302 Found \\(redirects are not followed\\)")
    assert len(idp.requests) == 1


def test_a_body_over_1_mib_is_refused_without_reading_it_all(
    idp: IdP, clock: Clock, rsa_key: rsa.RSAPrivateKey
) -> None:
    sent: list[int] = []

    def endless() -> Iterator[bytes]:
        for _ in range(1_000):  # 64 MiB if read to the end
            sent.append(1)
            yield b" " * 65_536

    idp.body = endless
    refused(url_verifier(idp, clock), sign(rsa_key), "could not be read: .*larger than 1 MiB")
    assert len(sent) <= MAX_JWKS_BYTES // 65_536 + 1


@pytest.mark.parametrize(("body", "reason"), [(b"<html>", "not JSON"), (b'{"keys": []}', "no public signing key")])
def test_an_unusable_key_set_is_refused(
    idp: IdP, clock: Clock, rsa_key: rsa.RSAPrivateKey, body: bytes, reason: str
) -> None:
    idp.body = lambda: body
    refused(url_verifier(idp, clock), sign(rsa_key), f"could not be read: https://idp.example/jwks: {reason}")


def test_a_transport_failure_is_refused(clock: Clock, rsa_key: rsa.RSAPrivateKey) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    verifier = OidcVerifier(config(jwksURL=JWKS_URL), transport=httpx.MockTransport(down), clock=clock)
    refused(verifier, sign(rsa_key), "could not be read: https://idp.example/jwks: connection refused")


def test_concurrent_verifications_fetch_once(idp: IdP, clock: Clock, rsa_key: rsa.RSAPrivateKey) -> None:
    verifier = url_verifier(idp, clock)
    token = sign(rsa_key)
    results: list[Reader] = []
    threads = [threading.Thread(target=lambda: results.append(verifier.verify(token))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and len(idp.requests) == 1


def test_the_jwks_url_must_be_https() -> None:
    with pytest.raises(ValueError, match="https"):
        config(jwksURL="http://idp.example/jwks")


# ---- looks_like_jwt ----


def test_looks_like_jwt(rsa_key: rsa.RSAPrivateKey) -> None:
    assert looks_like_jwt(sign(rsa_key))
    assert not looks_like_jwt(secrets.token_urlsafe(32))
    for garbage in ["", "...", "a.b.c", "a..c", "e30.e30.sig", f"{b64(b'[1]')}.e30.sig", "\u00e9.b.c", "x" * 100]:
        assert not looks_like_jwt(garbage), garbage
    unsigned = b64(json.dumps({"alg": "none"}).encode())
    assert looks_like_jwt(f"{unsigned}.e30.sig")  # the shape only: verify() refuses it
    assert not looks_like_jwt(f"{unsigned}.e30.")  # an empty signature is not the shape


# ---- the JWKS URL over real HTTPS ----


def test_keys_are_fetched_over_https_from_a_real_server_and_refetched_when_rotated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rsa_key: rsa.RSAPrivateKey, other_rsa_key: rsa.RSAPrivateKey
) -> None:
    """The identity provider as a real HTTPS server on 127.0.0.1 (a throwaway CA trusted through SSL_CERT_FILE):
    its keys are fetched once, a token signed with a key it rotated in makes them be fetched again, and a server
    whose certificate is not trusted is refused, never read over an unverified connection."""
    ca, cert, key = tls_certificates(tmp_path, "IP:127.0.0.1", "127.0.0.1")
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    with serve(tls=server_context) as idp:
        idp.route("/jwks", body=json.dumps({"keys": [rsa_jwk(rsa_key, "rsa1")]}), content_type="application/json")
        url = f"https://127.0.0.1:{idp.port}/jwks"
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        clock = Clock()
        verifier = OidcVerifier(config(jwksURL=url), clock=clock)
        assert verifier.verify(sign(rsa_key)) == Reader.of(["hr", "staff"])
        assert verifier.verify(sign(rsa_key, groups=["staff"])) == Reader.of(["staff"])
        assert idp.hits["/jwks"] == 1
        assert idp.requests_for("/jwks")[0].headers["user-agent"].startswith("kbctl/")
        both = [rsa_jwk(rsa_key, "rsa1"), rsa_jwk(other_rsa_key, "rsa2")]
        idp.route("/jwks", body=json.dumps({"keys": both}), content_type="application/json")
        clock.now += 60  # past the refetch interval
        assert verifier.verify(sign(other_rsa_key, kid="rsa2")) == Reader.of(["hr", "staff"])
        assert idp.hits["/jwks"] == 2
        monkeypatch.delenv("SSL_CERT_FILE")  # the throwaway CA is no longer trusted
        untrusted = OidcVerifier(config(jwksURL=url), clock=Clock())
        refused(untrusted, sign(rsa_key), "keys could not be read")
        assert idp.hits["/jwks"] == 2  # the TLS handshake failed: no request was made


def test_an_eddsa_token_is_accepted_when_eddsa_is_allowed(tmp_path: Path) -> None:
    """An Ed25519 key (OKP) of the set verifies an EdDSA token, once `algorithms` allows EdDSA (not by default)."""
    key = ed25519.Ed25519PrivateKey.generate()
    jwk: dict[str, Any] = OKPAlgorithm.to_jwk(key.public_key(), as_dict=True)
    path = write(tmp_path, {"keys": [{**jwk, "kid": "ed1"}]})
    token = sign(key, kid="ed1", algorithm="EdDSA")
    assert OidcVerifier(config(jwksFile=path, algorithms=["EdDSA"])).verify(token) == Reader.of(["hr", "staff"])
    with pytest.raises(KbctlError, match="no public signing key usable with RS256, ES256"):
        OidcVerifier(config(jwksFile=path)).verify(token)  # RS256 and ES256 only: the set holds no usable key
