# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Build, push and verify a Modelcar image: the OCI layout writer (oci_layout) plus skopeo.

Default backend (no container engine): write the image as an OCI layout, then
``skopeo copy --preserve-digests oci:LAYOUT:TAG docker://IMAGE:TAG``, so the registry stores
exactly the digests computed here. Before pushing, the tag is inspected: when it already
resolves to the built manifest digest nothing is pushed (changed=false). After pushing, the
manifest is read back by digest and checked (layers equal the local ones, the tag resolves to
the digest) and the content is checked from the layer blobs that the registry now holds:
``sh``/``ln``/``sleep`` in the base, ``/models/<subdir>`` present and non-empty.

Registry credentials never appear on a command line: they are written to a temporary
authfile (mode 0600, removed afterwards) when given as username/password.

Optional backend ``podman``: ``podman build --timestamp 0`` + ``podman push --digestfile``.
"""

from __future__ import absolute_import, division, print_function

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from ansible_collections.specpilot.core.plugins.module_utils.staging import oci_layout, oci_registry
from ansible_collections.specpilot.core.plugins.module_utils.report.progress import human

__metaclass__ = type

# busybox 1.36.1 pinned by the digest of its index (issue 19: a tag can be moved to other bytes). The digest
# is cited, not read here (no Docker Hub access): "the index of library/busybox:1.36.1 as Docker Hub's
# registry answered on 2026-10-03" (a public repository's debug_pod_bodies.rs, DEFAULT_DEBUG_IMAGE), the same
# digest in two more public repositories' pins of busybox:1.36.1.
BUSYBOX = (
    "docker.io/library/busybox:1.36.1@sha256:73aaf090f3d85aa34ee199857f03fa3a95c8ede2ffd4cc2cdb5b94e566b11662"
)
DEFAULT_BASE = "docker://" + BUSYBOX
NOT_FOUND = re.compile(r"manifest unknown|name unknown|not found|MANIFEST_UNKNOWN|NAME_UNKNOWN|404", re.I)


class ModelcarError(Exception):
    pass


def split_image(image):
    """(repository, tag) of ``[docker://|oci://]registry/repo:tag``; a digest is refused."""
    for prefix in ("docker://", "oci://"):
        if image.startswith(prefix):
            image = image[len(prefix) :]
    if "@" in image:
        raise ModelcarError(
            "image %r carries a digest: give registry/repo:tag (the digest is the result)" % image
        )
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = image.rsplit(":", 1)
    else:
        repo, tag = image, "latest"
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", tag):
        raise ModelcarError("bad tag %r in image %r" % (tag, image))
    return repo, tag


def registry_host(repo):
    first = repo.split("/", 1)[0]
    if "/" in repo and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


class Skopeo(object):
    def __init__(self, binary="skopeo", timeout=3600, env=None):
        self.binary = binary
        self.timeout = timeout
        self.env = env
        self.calls = []

    def run(self, args, timeout=None, check=True):
        path = shutil.which(self.binary) if not os.path.isabs(self.binary) else self.binary
        if not path:
            raise ModelcarError(
                "%s not found: install skopeo (Debian/Ubuntu: apt-get install skopeo)" % self.binary
            )
        self.calls.append(list(args))
        try:
            proc = subprocess.run(
                [path] + list(args),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=timeout or self.timeout,
                env=self.env,
                check=False,  # the exit status is judged below, with skopeo's stderr in the error
            )
        except subprocess.TimeoutExpired:
            raise ModelcarError("skopeo %s timed out" % args[0])
        if check and proc.returncode != 0:
            raise ModelcarError(
                "skopeo %s failed (exit %d): %s"
                % (args[0], proc.returncode, proc.stderr.decode("utf-8", "replace").strip()[-2000:])
            )
        return proc

    @staticmethod
    def _tls(flag, verify):
        return ["--%s=%s" % (flag, "true" if verify else "false")]

    def inspect_raw(self, ref, tls_verify=True, authfile=None):
        """Raw manifest bytes of docker://ref, or None when the registry does not have it."""
        args = ["inspect", "--raw", "--retry-times", "2"] + self._tls("tls-verify", tls_verify)
        if authfile:
            args += ["--authfile", authfile]
        proc = self.run(args + ["docker://" + ref], check=False, timeout=300)
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace")
            if NOT_FOUND.search(err):
                return None
            raise ModelcarError("skopeo inspect docker://%s failed: %s" % (ref, err.strip()[-1500:]))
        return proc.stdout

    def copy(
        self,
        src,
        dest,
        preserve_digests=True,
        src_tls_verify=None,
        dest_tls_verify=None,
        src_authfile=None,
        dest_authfile=None,
        platform=None,
    ):
        args = ["copy", "--retry-times", "3"]
        if preserve_digests:
            args.append("--preserve-digests")
        if src_tls_verify is not None:
            args += self._tls("src-tls-verify", src_tls_verify)
        if dest_tls_verify is not None:
            args += self._tls("dest-tls-verify", dest_tls_verify)
        if src_authfile:
            args += ["--src-authfile", src_authfile]
        if dest_authfile:
            args += ["--dest-authfile", dest_authfile]
        if platform:
            args += ["--override-os", platform[0], "--override-arch", platform[1]]
            if len(platform) > 2 and platform[2]:
                args += ["--override-variant", platform[2]]
        proc = self.run(args + [src, dest])
        return (proc.stdout + proc.stderr).decode("utf-8", "replace")


def manifest_digest(raw):
    return "sha256:" + hashlib.sha256(raw).hexdigest()


class Credentials(object):
    """A temporary authfile for username/password (0600 in a private directory), or the given
    authfile, or nothing."""

    def __init__(self, registry, username=None, password=None, authfile=None):
        self.registry = registry
        self.username = username
        self.password = password
        self.authfile = authfile
        self._dir = None

    def __enter__(self):
        if self.username and self.password is not None:
            self._dir = tempfile.mkdtemp(prefix="specpilot-auth-")
            os.chmod(self._dir, 0o700)
            path = os.path.join(self._dir, "auth.json")
            token = base64.b64encode(("%s:%s" % (self.username, self.password)).encode()).decode()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"auths": {self.registry: {"auth": token}}}, fh)
            return path
        return self.authfile

    def __exit__(self, *exc):
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)


