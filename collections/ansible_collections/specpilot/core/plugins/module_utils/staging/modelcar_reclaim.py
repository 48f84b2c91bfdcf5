# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Option B draft reclaim: the Modelcar image without its draft layer, by manifest surgery.

The image is never pulled and no layer is uploaded again. Through the registry's HTTP API
(:mod:`oci_registry`): read the manifest by digest and the image config (a few KiB), tell which
layer holds ``/models/<draft subdir>``, and write

* a config without that layer's ``rootfs.diff_ids`` entry and without its ``history`` entry
  (``empty_layer`` entries kept; one ``empty_layer`` entry added that says what was removed),
  the ``io.specpilot.modelcar.models`` label without the draft's path, and the labels
  ``io.specpilot.modelcar.reclaimed`` (the path removed) and ``io.specpilot.modelcar.reclaimed-from``
  (the source manifest digest);
* a manifest with the same layer descriptors minus the draft's (base and target layers keep their
  digests: the registry already has them) and the new config's descriptor;

uploaded as one small blob and one manifest ``PUT`` under a new tag (default ``<tag>-nodraft``).
Both documents are canonical JSON derived from the source only, so the result is deterministic:
a second run finds the tag on that digest and changes nothing. The source image is left as it is.

Which layer is the draft's, from the cheapest to the least:

1. ``annotation``: the layer descriptors' ``io.specpilot.modelcar.artifact.subdir`` / ``.role``
   (written by ``oci_layout`` since this feature);
2. ``label``: the config label ``io.specpilot.modelcar.models`` (``/models/target,/models/draft``)
   that every ``modelcar_build`` image carries: the image's last layers, in that order, when the
   build ``history`` entries of those layers (``specpilot modelcar: <role> -> /models/<subdir>``)
   say the same;
3. ``layer-content``: the first bytes (``Range``, 64 KiB) of the last layers: a layer whose
   entries begin with ``models/<subdir>/``. Only a prefix is read, so this also requires the
   target's sub-directory to begin another layer (a layer holding both is never dropped);
