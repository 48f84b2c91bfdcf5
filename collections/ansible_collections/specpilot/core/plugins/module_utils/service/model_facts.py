# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""Model facts read at the artifact's source: ``config.json`` and the tokenizer, never weights.

What the compatibility and GPU-memory checks need (architecture, model_type, hidden_size, vocab_size,
layers, heads, num_nextn_predict_layers, an EAGLE head's target, the tokenizer's fingerprint) is in a
few small files.  This module reads them from where the artifact comes from:

``local_path``
    a directory on the controller (compat.read_local_facts reads it, as before);
``hf://org/repo[@revision]``
    the Hub's REST API (``/api/models/<repo>/revision/<rev>`` lists the files and resolves the revision
    to a commit, ``/<repo>/resolve/<commit>/<file>`` serves one file), at HF_ENDPOINT with HF_TOKEN as a
    Bearer header: the staging program's Env, HfSource (endpoint, token, revision) and Http clients;
``s3://bucket/prefix``
    the staging program's S3Source (boto3, the AWS_* variables): one listing, then the small objects;
``oci://registry/repo[:tag|@digest]``
    the registry API (oci_registry.Registry): the manifest, then the tar headers of the model's layer,
    read with Range requests one header at a time, and the bytes of the wanted members only (a layer
    that is compressed cannot be read that way and is reported);
``pvc://claim/path``
    a directory on a PersistentVolumeClaim: the deploy's probe Job (cluster_probe.py) reads it in the
    cluster with this same code and passes the facts in (spec_validate's option ``probed``); the
    controller cannot read it in a validate-only run, so there the checks that need facts typed nowhere
    else are reported as not run.

Only ``config.json``, ``model.safetensors.index.json`` (for the weights' total size), ``tokenizer.json``
and ``tokenizer.model`` are fetched, each at most 64 MiB, into a temporary directory that
compat.read_local_facts then reads: a fact means the same whatever its source.

Results are cached by source and revision in ``$SPECPILOT_MODEL_FACTS_CACHE`` (default
``$XDG_CACHE_HOME/specpilot/model-facts``, i.e. ``~/.cache/specpilot/model-facts``), one JSON file per
source: a commit or a digest forever, a branch, tag or S3 prefix for ``SPECPILOT_MODEL_FACTS_TTL``
seconds (default one day).  Every host of a run and every later run on the controller share it (each
file is written to a temporary name and renamed: concurrent writers never leave half a file; one that
cannot be read is ignored).  A read that fails is not cached, except that an endpoint that did not
answer (no connection, a timeout, a 5xx) is remembered for ``SPECPILOT_MODEL_FACTS_UNREACHABLE_TTL``
seconds (default 300): the other artifacts and hosts of the run do not try it again, and report the
checks they could not run as the first one did.  ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) set
as huggingface_hub reads it: hf:// facts come from the cache only, nothing is asked of the Hub.
Validation's reads try twice, a quarter second apart, 10 s each at most (the staging Job, which has
the time, keeps stager.Http's longer policy).

``resolve()`` merges them into the facts typed in the spec (typed facts win; a typed fact that
contradicts the source is an error naming both values) and reports, per artifact, which checks could
not run and why.  The switch ``specpilot_model_facts`` (``auto``, the default, or ``off``; the
environment variable SPECPILOT_MODEL_FACTS when the variable is not set) turns the network reads off.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import ssl
import tempfile
import time

from urllib import error as urlerror
from urllib import parse as urlparse

from ansible_collections.specpilot.core.plugins.module_utils.service import compat
from ansible_collections.specpilot.core.plugins.module_utils.staging import oci_registry
from ansible_collections.specpilot.core.plugins.module_utils.staging import stager
from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.report.findings import path_join

__all__ = ["MODES", "mode_of", "source_for", "read", "resolve", "Cache", "Unreadable"]

MODES = ("auto", "off")
ENV_MODE = "SPECPILOT_MODEL_FACTS"
ENV_CACHE = "SPECPILOT_MODEL_FACTS_CACHE"
ENV_TTL = "SPECPILOT_MODEL_FACTS_TTL"
ENV_UNREACHABLE_TTL = "SPECPILOT_MODEL_FACTS_UNREACHABLE_TTL"
DEFAULT_TTL = 86400
DEFAULT_UNREACHABLE_TTL = 300
# huggingface_hub/constants.py: HF_HUB_OFFLINE = _is_true(HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE),
# _is_true: value.upper() in ENV_VARS_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}
ENV_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
TRUE_VALUES = ("1", "ON", "YES", "TRUE")
SMALL_FILES = ("config.json", "model.safetensors.index.json", "tokenizer.json", "tokenizer.model")
MAX_SMALL = 64 * 1024 * 1024
# validation's policy for a read: 10 s a request, one retry a quarter second later (a validation waits
# on it; the staging Job keeps stager.Http's and oci_registry.Registry's longer defaults)
TIMEOUT = 10
RETRY_WAIT = 0.25
# botocore's exceptions that mean the endpoint did not answer (they are not OSErrors)
BOTO_UNREACHABLE = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionClosedError",
)
NETWORK_KINDS = ("hf", "s3", "oci")
FORMAT = 1
# the facts compared with the source when both give them (tokenizer: only a sha256 fingerprint is
# comparable; quantization and params_b are named or estimated differently by different tools)
COMPARED = tuple(k for k in compat.FACT_KEYS if k not in ("params_b", "quantization"))


