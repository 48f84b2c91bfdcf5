"""The registry clients against Debian's docker-registry with token authentication on (issue 18, item 7):
the registry answers 401 with a ``Bearer realm=...,service=...,scope=...`` challenge, and a token service
(tests/staging_support.py ``TokenAuthRegistry``) issues JWTs the registry itself verifies
(distribution's ``auth: token``: issuer, audience, expiry, signature, the access list).

Both clients specpilot uses: skopeo (modelcar_build's push, credentials in a temporary authfile) and the
collection's own OCI client (``MU/staging/oci_registry.py``, modelcar_reclaim's manifest surgery): a
token per scope, asked again when a push needs more than a pull; wrong credentials and anonymous
requests refused with a message that names what to fix and never the password."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest

import staging_support as ss
from ansible_collections.specpilot.core.plugins.module_utils.staging import (
    modelcar,
    modelcar_reclaim,
    oci_registry,
)

pytestmark = pytest.mark.skipif(
    not ss.TokenAuthRegistry.available(), reason="docker-registry, skopeo and cryptography are needed"
)


def _scope(scope: str) -> tuple[str, str, frozenset]:
    """(type, name, actions) of a token scope such as ``repository:models/chat:pull,push``. The actions
    are a set: distribution's challenge lists them in Go map order, which changes from one request to
    the next (``registry/auth/token/accesscontroller.go``, ``accessSet.scopeParam``), and a client
    that asks for the challenge's scope passes that order on."""
    kind, _, rest = scope.partition(":")
    name, _, actions = rest.rpartition(":")
    return kind, name, frozenset(actions.split(","))


PULL = ("repository", "models/chat", frozenset({"pull"}))
PUSH = ("repository", "models/chat", frozenset({"pull", "push"}))


@pytest.fixture
def models(tmp_path):
    return ss.modelcar_inputs(tmp_path, 256 * 1024, 64 * 1024)


@pytest.fixture
def reg(tmp_path):
    with ss.TokenAuthRegistry(tmp_path / "reg") as registry:
        yield registry


CREDS = {"username": ss.REGISTRY_USER, "password": ss.REGISTRY_PASSWORD}


def _get(url, token=None):
    """(status, WWW-Authenticate) of a plain GET."""
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("WWW-Authenticate")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("WWW-Authenticate")


def test_the_registry_verifies_the_tokens_it_is_given(reg):
    """The token service is the one the registry trusts (no client-side stand-in): a signed token for the
    scope reads a repository's tags; one with no access, a forged signature or another audience is refused."""
    url = f"http://{reg.addr}/v2/models/none/tags/list"
    code, challenge = _get(url)
    assert code == 401 and challenge.startswith("Bearer ") and f'realm="{reg.realm}"' in challenge
    assert 'scope="repository:models/none:pull"' in challenge
    good = reg.token(ss.REGISTRY_USER, ["repository:models/none:pull"])
    assert _get(url, good)[0] == 404  # authorized; the repository does not exist
    assert _get(url, reg.token(None, ["repository:models/none:pull"]))[0] == 401  # a token with no access
    assert _get(url, reg.token(ss.REGISTRY_USER, ["repository:models/other:pull"]))[0] == 401
    head, claims, _sig = good.split(".")
    forged = base64.urlsafe_b64encode(b"\x01" * 64).rstrip(b"=").decode()
    assert _get(url, ".".join((head, claims, forged)))[0] == 401


def test_modelcar_build_pushes_with_a_token_and_refuses_wrong_or_no_credentials(models, reg, monkeypatch):
    seen = ss.record_skopeo_calls(monkeypatch, modelcar.Skopeo)
    p = ss.modelcar_params(models, f"{reg.addr}/models/chat:v1", **CREDS)
    first = modelcar.build_push(p)
    assert first["pushed"] and first["verify"]["ok"] and first["verify"]["tag_pinned"]
    assert first["blobs_uploaded"] == 4 and "upload_accounting" not in first  # HEADs with a token worked
    second = modelcar.build_push(p)
    assert not second["pushed"] and second["digest"] == first["digest"] and second["registry_had_digest"]
    # skopeo asked the token service as the robot, for a push
    assert any(u == ss.REGISTRY_USER and PUSH in map(_scope, s) for u, s in reg.requests)
    with pytest.raises(modelcar.ModelcarError) as wrong:
        modelcar.build_push(dict(p, password="wrong-password-xyz", force=True))
    with pytest.raises(modelcar.ModelcarError):
        modelcar.build_push(dict(p, username=None, password=None, force=True))  # anonymous: no access
    assert "wrong-password-xyz" not in str(wrong.value)
    flat = json.dumps(seen)
    assert ss.REGISTRY_PASSWORD not in flat and "wrong-password-xyz" not in flat
    assert any("--dest-authfile" in c for c in seen)


def test_the_draft_reclaim_takes_a_token_per_scope_and_names_the_fix(models, reg, tmp_path):
    built = modelcar.build_push(ss.modelcar_params(models, f"{reg.addr}/models/chat:v1", **CREDS))
    reg.requests.clear()
    p = {"image": built["storage_uri"], "draft_subdir": "draft", "tls_verify": False, **CREDS}
    res = modelcar_reclaim.reclaim(dict(p))
    assert res["pushed"] and res["verify"]["ok"] and ss.REGISTRY_PASSWORD not in json.dumps(res)
    scopes = [_scope(s) for user, asked in reg.requests for s in asked if user == ss.REGISTRY_USER]
    # reads first with a pull token; the push asks again, for pull and push on the same repository
    assert scopes[0] == PULL and PUSH in scopes, scopes
    again = modelcar_reclaim.reclaim(dict(p))
    assert not again["changed"] and again["digest"] == res["digest"]

    with pytest.raises(oci_registry.RegistryError) as wrong:
        modelcar_reclaim.reclaim(dict(p, password="wrong-password-xyz", tag="other"))
    assert "wrong credentials?" in str(wrong.value) and reg.realm in str(wrong.value)
    assert "wrong-password-xyz" not in str(wrong.value)
    with pytest.raises(oci_registry.RegistryError) as anonymous:
        modelcar_reclaim.reclaim(dict(p, username=None, password=None, tag="other"))
    assert "HTTP 401" in str(anonymous.value) and "credentials missing or refused" in str(anonymous.value)

    authfile = ss.robot_authfile(tmp_path / "auth.json", reg.addr)
    by_file = ss.reclaim_by_authfile(modelcar_reclaim.reclaim, built["storage_uri"], authfile)
    assert not by_file["changed"] and by_file["digest"] == res["digest"]


def test_an_expired_token_is_asked_for_again(tmp_path):
    """The client keeps its token between requests; once the registry refuses it as expired, the next
    request asks the token service again instead of failing (distribution allows 60 s of clock skew, so
    the first token is issued already two minutes old)."""
    with ss.TokenAuthRegistry(tmp_path / "reg", lifetime=-120) as reg:
        client = oci_registry.Registry(
            reg.addr, tls_verify=False, username=ss.REGISTRY_USER, password=ss.REGISTRY_PASSWORD
        )
        assert client.request("GET", "/v2/models/none/tags/list").code == 401  # got an expired one
        assert len(reg.requests) == 1
        reg.lifetime = 300
        assert client.request("GET", "/v2/models/none/tags/list").code == 404  # asked again: authorized
        assert len(reg.requests) == 2