4. ``explicit``: the ``draft_layer`` digest given by the caller.
"""

from __future__ import absolute_import, division, print_function

import copy
import io
import json
import re
import tarfile
import zlib

from ansible_collections.specpilot.core.plugins.module_utils.staging import modelcar, oci_layout, oci_registry

__metaclass__ = type

RECLAIM_VERSION = 1
LABEL_RECLAIMED = "io.specpilot.modelcar.reclaimed"
LABEL_RECLAIMED_FROM = "io.specpilot.modelcar.reclaimed-from"
PEEK_BYTES = 64 * 1024
MAX_PEEK_LAYERS = 16
DEFAULT_TAG_SUFFIX = "-nodraft"
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
HISTORY_RE = re.compile(r"^specpilot modelcar: (\S+) -> /models/([^/\s]+)$")
IMAGE_MANIFESTS = (oci_registry.MT_OCI_MANIFEST, oci_registry.MT_DOCKER_MANIFEST)


class ReclaimError(Exception):
    pass


# ---------------------------------------------------------------- references
def parse_image(image):
    """(repository, tag or None, digest or None) of ``[oci://|docker://]registry/repo[:tag][@sha256:...]``."""
    ref = image.strip()
    for prefix in ("oci://", "docker://"):
        if ref.startswith(prefix):
            ref = ref[len(prefix) :]
            break
    else:
        if "://" in ref:
            raise ReclaimError("image %r: use oci://, docker:// or a plain registry/repo reference" % image)
    digest = None
    if "@" in ref:
        ref, digest = ref.rsplit("@", 1)
        if not oci_registry.DIGEST_RE.match(digest):
            raise ReclaimError("image %r: %r is not a sha256 digest" % (image, digest))
    tag = None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref, tag = ref.rsplit(":", 1)
        if not TAG_RE.match(tag):
            raise ReclaimError("image %r: bad tag %r" % (image, tag))
    if not ref or ref.endswith("/"):
        raise ReclaimError("image %r: no repository" % image)
    return ref, tag, digest


def default_tag(source_tag, source_digest, suffix=DEFAULT_TAG_SUFFIX):
    """``<tag><suffix>`` (``v1-nodraft``), or ``sha256-<12 hex><suffix>`` for a source known by
    digest only."""
    suffix = suffix or ""
    stem = source_tag or "sha256-" + source_digest.split(":", 1)[1][:12]
    tag = stem[: 128 - len(suffix)] + suffix
    if not TAG_RE.match(tag):
        raise ReclaimError("the derived tag %r is not a valid tag: set tag" % tag)
    return tag


# ---------------------------------------------------------------- which layer is which
def _history_layers(config, n_layers):
    """{layer index: history entry} when the history's non-empty entries match the layers."""
    history = config.get("history") or []
    filled = [h for h in history if not (h or {}).get("empty_layer")]
    if len(filled) != n_layers:
        return {}
    return dict(enumerate(filled))


def _tar_entries(data):
    """[(name, is_dir)] of the tar entries whose headers lie in ``data`` (a prefix of a layer)."""
    out = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tf:
            for ti in tf:
                out.append((ti.name, ti.isdir()))
                if len(out) >= 256:
                    break
    except (tarfile.TarError, EOFError, OSError, ValueError):
        pass
    return out


def _models_subdir(entries):
    """The ``<subdir>`` when every entry of a layer prefix lies under ``models/<subdir>``, else None."""
    subs = set()
    for name, is_dir in entries:
        while name.startswith("./"):
            name = name[2:]
        parts = [p for p in name.strip("/").split("/") if p]
        if not parts or parts == ["models"]:
            continue
        if parts[0] != "models" or any(p.startswith(".wh.") for p in parts):
            return None
        if len(parts) == 2 and not is_dir:
            return None  # a file directly in /models
        subs.add(parts[1])
    return subs.pop() if len(subs) == 1 else None


def peek_layer_subdir(reg, name, desc, nbytes=PEEK_BYTES):
    """The ``/models/<subdir>`` a layer begins with, from its first ``nbytes`` (tar or tar+gzip), or None."""
    media_type = desc.get("mediaType") or ""
    if not (media_type.endswith("tar") or media_type.endswith("gzip")):
        return None  # zstd, foreign layers: not read
    head = reg.peek_blob(name, desc["digest"], nbytes)
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head)
        except zlib.error:
            return None
    return _models_subdir(_tar_entries(head))


def _by_annotation(layers):
    """The layers whose descriptor names their artifact (what oci_layout writes)."""
    found = {}
    for i, desc in enumerate(layers):
        ann = desc.get("annotations") or {}
        if ann.get(oci_layout.ANN_ARTIFACT_SUBDIR):
            found[i] = {
                "subdir": ann[oci_layout.ANN_ARTIFACT_SUBDIR].strip("/"),
                "role": ann.get(oci_layout.ANN_ARTIFACT_ROLE),
            }
    return found


def _by_label(config, layers):
    """The image's last layers, as its models label names them; trusted only where the build history,
    entry by entry, says the same (a derived image with layers added on top falls through)."""
    labels = (config.get("config") or {}).get("Labels") or {}
    listed = [p.strip() for p in (labels.get(oci_layout.LABEL_MODELS) or "").split(",") if p.strip()]
    subdirs = [p[len("/models/") :].strip("/") for p in listed if p.startswith("/models/")]
    if not (listed and len(subdirs) == len(listed) and all(subdirs) and len(subdirs) < len(layers)):
        return {}
    history = _history_layers(config, len(layers))
    start = len(layers) - len(subdirs)
    found = {}
    for k, sub in enumerate(subdirs):
        match = HISTORY_RE.match(str((history.get(start + k) or {}).get("created_by") or ""))
        if not match or match.group(2) != sub:
            return {}
        found[start + k] = {"subdir": sub, "role": match.group(1) if match.group(1) != "model" else None}
    return found


def artifact_layers(manifest, config, peek=None, max_peek=MAX_PEEK_LAYERS):
    """({layer index: {subdir, role}}, how they were told apart) of the layers holding
    ``/models/<subdir>``; ``peek(desc)`` -> subdir reads the start of a layer (None: never)."""
    layers = manifest.get("layers") or []
    found = _by_annotation(layers)
    if found:
        return found, "annotation"
    found = _by_label(config, layers)
    if found:
        return found, "label"
    if peek is None:
        return {}, None
    for i in list(reversed(range(1, len(layers))))[:max_peek]:
        sub = peek(layers[i])
        if sub:
            found[i] = {"subdir": sub, "role": None}
    return found, ("layer-content" if found else None)