class Unreadable(Exception):
    """The facts cannot be read from this source; the message says why."""


# ---------------------------------------------------------------- settings
def mode_of(options, environ=None):
    """(mode, problem): the option, else $SPECPILOT_MODEL_FACTS, else auto; an unknown value is off.
    YAML 1.1 reads an unquoted off as false (and on as true): both spellings are taken."""
    environ = os.environ if environ is None else environ
    value = options.get("model_facts")
    if value is None or value == "":
        value = environ.get(ENV_MODE) or "auto"
    if isinstance(value, bool):
        value = "auto" if value else "off"
    text = str(value).strip().lower()
    text = {"false": "off", "no": "off", "true": "auto", "on": "auto", "yes": "auto"}.get(text, text)
    if text not in MODES:
        return "off", "specpilot_model_facts=%r is not one of %s" % (value, ", ".join(MODES))
    return text, None


def cache_dir(environ=None):
    environ = os.environ if environ is None else environ
    if environ.get(ENV_CACHE):
        return environ[ENV_CACHE]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "specpilot", "model-facts")


class Cache(object):
    """One JSON file per source and revision; moving references expire after ``ttl`` seconds."""

    def __init__(self, directory, ttl=DEFAULT_TTL):
        self.directory = directory
        self.ttl = ttl

    def _path(self, key):
        return os.path.join(self.directory, hashlib.sha256(key.encode("utf-8")).hexdigest() + ".json")

    def get(self, key, now=None, ttl=None):
        """The entry of ``key``, or None: missing, expired, or not a cache file of this format (a
        file that does not parse, half written by a tool that did not rename it, is a miss)."""
        try:
            with open(self._path(key)) as handle:
                entry = json.load(handle)
            age = (now or time.time()) - float(entry.get("read_at") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            return None
        if entry.get("format") != FORMAT or entry.get("key") != key:
            return None
        if not entry.get("immutable") and not 0 <= age < (self.ttl if ttl is None else ttl):
            return None
        return entry

    def put(self, key, entry):
        entry = dict(entry, key=key, format=FORMAT)
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".facts-", dir=self.directory)
            with os.fdopen(fd, "w") as handle:
                json.dump(entry, handle, sort_keys=True)
            os.replace(tmp, self._path(key))
        except OSError:
            pass  # a cache that cannot be written only costs the next run a read


def _seconds(environ, name, default):
    try:
        return float(environ.get(name) or default)
    except ValueError:
        return default


def default_cache(environ=None):
    environ = os.environ if environ is None else environ
    return Cache(cache_dir(environ), _seconds(environ, ENV_TTL, DEFAULT_TTL))


