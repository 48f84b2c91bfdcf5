# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""A small writer of OCI image layouts for Modelcar images (standard library only).

Deterministic by construction, so that the same inputs give the same digests:

* one uncompressed tar layer per artifact, holding ``models/<subdir>/...``;
* entries sorted by path, parents before children; mtime 0, uid/gid 0, no user/group names;
  directories 0775, files 0644 (0755 when executable in the source); symlinks followed (the
  file content is stored: Hugging Face cache snapshots are symlinks into a blob store);
  specpilot's staging marker and partial downloads are left out;
* config and manifest serialised with sorted keys and no whitespace, no timestamps added;
* each artifact layer's descriptor carries the annotations ``io.specpilot.modelcar.artifact.role``
  and ``io.specpilot.modelcar.artifact.subdir`` (the manifest only: layer digests do not change);
* the base image's layers are copied as they are (compressed or not) with their diff_ids.

A draft-only change therefore leaves the target layer's digest untouched; a registry that has
that blob skips it (``skopeo copy --preserve-digests``). Layers are streamed to disk while being
hashed (constant memory), and a layer whose input files are unchanged (same paths, sizes,
mtimes, inodes and modes) is taken from the layout's layer cache without reading them again.

Layout on disk: ``oci-layout``, ``index.json`` (one manifest, tagged), ``blobs/sha256/...``,
``specpilot-layer-cache.json``.
"""

from __future__ import absolute_import, division, print_function

import gzip
import hashlib
import json
import os
import shutil
import stat
import tarfile
import tempfile

from ansible_collections.specpilot.core.plugins.module_utils.report.progress import ByteProgress
from ansible_collections.specpilot.core.plugins.module_utils.staging.stager import Hasher

__metaclass__ = type

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar"
MT_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
REF_NAME = "org.opencontainers.image.ref.name"
# on each artifact layer's descriptor in the manifest: which artifact the layer holds, so that a
# layer can be told apart without reading it (modelcar_reclaim drops the draft's)
ANN_ARTIFACT_ROLE = "io.specpilot.modelcar.artifact.role"
ANN_ARTIFACT_SUBDIR = "io.specpilot.modelcar.artifact.subdir"
# config label: the /models/<subdir> of the artifact layers, in layer order (the image's last layers)
LABEL_MODELS = "io.specpilot.modelcar.models"
WRITER_VERSION = 1
CHUNK = 4 * 1024 * 1024
SKIP_NAMES = (".specpilot-staged.json", ".specpilot-staged.json.tmp", ".specpilot-partial")
RECORDSIZE = 20 * 512


class LayoutError(Exception):
    pass


def canonical(data):
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")


def sha256_bytes(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _HashingWriter(object):
    """Writes to a file while sha256 runs in a second thread (stager.Hasher)."""

    def __init__(self, fh):
        self.fh = fh
        self.size = 0
        self._hasher = Hasher()

    def write(self, block):
        if not block:
            return
        self._hasher.update(block)
        self.fh.write(block)
        self.size += len(block)

    def finish(self):
        return "sha256:" + self._hasher.finish()[0], self.size


def _tarinfo(name, kind, mode, size=0):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.size = size
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _header(ti):
    return ti.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")


def dir_entries(src, dest):
    """Sorted (archive name, source path or None, mode, size) of a directory tree placed at dest
    (``models/target``): parent directories first, symlinks followed, markers skipped."""
    src = os.path.abspath(src)
    if not os.path.isdir(src):
        raise LayoutError("%s is not a directory" % src)
    dest = dest.strip("/")
    parts = dest.split("/")
    out = [("/".join(parts[:i]) + "/", None, 0o775, 0) for i in range(1, len(parts) + 1)]
    items = []
    seen_dirs = set()
    for base, dirs, files in os.walk(src, followlinks=True):
        real = os.path.realpath(base)
        if real in seen_dirs:  # a symlink loop
            dirs[:] = []
            continue
        seen_dirs.add(real)
        dirs[:] = [d for d in dirs if d not in SKIP_NAMES]
        rel_base = os.path.relpath(base, src)
        for d in dirs:
            rel = d if rel_base == "." else os.path.join(rel_base, d)
            items.append((rel.replace(os.sep, "/"), None))
        for f in files:
            if f in SKIP_NAMES or f.endswith(".specpilot-tmp"):
                continue
            path = os.path.join(base, f)
            rel = f if rel_base == "." else os.path.join(rel_base, f)
            items.append((rel.replace(os.sep, "/"), path))
    for rel, path in sorted(items, key=lambda it: it[0].split("/")):
        if path is None:
            out.append(("%s/%s/" % (dest, rel), None, 0o775, 0))
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue  # a dangling symlink
        if not stat.S_ISREG(st.st_mode):
            continue
        mode = 0o755 if st.st_mode & 0o111 else 0o644
        out.append(("%s/%s" % (dest, rel), path, mode, st.st_size))
    return out


def tree_signature(src, dest):
    """What decides a layer's content without reading it: paths, sizes, mtimes, inodes, modes."""
    h = hashlib.sha256()
    h.update(("v%d|%s\n" % (WRITER_VERSION, dest.strip("/"))).encode("utf-8", "surrogateescape"))
    for name, path, mode, size in dir_entries(src, dest):
        if path is None:
            h.update(("d|%s\n" % name).encode("utf-8", "surrogateescape"))
        else:
            st = os.stat(path)
            h.update(
                ("f|%s|%d|%d|%d|%d|%o\n" % (name, size, st.st_mtime_ns, st.st_ino, st.st_dev, mode)).encode(
                    "utf-8", "surrogateescape"
                )
            )
    return h.hexdigest()