# ---------------------------------------------------------------- surgery
def _drop_history(history, n_layers, index, dropped, path):
    """Remove layer ``index``'s entry from ``history`` (when it matches the layers) and record the removal;
    the notes."""
    notes = []
    filled = [j for j, h in enumerate(history) if not (h or {}).get("empty_layer")]
    if len(filled) == n_layers:
        del history[filled[index]]
    else:
        notes.append(
            "the config history does not match the layers (%d entries for %d layers): left as it is"
            % (len(filled), n_layers)
        )
    history.append(
        {
            "created_by": "specpilot modelcar_reclaim: removed %s (layer %s)" % (path, dropped["digest"]),
            "comment": "specpilot modelcar_reclaim v%d" % RECLAIM_VERSION,
            "empty_layer": True,
        }
    )
    return notes


def _reclaimed_labels(labels, path, source_digest):
    """The config's labels without ``path`` among the models, with it among the reclaimed."""
    labels = dict(labels or {})
    if labels.get(oci_layout.LABEL_MODELS) is not None:
        labels[oci_layout.LABEL_MODELS] = ",".join(
            p
            for p in labels[oci_layout.LABEL_MODELS].split(",")
            if p.strip() and p.strip().rstrip("/") != path
        )
    labels[LABEL_RECLAIMED] = ",".join(
        p for p in (labels.get(LABEL_RECLAIMED) or "").split(",") + [path] if p
    )
    labels[LABEL_RECLAIMED_FROM] = source_digest
    return labels


def without_layer(manifest, config, index, source_digest, path):
    """(manifest, config) without layer ``index``: its descriptor, its diff_id, its history entry."""
    layers = list(manifest.get("layers") or [])
    cfg = copy.deepcopy(config)
    rootfs = cfg.get("rootfs") or {}
    diff_ids = list(rootfs.get("diff_ids") or [])
    if len(diff_ids) != len(layers):
        raise ReclaimError(
            "the image config lists %d diff_ids for %d layers: not a consistent image"
            % (len(diff_ids), len(layers))
        )
    dropped = layers.pop(index)
    del diff_ids[index]
    rootfs["diff_ids"] = diff_ids
    cfg["rootfs"] = rootfs
    notes = []
    history = list(cfg.get("history") or [])
    if history:
        notes = _drop_history(history, len(manifest.get("layers") or []), index, dropped, path)
        cfg["history"] = history
    inner = cfg.get("config")
    if not isinstance(inner, dict):
        inner = {}
    inner["Labels"] = _reclaimed_labels(inner.get("Labels"), path, source_digest)
    cfg["config"] = inner
    new_manifest = copy.deepcopy(manifest)
    new_manifest["layers"] = layers
    return new_manifest, cfg, dropped, notes


def _layer_view(index, desc, artifacts):
    art = artifacts.get(index) or {}
    return {
        "index": index,
        "digest": desc.get("digest"),
        "size": desc.get("size"),
        "subdir": art.get("subdir"),
        "role": art.get("role"),
        "mount": ("/models/" + art["subdir"]) if art.get("subdir") else None,
    }


# ---------------------------------------------------------------- the operation
def _registry(p, repo):
    host = modelcar.registry_host(repo)
    reg = oci_registry.Registry(
        host,
        tls_verify=p.get("tls_verify", True),
        username=p.get("username"),
        password=p.get("password"),
        authfile=p.get("authfile"),
        timeout=p.get("timeout") or 60,
    )
    return reg, oci_registry.repository_name(repo, host)


