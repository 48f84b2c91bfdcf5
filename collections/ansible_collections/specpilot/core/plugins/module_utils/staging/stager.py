# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""specpilot's staging program: copy model artifacts into a directory, resumably and verified.

One file, Python 3.8+ standard library only (and the collection's retry policy, ``k8s/deploy_retry.py``,
itself standard library only), so that it runs unchanged in three places:

* in a Kubernetes Job (``python3 stager.py --request request.json``): the PVC staging role ships
  this file, ``deploy_retry.py`` beside it and the request in a ConfigMap and mounts the PVC(s);
* on the Ansible controller, imported as ``specpilot.core`` module_utils (the Modelcar role
  fetches its sources with it before building the image);
* in tests, as a subprocess or imported.

Sources (``uri`` of an artifact):

``hf://org/repo[@revision]``
    Lists the repository with ``huggingface_hub`` (imported only for this scheme; the image must
    have it) and downloads each selected file with its ``snapshot_download``, pinned to the commit
    the revision resolved to, only that file (``allow_patterns``), into the partial directory; the
    copy into place verifies the LFS sha256 the hub published, and the commit is recorded.
``s3://bucket/prefix``
    ``boto3`` (imported only for this scheme). Endpoint, region and credentials from the
    environment (see below). Single-part ETags (MD5) are verified.
``https://host/path/`` (trailing slash: a directory)
    The file list and sha256 digests come from a checksum manifest in that directory
    (``SHA256SUMS`` by default, ``sha256sum`` format) or from the request's ``files``.
``https://host/path/model.tar[.gz|.tgz|.bz2|.xz]`` or ``.zip``
    An archive: downloaded (resumably), verified when its sha256 is known, then unpacked (a single
    top-level directory is stripped).
``https://host/path/file``
    A single file.
``pvc://claim/path``
    A directory on another PVC, mounted by the Job at ``src_root``.

Any source may publish a checksum manifest (``SHA256SUMS`` or ``sha256sums.txt`` at its root,
or ``checksum_manifest`` in the request); the request's ``checksums`` map adds more. HTTP
servers may publish ``Repr-Digest``/``Digest: sha-256=...`` headers.