def write_tar(entries, out, count=None):
    """Write a tar stream of entries to out (a writer with write()); deterministic. ``count(n)``:
    called with each block of file content written."""
    total = 0
    for name, path, mode, size in entries:
        if path is None:
            buf = _header(_tarinfo(name.rstrip("/"), tarfile.DIRTYPE, mode))
            out.write(buf)
            total += len(buf)
            continue
        buf = _header(_tarinfo(name, tarfile.REGTYPE, mode, size))
        out.write(buf)
        total += len(buf)
        remaining = size
        with open(path, "rb") as fh:
            while remaining > 0:
                block = fh.read(min(CHUNK, remaining))
                if not block:
                    raise LayoutError("%s shrank while it was read" % path)
                out.write(block)
                remaining -= len(block)
                if count is not None:
                    count(len(block))
        total += size
        pad = (-size) % 512
        if pad:
            out.write(b"\0" * pad)
            total += pad
    end = b"\0" * 1024
    total += len(end)
    pad = (-total) % RECORDSIZE
    out.write(end + b"\0" * pad)


class Layout(object):
    """An OCI image layout directory."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.blobs = os.path.join(self.path, "blobs", "sha256")

    def init(self):
        os.makedirs(self.blobs, exist_ok=True)
        marker = os.path.join(self.path, "oci-layout")
        if not os.path.exists(marker):
            with open(marker, "w") as fh:
                fh.write('{"imageLayoutVersion":"1.0.0"}')
        return self

    def blob_path(self, digest):
        algo, _sep, hexd = digest.partition(":")
        return os.path.join(self.path, "blobs", algo, hexd)

    def has_blob(self, digest, size=None):
        p = self.blob_path(digest)
        return os.path.isfile(p) and (size is None or os.path.getsize(p) == size)

    def read_blob(self, digest):
        with open(self.blob_path(digest), "rb") as fh:
            return fh.read()

    def put_bytes(self, data):
        digest = sha256_bytes(data)
        if not self.has_blob(digest, len(data)):
            fd, tmp = tempfile.mkstemp(dir=self.blobs, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.blob_path(digest))
        return digest, len(data)

    def put_json(self, data, media_type):
        digest, size = self.put_bytes(canonical(data))
        return {"mediaType": media_type, "digest": digest, "size": size}

    def add_blob_from(self, other, digest):
        """Copy (hard-link when possible) a blob from another layout."""
        dst = self.blob_path(digest)
        if os.path.isfile(dst):
            return
        src = other.blob_path(digest)
        tmp = dst + ".tmp-link"
        try:
            if os.path.exists(tmp):
                os.remove(tmp)
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)

    def index(self):
        try:
            with open(os.path.join(self.path, "index.json")) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def write_index(self, manifest_desc, tag):
        desc = dict(manifest_desc)
        desc["annotations"] = {REF_NAME: tag}
        index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [desc]}
        data = canonical(index)
        tmp = os.path.join(self.path, "index.json.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(self.path, "index.json"))

    def _tagged(self, descs, tag):
        """The index entries of ``tag`` (all when it names none of several, or without a tag, all when
        they are one multi-platform image); LayoutError when the choice is not clear."""
        if tag is None:
            if len(descs) > 1 and not all(d.get("platform") for d in descs):
                raise LayoutError("%s holds %d images: name the tag" % (self.path, len(descs)))
            return descs
        tagged = [d for d in descs if (d.get("annotations") or {}).get(REF_NAME) == tag]
        if not tagged and len(descs) > 1:
            raise LayoutError(
                "%s: no image tagged %r (tags: %s)"
                % (
                    self.path,
                    tag,
                    ", ".join(sorted(str((d.get("annotations") or {}).get(REF_NAME)) for d in descs)),
                )
            )
        return tagged or descs

    def resolve(self, tag=None, platform=("linux", "amd64")):
        """(manifest dict, manifest descriptor) for tag (or the only manifest); image indexes
        (multi-platform) are resolved to the platform's manifest."""
        index = self.index()
        if not index or not index.get("manifests"):
            raise LayoutError("%s: no index.json or no manifests (not an OCI image layout?)" % self.path)
        descs = self._tagged(index["manifests"], tag)
        desc = descs[0]
        if all(d.get("platform") for d in descs) and len(descs) > 1:
            desc = _pick_platform(descs, platform, self.path)
        data = json.loads(self.read_blob(desc["digest"]))
        mt = data.get("mediaType") or desc.get("mediaType")
        if mt in (MT_INDEX, MT_DOCKER_LIST):
            desc = _pick_platform(data.get("manifests") or [], platform, self.path)
            data = json.loads(self.read_blob(desc["digest"]))
        return data, desc

    def referenced(self):
        """Digests of every blob referenced from index.json."""
        out = set()
        index = self.index() or {}
        stack = [d["digest"] for d in index.get("manifests") or []]
        while stack:
            digest = stack.pop()
            if digest in out or not self.has_blob(digest):
                continue
            out.add(digest)
            try:
                doc = json.loads(self.read_blob(digest))
            except ValueError:
                continue
            if isinstance(doc, dict):
                for d in doc.get("manifests") or []:
                    stack.append(d["digest"])
                if doc.get("config"):
                    out.add(doc["config"]["digest"])
                for d in doc.get("layers") or []:
                    out.add(d["digest"])
        return out

    def gc(self, keep=()):
        """Remove blobs that index.json does not reference (and are not in keep)."""
        live = self.referenced() | set(keep)
        removed = 0
        for name in os.listdir(self.blobs):
            digest = "sha256:" + name
            if name.startswith(".tmp-") or digest not in live:
                os.remove(os.path.join(self.blobs, name))
                removed += 1
        return removed


