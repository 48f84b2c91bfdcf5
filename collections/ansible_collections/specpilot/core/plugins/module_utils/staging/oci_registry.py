# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The part of the OCI distribution API that skopeo does not offer: which blobs a registry already
has (``HEAD /v2/<name>/blobs/<digest>``, to know what a push uploads), and manifest surgery without
moving layers (``modelcar_reclaim``): manifests by digest or tag with the usual ``Accept`` types,
small blobs (an image config), the first bytes of a layer (``Range``), a monolithic blob upload
(``POST`` + ``PUT ?digest=``) and a manifest ``PUT`` under a tag.

Authentication as registries ask for it: anonymous, Basic, or a Bearer token from the realm of
the ``WWW-Authenticate`` challenge (asked again when a push needs a wider scope than a pull),
with credentials from an authfile (``auths.<host>.auth``) or username/password.
``tls_verify: false`` also allows plain HTTP (as skopeo does). Redirects of reads (blob storage
on another host) are followed without the registry's ``Authorization`` header. Credentials are
never logged or returned. A 429, 5xx or connection error is retried with deploy_retry.Backoff
(exponential backoff with full jitter; the ``Retry-After`` of a 429 or 503 honoured).
"""

from __future__ import absolute_import, division, print_function

import base64
import hashlib
import json
import re
import ssl

from urllib import error as urlerror
from urllib import parse as urlparse
from urllib import request as urlrequest

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import (
    Backoff,
    retry_after_of,
    transient_status,
)

__metaclass__ = type


def _is_redirect(reply, method, follow, redirects):
    """Whether a read's reply is a redirect to follow (while redirects are left)."""
    return bool(
        follow and reply.code in (301, 302, 303, 307, 308) and method in ("GET", "HEAD") and redirects > 0
    )


class RegistryError(Exception):
    pass


def _challenge(header):
    scheme, _sep, rest = (header or "").partition(" ")
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
            user, _sep, pw = base64.b64decode(auths[key]["auth"]).decode("utf-8").partition(":")
            return user, pw
    return None


MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (MT_OCI_MANIFEST, MT_OCI_INDEX, MT_DOCKER_MANIFEST, MT_DOCKER_LIST)
INDEX_TYPES = (MT_OCI_INDEX, MT_DOCKER_LIST)
ACCEPT_MANIFEST = ", ".join(MANIFEST_TYPES)
# what a GET of a "small" blob (an image config) or of a manifest reads at most
SMALL_LIMIT = 16 * 1024 * 1024
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def sha256_digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def repository_name(repo, host):
    """The repository path on its registry: ``r.example/a/b`` -> ``a/b``; Docker Hub's
    single names get ``library/``."""
    name = repo.split("/", 1)[1] if repo.startswith(host + "/") else repo
    if host == "docker.io" and "/" not in name:
        name = "library/" + name
    return name


class Reply(object):
    """One HTTP answer, read (up to a limit) and closed."""

    def __init__(self, code, headers, body, url):
        self.code = code
        self.headers = headers
        self.body = body
        self.url = url

    def header(self, name):
        return self.headers.get(name) if self.headers is not None else None

    def error_text(self):
        """The registry's error message (``{"errors": [{"code", "message"}]}``) or the body."""
        try:
            data = json.loads(self.body.decode("utf-8"))
            errs = data.get("errors") or []
            if errs:
                return "; ".join(
                    "%s: %s" % (e.get("code"), e.get("message")) for e in errs if isinstance(e, dict)
                )
        except (ValueError, AttributeError):
            pass
        return (self.body or b"").decode("utf-8", "replace").strip()[:300]