def hf_offline(environ):
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, read as huggingface_hub reads it."""
    return any(str(environ.get(name) or "").upper() in TRUE_VALUES for name in ENV_OFFLINE)


# ---------------------------------------------------------------- where an artifact's facts are
def source_for(role, artifact, spec, read_local=True):
    """The source to read ``role``'s facts from: {kind, uri, revision, subdir, path, label}, or None.

    local_path first (unless read_local is false), then the artifact's uri; with no uri, where the
    delivery put it: the PVC's directory (delivery pvc) or the Modelcar image (delivery modelcar)."""
    if artifact.get("local_path") and read_local:
        return {"kind": "local", "uri": artifact["local_path"], "path": path_join(role, "local_path")}
    uri = artifact.get("uri")
    if uri:
        kind = uri.split("://", 1)[0].lower() if "://" in uri else "other"
        return {
            "kind": kind,
            "uri": uri,
            "revision": artifact.get("revision"),
            "path": path_join(role, "uri"),
            "subdir": None,
        }
    subdir = artifact.get("subdir") or role
    delivery = spec.get("delivery")
    if delivery == "pvc" and isinstance(spec.get("pvc"), dict) and spec["pvc"].get("name"):
        sub = "/".join(p for p in ((spec["pvc"].get("path") or "").strip("/"), subdir) if p)
        return {"kind": "pvc", "uri": "pvc://%s/%s" % (spec["pvc"]["name"], sub), "path": role}
    modelcar = spec.get("modelcar") if delivery == "modelcar" else None
    if isinstance(modelcar, dict) and modelcar.get("image"):
        image = modelcar["image"].split("://", 1)[-1]
        digest = modelcar.get("image_digest")
        if "@" not in image and digest:
            last = image.rsplit("/", 1)
            if ":" in last[-1]:
                image = image.rsplit(":", 1)[0]
            image = "%s@%s" % (image, digest)
        return {
            "kind": "oci" if "@" in image else "unbuilt",
            "uri": "oci://" + image,
            "path": role,
            "subdir": subdir,
            "tls_verify": modelcar.get("tls_verify"),
        }
    return None


# ---------------------------------------------------------------- reading
def read(source, environ=None, cache=None, now=None, probed=None):
    """(facts, problem, cached) of a network source (hf, s3, oci), a local directory, or a PVC directory
    that the cluster probe read (probed: spec_validate's option, cluster_probe.probed); problem says why
    nothing could be read."""
    environ = os.environ if environ is None else environ
    kind = source["kind"]
    if kind == "local":
        facts, problem = compat.read_local_facts(source["uri"])
        return facts, problem, False
    if kind == "pvc" and probed:
        for entry in (probed.get("models") or {}).values():
            if entry.get("uri") == source["uri"]:
                return dict(entry.get("facts") or {}), entry.get("problem"), False
    if kind not in NETWORK_KINDS:
        return {}, _not_readable(source), False
    key = _cache_key(source, environ)
    cache = default_cache(environ) if cache is None else cache
    entry = cache.get(key, now) if cache else None
    if entry and isinstance(entry.get("facts"), dict):
        return entry["facts"], None, True
    held = _held_back(source, environ, cache, now)
    if held:
        return {}, held, False
    try:
        facts, meta = _fetch(source, environ)
    except Exception as exc:  # pylint: disable=broad-except  # a source's failure is a finding, not a crash
        problem = _problem(source, exc)
        if cache and _unreachable(exc):
            cache.put(_down_key(source, environ), {"problem": problem, "read_at": now or time.time()})
        return {}, problem, False
    if meta.get("problem"):
        return {}, meta["problem"], False
    if cache:
        cache.put(key, {"facts": facts, "read_at": now or time.time(), "immutable": meta.get("immutable")})
    return facts, None, False