def _pick_platform(descs, platform, where):
    want_os, want_arch = platform[0], platform[1]
    variant = platform[2] if len(platform) > 2 else None
    for d in descs:
        p = d.get("platform") or {}
        if (
            p.get("os") == want_os
            and p.get("architecture") == want_arch
            and (variant is None or p.get("variant") == variant)
        ):
            return d
    raise LayoutError(
        "%s: no image for platform %s/%s (has: %s)"
        % (
            where,
            want_os,
            want_arch,
            ", ".join(
                "%s/%s" % ((d.get("platform") or {}).get("os"), (d.get("platform") or {}).get("architecture"))
                for d in descs
            ),
        )
    )


class LayerCache(object):
    """signature -> {digest, size} of layers built before, stored in the layout."""

    def __init__(self, layout, enabled=True):
        self.layout = layout
        self.enabled = enabled
        self.path = os.path.join(layout.path, "specpilot-layer-cache.json")
        self.data = {}
        if enabled:
            try:
                with open(self.path) as fh:
                    self.data = json.load(fh)
            except (OSError, ValueError):
                self.data = {}

    def get(self, sig):
        hit = self.data.get(sig) if self.enabled else None
        if hit and self.layout.has_blob(hit["digest"], hit["size"]):
            return hit
        return None

    def put(self, sig, digest, size, keep=()):
        if not self.enabled:
            return
        self.data[sig] = {"digest": digest, "size": size}
        live = set(keep) | {digest}
        self.data = {k: v for k, v in self.data.items() if v["digest"] in live}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(self.data, fh, sort_keys=True)
        os.replace(tmp, self.path)