def parse_base(base):
    """("oci", path, tag) for ``oci:PATH[:TAG]``, ("docker", ref, None) for ``docker://REF`` or a bare
    reference."""
    if base.startswith("oci:"):
        rest = base[len("oci:") :]
        if os.path.isdir(rest):
            return "oci", rest, None
        path, _sep, tag = rest.rpartition(":")
        if path and os.path.isdir(path):
            return "oci", path, tag
        raise ModelcarError("base %r: no OCI layout directory at %s" % (base, path or rest))
    if base.startswith("docker://"):
        return "docker", _digest_only(base[len("docker://") :]), None
    if "://" in base:
        raise ModelcarError("base %r: use oci:PATH[:TAG] (a local OCI layout) or docker://REF" % base)
    return "docker", _digest_only(base), None


def _digest_only(ref):
    """repo@sha256:... for repo:tag@sha256:... - skopeo (containers/image, docker transport) refuses a
    reference with both ("Docker references with both a tag and digest are currently not supported"),
    and the digest alone names the same bytes; the tag stays in the spec for people to read."""
    name, sep, digest = ref.partition("@")
    if not sep:
        return ref
    last = name.rsplit("/", 1)[-1]
    return (name.rsplit(":", 1)[0] if ":" in last else name) + "@" + digest


def prepare_base(skopeo, base, work_dir, tls_verify=True, authfile=None, platform=("linux", "amd64")):
    """(layout path, tag, info) of the base image: a local layout as is, or pulled with skopeo into
    work_dir/base (a reference pinned by digest is pulled once)."""
    kind, where, tag = parse_base(base)
    if kind == "oci":
        return where, tag, {"source": base, "pulled": False}
    layout = os.path.join(work_dir, "base")
    pin = re.sub(r"[^A-Za-z0-9_.-]", "_", where)[-100:]
    stamp = os.path.join(work_dir, "base.ref")
    if "@sha256:" in where and os.path.isfile(os.path.join(layout, "index.json")) and os.path.isfile(stamp):
        with open(stamp) as fh:
            if fh.read() == where:
                return layout, "base", {"source": base, "pulled": False}
    if os.path.isdir(layout):
        shutil.rmtree(layout)
    skopeo.copy(
        "docker://" + where,
        "oci:%s:base" % layout,
        preserve_digests=False,
        src_tls_verify=tls_verify,
        src_authfile=authfile,
        platform=platform,
    )
    with open(stamp, "w") as fh:
        fh.write(where)
    return layout, "base", {"source": base, "pulled": True, "pin": pin}