def _fetch(source, environ):
    """(facts, meta) read at the source into a temporary directory (meta: immutable, or a problem)."""
    work = tempfile.mkdtemp(prefix="specpilot-facts-")
    try:
        meta = {"hf": _read_hf, "s3": _read_s3, "oci": _read_oci}[source["kind"]](source, environ, work)
        facts, problem = compat.read_local_facts(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if problem:
        return {}, {"problem": problem.replace(work, source["uri"])}
    for name in ("weight_bytes", "resolved_revision"):  # weight_bytes: the index's total, else the listing's
        if meta.get(name) and not facts.get(name):
            facts[name] = meta[name]
    return facts, meta


def _problem(source, exc):
    if isinstance(exc, (Unreadable, oci_registry.RegistryError)):
        return str(exc)
    if isinstance(exc, stager.StageError):
        return _stage_problem(source, exc)
    return "reading %s failed: %s: %s" % (show_uri(source["uri"]), type(exc).__name__, exc)


# ---------------------------------------------------------------- offline, unreachable
def _where(source, environ):
    """The endpoint a network source is read from: the Hub, the S3 endpoint, the registry."""
    if source["kind"] == "hf":
        return stager.Env("", environ).get("HF_ENDPOINT") or "https://huggingface.co"
    if source["kind"] == "s3":
        return stager.Env("", environ).get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") or "AWS S3"
    return _parse_oci(source["uri"])[0]


def _down_key(source, environ):
    return "unreachable|%s|%s" % (source["kind"], _where(source, environ))


def _unreachable(exc):
    """Whether a read failed because its endpoint did not answer: no connection (DNS, refused,
    unroutable), a timeout, or a 408, 429 or 5xx after the retries.  A 401, 403 or 404 and a TLS
    verification failure are answers about one source, not about the endpoint."""
    seen, depth = exc, 0
    while seen is not None and depth < 8:
        if isinstance(seen, urlerror.HTTPError):
            return seen.code in (408, 429) or seen.code >= 500
        if isinstance(seen, ssl.CertificateError) or isinstance(
            getattr(seen, "reason", None), ssl.CertificateError
        ):
            return False
        if isinstance(seen, OSError) or type(seen).__name__ in BOTO_UNREACHABLE:
            return True
        seen, depth = seen.__cause__ or seen.__context__, depth + 1
    return False


def _held_back(source, environ, cache, now=None):
    """Why the source is not read now: HF_HUB_OFFLINE for hf://, or its endpoint found unreachable
    less than SPECPILOT_MODEL_FACTS_UNREACHABLE_TTL seconds ago (by this process, another host's
    worker of the same run, or an earlier run); None to read it."""
    uri = show_uri(source["uri"])
    if source["kind"] == "hf" and hf_offline(environ):
        return (
            "HF_HUB_OFFLINE is set: %s was not read from the Hub, and no earlier read of it is cached "
            "(unset HF_HUB_OFFLINE to read it)" % uri
        )
    ttl = _seconds(environ, ENV_UNREACHABLE_TTL, DEFAULT_UNREACHABLE_TTL)
    down = cache.get(_down_key(source, environ), now, ttl=ttl) if cache and ttl > 0 else None
    if not down:
        return None
    return "%s was not read: %s did not answer at %s UTC (%s); it is tried again %d s after that (%s)" % (
        uri,
        _where(source, environ),
        time.strftime("%H:%M:%S", time.gmtime(float(down.get("read_at") or 0))),
        down.get("problem"),
        ttl,
        ENV_UNREACHABLE_TTL,
    )


def show_uri(uri):
    """The URI as written, unless it carries credentials or a query (then stager.redact_uri's form)."""
    try:
        parts = urlparse.urlsplit(uri)
        secret = bool(parts.username or parts.password or parts.query)
    except ValueError:
        secret = True
    return stager.redact_uri(uri) if secret else uri


def _not_readable(source):
    uri = show_uri(source["uri"])
    if source["kind"] == "pvc":
        return (
            "%s is a directory on a PersistentVolumeClaim, which the controller cannot read in a "
            "validate-only run" % uri
        )
    if source["kind"] == "unbuilt":
        return "the Modelcar image %s has no digest yet (playbooks/stage.yml builds it)" % uri
    return "reading model facts from %s:// sources is not supported" % source["kind"]


def _stage_problem(source, exc):
    text = str(exc)
    if "HTTP 401" in text or "HTTP 403" in text:
        text += " (set HF_TOKEN to a token with access to the repository)"
    if "boto3" in text:
        text = "s3:// sources need boto3 on the controller (python3 -c 'import boto3' failed)"
    return text


def _cache_key(source, environ):
    env = stager.Env("", environ)
    where = ""
    if source["kind"] == "hf":
        where = env.get("HF_ENDPOINT") or "https://huggingface.co"
    elif source["kind"] == "s3":
        where = env.get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") or ""
    return "|".join(
        [source["kind"], where, source["uri"], source.get("revision") or "", source.get("subdir") or ""]
    )


def _save(dest, name, data):
    with open(os.path.join(dest, name), "wb") as handle:
        handle.write(data)


def _read_all(stream, name, limit=MAX_SMALL):
    with stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise Unreadable("%s is larger than %d bytes: not a small file, not read" % (name, limit))
    return data


def _to_fetch(names):
    """The small files of SMALL_FILES present in ``names`` (tokenizer.model only without tokenizer.json)."""
    out = [n for n in SMALL_FILES if n in names]
    if "tokenizer.json" in out and "tokenizer.model" in out:
        out.remove("tokenizer.model")
    return out


def _weights(sizes):
    total = sum(size or 0 for rel, size in sizes.items() if rel.endswith(".safetensors"))
    return total or None


def _read_hf(source, environ, dest):
    """The Hub's REST API: the file list at the revision, then the small files at its commit."""
    src = stager.HfSource({"uri": source["uri"], "revision": source.get("revision")}, stager.Env("", environ))
    http = stager.Http(authorization=src.http.authorization, timeout=TIMEOUT, retries=1, backoff=RETRY_WAIT)
    api = "%s/api/models/%s/revision/%s?blobs=true" % (
        src.endpoint,
        src.repo,
        urlparse.quote(src.requested, safe=""),
    )
    try:
        info = json.loads(http.text(api))
    except ValueError:
        raise Unreadable("hf://%s@%s: the Hub's answer is not JSON" % (src.repo, src.requested))
    commit = info.get("sha") or src.requested
    sizes = {}
    for sib in info.get("siblings") or []:
        if not isinstance(sib, dict) or not sib.get("rfilename"):
            continue
        lfs = sib.get("lfs") or {}
        sizes[sib.get("rfilename")] = lfs.get("size") or sib.get("size")
    if "config.json" not in sizes:
        raise Unreadable("hf://%s@%s has no config.json" % (src.repo, src.requested))
    for name in _to_fetch(sizes):
        url = "%s/%s/resolve/%s/%s" % (src.endpoint, src.repo, urlparse.quote(commit, safe=""), name)
        stream, _start = http.opener_for(url)(0)
        _save(dest, name, _read_all(stream, name))
    return {
        "resolved_revision": commit,
        "weight_bytes": _weights(sizes),
        "immutable": bool(re.match(r"^[0-9a-f]{40}$", src.requested)),
    }


def _read_s3(source, environ, dest):
    """One listing of the prefix (sizes, never contents), then the small objects."""
    uri = source["uri"].rstrip("/") + "/"
    src = stager.S3Source({"uri": uri}, stager.Env("", environ))
    files = {f.rel: f for f in src.files()}
    if "config.json" not in files:
        raise Unreadable("%s has no config.json" % source["uri"])
    for name in _to_fetch(files):
        if (files[name].size or 0) > MAX_SMALL:
            raise Unreadable("%s/%s is larger than %d bytes: not read" % (source["uri"], name, MAX_SMALL))
        stream, _start = files[name].open(0)
        _save(dest, name, _read_all(stream, name))
    return {"weight_bytes": _weights({rel: f.size for rel, f in files.items()}), "immutable": False}


# ---------------------------------------------------------------- oci:// (the registry API)
def _parse_oci(uri):
    ref = uri.split("://", 1)[-1]
    if "@" in ref:
        repo, reference = ref.split("@", 1)
    elif ":" in ref.rsplit("/", 1)[-1]:
        repo, reference = ref.rsplit(":", 1)
    else:
        repo, reference = ref, "latest"
    host = repo.split("/", 1)[0]
    if "/" not in repo or ("." not in host and ":" not in host and host != "localhost"):
        host = "docker.io"
    return host, oci_registry.repository_name(repo, host), reference


def _registry(host, source, environ):
    verify = source.get("tls_verify")
    if verify is None:
        flag = (environ.get("SPECPILOT_REGISTRY_TLS_VERIFY") or "").lower()
        verify = not (flag in ("0", "false", "no") or host.split(":")[0] in ("127.0.0.1", "localhost"))
    authfile = environ.get("REGISTRY_AUTH_FILE")
    if not authfile:
        candidate = os.path.join(os.path.expanduser("~"), ".docker", "config.json")
        authfile = candidate if os.path.isfile(candidate) else None
    return oci_registry.Registry(
        host,
        tls_verify=bool(verify),
        authfile=authfile,
        timeout=TIMEOUT,
        backoff=oci_registry.Backoff(attempts=2, base=RETRY_WAIT, cap=RETRY_WAIT),
    )


def _image_manifest(reg, name, reference):
    got = reg.get_manifest(name, reference)
    if got is None:
        raise Unreadable("%s/%s:%s: no such image" % (reg.host, name, reference))
    raw, media_type, digest = got
    doc = json.loads(raw.decode("utf-8"))
    if media_type in oci_registry.INDEX_TYPES or doc.get("manifests"):
        descs = doc.get("manifests") or []
        pick = [d for d in descs if (d.get("platform") or {}).get("architecture") in ("amd64", None)] or descs
        if not pick:
            raise Unreadable("%s/%s:%s: an empty image index" % (reg.host, name, reference))
        return _image_manifest(reg, name, pick[0]["digest"])
    return doc, digest


def _read_oci(source, environ, dest):
    """The model's files in an image's layers: models/<subdir>/ (a specpilot Modelcar) or models/ (a
    KServe modelcar image), read from tar headers fetched with Range requests."""
    host, name, reference = _parse_oci(source["uri"])
    reg = _registry(host, source, environ)
    manifest, digest = _image_manifest(reg, name, reference)
    subdir = source.get("subdir")
    prefixes = (["models/%s/" % subdir] if subdir else []) + ["models/"]
    layers = list(reversed(manifest.get("layers") or []))
    own = [
        layer
        for layer in layers
        if subdir and (layer.get("annotations") or {}).get("io.specpilot.modelcar.artifact.subdir") == subdir
    ]
    compressed = []
    for layer in own or layers:
        if not str(layer.get("mediaType") or "").endswith(".tar"):
            compressed.append(layer.get("digest"))
            continue
        found = _tar_members(reg, name, layer["digest"], layer.get("size"), prefixes)
        if "config.json" in found:
            for member in _to_fetch(found):
                _save(dest, member, found[member])
            return {"resolved_revision": digest, "immutable": reference.startswith("sha256:")}
    if compressed:
        raise Unreadable(
            "%s: the model's layer is compressed (%s): its config.json cannot be read without reading "
            "the weights" % (source["uri"], ", ".join(d[:19] for d in compressed if d))
        )
    raise Unreadable("%s holds no %sconfig.json" % (source["uri"], prefixes[0]))


def _blob_range(reg, name, digest, start, length):
    reply = reg.request(
        "GET",
        "/v2/%s/blobs/%s" % (name, digest),
        headers={"Range": "bytes=%d-%d" % (start, start + length - 1)},
        limit=length,
    )
    if reply.code == 206 or (reply.code == 200 and start == 0):
        return reply.body[:length]
    if reply.code == 200:
        raise Unreadable("%s ignores Range requests: the layer cannot be read without its weights" % reg.host)
    raise Unreadable(
        "GET a range of blob %s of %s/%s: HTTP %s%s"
        % (
            digest,
            reg.host,
            name,
            reply.code,
            " (credentials missing or refused)" if reply.code in (401, 403) else "",
        )
    )


def _member_name(name):
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def _tar_members(reg, name, digest, size, prefixes, max_headers=100000):
    """{file name: bytes} of the small files under the first prefix that has a config.json, walking an
    uncompressed tar's headers (512 bytes each) and reading only the wanted members."""
    wanted = {p + f: (rank, f) for rank, p in enumerate(prefixes) for f in SMALL_FILES}
    found, offset, long_name = {}, 0, None
    for _unused in range(max_headers):
        if size is not None and offset + 512 > size:
            break
        block = _blob_range(reg, name, digest, offset, 512)
        if len(block) < 512 or block == b"\0" * 512:
            break
        info = tarfile.TarInfo.frombuf(block, tarfile.ENCODING, "surrogateescape")
        data_at, padded = offset + 512, (info.size + 511) // 512 * 512
        member = _member_name(long_name or info.name)
        long_name = None
        if info.type in (tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE):
            extra = _blob_range(reg, name, digest, data_at, info.size) if info.size else b""
            long_name = _long_name(info.type, extra)
        elif info.isfile() and member in wanted and info.size <= MAX_SMALL:
            rank, base = wanted[member]
            found[(rank, base)] = _blob_range(reg, name, digest, data_at, info.size) if info.size else b""
        offset = data_at + padded
    for rank in range(len(prefixes)):
        if (rank, "config.json") in found:
            return {base: data for (r, base), data in found.items() if r == rank}
    return {}


def _long_name(kind, data):
    if kind == tarfile.GNUTYPE_LONGNAME:
        return data.rstrip(b"\0").decode("utf-8", "surrogateescape")
    for record in data.decode("utf-8", "surrogateescape").split("\n"):
        _length, _sep, rest = record.partition(" ")
        key, _sep, value = rest.partition("=")
        if key == "path":
            return value
    return None


# ---------------------------------------------------------------- into the validation
def resolve(spec, draft_used, options, findings, environ=None):
    """(target facts, draft facts, report): the typed facts, completed from each artifact's source.

    Conflicts between a typed fact and the source are errors; the checks that could not run for want
    of a fact are findings (see _report_gaps)."""
    environ = os.environ if environ is None else environ
    mode, bad = mode_of(options, environ)
    if bad:
        findings.error("model_facts", bad, "set specpilot_model_facts to auto or off", "model-facts-mode")
    read_local = options.get("read_local_files", True) is not False
    cache = options.get("model_facts_cache")
    facts, report = {}, {"mode": mode}
    for role in ("target", "draft"):
        artifact = spec.get(role)
        if not artifact or (role == "draft" and not draft_used):
            typed = (
                {k: artifact[k] for k in compat.FACT_KEYS if artifact.get(k) is not None} if artifact else {}
            )
            facts[role] = _with_estimate(typed)
            continue
        facts[role], report[role] = _role_facts(
            role, artifact, spec, mode, read_local, cache, environ, findings, options.get("probed")
        )
    method = (
        (spec.get("speculative") or {}).get("method") if isinstance(spec.get("speculative"), dict) else None
    )
    _report_gaps(method, draft_used, facts, report, findings)
    report["origins"] = {
        role: {k: v for k, v in report[role].items() if k in ("path", "source", "uri", "keys")}
        for role in ("target", "draft")
        if role in report
    }
    return facts["target"], facts["draft"], report


def _role_facts(role, artifact, spec, mode, read_local, cache, environ, findings, probed=None):
    typed = {k: artifact[k] for k in compat.FACT_KEYS if artifact.get(k) is not None}
    source = source_for(role, artifact, spec, read_local)
    out = {"typed": sorted(typed), "uri": artifact.get("uri"), "keys": []}
    if source is None:
        out.update(problem="no source to read its facts from (no uri, local_path or delivered copy)")
        return _with_estimate(typed), out
    out.update(path=source["path"], source=show_uri(source["uri"]), kind=source["kind"])
    if source["kind"] in NETWORK_KINDS and mode == "off":
        out["problem"] = "specpilot_model_facts is off: %s was not read" % out["source"]
        out["off"] = True
        return _with_estimate(typed), out
    found, problem, cached = read(source, environ, cache, probed=probed)
    out["cached"] = cached
    if problem:
        out["problem"] = problem
        if source["kind"] == "pvc" and _probe_read(probed, source["uri"]):
            _missing_on_pvc(role, artifact, spec, source, problem, findings)
            out["reported"] = True
        if source["kind"] == "local":
            findings.warning(
                source["path"],
                "%s.local_path: %s; compatibility checks use only the facts given in the spec"
                % (role, problem),
                "fix the path or remove local_path",
                "local-path",
            )
            out["reported"] = True
        return _with_estimate(typed), out
    merged = dict(found)
    for key, value in typed.items():
        if key in COMPARED and key in found and not _agrees(key, value, found):
            findings.error(
                path_join(role, key),
                "%s.%s=%r but %s says %r (from %s)"
                % (role, key, value, _config_name(key), _found_value(key, found), out["source"]),
                "correct specpilot_%s.%s, or remove it to use the source's value" % (role, key),
                "model-fact-conflict",
            )
        merged[key] = value
    out["keys"] = sorted(k for k in found if k not in typed)
    out["resolved_revision"] = found.get("resolved_revision")
    return _with_estimate(merged), out


def _probe_read(probed, uri):
    """Whether the cluster probe's Job looked at this pvc:// directory (not check mode, where no Job runs,
    nor a claim it could not mount: cluster_probe.probed marks what the Job read)."""
    return any(e.get("uri") == uri and e.get("read") for e in ((probed or {}).get("models") or {}).values())


def _missing_on_pvc(role, artifact, spec, source, problem, findings):
    """A directory the cluster probe could not read on the service's PVC (missing, or no config.json): the
    predictor would mount the same path and its engine would crash-loop, so it is an error before any
    change."""
    field = path_join(role, "uri") if artifact.get("uri") else path_join(role, "subdir")
    service = spec.get("name") or "?"
    findings.error(
        field,
        "%s: the %s model is read from %s, and %s (the probe Job mounts the claim as the predictor will): "
        "the engine would fail to start" % (service, role, show_uri(source["uri"]), problem),
        "stage the model there (ansible-playbook -i <inventory> playbooks/stage.yml --limit %s), or correct "
        "specpilot_%s.%s / specpilot_pvc.path" % (service, role, field.split(".")[-1]),
        "model-dir-missing",
    )


def _with_estimate(facts):
    if "params_b" not in facts and "params_b_estimate" in facts:
        facts = dict(facts, params_b=facts["params_b_estimate"])
    return facts


def _agrees(key, typed, found):
    if key == "architecture":
        return typed in (found.get("architectures") or [found.get("architecture")])
    if key == "tokenizer":
        return not str(typed).startswith("sha256:") or typed == found.get("tokenizer")
    return typed == found.get(key)


def _found_value(key, found):
    if key == "architecture":
        return "/".join(found.get("architectures") or [str(found.get("architecture"))])
    return found.get(key)


def _config_name(key):
    if key == "tokenizer":
        return "the tokenizer's fingerprint"
    if key == "architecture":
        return "config.json architectures"
    return "config.json " + ("torch_dtype" if key == "dtype" else key)


def needed_facts(method, draft_used):
    """[(check, role, (fact, alternative ...))]: the facts each check of this spec needs."""
    out = []
    info = vp.method_info(method) if isinstance(method, str) else None
    if info and draft_used and info["draft_artifact"]:
        out.append(("the draft's kind against method %s" % method, "draft", ("architecture",)))
    if method in ("eagle", "eagle3") and draft_used:
        for role in ("draft", "target"):
            out.append(("the EAGLE head's hidden size", role, ("hidden_size",)))
    if method == "draft_model" and draft_used:
        for role in ("draft", "target"):
            out.append(("the tokenizer comparison", role, ("tokenizer",)))
            out.append(("the vocabulary comparison", role, ("vocab_size",)))
    if info and info["mtp"]:
        out.append(("the MTP layer count", "target", ("num_nextn_predict_layers",)))
    # (the GPU memory budget says itself what it left out: gpu_budget's budget-skipped and
    # budget-draft-unknown notes)
    return out


def _report_gaps(method, draft_used, facts, report, findings):
    """Per artifact: the checks that could not run, and why (never silence)."""
    needed = needed_facts(method, draft_used)
    for role in ("target", "draft"):
        info = report.get(role)
        if not info or info.get("reported"):
            continue
        missing = []
        for check, need_role, keys in needed:
            if need_role == role and not any(facts[role].get(k) is not None for k in keys):
                entry = "%s (needs %s)" % (check, " or ".join(path_join(role, k) for k in keys))
                if entry not in missing:
                    missing.append(entry)
        problem, path = info.get("problem"), info.get("path") or role
        if missing:
            _report_missing(role, path, problem, missing, info, findings)
        elif problem and info.get("typed"):
            findings.note(
                path,
                "the facts typed in specpilot_%s were not compared with its source: %s" % (role, problem),
                "nothing to do when they are right; give local_path to compare them",
                "model-facts-unverified",
            )


def _report_missing(role, path, problem, missing, info, findings):
    checks = "; ".join(missing)
    hint = (
        "type the facts in specpilot_%s, or point %s.local_path at a copy of its config.json and tokenizer "
        "files" % (role, role)
    )
    if info.get("off"):
        findings.note(
            path,
            "these checks were skipped because %s: %s" % (problem, checks),
            hint + ", or set specpilot_model_facts: auto",
            "model-facts-off",
        )
    elif problem:
        findings.warning(
            path,
            "the facts of the %s could not be read: %s; these checks could not run: %s"
            % (role, problem, checks),
            hint,
            "model-facts-unread",
        )
    else:
        findings.warning(
            path,
            "%s does not give every fact these checks need, so they could not run: %s"
            % (info.get("source") or "the source", checks),
            hint,
            "model-facts-incomplete",
        )