Credentials are read from the environment only, never from arguments, and are never printed:
``<env_prefix>NAME`` first, then ``NAME``: ``HF_TOKEN``, ``HF_ENDPOINT``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL`` (or
``AWS_ENDPOINT_URL_S3``), ``AWS_DEFAULT_REGION`` (or ``AWS_REGION``), ``S3_ADDRESSING_STYLE``,
``S3_VERIFY_SSL``, ``AWS_CA_BUNDLE``, ``HTTP_AUTHORIZATION`` (the whole Authorization header of
https:// sources). The Kubernetes Job gets them with ``envFrom: secretRef`` and a prefix.

What a run does per artifact (``dest`` under ``dest_root``):

1. a marker ``.specpilot-staged.json`` whose ``request_digest`` matches, every file present with
   its size and (unless ``verify`` is ``size``) its sha256: nothing to do;
2. otherwise every selected source file (``include``/``exclude`` globs on the relative path) is
   skipped when the destination already holds it (same size and digest), downloaded otherwise:
   into ``.specpilot-partial/<file>.part`` first, continued with a range request after an
   interruption when the source is unchanged, verified (size, sha256/MD5 when published), then
   moved into place. A destination file that differs is an error naming it, unless ``force``;
   no file is ever deleted;
3. the layout is checked (``config.json``, tokenizer files for full models, every
   ``*.safetensors`` header readable and consistent with the file size, index shards present;
   draft vocabulary equal to the target's for draft models);
4. the marker is written with the source, the revision, and every file's size and sha256.

The log carries ``progress`` lines (bytes done / total) and ends with one line
``SPECPILOT-RESULT {json}`` or ``SPECPILOT-ERROR {json}``. Exit status: 0 done, 2 a
permanent error (mismatch, corruption, layout, bad request: retrying cannot help), 1 anything
else (network errors: a retry resumes).
"""

from __future__ import absolute_import, division, print_function

import argparse
import collections
import fnmatch
import glob
import hashlib
import io
import json
import mmap
import os
import posixpath
import re
import shutil
import socket
import ssl
import stat
import struct
import sys
import tarfile
import threading
import time
import zipfile

try:  # as specpilot.core module_utils (the Modelcar fetch, validation's model facts, tests)
    from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_retry
except ImportError:  # as the staging Job's program: pvc_staging ships deploy_retry.py beside this file
    import deploy_retry

try:  # Python 3
    from urllib import error as urlerror
    from urllib import parse as urlparse
    from urllib import request as urlrequest
except ImportError:  # pragma: no cover - Python 2 is not supported
    urlerror = urlparse = urlrequest = None

FORMAT = 1
MARKER = ".specpilot-staged.json"
PARTIAL = ".specpilot-partial"
RESULT_PREFIX = "SPECPILOT-RESULT "
ERROR_PREFIX = "SPECPILOT-ERROR "
LOG_PREFIX = "specpilot-stage: "
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")
MANIFEST_NAMES = ("SHA256SUMS", "sha256sums.txt", "SHA256SUMS.txt")
TOKENIZER_SETS = (
    ("tokenizer.json",),
    ("tokenizer.model",),
    ("vocab.json", "merges.txt"),
    ("tiktoken.model",),
    ("vocab.txt",),
)
CHUNK = 4 * 1024 * 1024
LOCAL_WORKERS = 2  # files of a pvc:// source copied and hashed at a time
EXIT_OK, EXIT_RETRY, EXIT_PERMANENT = 0, 1, 2
SECRET_ENV_NAMES = (
    "HF_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "HTTP_AUTHORIZATION",
)


class StageError(Exception):
    """A permanent failure: retrying the same request cannot succeed."""

    permanent = True

    def __init__(self, message, path=None, role=None):
        super(StageError, self).__init__(message)
        self.path = path
        self.role = role


class TransientError(StageError):
    """A failure a retry may fix (network, server errors)."""

    permanent = False


# ---------------------------------------------------------------- small helpers
def redact_uri(uri):
    """The URI without user info or query string (presigned URLs carry signatures there)."""
    if not uri:
        return uri
    try:
        parts = urlparse.urlsplit(uri)
    except ValueError:
        return "<unparseable uri>"
    netloc = parts.hostname or ""
    if parts.port:
        netloc += ":%d" % parts.port
    if parts.username or parts.password:
        netloc = "***@" + netloc
    query = "***" if parts.query else ""
    return urlparse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def human(n):
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return "%.1f %s" % (n, unit) if unit != "B" else "%d B" % n
        n /= 1024.0
    return "%d B" % n  # pragma: no cover


def canonical_json(data):
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _file_blocks(path, chunk=CHUNK):
    """The bytes of the file at ``path``, ``chunk`` bytes at a time."""
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                return
            yield block


def _file_hexdigest(h, path, chunk=CHUNK):
    """The hex digest of the file at ``path`` by ``h``, a new hashlib object."""
    for block in _file_blocks(path, chunk):
        h.update(block)
    return h.hexdigest()


def sha256_file(path, chunk=CHUNK):
    return _file_hexdigest(hashlib.sha256(), path, chunk)


def safe_rel(rel):
    """A normalised relative POSIX path inside its root, or raise StageError."""
    rel = rel.replace("\\", "/")
    norm = posixpath.normpath(rel.lstrip("/")) if rel else ""
    if not norm or norm == "." or norm.startswith("../") or norm == ".." or rel.startswith("/"):
        raise StageError("unsafe path in the source: %r" % rel, path=rel)
    if norm.split("/")[0] in (PARTIAL, MARKER):
        raise StageError("the source holds a reserved name: %r" % rel, path=rel)
    return norm


def selected(rel, include, exclude):
    """include/exclude: fnmatch globs on the relative path (``*`` also crosses ``/``) or on the
    base name."""
    base = posixpath.basename(rel)

    def hit(patterns):
        return any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(base, p) for p in patterns)

    if include and not hit(include):
        return False
    if exclude and hit(exclude):
        return False
    return True


def parse_checksum_manifest(text):
    """``sha256sum`` output (``<hex>  <path>`` or ``<hex> *<path>``) -> {path: hex}."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([0-9a-fA-F]{64})\s+\*?(.+)$", line)
        if not m:
            m = re.match(r"^SHA256 \((.+)\) = ([0-9a-fA-F]{64})$", line)
            if m:
                out[safe_rel(m.group(1).strip())] = m.group(2).lower()
            continue
        out[safe_rel(m.group(2).strip())] = m.group(1).lower()
    return out


def is_archive(name):
    low = name.lower()
    return any(low.endswith(s) for s in ARCHIVE_SUFFIXES)


class Env(object):
    """Credentials and settings of one artifact: ``<prefix>NAME`` first, then ``NAME``."""

    def __init__(self, prefix="", environ=None, extra=None):
        self.prefix = prefix or ""
        self.environ = os.environ if environ is None else environ
        self.extra = dict(extra or {})

    def get(self, *names):
        for name in names:
            for key in (self.prefix + name, name):
                if key in self.extra and self.extra[key] not in (None, ""):
                    return self.extra[key]
                val = self.environ.get(key)
                if val not in (None, ""):
                    return val
        return None


# ---------------------------------------------------------------- progress
class Progress(object):
    """``progress`` lines: at most one every ``interval`` seconds, plus the first and last."""

    def __init__(self, role, total, files, out=None, interval=2.0):
        self.role = role
        self.total = total
        self.files = files
        self.done = 0
        self.files_done = 0
        self.out = out or sys.stdout
        self.interval = interval
        self.started = time.time()
        self.last = 0.0
        self.lock = threading.Lock()

    def add(self, n):
        with self.lock:
            self.done += n
        self.maybe()

    def file_done(self):
        with self.lock:
            self.files_done += 1
        self.maybe()

    def maybe(self, force=False):
        now = time.time()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        elapsed = max(now - self.started, 1e-6)
        pct = (100.0 * self.done / self.total) if self.total else 100.0
        log(
            self.out,
            "progress %s %d/%d bytes (%.1f%%) files %d/%d %s/s"
            % (
                self.role,
                self.done,
                self.total or 0,
                pct,
                self.files_done,
                self.files,
                human(self.done / elapsed),
            ),
        )


def log(out, message):
    out.write(LOG_PREFIX + message + "\n")
    out.flush()


# ---------------------------------------------------------------- sources
class RemoteFile(object):
    """One file of a source: relative path, size (None when unknown), published digests and an
    identity that changes when the remote content changes (for resuming partial downloads)."""

    def __init__(self, rel, size=None, sha256=None, md5=None, identity=None, opener=None, url=None):
        self.rel = rel
        self.size = size
        self.sha256 = sha256.lower() if sha256 else None
        self.md5 = md5.lower() if md5 else None
        self.identity = identity or {}
        self.opener = opener  # opener(offset) -> (stream, start_offset)
        self.url = url

    def open(self, offset=0):
        return self.opener(offset)


class _StripAuthOnRedirect(urlrequest.HTTPRedirectHandler if urlrequest else object):
    """Follow redirects, dropping the Authorization header when the host changes (the hub and
    presigned CDN URLs: a token must not travel to another host)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = urlrequest.HTTPRedirectHandler.redirect_request(self, req, fp, code, msg, headers, newurl)
        if new is not None and urlparse.urlsplit(newurl).netloc != urlparse.urlsplit(req.full_url).netloc:
            for key in list(new.headers):
                if key.lower() == "authorization":
                    del new.headers[key]
            new.unredirected_hdrs.pop("Authorization", None)
        return new


_NETWORK_ERRORS = (urlerror.URLError, socket.timeout, ConnectionError, ssl.SSLError) if urlerror else ()
_TLS_VERIFY_ERROR = ssl.SSLCertVerificationError if hasattr(ssl, "SSLCertVerificationError") else ssl.SSLError


def _verdict(what, exc):
    """``(retry, Retry-After)`` of an HTTP attempt (deploy_retry.Backoff's verdict): an answer a retry cannot
    change (a missing file, refused credentials, a certificate that does not verify) raises StageError; a
    transient status (deploy_retry.HTTP_RETRY_STATUS) or a network error is retried; another status is not."""
    if exc is None:
        return False, None
    if isinstance(exc, urlerror.HTTPError):
        if exc.code in deploy_retry.HTTP_FINAL:
            raise StageError("%s: HTTP %d %s" % (what, exc.code, exc.reason))
        if exc.code not in deploy_retry.HTTP_RETRY_STATUS:
            return False, None
        return True, deploy_retry.retry_after_of(exc.code, exc.headers)
    if isinstance(exc, _NETWORK_ERRORS):
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, _TLS_VERIFY_ERROR):
            raise StageError("%s: TLS verification failed: %s" % (what, reason))
        return True, None
    return False, None


class Http(object):
    """urllib with timeouts, retries on transient errors, and an optional Authorization header.

    The retries follow the collection's one policy (``deploy_retry.Backoff``): ``retries`` more attempts
    after the first, after waits of exponential backoff with full jitter (``backoff`` seconds the first at
    most, doubling, at most 15 s), or what a 429's or 503's ``Retry-After`` asks (at most
    ``max_retry_after``), and no attempt later than ``total`` seconds after the first: the staging Job's
    default; a validation reading model facts asks for less."""

    def __init__(
        self,
        authorization=None,
        timeout=60,
        retries=4,
        insecure=False,
        backoff=1.0,
        max_retry_after=60.0,
        total=300.0,
    ):
        self.authorization = authorization
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.total = total
        self.sleep, self.clock = time.sleep, time.time  # tests: a fake sleep and clock
        handlers = [_StripAuthOnRedirect()]
        if insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            handlers.append(urlrequest.HTTPSHandler(context=ctx))
        self.opener = urlrequest.build_opener(*handlers)

    def request(self, url, method="GET", headers=None):
        hdrs = {"User-Agent": "specpilot-stager/%d" % FORMAT}
        hdrs.update(headers or {})
        req = urlrequest.Request(url, method=method, headers=hdrs)
        if self.authorization:
            req.add_header("Authorization", self.authorization)
        what = "%s %s" % (method, redact_uri(url))
        backoff = deploy_retry.Backoff(
            attempts=self.retries + 1,
            base=self.backoff,
            cap=15.0,
            max_retry_after=self.max_retry_after,
            sleep=self.sleep,
            clock=self.clock,
            total=self.total,
        )
        try:
            return backoff.run(
                lambda: self.opener.open(req, timeout=self.timeout), lambda _r, exc: _verdict(what, exc)
            )
        except urlerror.HTTPError as exc:
            raise TransientError("%s: HTTP %d %s" % (what, exc.code, exc.reason))
        except _NETWORK_ERRORS as exc:
            raise TransientError("%s: %s" % (what, getattr(exc, "reason", exc)))

    def head(self, url):
        """(size or None, accept_ranges, etag, sha256 or None) of a URL."""
        resp = self.request(url, "HEAD")
        with resp:
            h = resp.headers
            size = h.get("Content-Length")
            return (
                int(size) if size and size.isdigit() else None,
                (h.get("Accept-Ranges") or "").lower() == "bytes",
                h.get("ETag"),
                published_sha256(h),
            )

    def text(self, url):
        with self.request(url) as resp:
            return resp.read().decode("utf-8")

    def opener_for(self, url):
        def opener(offset):
            headers = {"Range": "bytes=%d-" % offset} if offset else {}
            resp = self.request(url, headers=headers)
            status = getattr(resp, "status", 200)
            if offset and status != 206:
                return resp, 0  # range ignored: the server sends everything
            return resp, offset

        return opener


def published_sha256(headers):
    """sha256 from ``Repr-Digest: sha-256=:<b64>:`` (RFC 9530) or ``Digest: SHA-256=<b64>``."""
    import base64
    import binascii

    for name in ("Repr-Digest", "Digest"):
        value = headers.get(name)
        if not value:
            continue
        for part in value.split(","):
            key, _sep, val = part.strip().partition("=")
            if key.strip().lower() == "sha-256" and val:
                val = val.strip().strip(":")
                try:
                    return binascii.hexlify(base64.b64decode(val)).decode()
                except (ValueError, binascii.Error):
                    continue
    return None


class HttpSource(object):
    scheme = "https"

    def __init__(self, art, env, http=None):
        self.art = art
        self.uri = art["uri"]
        self.http = http or Http(
            authorization=env.get("HTTP_AUTHORIZATION"), insecure=bool(art.get("insecure_tls"))
        )
        self.revision = None

    def describe(self):
        return {"uri": redact_uri(self.uri)}

    def _file(self, url, rel, sha256=None):
        try:
            size, _ranges, etag, published = self.http.head(url)
        except StageError as exc:
            if not re.search(r"HTTP (403|405|501)", str(exc)):  # servers (presigned URLs) that refuse HEAD
                raise
            size, etag, published = None, None, None
        return RemoteFile(
            rel,
            size=size,
            sha256=sha256 or published,
            identity={"url": redact_uri(url), "size": size, "etag": etag},
            opener=self.http.opener_for(url),
            url=url,
        )

    def files(self):
        path = urlparse.urlsplit(self.uri).path
        if self.uri.endswith("/"):
            names = list(self.art.get("files") or [])
            sums = {}
            manifest = self.art.get("checksum_manifest")
            tried = [manifest] if manifest else list(MANIFEST_NAMES)
            for name in tried:
                url = name if "://" in name else urlparse.urljoin(self.uri, name)
                try:
                    sums = parse_checksum_manifest(self.http.text(url))
                except StageError:
                    if manifest:
                        raise
                    continue
                break
            if not names:
                names = sorted(sums)
            if not names:
                raise StageError(
                    "%s is a directory URL: give the file list (files) or publish a checksum "
                    "manifest (%s) there" % (redact_uri(self.uri), " or ".join(MANIFEST_NAMES))
                )
            return [
                self._file(
                    urlparse.urljoin(self.uri, urlparse.quote(safe_rel(n))),
                    safe_rel(n),
                    sums.get(safe_rel(n)),
                )
                for n in names
            ]
        name = posixpath.basename(path) or "download"
        return [self._file(self.uri, name)]


class PvcSource(object):
    scheme = "pvc"

    def __init__(self, art, env):
        self.art = art
        self.root = art.get("src_root")
        if not self.root:
            raise StageError("pvc:// source without src_root (the Job mounts the source PVC there)")
        parts = urlparse.urlsplit(art["uri"])
        self.claim = parts.netloc
        self.sub = parts.path.strip("/")
        self.dir = os.path.join(self.root, self.sub) if self.sub else self.root
        self.revision = None

    def describe(self):
        return {"uri": self.art["uri"]}

    def files(self):
        if not os.path.isdir(self.dir):
            raise StageError("pvc://%s/%s: no such directory on the source PVC" % (self.claim, self.sub))
        out = []
        # a directory that specpilot staged carries the sha256 of every file: verify against it
        known = (read_marker(self.dir) or {}).get("files") or {}
        for base, dirs, names in os.walk(self.dir):
            dirs[:] = sorted(d for d in dirs if d != PARTIAL)
            for name in sorted(names):
                if name == MARKER and base == self.dir:
                    continue
                full = os.path.join(base, name)
                if os.path.islink(full) and not os.path.exists(full):
                    continue
                rel = os.path.relpath(full, self.dir).replace(os.sep, "/")
                st = os.stat(full)
                out.append(
                    RemoteFile(
                        rel,
                        size=st.st_size,
                        sha256=(
                            (known.get(rel) or {}).get("sha256")
                            if (known.get(rel) or {}).get("size") == st.st_size
                            else None
                        ),
                        identity={"size": st.st_size, "mtime": int(st.st_mtime)},
                        opener=_file_opener(full),
                    )
                )
        return out


def _file_opener(path):
    def opener(offset):
        fh = open(path, "rb")
        if offset:
            fh.seek(offset)
        return fh, offset

    return opener


class _BodyStream(object):
    """A boto3 StreamingBody as a file-like object with read(n) and close()."""

    def __init__(self, body):
        self.body = body

    def read(self, n=-1):
        return self.body.read(n if n and n > 0 else None)

    def close(self):
        self.body.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class S3Source(object):
    scheme = "s3"

    def __init__(self, art, env, client=None):
        self.art = art
        parts = urlparse.urlsplit(art["uri"])
        self.bucket = parts.netloc
        self.prefix = parts.path.lstrip("/")
        self.env = env
        self.revision = None
        self._client = client

    def describe(self):
        return {"uri": self.art["uri"]}

    @property
    def client(self):
        if self._client is None:
            try:
                import boto3  # noqa: F401  (only s3:// sources need it)
                from botocore.config import Config
            except ImportError:
                raise StageError(
                    "s3:// sources need boto3 in the staging image (python3 -c 'import boto3' "
                    "failed): use an image that has it"
                )
            env = self.env
            endpoint = env.get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
            style = env.get("S3_ADDRESSING_STYLE") or ("path" if endpoint else "auto")
            verify = env.get("S3_VERIFY_SSL")
            verify = (
                False
                if verify and verify.lower() in ("0", "false", "no")
                else (env.get("AWS_CA_BUNDLE") or None)
            )
            session = boto3.session.Session(
                aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                aws_session_token=env.get("AWS_SESSION_TOKEN"),
                region_name=env.get("AWS_DEFAULT_REGION", "AWS_REGION") or "us-east-1",
            )
            self._client = session.client(
                "s3",
                endpoint_url=endpoint,
                verify=verify,
                config=Config(
                    s3={"addressing_style": style}, retries={"max_attempts": 5, "mode": "standard"}
                ),
            )
        return self._client

    def _call(self, what, fn, **kw):
        try:
            return fn(**kw)
        except Exception as exc:  # botocore's errors: keep their message, never the credentials
            code = ""
            resp = getattr(exc, "response", None)
            if isinstance(resp, dict):
                code = (resp.get("Error") or {}).get("Code", "")
            msg = "s3://%s/%s: %s failed: %s%s" % (
                self.bucket,
                kw.get("Key", kw.get("Prefix", "")),
                what,
                type(exc).__name__,
                (" (%s)" % code) if code else "",
            )
            if code in (
                "NoSuchBucket",
                "NoSuchKey",
                "AccessDenied",
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "403",
                "404",
            ):
                raise StageError(msg)
            raise TransientError(msg + ": " + str(exc)[:300])

    def files(self):
        prefix = self.prefix
        objects = []
        token = None
        dir_prefix = prefix if (not prefix or prefix.endswith("/")) else prefix + "/"
        while True:
            kw = {"Bucket": self.bucket, "Prefix": dir_prefix}
            if token:
                kw["ContinuationToken"] = token
            page = self._call("list", self.client.list_objects_v2, **kw)
            objects.extend(page.get("Contents") or [])
            if not page.get("IsTruncated"):
                break
            token = page.get("NextContinuationToken")
        if not objects and prefix and not prefix.endswith("/"):
            # a single object (e.g. an archive)
            head = self._call("head", self.client.head_object, Bucket=self.bucket, Key=prefix)
            objects = [{"Key": prefix, "Size": head.get("ContentLength"), "ETag": head.get("ETag")}]
            dir_prefix = prefix[: prefix.rfind("/") + 1]
        if not objects:
            raise StageError("s3://%s/%s: no objects under this prefix" % (self.bucket, prefix))
        out = []
        for obj in objects:
            key = obj["Key"]
            if key.endswith("/"):
                continue
            rel = safe_rel(key[len(dir_prefix) :])
            etag = (obj.get("ETag") or "").strip('"')
            md5 = etag if re.match(r"^[0-9a-f]{32}$", etag) else None
            out.append(
                RemoteFile(
                    rel,
                    size=obj.get("Size"),
                    md5=md5,
                    identity={"etag": etag, "size": obj.get("Size")},
                    opener=self._opener(key),
                )
            )
        return out

    def _opener(self, key):
        def opener(offset):
            kw = {"Bucket": self.bucket, "Key": key}
            if offset:
                kw["Range"] = "bytes=%d-" % offset
            resp = self._call("get", self.client.get_object, **kw)
            start = offset if (offset and resp.get("ContentRange")) else 0
            return _BodyStream(resp["Body"]), start

        return opener

    def read_text(self, rel):
        resp = self._call(
            "get",
            self.client.get_object,
            Bucket=self.bucket,
            Key=(self.prefix.rstrip("/") + "/" + rel) if self.prefix else rel,
        )
        return resp["Body"].read().decode("utf-8")


class HfSource(object):
    scheme = "hf"

    def __init__(self, art, env, api=None, http=None):
        self.art = art
        spec = art["uri"][len("hf://") :]
        repo, _sep, rev = spec.partition("@")
        self.repo = repo.strip("/")
        self.requested = art.get("revision") or rev or "main"
        self.endpoint = (env.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        self.token = env.get("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
        self._api = api
        self.http = http or Http(authorization=("Bearer " + self.token) if self.token else None)
        self.revision = None
        self.workdir = None  # where snapshot_download writes: the destination's partial directory (prepare)

    def prepare(self, dest):
        """The destination the files are staged into (its partial directory holds the hub's downloads)."""
        self.workdir = os.path.join(dest, PARTIAL, "hf")

    def _hub(self, name):
        try:
            import huggingface_hub
        except ImportError:
            raise StageError(
                "hf:// sources need huggingface_hub in the staging image "
                "(python3 -c 'import huggingface_hub' failed): use an image that has it"
            )
        return getattr(huggingface_hub, name)

    def _hub_error(self, what, exc):
        """StageError for an answer a retry cannot change (missing, gated, refused), else TransientError."""
        name = type(exc).__name__
        msg = "hf://%s@%s: %s failed: %s: %s" % (self.repo, self.requested, what, name, str(exc)[:300])
        if "NotFound" in name or "Gated" in name or "401" in str(exc) or "403" in str(exc):
            return StageError(msg)
        return TransientError(msg)

    def _snapshot_opener(self, rel):
        """opener(offset) of one file: huggingface_hub's snapshot_download fetches it (pinned to the resolved
        commit, this file only: a file the destination already holds is never fetched; the library resumes
        its own interrupted download) into the partial directory. The file is unlinked once opened, so its
        space returns when the copy into place has read it: the PVC holds one extra file at most."""

        def opener(offset):
            if self.workdir is None:
                raise StageError("hf://%s: no destination prepared for the download" % self.repo)
            snapshot_download = self._hub("snapshot_download")
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()  # the log carries the stager's own progress lines
            try:
                root = snapshot_download(
                    repo_id=self.repo,
                    revision=self.revision,
                    allow_patterns=[glob.escape(rel)],
                    local_dir=self.workdir,
                    endpoint=self.endpoint,
                    token=self.token or False,
                )
            except Exception as exc:  # huggingface_hub's errors (HTTP, not found, offline)
                raise self._hub_error("download of %s" % rel, exc)
            fh = open(os.path.join(root, rel), "rb")
            os.unlink(os.path.join(root, rel))
            if offset:
                fh.seek(offset)
            return fh, offset

        return opener

    def describe(self):
        return {"uri": self.art["uri"], "revision": self.requested, "resolved_revision": self.revision}

    @property
    def api(self):
        if self._api is None:
            self._api = self._hub("HfApi")(endpoint=self.endpoint, token=self.token or False)
        return self._api

    def files(self):
        try:
            info = self.api.model_info(self.repo, revision=self.requested, files_metadata=True)
        except Exception as exc:  # huggingface_hub's errors (RepositoryNotFound, RevisionNotFound, HTTP)
            raise self._hub_error("listing", exc)
        self.revision = getattr(info, "sha", None) or self.requested
        out = []
        for sib in getattr(info, "siblings", None) or []:
            rel = safe_rel(sib.rfilename)
            lfs = getattr(sib, "lfs", None)
            sha = None
            size = getattr(sib, "size", None)
            if lfs is not None:
                sha = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
                size = (lfs.get("size") if isinstance(lfs, dict) else getattr(lfs, "size", None)) or size
            url = "%s/%s/resolve/%s/%s" % (
                self.endpoint,
                self.repo,
                urlparse.quote(self.revision, safe=""),
                urlparse.quote(rel),
            )
            out.append(
                RemoteFile(
                    rel,
                    size=size,
                    sha256=sha,
                    identity={"revision": self.revision, "blob": getattr(sib, "blob_id", None), "size": size},
                    opener=self._snapshot_opener(rel),
                    url=url,
                )
            )
        if not out:
            raise StageError("hf://%s@%s: the repository has no files" % (self.repo, self.revision))
        return out


def make_source(art, env):
    scheme = (art.get("uri") or "").split("://", 1)[0].lower()
    if scheme in ("https", "http"):
        return HttpSource(art, env)
    if scheme == "s3":
        return S3Source(art, env)
    if scheme == "hf":
        return HfSource(art, env)
    if scheme == "pvc":
        return PvcSource(art, env)
    raise StageError(
        "unsupported source %r: staging copies from hf://, s3://, https://, pvc://"
        % redact_uri(art.get("uri"))
    )


# ---------------------------------------------------------------- copying
class Hasher(object):
    """sha256 (and md5 when asked) in a second thread: hashlib releases the GIL on large
    blocks, so hashing overlaps the reads and writes of the copy loop (and oci_layout's layer writes)."""

    def __init__(self, md5=False, initial=None):
        self.sha = hashlib.sha256()
        self.md5 = hashlib.md5() if md5 else None
        if initial:
            self.sha, self.md5 = initial
        self._q = []
        self._cv = threading.Condition()
        self._done = False
        self._t = threading.Thread(target=self._run, name="stager-hash")
        self._t.daemon = True
        self._t.start()

    def _run(self):
        while True:
            with self._cv:
                while not self._q and not self._done:
                    self._cv.wait()
                if not self._q and self._done:
                    return
                block = self._q.pop(0)
            self.sha.update(block)
            if self.md5 is not None:
                self.md5.update(block)
            with self._cv:
                self._cv.notify_all()

    def update(self, block):
        with self._cv:
            while len(self._q) >= 4:
                self._cv.wait()
            self._q.append(block)
            self._cv.notify_all()

    def finish(self):
        with self._cv:
            self._done = True
            self._cv.notify_all()
        self._t.join()
        return self.sha.hexdigest(), (self.md5.hexdigest() if self.md5 is not None else None)


class _Job(object):
    """One file's download in its own thread (``_download_each``)."""

    def __init__(self, download, role, dest, f, progress):
        self.f = f
        self.stats = {"downloaded": 0, "resumed": 0}
        self._info = self._error = None
        self._t = threading.Thread(
            target=self._run, args=(download, role, dest, f, progress), name="stager-file"
        )
        self._t.daemon = True
        self._t.start()

    def _run(self, download, role, dest, f, progress):
        try:
            self._info = download(role, dest, f, progress, self.stats)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self._error = exc

    def wait(self):
        self._t.join()

    def result(self):
        self._t.join()
        if self._error is not None:
            raise self._error
        return self._info


def _hash_range(fd, start, end, hasher):
    """Feed bytes [start, end) of fd into the hasher's digests directly (nothing else feeds it on
    the local-copy path).

    The bytes are hashed where they sit, in the page cache (a read-only mmap): no copy into this
    process, so the hash costs little more than the copy running beside it in the kernel.  A
    source file truncated while it is being staged would end the process with SIGBUS; the Job's
    retry then finds the source changed and starts that file again.  Where mmap is not possible,
    one reused buffer (a fresh 16 MiB object per read would cost page faults and zeroing)."""
    step = 4 * CHUNK
    mm = None
    if end > start:
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            mm = None
    if mm is not None:
        if hasattr(mm, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
            mm.madvise(mmap.MADV_SEQUENTIAL)
        view = memoryview(mm)
        try:
            for pos in range(start, min(end, len(mm)), step):
                block = view[pos : min(pos + step, end)]
                hasher.sha.update(block)
                if hasher.md5 is not None:
                    hasher.md5.update(block)
                block.release()
        finally:
            view.release()
            mm.close()
        return
    pos = start
    buf = bytearray(step)
    view = memoryview(buf)
    while pos < end:
        if hasattr(os, "preadv"):
            n = os.preadv(fd, [buf], pos)
            block = view[:n]
        else:
            block = os.pread(fd, step, pos)
            n = len(block)
        if not n:
            break
        hasher.sha.update(block)
        if hasher.md5 is not None:
            hasher.md5.update(block)
        pos += n


_FADV_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", None) if hasattr(os, "posix_fadvise") else None


def _local_fd(stream):
    """The file descriptor of a local regular file stream, else None."""
    try:
        fd = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _read_into(stream, n):
    read = getattr(stream, "read1", None) or stream.read
    return read(n)


class Stager(object):
    """Stages the artifacts of one request."""

    def __init__(self, request, out=None, environ=None, sources=None):
        self.req = request
        self.out = out or sys.stdout
        self.environ = os.environ if environ is None else environ
        self.sources = sources or {}
        self.root = request.get("dest_root") or "."
        self.force = bool(request.get("force"))
        self.recheck = bool(request.get("recheck"))
        self.verify = request.get("verify") or "sha256"
        self.layout_check = request.get("layout_check", True)
        self.interval = float(request.get("progress_interval", 2.0))
        self.stop_after_bytes = request.get("_test_stop_after_bytes")

    def log(self, message):
        log(self.out, message)

    # ------------------------------------------------------------ whole request
    def run(self):
        results = []
        layouts = {}
        for art in self.req.get("artifacts") or []:
            res = self.stage_artifact(art)
            results.append(res)
            layouts[art.get("role")] = res.get("layout") or {}
        if self.layout_check:
            self.cross_check(layouts)
        return {
            "format": FORMAT,
            "ok": True,
            "changed": any(r["changed"] for r in results),
            "artifacts": results,
        }

    def cross_check(self, layouts):
        target = layouts.get("target") or {}
        for art in self.req.get("artifacts") or []:
            if art.get("role") == "target" or art.get("kind", "model") != "model":
                continue
            draft = layouts.get(art.get("role")) or {}
            tv, dv = target.get("vocab_size"), draft.get("vocab_size")
            if tv and dv and tv != dv:
                raise StageError(
                    "%s: vocab_size %s differs from the target's %s: a draft model must share the "
                    "target's tokenizer" % (art.get("role"), dv, tv),
                    path="config.json",
                    role=art.get("role"),
                )

    # ------------------------------------------------------------ one artifact
    def dest_dir(self, art):
        dest = art.get("dest") or art.get("subdir") or art.get("role")
        dest = posixpath.normpath(dest.strip("/"))
        if dest.startswith("..") or dest in ("", "."):
            raise StageError("bad destination %r" % art.get("dest"))
        return os.path.join(self.root, dest)

    def stage_artifact(self, art):
        role = art.get("role") or "artifact"
        dest = self.dest_dir(art)
        started = time.time()
        marker = read_marker(dest)
        if marker and marker.get("request_digest") == art.get("request_digest") and not self.force:
            return self._up_to_date(art, role, dest, marker, started)
        env = Env(art.get("env_prefix"), self.environ, art.get("env"))
        source = self.sources.get(role) or make_source(art, env)
        self.log("%s: listing %s" % (role, redact_uri(art.get("uri"))))
        stats, staged = self._fetch(art, role, dest, source)
        layout = self._checked_layout(art, role, dest, staged)
        self._note_extra(role, dest, staged)
        new_marker = _new_marker(art, role, source, staged, layout)
        changed = stats["downloaded_files"] > 0 or marker_core(marker) != marker_core(new_marker)
        write_marker(dest, new_marker)
        shutil.rmtree(os.path.join(dest, PARTIAL), ignore_errors=True)
        return self._result(
            art,
            dest,
            new_marker,
            changed=bool(changed),
            downloaded=stats["downloaded"],
            reused=stats["reused"],
            started=started,
            layout=new_marker["layout"],
            resumed=stats.get("resumed", 0),
        )

    def _up_to_date(self, art, role, dest, marker, started):
        """The result of an artifact the marker says is staged, when its files still match it; StageError
        when they do not."""
        problem = verify_against_marker(dest, marker, full=self.recheck or self.verify == "sha256")
        if problem is not None:
            raise StageError(
                "%s: %s on the PVC differs from what was staged (%s); set force: true to "
                "fetch it again" % (role, problem[0], problem[1]),
                path=problem[0],
                role=role,
            )
        self.log(
            "%s: up to date (marker %s matches; %d files verified)"
            % (role, MARKER, len(marker.get("files") or {}))
        )
        return self._result(
            art,
            dest,
            marker,
            changed=False,
            downloaded=0,
            reused=marker.get("bytes", 0),
            started=started,
            layout=marker.get("layout"),
        )

    def _fetch(self, art, role, dest, source):
        """(stats, staged files) of the source's files: one archive unpacked, or the selected files."""
        if hasattr(
            source, "prepare"
        ):  # hf://: the hub's downloads go into the destination's partial directory
            source.prepare(dest)
        files = source.files()
        manifest_sums = self._manifest(art, source, files)
        include, exclude = art.get("include") or [], art.get("exclude") or []
        archives = [f for f in files if is_archive(f.rel)] if len(files) == 1 else []
        if archives and art.get("unpack", True):
            return self._stage_archive(art, role, dest, archives[0], include, exclude, manifest_sums)
        chosen = [f for f in files if selected(f.rel, include, exclude)]
        if not chosen:
            raise StageError(
                "%s: include/exclude select none of the %d source files" % (role, len(files)), role=role
            )
        for f in chosen:
            f.sha256 = f.sha256 or manifest_sums.get(f.rel)
        return self._stage_files(role, dest, chosen, local=getattr(source, "scheme", None) == "pvc")

    def _checked_layout(self, art, role, dest, staged):
        """The layout facts of the staged directory (none without the layout check); StageError on its errors."""
        layout = check_layout(dest, art.get("kind", "model"), list(staged)) if self.layout_check else {}
        if layout.get("errors"):
            raise StageError(
                "%s: layout check failed: %s" % (role, "; ".join(layout["errors"])),
                path=layout.get("error_path"),
                role=role,
            )
        for w in layout.get("warnings") or []:
            self.log("%s: warning: %s" % (role, w))
        return layout

    def _note_extra(self, role, dest, staged):
        extra = sorted(set(list_files(dest)) - set(staged))
        if extra:
            self.log(
                "%s: note: %d file(s) on the PVC are not in the source and were left alone: %s"
                % (role, len(extra), ", ".join(extra[:10]) + (" ..." if len(extra) > 10 else ""))
            )

    def _result(self, art, dest, marker, changed, downloaded, reused, started, layout=None, resumed=0):
        elapsed = max(time.time() - started, 1e-6)
        return {
            "role": art.get("role"),
            "dest": art.get("dest"),
            "changed": changed,
            "bytes": marker.get("bytes", 0),
            "files": len(marker.get("files") or {}),
            "bytes_downloaded": downloaded,
            "bytes_reused": reused,
            "bytes_resumed": resumed,
            "seconds": round(elapsed, 3),
            "throughput_bps": int(downloaded / elapsed) if downloaded else 0,
            "status": {
                "format": FORMAT,
                "request_digest": marker.get("request_digest"),
                "source": marker.get("source"),
                "revision": marker.get("revision"),
                "resolved_revision": marker.get("resolved_revision"),
                "files": len(marker.get("files") or {}),
                "bytes": marker.get("bytes", 0),
                "manifest_sha256": marker.get("manifest_sha256"),
                "staged_at": marker.get("staged_at"),
            },
            "layout": layout or {},
        }

    def _manifest(self, art, source, files):
        sums = {}
        names = {f.rel: f for f in files}
        wanted = art.get("checksum_manifest")
        for name in ([wanted] if wanted and "://" not in wanted else MANIFEST_NAMES):
            f = names.get(name)
            if f is None:
                continue
            stream, _unused = f.open(0)
            try:
                sums.update(parse_checksum_manifest(stream.read().decode("utf-8")))
            finally:
                stream.close()
            break
        else:
            if wanted and "://" not in wanted and source.scheme != "https":
                raise StageError("checksum manifest %r not found in the source" % wanted, path=wanted)
        if wanted and "://" in wanted and source.scheme != "https":
            sums.update(parse_checksum_manifest(Http().text(wanted)))
        for rel, digest in (art.get("checksums") or {}).items():
            sums[safe_rel(rel)] = digest.lower().replace("sha256:", "")
        return sums

    # ------------------------------------------------------------ plain files
    def _stage_files(self, role, dest, files, local=False):
        total = sum(f.size or 0 for f in files)
        progress = Progress(role, total, len(files), self.out, self.interval)
        self.log("%s: %d file(s), %s, into %s" % (role, len(files), human(total), dest))
        stats = {"downloaded": 0, "reused": 0, "resumed": 0, "downloaded_files": 0}
        staged = {}
        todo = []
        for f in files:
            target = os.path.join(dest, f.rel)
            if os.path.lexists(target):
                info = self._existing(role, target, f)
                if info is not None:
                    staged[f.rel] = info
                    stats["reused"] += info["size"]
                    progress.add(info["size"])
                    progress.file_done()
                    continue
            todo.append(f)
        workers = LOCAL_WORKERS if local and self.stop_after_bytes is None else 1
        for f, info, file_stats in self._download_each(role, dest, todo, progress, workers, stats):
            staged[f.rel] = info
            for key, value in file_stats.items():
                stats[key] += value
            stats["downloaded_files"] += 1
            progress.file_done()
        progress.maybe(force=True)
        return stats, staged

    def _download_each(self, role, dest, files, progress, workers, stats):
        """Yield (file, its {size, sha256}, its stats to add to ``stats``) of each file downloaded,
        in order.

        ``workers`` > 1 (a local pvc:// source): that many files at a time. One sha256 thread
        hashes slower than the kernel copies, so one file's hash runs beside the next file's copy
        and hash. Each file is still verified whole before it is renamed into place; the first
        error is raised once the files in flight have ended (their partial files stay resumable).
        """
        if workers <= 1 or len(files) <= 1:
            for f in files:  # one after another, counted in ``stats`` as they go (stop_after_bytes)
                yield f, self._download(role, dest, f, progress, stats), {}
            return
        pending = collections.deque()
        queue = collections.deque(files)
        try:
            while queue or pending:
                while queue and len(pending) < workers:
                    pending.append(_Job(self._download, role, dest, queue.popleft(), progress))
                job = pending.popleft()
                yield job.f, job.result(), job.stats
        finally:
            for job in pending:  # an error (or the caller stopped): let the others end first
                job.wait()

    def _existing(self, role, target, f):
        """The existing file's {size, sha256} when it equals the source; None to (re)download
        (force); StageError when it differs."""
        if os.path.islink(target) or not os.path.isfile(target):
            problem = "is not a regular file"
        else:
            size = os.path.getsize(target)
            if f.size is not None and size != f.size:
                problem = "has %d bytes, the source %d" % (size, f.size)
            else:
                # verify "size" and nothing published: do not read the file
                digest = sha256_file(target) if (f.sha256 or self.verify != "size") else None
                if f.sha256 and digest != f.sha256:
                    problem = "has sha256 %s, the source %s" % (digest, f.sha256)
                elif f.md5 and not f.sha256 and _md5_file(target) != f.md5:
                    problem = "has a different MD5 than the source's ETag"
                elif f.size is None and not f.sha256 and not f.md5:
                    # nothing published to compare with: compare the bytes themselves
                    problem = None if self._same_bytes(target, f) else "differs from the source"
                else:
                    problem = None
                if problem is None:
                    return {"size": size, "sha256": digest}
        if self.force:
            self.log("%s: %s %s: overwriting (force)" % (role, f.rel, problem))
            return None
        raise StageError(
            "%s: %s already exists on the PVC and %s; set force: true to overwrite it"
            % (role, f.rel, problem),
            path=f.rel,
            role=role,
        )

    def _same_bytes(self, target, f):
        stream, _unused = f.open(0)
        try:
            with open(target, "rb") as fh:
                while True:
                    a = _read_into(stream, CHUNK)
                    b = fh.read(len(a)) if a else fh.read(1)
                    if a != b:
                        return False
                    if not a:
                        return True
        finally:
            stream.close()

    def _download(self, role, dest, f, progress, stats):
        part = os.path.join(dest, PARTIAL, f.rel + ".part")
        meta_path = part + ".json"
        os.makedirs(os.path.dirname(part), exist_ok=True)
        offset = _resume_offset(f, part, meta_path)
        want_md5 = bool(f.md5 and not f.sha256)
        initial = _part_hashes(part, want_md5) if offset else None
        stream, start = f.open(offset)
        if start != offset:  # the source ignored the range request
            offset, initial = 0, None
        if offset:
            self.log("%s: %s: resuming at %s of %s" % (role, f.rel, human(offset), human(f.size)))
            stats["resumed"] += offset
            progress.add(offset)
        hasher = Hasher(md5=want_md5, initial=initial)
        done = {"written": offset, "unhashed": False}
        try:
            self._write_part(f, stream, part, offset, hasher, progress, stats, done)
        except StageError:
            raise
        except Exception as exc:  # noqa: BLE001 - socket, http.client, botocore read errors: resumable
            raise _transfer_error(role, f, done["written"], exc)
        finally:
            sha_hex, md5_hex = hasher.finish()
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a broken stream
                pass
        if done["unhashed"]:
            sha_hex = None
        written = done["written"]
        problem = _corruption(f, written, sha_hex, md5_hex, want_md5)
        if problem:
            _remove_quietly(part, meta_path)
            raise StageError(
                "%s: %s is corrupt: %s (the partial download was removed)" % (role, f.rel, problem),
                path=f.rel,
                role=role,
            )
        target = os.path.join(dest, f.rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(part, target)
        _remove_quietly(meta_path)
        return {"size": written, "sha256": sha_hex}

    def _write_part(self, f, stream, part, offset, hasher, progress, stats, done):
        """Write the stream into ``part`` from ``offset`` (an in-kernel copy for a local file), synced;
        ``done`` counts the bytes written as they go, so an interruption can say where."""
        with open(part, "r+b" if offset else "wb") as out:
            out.seek(offset)
            copied = None
            if self.stop_after_bytes is None and _local_fd(stream) is not None:
                # verify "size" and no published digest: an in-kernel copy, not hashed
                hash_it = bool(f.sha256 or f.md5) or self.verify != "size"
                copied = self._copy_local(stream, out, offset, hasher if hash_it else None, progress, stats)
                done["unhashed"] = copied is not None and not hash_it
            if copied is not None:
                done["written"] = copied
            else:
                self._copy_stream(stream, out, hasher, progress, stats, done)
            out.flush()
            os.fsync(out.fileno())

    def _copy_stream(self, stream, out, hasher, progress, stats, done):
        while True:
            block = _read_into(stream, CHUNK)
            if not block:
                break
            out.write(block)
            hasher.update(block)
            done["written"] += len(block)
            stats["downloaded"] += len(block)
            progress.add(len(block))
            if self.stop_after_bytes is not None and stats["downloaded"] >= self.stop_after_bytes:
                out.flush()
                os._exit(EXIT_RETRY)  # tests: an interruption at a known point

    def _copy_local(self, stream, out, offset, hasher, progress, stats):
        """A local source file (pvc://): copy in the kernel (copy_file_range, what cp does) while a
        second thread reads the source for the sha256 (unless hasher is None). Returns the bytes in
        the part file, or None when the kernel cannot copy between these files (the caller then
        reads and writes)."""
        in_fd = stream.fileno()
        out.flush()
        out_fd = out.fileno()
        size = os.fstat(in_fd).st_size
        pos = offset
        feeder = None
        started = False
        while pos < size:
            try:
                n = os.copy_file_range(in_fd, out_fd, min(64 * 1024 * 1024, size - pos), pos, pos)
            except (OSError, AttributeError):
                if not started:
                    stream.seek(pos)
                    return None
                raise
            if n == 0:
                break
            if _FADV_DONTNEED is not None:
                # start the write-back of this chunk now (Linux: fadvise DONTNEED writes dirty pages
                # back without waiting), so the fsync at the end finds little left to write
                try:
                    os.posix_fadvise(out_fd, pos, n, _FADV_DONTNEED)
                except OSError:
                    pass
            if not started and hasher is not None:
                feeder = threading.Thread(
                    target=_hash_range, args=(in_fd, pos, size, hasher), name="stager-read"
                )
                feeder.daemon = True
                feeder.start()
            started = True
            pos += n
            stats["downloaded"] += n
            progress.add(n)
        try:
            # the write-back runs while the feeder still hashes; the digest is checked after both
            os.fsync(out_fd)
        finally:
            if feeder is not None:
                feeder.join()
        return pos

    # ------------------------------------------------------------ archives
    def _stage_archive(self, art, role, dest, f, include, exclude, sums):
        f.sha256 = f.sha256 or art.get("archive_sha256") or sums.get(f.rel)
        stats = {"downloaded": 0, "reused": 0, "resumed": 0, "downloaded_files": 0}
        progress = Progress(role + " (archive)", f.size or 0, 1, self.out, self.interval)
        self.log("%s: archive %s, %s" % (role, f.rel, human(f.size)))
        os.makedirs(dest, exist_ok=True)
        archive_dir = os.path.join(dest, PARTIAL, "archive")
        path = self._download_archive(role, dest, f, progress, stats)["path"]
        staged = {}
        members = list(iter_archive(path))
        strip = common_top_dir([m[0] for m in members])
        extracted = 0
        for rel, size, opener in members:
            if strip:
                rel = rel[len(strip) + 1 :]
            rel = safe_rel(rel)
            if not selected(rel, include, exclude):
                continue
            target = os.path.join(dest, rel)
            sha_expected = sums.get(rel)
            if os.path.lexists(target):
                rf = RemoteFile(rel, size=size, sha256=sha_expected, opener=lambda off, o=opener: (o(), 0))
                existing = self._existing(role, target, rf)
                if existing is not None:
                    staged[rel] = existing
                    stats["reused"] += existing["size"]
                    continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            tmp = target + ".specpilot-tmp"
            h = hashlib.sha256()
            n = 0
            with opener() as src, open(tmp, "wb") as out:
                while True:
                    block = src.read(CHUNK)
                    if not block:
                        break
                    h.update(block)
                    out.write(block)
                    n += len(block)
            if sha_expected and h.hexdigest() != sha_expected:
                os.remove(tmp)
                raise StageError(
                    "%s: %s (from %s) is corrupt: sha256 %s, expected %s"
                    % (role, rel, f.rel, h.hexdigest(), sha_expected),
                    path=rel,
                    role=role,
                )
            os.replace(tmp, target)
            staged[rel] = {"size": n, "sha256": h.hexdigest()}
            extracted += 1
        if not staged:
            raise StageError("%s: the archive %s holds no selected files" % (role, f.rel), role=role)
        stats["downloaded_files"] = extracted + (1 if stats["downloaded"] else 0)
        shutil.rmtree(archive_dir, ignore_errors=True)
        self.log("%s: unpacked %d file(s) from %s" % (role, extracted, f.rel))
        return stats, staged

    def _download_archive(self, role, dest, f, progress, stats):
        holder = os.path.join(dest, PARTIAL, "archive")
        os.makedirs(holder, exist_ok=True)
        final = os.path.join(holder, posixpath.basename(f.rel))
        fake = RemoteFile(
            posixpath.basename(f.rel),
            size=f.size,
            sha256=f.sha256,
            md5=f.md5,
            identity=f.identity,
            opener=f.opener,
        )
        if (
            os.path.exists(final)
            and os.path.exists(final + ".ok")
            and open(final + ".ok").read() == canonical_json(f.identity)
        ):
            return {"path": final}
        info = self._download(role, holder, fake, progress, stats)
        progress.file_done()
        progress.maybe(force=True)
        with open(final + ".ok", "w") as fh:
            fh.write(canonical_json(f.identity))
        info["path"] = final
        return info


def _read_text(path):
    """The text of ``path``, or None when it is missing or unreadable."""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _resume_offset(f, part, meta_path):
    """How many bytes of an earlier partial download of ``f`` a new transfer keeps: all of ``part`` when
    it was fetched from the same source file (its identity recorded beside it), else 0, and then the
    identity of this transfer is recorded."""
    identity = canonical_json(f.identity)
    offset = 0
    if (
        os.path.exists(part)
        and os.path.exists(meta_path)
        and f.identity
        and _read_text(meta_path) == identity
    ):
        offset = os.path.getsize(part)
        if f.size is not None and offset > f.size:
            offset = 0
    if not offset:
        with open(meta_path, "w") as fh:
            fh.write(identity)
    return offset


def _part_hashes(part, want_md5):
    """(sha256, md5 or None) over the bytes of a partial download, to go on hashing after them."""
    sha = hashlib.sha256()
    md5 = hashlib.md5() if want_md5 else None
    for block in _file_blocks(part):
        sha.update(block)
        if md5 is not None:
            md5.update(block)
    return sha, md5


def _transfer_error(role, f, written, exc):
    """The error of an interrupted transfer: the PVC full (permanent), else resumable."""
    if isinstance(exc, OSError) and exc.errno in (28, 122):  # ENOSPC, EDQUOT
        return StageError("%s: %s: the PVC is full (%s)" % (role, f.rel, exc), path=f.rel, role=role)
    return TransientError(
        "%s: %s: transfer interrupted at %s: %s; a new run resumes" % (role, f.rel, human(written), exc),
        path=f.rel,
        role=role,
    )


def _corruption(f, written, sha_hex, md5_hex, want_md5):
    """What is wrong with a finished download against the source's size and digests, or None."""
    if f.size is not None and written != f.size:
        return "received %d bytes, expected %d" % (written, f.size)
    if f.sha256 and sha_hex != f.sha256:
        return "sha256 %s, expected %s" % (sha_hex, f.sha256)
    if want_md5 and md5_hex != f.md5:
        return "MD5 %s, the ETag says %s" % (md5_hex, f.md5)
    return None


def _remove_quietly(*paths):
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass


def _md5_file(path):
    return _file_hexdigest(hashlib.md5(), path)


def iter_archive(path):
    """(name, size, opener) of every regular file in a tar or zip archive, safe names only."""
    if path.lower().endswith(".zip"):
        zf = zipfile.ZipFile(path)
        for zi in sorted(zf.infolist(), key=lambda z: z.filename):
            if zi.is_dir():
                continue
            yield zi.filename, zi.file_size, (lambda zi=zi: zf.open(zi))
        return
    tf = tarfile.open(path, "r:*")
    for ti in tf.getmembers():  # archive order: compressed streams only read forwards cheaply
        if ti.isreg():
            yield ti.name, ti.size, (lambda ti=ti: tf.extractfile(ti))
        elif ti.issym() or ti.islnk():
            raise StageError(
                "the archive %s holds a link (%s): refusing to unpack links"
                % (os.path.basename(path), ti.name),
                path=ti.name,
            )


def common_top_dir(names):
    tops = set()
    for n in names:
        n = n.lstrip("./")
        if "/" not in n:
            return None
        tops.add(n.split("/", 1)[0])
    return tops.pop() if len(tops) == 1 else None


# ---------------------------------------------------------------- markers
def read_marker(dest):
    try:
        with open(os.path.join(dest, MARKER)) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def write_marker(dest, marker):
    os.makedirs(dest, exist_ok=True)
    tmp = os.path.join(dest, MARKER + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(marker, fh, indent=1, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(dest, MARKER))


def marker_core(marker):
    if not marker:
        return None
    return {k: marker.get(k) for k in ("request_digest", "files", "source", "revision", "resolved_revision")}


def _new_marker(art, role, source, staged, layout):
    """The marker of a staged artifact: its source, request, files and layout facts."""
    desc = source.describe()
    marker = {
        "format": FORMAT,
        "role": role,
        "source": desc.get("uri"),
        "revision": desc.get("revision") or art.get("revision"),
        "resolved_revision": getattr(source, "revision", None),
        "request_digest": art.get("request_digest"),
        "include": art.get("include") or [],
        "exclude": art.get("exclude") or [],
        "files": {rel: staged[rel] for rel in sorted(staged)},
        "bytes": sum(v["size"] for v in staged.values()),
        "layout": {k: v for k, v in layout.items() if k not in ("errors", "warnings", "error_path")},
        "staged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    marker["manifest_sha256"] = manifest_digest(marker["files"])
    return marker


def manifest_digest(files):
    return "sha256:" + hashlib.sha256(canonical_json(files).encode()).hexdigest()


def already_staged(dest, art):
    """Whether ``dest`` holds ``art`` as its request asks - the marker's request digest, every file
    with its size - without reading a source (what a check-mode run can tell)."""
    marker = read_marker(dest)
    return bool(
        marker
        and marker.get("request_digest") == art.get("request_digest")
        and verify_against_marker(dest, marker, full=False) is None
    )


def verify_against_marker(dest, marker, full=True):
    """None when every file of the marker is present with its size (and sha256 when full);
    else (file, problem)."""
    for rel, info in sorted((marker.get("files") or {}).items()):
        path = os.path.join(dest, rel)
        if not os.path.isfile(path):
            return rel, "missing"
        size = os.path.getsize(path)
        if size != info.get("size"):
            return rel, "%d bytes, %s when staged" % (size, info.get("size"))
        if full and info.get("sha256") and sha256_file(path) != info["sha256"]:
            return rel, "sha256 differs from the one recorded when staged (corrupted)"
    return None


def list_files(dest):
    out = []
    for base, dirs, names in os.walk(dest):
        dirs[:] = [d for d in dirs if d != PARTIAL]
        for name in names:
            if base == dest and (name == MARKER or name.startswith(MARKER)):
                continue
            out.append(os.path.relpath(os.path.join(base, name), dest).replace(os.sep, "/"))
    return out


# ---------------------------------------------------------------- layout
def safetensors_header(path):
    """The header dict of a .safetensors file; StageError when unreadable or inconsistent."""
    size = os.path.getsize(path)
    name = os.path.basename(path)
    if size < 8:
        raise StageError("%s: too short for a safetensors file (%d bytes)" % (name, size), path=name)
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > min(size - 8, 100 * 1024 * 1024):
            raise StageError(
                "%s: safetensors header length %d does not fit the file (%d bytes)" % (name, n, size),
                path=name,
            )
        raw = fh.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise StageError("%s: the safetensors header is not valid JSON" % name, path=name)
    if not isinstance(header, dict):
        raise StageError("%s: the safetensors header is not an object" % name, path=name)
    data_len = size - 8 - n
    end = 0
    for key, t in header.items():
        if key == "__metadata__":
            continue
        offs = (t or {}).get("data_offsets") if isinstance(t, dict) else None
        if not offs or len(offs) != 2 or not (0 <= offs[0] <= offs[1] <= data_len):
            raise StageError(
                "%s: tensor %s has data_offsets %r outside the %d data bytes" % (name, key, offs, data_len),
                path=name,
            )
        end = max(end, offs[1])
    if end != data_len:
        raise StageError(
            "%s: tensors end at byte %d of %d data bytes (truncated or padded file)" % (name, end, data_len),
            path=name,
        )
    return header


_CONFIG_FACTS = ("architectures", "model_type", "vocab_size", "hidden_size")


def _config_facts(dest, files, out):
    """Read config.json's facts into ``out``; the error when it is missing or not a JSON object, else None."""
    if "config.json" not in files:
        return "config.json is missing"
    try:
        with open(os.path.join(dest, "config.json")) as fh:
            cfg = json.load(fh)
        if not isinstance(cfg, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as exc:
        return "config.json is not valid JSON (%s)" % exc
    out.update((key, cfg[key]) for key in _CONFIG_FACTS if key in cfg)
    if "vocab_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        out["vocab_size"] = cfg["text_config"].get("vocab_size")
    return None


def _safetensors_tensors(dest, shards, errors):
    """(tensors in the shards, the first unreadable shard or None); each unreadable one goes to ``errors``."""
    tensors, bad = 0, None
    for rel in shards:
        try:
            tensors += len([k for k in safetensors_header(os.path.join(dest, rel)) if k != "__metadata__"])
        except StageError as exc:
            errors.append(str(exc))
            bad = bad or rel
    return tensors, bad


def _index_problems(dest, files, errors):
    """Check each *.safetensors.index.json names shards that are there; the first missing shard or None."""
    first_missing = None
    for idx in sorted(f for f in files if f.endswith(".safetensors.index.json")):
        try:
            with open(os.path.join(dest, idx)) as fh:
                wm = json.load(fh).get("weight_map") or {}
            missing = sorted(set(wm.values()) - files)
            if missing:
                errors.append("%s names shards that are missing: %s" % (idx, ", ".join(missing[:5])))
                first_missing = first_missing or missing[0]
        except (OSError, ValueError, AttributeError) as exc:
            errors.append("%s is not valid JSON (%s)" % (idx, exc))
    return first_missing


def _tokenizer(files):
    """The first complete set of tokenizer files among ``files`` (a list), or []."""
    tok = [s for s in TOKENIZER_SETS if all(n in files for n in s)]
    return list(tok[0]) if tok else []


def _weight_files(files):
    """(the safetensors files, the other weight files at the top level), each sorted."""
    st = sorted(f for f in files if f.endswith(".safetensors"))
    other = sorted(f for f in files if f.endswith((".bin", ".pt", ".pth", ".gguf")) and "/" not in f)
    return st, other


def check_layout(dest, kind, files):
    """{errors, warnings, facts...} of a staged model directory. kind: model (a full model with
    its tokenizer) or head (an EAGLE/Medusa-style draft head: tokenizer optional)."""
    errors, warnings = [], []
    out = {"kind": kind}
    files = set(files) | set(list_files(dest))
    config_error = _config_facts(dest, files, out)
    if config_error:
        errors.append(config_error)
    out["tokenizer"] = _tokenizer(files)
    if not out["tokenizer"]:
        msg = "no tokenizer files (tokenizer.json, tokenizer.model, or vocab.json + merges.txt)"
        (errors if kind == "model" else warnings).append(msg)
    st, other = _weight_files(files)
    tensors, bad_shard = _safetensors_tensors(dest, st, errors)
    missing_shard = _index_problems(dest, files, errors)
    if not st and not other:
        errors.append("no weight files (*.safetensors)")
    elif not st:
        warnings.append("weights are not safetensors (%s): headers not checked" % ", ".join(other[:3]))
    out.update({"weights": st or other, "tensors": tensors, "errors": errors, "warnings": warnings})
    error_path = ("config.json" if config_error else None) or bad_shard or missing_shard
    if error_path:
        out["error_path"] = error_path
    return out


# ---------------------------------------------------------------- entry point
def run_request(request, out=None, environ=None, sources=None):
    """Stage a request in-process (the Modelcar role's fetch); returns the result dict; raises
    StageError."""
    return Stager(request, out=out, environ=environ, sources=sources).run()


def main(argv=None):
    p = argparse.ArgumentParser(prog="stager.py", description="specpilot staging program")
    p.add_argument("--request", required=True, help="request JSON file")
    p.add_argument("--dest-root", help="override the request's dest_root")
    args = p.parse_args(argv)
    out = sys.stdout
    try:
        with open(args.request) as fh:
            request = json.load(fh)
        if args.dest_root:
            request["dest_root"] = args.dest_root
        if request.get("format", FORMAT) != FORMAT:
            raise StageError("request format %r, this program speaks %d" % (request.get("format"), FORMAT))
        log(
            out,
            "python %s, %d artifact(s), dest %s%s%s"
            % (
                sys.version.split()[0],
                len(request.get("artifacts") or []),
                request.get("dest_root"),
                ", force" if request.get("force") else "",
                ", recheck" if request.get("recheck") else "",
            ),
        )
        result = run_request(request, out=out)
    except StageError as exc:
        out.write(
            ERROR_PREFIX
            + canonical_json(
                {"message": str(exc), "path": exc.path, "role": exc.role, "permanent": exc.permanent}
            )
            + "\n"
        )
        out.flush()
        return EXIT_PERMANENT if exc.permanent else EXIT_RETRY
    except (OSError, ValueError) as exc:
        out.write(
            ERROR_PREFIX
            + canonical_json({"message": "%s: %s" % (type(exc).__name__, exc), "permanent": False})
            + "\n"
        )
        out.flush()
        return EXIT_RETRY
    out.write(RESULT_PREFIX + canonical_json(result) + "\n")
    out.flush()
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
