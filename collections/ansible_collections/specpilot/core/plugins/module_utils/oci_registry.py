# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache License 2.0 (see galaxy.yml)
"""The little of the OCI distribution API that skopeo does not report: which blobs a registry
already has (``HEAD /v2/<name>/blobs/<digest>``), to know what a push uploads.

Authentication as registries ask for it: anonymous, Basic, or a Bearer token from the realm of
the ``WWW-Authenticate`` challenge, with credentials from an authfile (``auths.<host>.auth``)
or username/password. ``tls_verify: false`` also allows plain HTTP (as skopeo does).
Credentials are never logged or returned.
"""

from __future__ import absolute_import, division, print_function

import base64
import json
import re
import ssl

from urllib import error as urlerror
from urllib import parse as urlparse
from urllib import request as urlrequest

__metaclass__ = type


class RegistryError(Exception):
    pass


def _challenge(header):
    scheme, _, rest = (header or "").partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


def read_authfile(path, host):
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    auths = data.get("auths") or {}
    for key in (
        host,
        "https://" + host,
        "http://" + host,
        host + "/v1/" if host == "docker.io" else None,
        "https://index.docker.io/v1/" if host == "docker.io" else None,
    ):
        if key and key in auths and auths[key].get("auth"):
            user, _, pw = base64.b64decode(auths[key]["auth"]).decode("utf-8").partition(":")
            return user, pw
    return None


class Registry(object):
    def __init__(self, host, tls_verify=True, username=None, password=None, authfile=None, timeout=60):
        self.host = "registry-1.docker.io" if host == "docker.io" else host
        self.tls_verify = tls_verify
        self.creds = (
            (username, password)
            if username and password is not None
            else (read_authfile(authfile, host) if authfile else None)
        )
        self.timeout = timeout
        self.scheme = "https"
        self._auth_header = None
        ctx = ssl.create_default_context()
        if not tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        self._ctx = ctx

    def _open(self, method, url, headers=None):
        req = urlrequest.Request(url, method=method, headers=dict(headers or {}))
        return urlrequest.urlopen(
            req, timeout=self.timeout, context=self._ctx if url.startswith("https") else None
        )

    def _request(self, method, path):
        url = "%s://%s%s" % (self.scheme, self.host, path)
        headers = {"Authorization": self._auth_header} if self._auth_header else {}
        try:
            return self._open(method, url, headers)
        except urlerror.HTTPError as exc:
            if exc.code == 401 and self._auth_header is None:
                self._authenticate(exc.headers.get("WWW-Authenticate"))
                return self._request(method, path)
            return exc
        except (urlerror.URLError, ssl.SSLError, OSError) as exc:
            if self.scheme == "https" and not self.tls_verify:
                self.scheme = "http"
                return self._request(method, path)
            raise RegistryError("%s %s: %s" % (method, url, getattr(exc, "reason", exc)))

    def _authenticate(self, header):
        scheme, params = _challenge(header)
        basic = None
        if self.creds:
            basic = "Basic " + base64.b64encode(("%s:%s" % self.creds).encode()).decode()
        if scheme == "basic":
            if not basic:
                raise RegistryError("%s asks for credentials (Basic) and none were given" % self.host)
            self._auth_header = basic
            return
        if scheme == "bearer" and params.get("realm"):
            query = {k: v for k, v in params.items() if k in ("service", "scope")}
            url = params["realm"] + ("?" + urlparse.urlencode(query) if query else "")
            try:
                with self._open("GET", url, {"Authorization": basic} if basic else {}) as resp:
                    data = json.loads(resp.read().decode("utf-8"))
            except (urlerror.URLError, ValueError) as exc:
                raise RegistryError(
                    "token request to %s failed: %s" % (params["realm"], getattr(exc, "reason", exc))
                )
            token = data.get("token") or data.get("access_token")
            if not token:
                raise RegistryError("the token service of %s returned no token" % self.host)
            self._auth_header = "Bearer " + token
            return
        raise RegistryError("%s: unsupported authentication challenge %r" % (self.host, scheme))

    def has_blob(self, name, digest):
        """Whether the repository ``name`` (or the registry, via cross-repo mount) has the blob."""
        resp = self._request("HEAD", "/v2/%s/blobs/%s" % (name, digest))
        code = getattr(resp, "code", None) or getattr(resp, "status", None)
        try:
            resp.close()
        except Exception:  # noqa: BLE001
            pass
        if code in (200, 307):
            return True
        if code == 404:
            return False
        raise RegistryError("HEAD blob %s of %s/%s: HTTP %s" % (digest, self.host, name, code))


def missing_blobs(repo, host, digests, **kw):
    """The digests the registry lacks, or None when it cannot be asked (unknown: assume all)."""
    name = repo.split("/", 1)[1] if repo.startswith(host + "/") else repo
    if host == "docker.io" and "/" not in name:
        name = "library/" + name
    try:
        reg = Registry(host, **kw)
        return [d for d in digests if not reg.has_blob(name, d)]
    except RegistryError:
        return None