def _read_source(reg, name, repo, src_tag, src_digest):
    """The source image's digest, manifest, media type and config; refuses an index or an
    unsupported manifest type."""
    if src_digest is None:
        src_digest = reg.resolve(name, src_tag or "latest")
        if src_digest is None:
            raise ReclaimError("%s:%s: no such image in the registry" % (repo, src_tag or "latest"))
    got = reg.get_manifest(name, src_digest)
    if got is None:
        raise ReclaimError("%s@%s: the registry has no such manifest" % (repo, src_digest))
    raw, media_type, _unused = got
    manifest = json.loads(raw.decode("utf-8"))
    if media_type in oci_registry.INDEX_TYPES or "manifests" in manifest:
        raise ReclaimError(
            "%s@%s is an image index (several platforms): give the digest of the platform's image manifest"
            % (repo, src_digest)
        )
    if media_type not in IMAGE_MANIFESTS or not isinstance(manifest.get("config"), dict):
        raise ReclaimError("%s@%s: unsupported manifest type %r" % (repo, src_digest, media_type))
    config = json.loads(reg.get_blob(name, manifest["config"]["digest"]).decode("utf-8"))
    return src_digest, manifest, media_type, config


def _initial_result(repo, src_tag, src_digest, manifest):
    source = {
        "repository": repo,
        "tag": src_tag,
        "digest": src_digest,
        "image_ref": "%s@%s" % (repo, src_digest),
        "storage_uri": "oci://%s@%s" % (repo, src_digest),
        "config_digest": manifest["config"]["digest"],
        "layers": len(manifest.get("layers") or []),
    }
    return {
        "changed": False,
        "reclaimed": False,
        "pushed": False,
        "source": source,
        "repository": repo,
        "digest": src_digest,
        "image_ref": source["image_ref"],
        "storage_uri": source["storage_uri"],
        "bytes_uploaded": 0,
        "blobs_uploaded": 0,
        "bytes_reclaimed": 0,
    }


def _named_layer(where, layers, draft_layer):
    """The index of the layer named by digest (draft_layer); never the base."""
    hits = [i for i, d in enumerate(layers) if d.get("digest") == draft_layer]
    if not hits:
        raise ReclaimError("%s has no layer %s (draft_layer)" % (where, draft_layer))
    if hits[0] == 0:
        raise ReclaimError("draft_layer %s is the image's first layer (the base): refused" % draft_layer)
    return hits


def _draft_hits(p, where, layers, artifacts, method):
    """The indexes of the layers that hold the draft (explicit draft_layer, sub-directory or role)."""
    draft_layer = p.get("draft_layer")
    draft_subdir = (p.get("draft_subdir") or "").strip("/") or None
    draft_role = p.get("draft_role") or "draft"
    if draft_layer:
        hits = _named_layer(where, layers, draft_layer)
    elif method is None:
        raise ReclaimError(
            "cannot tell which layer of %s holds the draft: its layers carry no %s annotations, "
            "its config no %s label, and no layer begins with /models/<subdir>. Rebuild the image with "
            "specpilot.core.modelcar_build (specpilot_stage_modelcar) from the target alone, or name "
            "the draft layer's digest in draft_layer (specpilot_rollback_modelcar_draft_layer)"
            % (where, oci_layout.ANN_ARTIFACT_SUBDIR, oci_layout.LABEL_MODELS)
        )
    elif draft_subdir:
        hits = [i for i, a in artifacts.items() if a["subdir"] == draft_subdir]
    else:
        hits = [i for i, a in artifacts.items() if a.get("role") == draft_role]
        if not hits and method == "layer-content":
            raise ReclaimError(
                "the layers of %s were told apart by their content, which names no role: give draft_subdir"
                % where
            )
    if len(hits) > 1:
        raise ReclaimError(
            "%d layers of %s match the draft (%s): name the one to drop in draft_layer"
            % (len(hits), where, ", ".join(layers[i]["digest"] for i in hits))
        )
    what = ("/models/" + draft_subdir) if draft_subdir else ("the %s layer" % draft_role)
    return hits, what


def _nothing_to_reclaim(result, where, what, config, method, warn):
    labels = (config.get("config") or {}).get("Labels") or {}
    before = (
        " (it was reclaimed from %s before)" % labels.get(LABEL_RECLAIMED_FROM)
        if labels.get(LABEL_RECLAIMED)
        else ""
    )
    result["msg"] = "%s has no %s: nothing to reclaim%s" % (where, what, before)
    result["already_without_draft"] = True
    if method == "layer-content":
        warn("no layer of %s begins with %s; only the first bytes of each layer were read" % (where, what))
    return result