def build_layer(layout, src, dest, cache=None, line=None):
    """The layer of directory src at dest (``models/target``): {digest, size, cached, files, bytes}.
    ``line(text)``: progress lines while the layer is written and hashed (every 10 s, and at the end)."""
    sig = tree_signature(src, dest) if cache is not None else None
    if sig is not None:
        hit = cache.get(sig)
        if hit:
            return dict(hit, cached=True, signature=sig)
    entries = dir_entries(src, dest)
    files = [e for e in entries if e[1] is not None]
    fd, tmp = tempfile.mkstemp(dir=layout.blobs, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb", buffering=0) as fh:
            writer = _HashingWriter(fh)
            meter = ByteProgress("layer " + dest, sum(e[3] for e in files), line or (lambda text: None))
            try:
                write_tar(entries, writer, meter.add)
            finally:
                digest, size = writer.finish()
            meter.finish()
        os.replace(tmp, layout.blob_path(digest))
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    if sig is not None:
        cache.put(sig, digest, size, keep=[v["digest"] for v in cache.data.values()])
    return {
        "digest": digest,
        "size": size,
        "cached": False,
        "signature": sig,
        "files": len(files),
        "bytes": sum(e[3] for e in files),
    }


def layer_members(layout, digest, media_type=None):
    """[(name, type, size, linkname)] of a layer blob (tar, tar+gzip)."""
    path = layout.blob_path(digest)
    with open(path, "rb") as raw:
        head = raw.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    out = []
    with opener(path, "rb") as fh:
        with tarfile.open(fileobj=fh, mode="r|") as tf:
            for ti in tf:
                out.append((ti.name.lstrip("./").lstrip("/"), ti.type, ti.size, ti.linkname))
    return out


def artifact_descriptor(layer):
    """The manifest descriptor of an artifact layer, annotated with its role and sub-directory."""
    annotations = {ANN_ARTIFACT_SUBDIR: layer["subdir"]}
    if layer.get("role"):
        annotations[ANN_ARTIFACT_ROLE] = layer["role"]
    return {
        "mediaType": MT_LAYER,
        "digest": layer["digest"],
        "size": layer["size"],
        "annotations": annotations,
    }


def _base_from_layout(layout, base_layout, base_tag, platform):
    """(manifest, descriptor, config, layer descriptors, diff_ids) of the base image in an OCI layout, its
    blobs copied into ``layout``; LayoutError for another platform or an inconsistent config."""
    base = Layout(base_layout)
    base_manifest, base_desc = base.resolve(base_tag, platform)
    base_config = json.loads(base.read_blob(base_manifest["config"]["digest"]))
    have = (base_config.get("os"), base_config.get("architecture"))
    if all(have) and have != tuple(platform[:2]):
        raise LayoutError("the base image is for platform %s/%s, not %s/%s" % (have + tuple(platform[:2])))
    base_diff_ids = list((base_config.get("rootfs") or {}).get("diff_ids") or [])
    base_descs = []
    for d in base_manifest.get("layers") or []:
        layout.add_blob_from(base, d["digest"])
        mt = d.get("mediaType") or MT_LAYER
        if mt == MT_DOCKER_LAYER_GZIP:
            mt = MT_LAYER_GZIP
        base_descs.append({"mediaType": mt, "digest": d["digest"], "size": d["size"]})
    if len(base_diff_ids) != len(base_descs):
        raise LayoutError(
            "base image: %d layers but %d diff_ids in its config" % (len(base_descs), len(base_diff_ids))
        )
    return base_manifest, base_desc, base_config, base_descs, base_diff_ids


def _base_from_tars(layout, base_layers):
    """(layer descriptors, diff_ids) of raw uncompressed tar layers (tests)."""
    base_descs, base_diff_ids = [], []
    for data in base_layers:
        digest, size = layout.put_bytes(data)
        base_descs.append({"mediaType": MT_LAYER, "digest": digest, "size": size})
        base_diff_ids.append(digest)
    return base_descs, base_diff_ids


def _model_layers(layout, artifacts, cache, line):
    """One layer per artifact at models/<subdir>, in order; LayoutError on a bad or repeated sub-directory."""
    subdirs = [a["subdir"].strip("/") for a in artifacts]
    if len(set(subdirs)) != len(subdirs):
        raise LayoutError("two artifacts use the same sub-directory: %s" % ", ".join(subdirs))
    layers = []
    for art in artifacts:
        sub = art["subdir"].strip("/")
        if not sub or "/" in sub or sub in (".", ".."):
            raise LayoutError("bad sub-directory %r" % art["subdir"])
        info = build_layer(layout, art["path"], "models/" + sub, cache, line)
        layers.append(dict(info, role=art.get("role"), subdir=sub, mount="/models/" + sub))
    return subdirs, layers


def _image_config(base_config, base_descs, base_diff_ids, subdirs, layers, platform, labels):
    """The image config: the base's, with the models' label, the layers' diff_ids and history."""
    cfg_in = dict(base_config.get("config") or {})
    cfg_in.setdefault("Env", ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    cfg_labels = dict(cfg_in.get("Labels") or {})
    cfg_labels[LABEL_MODELS] = ",".join("/models/" + s for s in subdirs)
    cfg_labels.update(labels or {})
    cfg_in["Labels"] = cfg_labels
    history = list(base_config.get("history") or [])
    if not history and base_descs:
        history = [{"created_by": "base layer"} for _unused in base_descs]
    for layer in layers:
        history.append(
            {
                "created_by": "specpilot modelcar: %s -> /models/%s"
                % (layer.get("role") or "model", layer["subdir"]),
                "comment": "specpilot oci_layout v%d" % WRITER_VERSION,
            }
        )
    config = {
        "architecture": base_config.get("architecture") or platform[1],
        "os": base_config.get("os") or platform[0],
        "config": cfg_in,
        "rootfs": {"type": "layers", "diff_ids": base_diff_ids + [layer["digest"] for layer in layers]},
        "history": history,
    }
    for key in ("created", "variant"):
        if base_config.get(key):
            config[key] = base_config[key]
    return config


def build_image(
    layout_dir,
    tag,
    artifacts,
    base_layout=None,
    base_tag=None,
    platform=("linux", "amd64"),
    labels=None,
    layer_cache=True,
    base_layers=None,
    line=None,
):
    """Write the Modelcar image into layout_dir (created or updated in place).

    artifacts: [{role, subdir, path}] -> one layer each at models/<subdir>, in the given order.
    base_layout: path of an OCI layout holding the base image (busybox...), base_tag its tag.
    Returns {digest, manifest, config, layers: [{role, subdir, digest, size, cached}], base: {...},
    manifest_size}. ``line(text)``: progress lines (build_layer)."""
    layout = Layout(layout_dir).init()
    cache = LayerCache(layout, layer_cache)
    base_desc, base_config = None, {}
    base_descs, base_diff_ids = [], []
    if base_layout is not None:
        _unused, base_desc, base_config, base_descs, base_diff_ids = _base_from_layout(
            layout, base_layout, base_tag, platform
        )
    elif base_layers:
        base_descs, base_diff_ids = _base_from_tars(layout, base_layers)
    subdirs, layers = _model_layers(layout, artifacts, cache, line)
    config = _image_config(base_config, base_descs, base_diff_ids, subdirs, layers, platform, labels)
    config_desc = layout.put_json(config, MT_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": config_desc,
        "layers": base_descs + [artifact_descriptor(layer) for layer in layers],
    }
    manifest_desc = layout.put_json(manifest, MT_MANIFEST)
    layout.write_index(manifest_desc, tag)
    layout.gc()
    return {
        "digest": manifest_desc["digest"],
        "manifest_size": manifest_desc["size"],
        "manifest": manifest,
        "config": config,
        "config_digest": config_desc["digest"],
        "layers": [{k: v for k, v in layer.items() if k != "signature"} for layer in layers],
        "base": {
            "manifest_digest": base_desc["digest"] if base_desc else None,
            "layers": [d["digest"] for d in base_descs],
        },
        "layout": layout.path,
    }


BASE_APPLETS = ("sh", "ln", "sleep")
BIN_DIRS = ("bin", "usr/bin", "sbin", "usr/sbin", "usr/local/bin")


def check_image(layout_dir, manifest, artifacts):
    """Content checks of a built image (by layer digests, i.e. what the registry holds):
    the base provides sh, ln and sleep; each /models/<subdir> layer holds non-empty files.
    Returns a list of problems (empty when fine) and facts."""
    layout = Layout(layout_dir)
    problems = []
    names = {}
    nonempty = {}
    layers = manifest.get("layers") or []
    n_models = len(artifacts)
    base_layers = layers[: len(layers) - n_models]
    for d in base_layers:
        for name, kind, size, _link in layer_members(layout, d["digest"]):
            names[name.rstrip("/")] = kind
    for applet in BASE_APPLETS:
        if not any(("%s/%s" % (b, applet)) in names for b in BIN_DIRS):
            problems.append("the base image has no %s (KServe's modelcar runs sh, ln and sleep)" % applet)
    for art, d in zip(artifacts, layers[len(layers) - n_models :]):
        prefix = "models/%s/" % art["subdir"].strip("/")
        files = [
            (n, s)
            for n, k, s, _l in layer_members(layout, d["digest"])
            if n.startswith(prefix) and k in (tarfile.REGTYPE, tarfile.AREGTYPE)
        ]
        nonempty[art["subdir"]] = {"files": len(files), "bytes": sum(s for _n, s in files)}
        if not files or not any(s > 0 for _n, s in files):
            problems.append("/models/%s is empty in its layer %s" % (art["subdir"], d["digest"]))
    return problems, {
        "base_has": [a for a in BASE_APPLETS if any(("%s/%s" % (b, a)) in names for b in BIN_DIRS)],
        "models": nonempty,
    }