class _NoRedirect(urlrequest.HTTPRedirectHandler):
    """Redirects come back as answers: the client decides whether Authorization goes along."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Registry(object):
    def __init__(
        self, host, tls_verify=True, username=None, password=None, authfile=None, timeout=60, backoff=None
    ):
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
        self._opener = urlrequest.build_opener(urlrequest.HTTPSHandler(context=ctx), _NoRedirect())
        self.bytes_sent = 0
        self._backoff = backoff or Backoff(attempts=4, base=0.5, cap=8.0)

    # ------------------------------------------------------------ transport
    def _open(self, method, url, headers=None, data=None):
        req = urlrequest.Request(url, data=data, method=method, headers=dict(headers or {}))
        return self._opener.open(req, timeout=self.timeout)

    def _call(self, method, url, headers, data, limit, retry_connection=True):
        """(Reply) of one request, again while the answer is transient (429, 5xx) or, with
        ``retry_connection``, while the connection fails (not on a TLS verification failure)."""

        def verdict(reply, exc):
            if exc is not None:
                reason = getattr(exc, "reason", exc)
                transient = isinstance(exc, OSError) and not isinstance(reason, ssl.SSLError)
                return retry_connection and transient, None
            return transient_status(reply.code), retry_after_of(reply.code, reply.headers)

        return self._backoff.run(lambda: self._exchange(method, url, headers, data, limit), verdict)

    def _exchange(self, method, url, headers, data, limit):
        """(Reply) of one request; HTTP errors are answers too."""
        try:
            resp = self._open(method, url, headers, data)
        except urlerror.HTTPError as exc:
            resp = exc
        try:
            code = getattr(resp, "code", None) or getattr(resp, "status", None)
            body = b""
            if method != "HEAD":
                try:
                    body = resp.read(limit + 1 if limit is not None else -1) or b""
                except (OSError, ValueError):
                    body = b""
            return Reply(code, resp.headers, body, url)
        finally:
            try:
                resp.close()
            except Exception:  # noqa: BLE001
                pass

    def _url(self, path):
        if path.startswith("http://") or path.startswith("https://"):
            return path
        return "%s://%s%s" % (self.scheme, self.host, path)

    def request(
        self,
        method,
        path,
        headers=None,
        data=None,
        limit=SMALL_LIMIT,
        follow=True,
        _redirects=5,
        _authed=False,
    ):
        """One registry request (``path`` under the registry, or an absolute URL it handed out):
        authentication on demand (once per request: a push may need a token of a wider scope than
        the reads before it), redirects of reads followed (``follow``). Returns a :class:`Reply`."""
        url = self._url(path)
        hdrs = dict(headers or {})
        same_host = urlparse.urlsplit(url).netloc == self.host
        if self._auth_header and same_host:
            hdrs["Authorization"] = self._auth_header
        may_fall_back = self._may_fall_back(url)
        try:
            reply = self._call(method, url, hdrs, data, limit, retry_connection=not may_fall_back)
        except (urlerror.URLError, ssl.SSLError, OSError) as exc:
            if may_fall_back:
                self.scheme = "http"
                return self.request(
                    method,
                    path.replace("https://", "http://", 1),
                    headers,
                    data,
                    limit,
                    follow,
                    _redirects,
                    _authed,
                )
            raise RegistryError("%s %s: %s" % (method, url, getattr(exc, "reason", exc)))
        if data is not None and reply.code is not None and reply.code < 400:
            self.bytes_sent += len(data)
        if reply.code == 401 and same_host:
            challenge = reply.header("WWW-Authenticate") or ""
            if challenge and not _authed:
                self._authenticate(challenge)
                return self.request(method, path, headers, data, limit, follow, _redirects, True)
            return reply
        location = reply.header("Location") if _is_redirect(reply, method, follow, _redirects) else None
        if location:
            target = urlparse.urljoin(url, location)
            if urlparse.urlsplit(target).netloc != self.host:
                return self._follow(method, target, headers, limit, _redirects - 1)
            return self.request(method, target, headers, None, limit, follow, _redirects - 1)
        return reply

    def _may_fall_back(self, url):
        """With tls_verify false, a failed https connection to the registry falls back to plain http at once."""
        return self.scheme == "https" and not self.tls_verify and url.startswith("https://" + self.host + "/")

    def _follow(self, method, url, headers, limit, redirects):
        """A read redirected to another host (blob storage): no Authorization header."""
        try:
            reply = self._call(method, url, dict(headers or {}), None, limit)
        except (urlerror.URLError, ssl.SSLError, OSError) as exc:
            raise RegistryError("%s %s: %s" % (method, url.split("?", 1)[0], getattr(exc, "reason", exc)))
        if reply.code in (301, 302, 303, 307, 308) and redirects > 0 and reply.header("Location"):
            return self._follow(
                method, urlparse.urljoin(url, reply.header("Location")), headers, limit, redirects - 1
            )
        return reply

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
                reply = self._call("GET", url, {"Authorization": basic} if basic else {}, None, SMALL_LIMIT)
            except (urlerror.URLError, ssl.SSLError, OSError) as exc:
                raise RegistryError(
                    "token request to %s failed: %s" % (params["realm"], getattr(exc, "reason", exc))
                )
            if reply.code != 200:
                raise RegistryError(
                    "token request to %s failed: HTTP %s%s"
                    % (
                        params["realm"],
                        reply.code,
                        " (wrong credentials?)" if reply.code in (401, 403) else "",
                    )
                )
            try:
                data = json.loads(reply.body.decode("utf-8"))
            except ValueError:
                raise RegistryError("the token service of %s returned no JSON" % self.host)
            token = data.get("token") or data.get("access_token")
            if not token:
                raise RegistryError("the token service of %s returned no token" % self.host)
            self._auth_header = "Bearer " + token
            return
        raise RegistryError("%s: unsupported authentication challenge %r" % (self.host, scheme))

    def _fail(self, what, reply):
        hint = ""
        if reply.code == 401:
            hint = " (credentials missing or refused)"
        elif reply.code == 403:
            hint = " (the credentials lack the permission)"
        raise RegistryError(
            "%s on %s: HTTP %s%s%s"
            % (what, self.host, reply.code, hint, (": " + reply.error_text()) if reply.body else "")
        )

    # ------------------------------------------------------------ blobs
    def has_blob(self, name, digest):
        """Whether the repository ``name`` (or the registry, via cross-repo mount) has the blob."""
        # a redirect (to blob storage) says the registry has it: not followed
        reply = self.request("HEAD", "/v2/%s/blobs/%s" % (name, digest), follow=False)
        if reply.code in (200, 302, 307):
            return True
        if reply.code == 404:
            return False
        raise RegistryError("HEAD blob %s of %s/%s: HTTP %s" % (digest, self.host, name, reply.code))

    def get_blob(self, name, digest, limit=SMALL_LIMIT):
        """The bytes of a small blob (an image config), checked against its digest."""
        reply = self.request("GET", "/v2/%s/blobs/%s" % (name, digest), limit=limit)
        if reply.code != 200:
            self._fail("GET blob %s of %s" % (digest, name), reply)
        if len(reply.body) > limit:
            raise RegistryError("blob %s of %s is larger than %d bytes: not read" % (digest, name, limit))
        if digest.startswith("sha256:") and sha256_digest(reply.body) != digest:
            raise RegistryError("blob %s of %s: the registry sent bytes with another digest" % (digest, name))
        return reply.body

    def peek_blob(self, name, digest, nbytes):
        """The first ``nbytes`` of a blob (``Range``; a registry that ignores it is read no further)."""
        reply = self.request(
            "GET",
            "/v2/%s/blobs/%s" % (name, digest),
            headers={"Range": "bytes=0-%d" % (nbytes - 1)},
            limit=nbytes,
        )
        if reply.code not in (200, 206):
            self._fail("GET the start of blob %s of %s" % (digest, name), reply)
        return reply.body[:nbytes]

    def upload_blob(self, name, data, digest=None):
        """Monolithic upload: ``POST /v2/<name>/blobs/uploads/`` then ``PUT <location>?digest=``."""
        digest = digest or sha256_digest(data)
        reply = self.request(
            "POST", "/v2/%s/blobs/uploads/" % name, data=b"", headers={"Content-Length": "0"}
        )
        if reply.code != 202 or not reply.header("Location"):
            self._fail("start of the upload of blob %s to %s" % (digest, name), reply)
        location = urlparse.urljoin(self._url("/v2/%s/blobs/uploads/" % name), reply.header("Location"))
        sep = "&" if "?" in location else "?"
        reply = self.request(
            "PUT",
            location + sep + urlparse.urlencode({"digest": digest}),
            data=data,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))},
        )
        if reply.code not in (201, 204):
            self._fail("upload of blob %s to %s" % (digest, name), reply)
        got = reply.header("Docker-Content-Digest")
        if got and got != digest:
            raise RegistryError("upload of blob %s to %s: the registry stored %s" % (digest, name, got))
        return digest

    # ------------------------------------------------------------ manifests
    def get_manifest(self, name, reference):
        """(raw bytes, media type, digest) of a manifest by tag or digest, or None when the
        registry does not have it. A manifest asked for by digest is checked against it."""
        reply = self.request(
            "GET", "/v2/%s/manifests/%s" % (name, reference), headers={"Accept": ACCEPT_MANIFEST}
        )
        if reply.code == 404:
            return None
        if reply.code != 200:
            self._fail("GET manifest %s:%s" % (name, reference), reply)
        raw = reply.body
        if len(raw) > SMALL_LIMIT:
            raise RegistryError("manifest %s:%s is larger than %d bytes" % (name, reference, SMALL_LIMIT))
        digest = sha256_digest(raw)
        if reference.startswith("sha256:") and digest != reference:
            raise RegistryError(
                "manifest %s@%s: the registry sent a document with digest %s" % (name, reference, digest)
            )
        media_type = (reply.header("Content-Type") or "").split(";", 1)[0].strip()
        try:
            doc_type = json.loads(raw.decode("utf-8")).get("mediaType")
        except (ValueError, AttributeError):
            raise RegistryError("manifest %s:%s is not JSON" % (name, reference))
        return raw, doc_type or media_type, digest

    def resolve(self, name, reference):
        """The manifest digest a tag (or digest) resolves to, or None: ``HEAD`` and the registry's
        ``Docker-Content-Digest`` (no manifest pull counted), else a ``GET`` hashed here."""
        reply = self.request(
            "HEAD", "/v2/%s/manifests/%s" % (name, reference), headers={"Accept": ACCEPT_MANIFEST}
        )
        if reply.code == 404:
            return None
        digest = reply.header("Docker-Content-Digest") if reply.code == 200 else None
        if digest and DIGEST_RE.match(digest):
            return digest
        got = self.get_manifest(name, reference)
        return got[2] if got else None

    def put_manifest(self, name, reference, raw, media_type):
        """``PUT /v2/<name>/manifests/<tag>``; returns the digest, checked against the registry's."""
        digest = sha256_digest(raw)
        reply = self.request(
            "PUT",
            "/v2/%s/manifests/%s" % (name, reference),
            data=raw,
            headers={"Content-Type": media_type, "Content-Length": str(len(raw))},
        )
        if reply.code not in (200, 201, 202):
            self._fail("PUT manifest %s:%s" % (name, reference), reply)
        got = reply.header("Docker-Content-Digest")
        if got and got != digest:
            raise RegistryError(
                "PUT manifest %s:%s: the registry reports digest %s, not %s" % (name, reference, got, digest)
            )
        return digest


def missing_blobs(repo, host, digests, **kw):
    """The digests the registry lacks, or None when it cannot be asked (unknown: assume all)."""
    name = repository_name(repo, host)
    try:
        reg = Registry(host, **kw)
        return [d for d in digests if not reg.has_blob(name, d)]
    except RegistryError:
        return None