def _checked_artifacts(given):
    """The artifacts to layer, with absolute paths; each must be a non-empty directory."""
    artifacts = [
        {"role": a.get("role"), "subdir": a["subdir"], "path": os.path.abspath(os.path.expanduser(a["path"]))}
        for a in given
    ]
    for a in artifacts:
        if not os.path.isdir(a["path"]):
            raise ModelcarError("%s: %s is not a directory" % (a["role"] or a["subdir"], a["path"]))
        if not any(True for _unused in os.scandir(a["path"])):
            raise ModelcarError("%s: %s is empty" % (a["role"] or a["subdir"], a["path"]))
    return artifacts


def _skopeo_push(p, skopeo, built, repo, tag, authfile, result):
    """Copy the built layout to the registry by digest; count what was uploaded (blobs the registry
    already had are skipped)."""
    tls = p.get("tls_verify", True)
    blobs = {d["digest"]: d["size"] for d in built["manifest"]["layers"]}
    blobs[built["manifest"]["config"]["digest"]] = built["manifest"]["config"]["size"]
    missing = oci_registry.missing_blobs(
        repo,
        registry_host(repo),
        list(blobs),
        tls_verify=tls,
        username=p.get("username"),
        password=p.get("password"),
        authfile=authfile,
    )
    skopeo.copy(
        "oci:%s:%s" % (built["layout"], tag),
        "docker://%s:%s" % (repo, tag),
        preserve_digests=True,
        dest_tls_verify=tls,
        dest_authfile=authfile,
    )
    if missing is None:  # the registry could not be asked: count everything
        missing = list(blobs)
        result["upload_accounting"] = "unknown (registry API not reachable): every blob counted"
    result.update(
        {
            "pushed": True,
            "changed": True,
            "blobs_uploaded": len(missing),
            "blobs_skipped": len(blobs) - len(missing),
            "bytes_uploaded": sum(blobs[d] for d in missing) + built["manifest_size"],
        }
    )
    result["msg"] = "pushed %s:%s (%s)" % (repo, tag, built["digest"])


def refuse_tag_move(repo, tag, had, new, p, what="digest"):
    """A tag that names another image is moved only with ``force`` (issue: data safety): pods that
    pull by tag would change under their services, and the old image, untagged, is left to the
    registry's garbage collection."""
    if p.get("force"):
        return
    raise ModelcarError(
        "%s:%s already names another image (%s %s; this build's is %s): pushing would move the tag, "
        "so that pods pulling it change under their services and the old image is left untagged for "
        "the registry's garbage collection. Give this build another tag, or set force: true to move it."
        % (repo, tag, what, had, new)
    )