def _check_target_kept(p, where, index, subdir, artifacts, method):
    """The target must lie in another layer than the one dropped."""
    target_subdir = (p.get("target_subdir") or "").strip("/") or None
    if target_subdir:
        if target_subdir == subdir:
            raise ReclaimError("the target and the draft have the same sub-directory %r" % target_subdir)
        if method is not None and not any(
            a["subdir"] == target_subdir for i, a in artifacts.items() if i != index
        ):
            raise ReclaimError(
                "no other layer of %s holds /models/%s (the target): the draft layer is not dropped"
                % (where, target_subdir)
            )
    elif method == "layer-content":
        raise ReclaimError(
            "the layers of %s were told apart from their first bytes only: give target_subdir, so "
            "that the target is known to lie in another layer" % where
        )


def _new_tag(p, src_tag, src_digest):
    tag = p.get("tag") or default_tag(src_tag, src_digest, p.get("tag_suffix", DEFAULT_TAG_SUFFIX))
    if not TAG_RE.match(tag):
        raise ReclaimError("bad tag %r" % tag)
    if src_tag and tag == src_tag:
        raise ReclaimError(
            "tag %r is the source image's own tag: the source stays tagged (restore needs it), "
            "pick another tag" % tag
        )
    return tag


def _push(reg, name, result, new, media_type, src_digest, path, check_mode, force=False):
    """Push the new config and manifest unless the tag already is the new digest; returns False
    in check mode (nothing to verify).  A tag that names another image is moved only with
    ``force`` (refused in check mode too)."""
    repo, tag, digest = result["repository"], result["tag"], result["digest"]
    config_bytes, manifest_bytes = new["config_bytes"], new["manifest_bytes"]
    had = reg.resolve(name, tag)
    result["registry_had_digest"] = had == digest
    if had == digest:
        result["msg"] = "%s:%s already is %s (%s without %s): nothing pushed" % (
            repo,
            tag,
            digest,
            src_digest,
            path,
        )
        return True
    if had:
        _refuse_tag_move(repo, tag, had, digest, force)
    if check_mode:
        result["changed"] = True
        result["msg"] = "check mode: would push %s:%s (%s: %s without %s, %d bytes)" % (
            repo,
            tag,
            digest,
            src_digest,
            path,
            result["upload_size"],
        )
        return False
    if had:
        result["tag_moved_from"] = had
    blobs = 0
    if not reg.has_blob(name, result["config_digest"]):
        reg.upload_blob(name, config_bytes, result["config_digest"])
        blobs = 1
    reg.put_manifest(name, tag, manifest_bytes, media_type)
    result.update(
        {
            "changed": True,
            "pushed": True,
            "blobs_uploaded": blobs,
            "bytes_uploaded": reg.bytes_sent,
            "msg": "pushed %s:%s (%s: %s without %s, %d bytes uploaded, %d bytes of draft layer "
            "no longer referenced)"
            % (repo, tag, digest, src_digest, path, reg.bytes_sent, result["bytes_reclaimed"]),
        }
    )
    return True


def _refuse_tag_move(repo, tag, had, new, force):
    """The tag moves to the image without the draft only when it names no other image, or with
    ``force``: the one rule of modelcar_build (modelcar.refuse_tag_move)."""
    try:
        modelcar.refuse_tag_move(repo, tag, had, new, {"force": force})
    except modelcar.ModelcarError as exc:
        raise ReclaimError(str(exc).replace("this build's", "the image without the draft"))


def _peek_function(p, reg, name):
    if not p.get("identify_by_content", True) or p.get("draft_layer"):
        return None
    nbytes = int(p.get("peek_bytes") or PEEK_BYTES)
    return lambda desc: peek_layer_subdir(reg, name, desc, nbytes)