def build_push(p, check_mode=False, line=None):
    """The whole Modelcar operation for the module; returns the module result dict. ``line(text)``:
    progress lines (each step, and each layer's bytes as it is written and hashed)."""
    line = line or (lambda text: None)
    t0 = time.time()
    repo, tag = split_image(p["image"])
    work = os.path.abspath(os.path.expanduser(p.get("work_dir") or "~/.cache/specpilot/modelcar"))
    work = os.path.join(work, re.sub(r"[^A-Za-z0-9_.-]", "_", repo)[-120:])
    os.makedirs(work, exist_ok=True)
    platform = tuple((p.get("platform") or "linux/amd64").split("/"))
    artifacts = _checked_artifacts(p["artifacts"])
    skopeo = Skopeo(p.get("skopeo_path") or "skopeo")
    result = {
        "changed": False,
        "image": "%s:%s" % (repo, tag),
        "repository": repo,
        "tag": tag,
        "pushed": False,
    }
    if (p.get("backend") or "skopeo") == "podman":
        return podman_build_push(p, repo, tag, artifacts, work, skopeo, check_mode, result, t0)
    with Credentials(
        registry_host(repo), p.get("username"), p.get("password"), p.get("authfile")
    ) as authfile:
        line("base image %s" % (p.get("base") or DEFAULT_BASE))
        base_layout, base_tag, base_info = prepare_base(
            skopeo,
            p.get("base") or DEFAULT_BASE,
            work,
            tls_verify=p.get("base_tls_verify", True),
            authfile=p.get("base_authfile"),
            platform=platform,
        )
        t_build = time.time()
        built = oci_layout.build_image(
            os.path.join(work, "layout"),
            tag,
            artifacts,
            base_layout=base_layout,
            base_tag=base_tag,
            platform=platform,
            labels=p.get("labels"),
            layer_cache=p.get("layer_cache", True),
            line=line,
        )
        result["timings"] = {"base": round(t_build - t0, 3), "build": round(time.time() - t_build, 3)}
        digest = built["digest"]
        line("built %s in %.1f s" % (digest, result["timings"]["build"]))
        result.update(
            {
                "digest": digest,
                "image_ref": "%s@%s" % (repo, digest),
                "storage_uri": "oci://%s@%s" % (repo, digest),
                "config_digest": built["config_digest"],
                "layers": built["layers"],
                "base": dict(built["base"], **base_info),
                "layout": built["layout"],
                "bytes_uploaded": 0,
                "blobs_uploaded": 0,
                "blobs_skipped": 0,
            }
        )
        problems, facts = oci_layout.check_image(built["layout"], built["manifest"], artifacts)
        if problems:
            raise ModelcarError("the built image is not a valid Modelcar: " + "; ".join(problems))
        result["content"] = facts
        if not p.get("push", True):
            return result
        tls = p.get("tls_verify", True)
        t_push = time.time()
        raw = skopeo.inspect_raw("%s:%s" % (repo, tag), tls_verify=tls, authfile=authfile)
        present = raw is not None and manifest_digest(raw) == digest
        result["registry_had_digest"] = present
        if raw is not None and not present:
            refuse_tag_move(repo, tag, manifest_digest(raw), digest, p)
        if present and not p.get("force"):
            result["msg"] = "%s:%s already is %s: nothing pushed" % (repo, tag, digest)
        elif check_mode:
            result["changed"] = True
            result["msg"] = "check mode: would push %s:%s (%s)" % (repo, tag, digest)
            return result
        else:
            line("pushing %s:%s" % (repo, tag))
            _skopeo_push(p, skopeo, built, repo, tag, authfile, result)
            line(
                "pushed %d blobs (%s) in %.1f s"
                % (result["blobs_uploaded"], human(result["bytes_uploaded"]), time.time() - t_push)
            )
        result["timings"]["push"] = round(time.time() - t_push, 3)
        if p.get("verify", True):
            t_verify = time.time()
            result["verify"] = verify_remote(skopeo, repo, tag, digest, built["manifest"], tls, authfile)
            result["verify"]["content"] = facts
            result["timings"]["verify"] = round(time.time() - t_verify, 3)
    result["timings"]["total"] = round(time.time() - t0, 3)
    return result


def verify_remote(skopeo, repo, tag, digest, manifest, tls_verify, authfile):
    """Read the pushed manifest back by digest and by tag; compare with the local one."""
    raw = skopeo.inspect_raw("%s@%s" % (repo, digest), tls_verify=tls_verify, authfile=authfile)
    if raw is None:
        raise ModelcarError("verify: the registry has no manifest %s@%s after the push" % (repo, digest))
    if manifest_digest(raw) != digest:
        raise ModelcarError(
            "verify: the registry's manifest %s@%s hashes to %s" % (repo, digest, manifest_digest(raw))
        )
    remote = json.loads(raw)
    local_layers = [(d["digest"], d["size"]) for d in manifest["layers"]]
    remote_layers = [(d.get("digest"), d.get("size")) for d in remote.get("layers") or []]
    if remote_layers != local_layers:
        raise ModelcarError("verify: the registry's layers differ from the built ones")
    by_tag = skopeo.inspect_raw("%s:%s" % (repo, tag), tls_verify=tls_verify, authfile=authfile)
    if by_tag is None or manifest_digest(by_tag) != digest:
        raise ModelcarError("verify: %s:%s does not resolve to %s (the tag moved?)" % (repo, tag, digest))
    return {"ok": True, "manifest_digest": digest, "layers": len(remote_layers), "tag_pinned": True}