def reclaim(p, check_mode=False, warn=None):
    """The whole reclaim for the module; returns the module result dict."""
    warn = warn or (lambda msg: None)
    repo, src_tag, src_digest = parse_image(p["image"])
    reg, name = _registry(p, repo)
    src_digest, manifest, media_type, config = _read_source(reg, name, repo, src_tag, src_digest)
    where = "%s@%s" % (repo, src_digest)
    layers = manifest.get("layers") or []
    result = _initial_result(repo, src_tag, src_digest, manifest)
    artifacts, method = artifact_layers(manifest, config, _peek_function(p, reg, name))
    result["identified_by"] = "explicit" if p.get("draft_layer") else method
    result["artifacts"] = [_layer_view(i, layers[i], artifacts) for i in sorted(artifacts)]

    hits, what = _draft_hits(p, where, layers, artifacts, method)
    if not hits:
        return _nothing_to_reclaim(result, where, what, config, method, warn)
    index = hits[0]
    subdir = (artifacts.get(index) or {}).get("subdir") or (p.get("draft_subdir") or "").strip("/") or None
    path = ("/models/" + subdir) if subdir else "layer " + layers[index]["digest"]
    _check_target_kept(p, where, index, subdir, artifacts, method)

    new_manifest, new_config, dropped, notes = without_layer(manifest, config, index, src_digest, path)
    for note in notes:
        warn(note)
    config_bytes = oci_layout.canonical(new_config)
    config_digest = oci_registry.sha256_digest(config_bytes)
    new_manifest["config"] = dict(manifest["config"], digest=config_digest, size=len(config_bytes))
    manifest_bytes = oci_layout.canonical(new_manifest)
    digest = oci_registry.sha256_digest(manifest_bytes)
    tag = _new_tag(p, src_tag, src_digest)
    result.update(
        {
            "reclaimed": True,
            "digest": digest,
            "tag": tag,
            "image": "%s:%s" % (repo, tag),
            "image_ref": "%s@%s" % (repo, digest),
            "storage_uri": "oci://%s@%s" % (repo, digest),
            "config_digest": config_digest,
            "media_type": media_type,
            "dropped_layer": dict(
                _layer_view(index, dropped, artifacts),
                subdir=subdir,
                mount=("/models/" + subdir) if subdir else None,
            ),
            "kept_layers": [_layer_view(i, d, artifacts) for i, d in enumerate(layers) if i != index],
            "bytes_reclaimed": int(dropped.get("size") or 0),
            "upload_size": len(config_bytes) + len(manifest_bytes),
        }
    )
    new = {"config_bytes": config_bytes, "manifest_bytes": manifest_bytes}
    if not _push(reg, name, result, new, media_type, src_digest, path, check_mode, bool(p.get("force"))):
        return result
    if p.get("verify", True):
        result["verify"] = verify_remote(
            reg, name, repo, tag, digest, new_manifest, src_digest, dropped["digest"]
        )
    return result


def verify_remote(reg, name, repo, tag, digest, manifest, source_digest, dropped_digest):
    """Read the new manifest back by digest and by tag; the layers and the config are there,
    the draft layer is not referenced, the source still resolves."""
    got = reg.get_manifest(name, digest)
    if got is None:
        raise ReclaimError("verify: the registry has no manifest %s@%s after the push" % (repo, digest))
    remote = json.loads(got[0].decode("utf-8"))
    want = [(d["digest"], d["size"]) for d in manifest["layers"]]
    have = [(d.get("digest"), d.get("size")) for d in remote.get("layers") or []]
    if have != want:
        raise ReclaimError(
            "verify: the registry's layers of %s@%s differ from the expected ones" % (repo, digest)
        )
    if dropped_digest in [d for d, _s in have]:
        raise ReclaimError("verify: %s@%s still references the draft layer" % (repo, digest))
    if (remote.get("config") or {}).get("digest") != manifest["config"]["digest"]:
        raise ReclaimError("verify: %s@%s has another config" % (repo, digest))
    if not reg.has_blob(name, manifest["config"]["digest"]):
        raise ReclaimError("verify: the config blob %s is missing" % manifest["config"]["digest"])
    missing = [d for d, _s in have if not reg.has_blob(name, d)]
    if missing:
        raise ReclaimError("verify: the registry lacks layer(s) %s" % ", ".join(missing))
    if reg.resolve(name, tag) != digest:
        raise ReclaimError("verify: %s:%s does not resolve to %s (the tag moved?)" % (repo, tag, digest))
    source_kept = reg.resolve(name, source_digest) == source_digest
    return {
        "ok": True,
        "manifest_digest": digest,
        "layers": len(have),
        "tag_pinned": True,
        "draft_layer_referenced": False,
        "source_kept": source_kept,
    }