# ---------------------------------------------------------------- podman backend
def podman_build_push(p, repo, tag, artifacts, work, skopeo, check_mode, result, t0):
    podman = shutil.which(p.get("podman_path") or "podman")
    if not podman:
        raise ModelcarError("backend podman: podman not found")
    image_id = _podman_build(p, podman, repo, tag, artifacts, work)
    tls = p.get("tls_verify", True)
    with Credentials(
        registry_host(repo), p.get("username"), p.get("password"), p.get("authfile")
    ) as authfile:
        proc = skopeo.run(
            ["inspect", "--config", "--raw"]
            + skopeo._tls("tls-verify", tls)
            + (["--authfile", authfile] if authfile else [])
            + ["docker://%s:%s" % (repo, tag)],
            check=False,
        )
        remote_config = "sha256:" + hashlib.sha256(proc.stdout).hexdigest() if proc.returncode == 0 else None
        if remote_config and remote_config.split(":", 1)[1] != image_id:
            refuse_tag_move(repo, tag, remote_config, "sha256:" + image_id, p, what="config")
        if remote_config and remote_config.split(":", 1)[1] == image_id and not p.get("force"):
            raw = skopeo.inspect_raw("%s:%s" % (repo, tag), tls_verify=tls, authfile=authfile)
            digest = manifest_digest(raw)
        elif check_mode:
            result.update({"changed": True, "msg": "check mode: would push %s:%s" % (repo, tag)})
            return result
        else:
            digest = _podman_push(podman, repo, tag, work, tls, authfile)
            result.update({"pushed": True, "changed": True})
        result.update(
            {
                "digest": digest,
                "image_ref": "%s@%s" % (repo, digest),
                "storage_uri": "oci://%s@%s" % (repo, digest),
                "config_digest": "sha256:" + image_id,
                "timings": {"total": round(time.time() - t0, 3)},
            }
        )
        if p.get("verify", True):
            _podman_verify(skopeo, repo, digest, artifacts, work, tls, authfile, result)
    return result


def _podman_push(podman, repo, tag, work, tls, authfile):
    """podman push; returns the pushed manifest's digest."""
    digestfile = os.path.join(work, "podman.digest")
    push = [podman, "push", "--tls-verify=%s" % ("true" if tls else "false"), "--digestfile", digestfile]
    if authfile:
        push += ["--authfile", authfile]
    proc = subprocess.run(
        push + ["%s:%s" % (repo, tag)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False
    )
    if proc.returncode != 0:
        raise ModelcarError("podman push failed: %s" % proc.stdout.decode("utf-8", "replace")[-2000:])
    with open(digestfile) as fh:
        return fh.read().strip()


def _podman_verify(skopeo, repo, digest, artifacts, work, tls, authfile, result):
    """Copy the pushed image back by digest and check it is a valid Modelcar holding the artifacts."""
    tmp = tempfile.mkdtemp(dir=work)
    try:
        skopeo.copy(
            "docker://%s@%s" % (repo, digest),
            "oci:%s:verify" % tmp,
            preserve_digests=True,
            src_tls_verify=tls,
            src_authfile=authfile,
        )
        manifest, _desc = oci_layout.Layout(tmp).resolve("verify")
        problems, facts = oci_layout.check_image(tmp, manifest, artifacts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        raise ModelcarError("the pushed image is not a valid Modelcar: " + "; ".join(problems))
    result["content"] = facts
    result["verify"] = {
        "ok": True,
        "manifest_digest": digest,
        "layers": len(manifest.get("layers") or []),
        "tag_pinned": True,
    }


def _podman_build(p, podman, repo, tag, artifacts, work):
    """podman build of the Containerfile FROM the base with one COPY per artifact; returns the image id."""
    base = p.get("base") or DEFAULT_BASE
    kind, where, base_tag = parse_base(base)
    from_ref = where if kind == "docker" else "oci:%s%s" % (where, (":" + base_tag) if base_tag else "")
    ctx = os.path.join(work, "podman-context")
    if os.path.isdir(ctx):
        shutil.rmtree(ctx)
    os.makedirs(ctx)
    lines = ["FROM %s" % from_ref]
    for a in artifacts:
        sub = a["subdir"].strip("/")
        for name, src, _mode, _size in oci_layout.dir_entries(a["path"], sub):
            target = os.path.join(ctx, name)
            if src is None:
                os.makedirs(target, exist_ok=True)
                continue
            try:
                os.link(src, target)
            except OSError:
                shutil.copyfile(src, target)
        lines.append("COPY %s /models/%s" % (sub, sub))
    with open(os.path.join(ctx, "Containerfile"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    run_args = [
        podman,
        "build",
        "--timestamp",
        "0",
        "-f",
        os.path.join(ctx, "Containerfile"),
        "-t",
        "%s:%s" % (repo, tag),
    ]
    if p.get("podman_runtime"):
        run_args[2:2] = ["--runtime", p["podman_runtime"]]
    proc = subprocess.run(run_args + [ctx], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise ModelcarError("podman build failed: %s" % proc.stdout.decode("utf-8", "replace")[-2000:])
    return (
        subprocess.run(
            [podman, "image", "inspect", "--format", "{{.Id}}", "%s:%s" % (repo, tag)],
            stdout=subprocess.PIPE,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
