"""The lab's OCI registry (Debian's ``docker-registry``), skopeo helpers, and Modelcar images.

The registry listens on 127.0.0.1 only, with its own config (filesystem storage under the
lab state directory, no auth, no TLS; the Debian package's own config turns on htpasswd).
Clients therefore pass ``--tls-verify=false``.

Modelcar images are written directly as OCI image layouts (tar + sha256 + JSON, uncompressed
layers, mtime 0, uid/gid 0): no container engine and no base image to pull. The base layer is
the static busybox (``/bin/busybox`` plus applet links: KServe's modelcar sidecar runs
``sh``/``ln``/``sleep``), an empty ``/models`` (0775) and ``/tmp`` (1777). Each model directory
becomes one more layer, so the same bytes give the same digests, and a changed draft leaves the
target's layer unchanged. ``skopeo copy --preserve-digests`` pushes them as they are.

Layout under ``<state_dir>/registry/``: ``config.yml``, ``data/`` (blobs), ``registry.log``,
``addr`` (``127.0.0.1:PORT`` while running), ``pid``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from .engine import free_port

REGISTRY_BIN = "docker-registry"
SKOPEO_BIN = "skopeo"
BUSYBOX = Path("/bin/busybox")
APT_PACKAGES = ["docker-registry", "skopeo", "busybox-static"]
# applets linked into the base image: what KServe's modelcar and a debugging shell need
APPLETS = [
    "sh",
    "ash",
    "ln",
    "sleep",
    "ls",
    "mkdir",
    "cat",
    "cp",
    "mv",
    "rm",
    "echo",
    "test",
    "[",
    "true",
    "false",
    "env",
    "chmod",
    "chown",
    "touch",
    "find",
    "du",
    "df",
    "head",
    "tail",
    "wc",
    "sha256sum",
    "stat",
    "readlink",
    "realpath",
    "dirname",
    "basename",
    "id",
    "ps",
    "kill",
    "tar",
    "grep",
    "sed",
    "printf",
    "pwd",
    "which",
    "uname",
    "date",
    "hostname",
    "vi",
    "wget",
]

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


class RegistryError(RuntimeError):
    pass


# ---------------------------------------------------------------- registry process
def registry_dir(state_dir: str | os.PathLike) -> Path:
    return Path(state_dir) / "registry"


def write_config(state_dir: str | os.PathLike, port: int, host: str = "127.0.0.1") -> Path:
    d = registry_dir(state_dir)
    (d / "data").mkdir(parents=True, exist_ok=True)
    # YAML is a superset of JSON: no YAML library needed here
    config = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": True}, "fields": {"service": "lab-registry"}},
        "storage": {
            "filesystem": {"rootdirectory": str((d / "data").resolve())},
            "delete": {"enabled": True},
            "cache": {"blobdescriptor": "inmemory"},
        },
        "http": {"addr": f"{host}:{port}", "headers": {"X-Content-Type-Options": ["nosniff"]}},
    }
    path = d / "config.yml"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def command(state_dir: str | os.PathLike, port: int) -> list[str]:
    """The registry's command line (writes its config first): for the lab's process table."""
    return [REGISTRY_BIN, "serve", str(write_config(state_dir, port))]


def healthy(addr: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{addr}/v2/", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(addr: str, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RegistryError(f"docker-registry exited with {proc.returncode}")
        if healthy(addr):
            return
        time.sleep(0.1)
    raise RegistryError(f"registry at {addr} not healthy after {timeout}s")


class Registry:
    """A docker-registry process owned by this object (tests, the lab CLI)."""

    def __init__(self, state_dir: str | os.PathLike, port: int | None = None, host: str = "127.0.0.1"):
        self.state_dir = Path(state_dir)
        self.host = host
        self.port = port or free_port(host)
        self.proc: subprocess.Popen | None = None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> "Registry":
        if not shutil.which(REGISTRY_BIN):
            raise RegistryError(
                f"{REGISTRY_BIN} not found: install the Debian package docker-registry " "(make installs it)"
            )
        d = registry_dir(self.state_dir)
        d.mkdir(parents=True, exist_ok=True)
        log = open(d / "registry.log", "ab")
        self.proc = subprocess.Popen(
            command(self.state_dir, self.port),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        try:
            wait_healthy(self.addr, timeout, self.proc)
        except RegistryError:
            self.stop()
            raise
        (d / "addr").write_text(self.addr + "\n")
        (d / "pid").write_text(f"{self.proc.pid}\n")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        d = registry_dir(self.state_dir)
        for f in ("addr", "pid"):
            (d / f).unlink(missing_ok=True)
        self.proc = None

    def __enter__(self) -> "Registry":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def running_addr(state_dir: str | os.PathLike) -> str | None:
    """The address of the lab registry recorded under state_dir, if it answers."""
    f = registry_dir(state_dir) / "addr"
    if not f.exists():
        return None
    addr = f.read_text().strip()
    return addr if healthy(addr) else None


# ---------------------------------------------------------------- OCI layouts
def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tarinfo(
    name: str, *, type_: bytes = tarfile.REGTYPE, mode: int = 0o644, size: int = 0, linkname: str = ""
) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = type_
    ti.mode = mode
    ti.size = size
    ti.linkname = linkname
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _tar(entries: list[tuple[tarfile.TarInfo, bytes | Path | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for ti, content in entries:
            if content is None:
                tf.addfile(ti)
            elif isinstance(content, Path):
                with content.open("rb") as fh:
                    tf.addfile(ti, fh)
            else:
                tf.addfile(ti, io.BytesIO(content))
    return buf.getvalue()


def base_layer(busybox: Path = BUSYBOX) -> bytes:
    """The Modelcar base layer: static busybox, applet links, /models (0775), /tmp (1777)."""
    if not busybox.exists():
        raise RegistryError(f"{busybox} not found: install the Debian package busybox-static")
    size = busybox.stat().st_size
    entries: list[tuple[tarfile.TarInfo, bytes | Path | None]] = [
        (_tarinfo("bin", type_=tarfile.DIRTYPE, mode=0o755), None),
        (_tarinfo("bin/busybox", mode=0o755, size=size), busybox),
    ]
    for applet in sorted(APPLETS):
        entries.append(
            (_tarinfo(f"bin/{applet}", type_=tarfile.SYMTYPE, mode=0o777, linkname="busybox"), None)
        )
    entries += [
        (_tarinfo("models", type_=tarfile.DIRTYPE, mode=0o775), None),
        (_tarinfo("tmp", type_=tarfile.DIRTYPE, mode=0o1777), None),
    ]
    return _tar(entries)


def dir_layer(src: Path, dest: str) -> bytes:
    """One layer holding src's files at dest (e.g. /models/target), sorted, mtime 0."""
    src = Path(src)
    dest = dest.strip("/")
    entries: list[tuple[tarfile.TarInfo, bytes | Path | None]] = []
    parts = dest.split("/")
    for i in range(1, len(parts) + 1):
        entries.append((_tarinfo("/".join(parts[:i]), type_=tarfile.DIRTYPE, mode=0o775), None))
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        name = f"{dest}/{rel}"
        if path.is_symlink():
            entries.append(
                (_tarinfo(name, type_=tarfile.SYMTYPE, mode=0o777, linkname=os.readlink(path)), None)
            )
        elif path.is_dir():
            entries.append((_tarinfo(name, type_=tarfile.DIRTYPE, mode=0o775), None))
        else:
            entries.append((_tarinfo(name, mode=0o644, size=path.stat().st_size), path))
    return _tar(entries)


def write_layout(
    layout: Path, layers: list[bytes], tag: str = "latest", labels: dict[str, str] | None = None
) -> str:
    """Write an OCI image layout with these (uncompressed) layers; return the manifest digest.
    An existing layout at the path is replaced."""
    layout = Path(layout)
    if layout.exists():
        shutil.rmtree(layout)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = _sha256(data)
        (blobs / digest.split(":", 1)[1]).write_bytes(data)
        return digest

    layer_descs = [{"mediaType": MT_LAYER, "digest": put(data), "size": len(data)} for data in layers]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "WorkingDir": "/", "Labels": dict(sorted((labels or {}).items()))},
        "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layer_descs]},
        "history": [{"created_by": "specpilot_lab.registry"} for _ in layer_descs],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": put(config_bytes), "size": len(config_bytes)},
        "layers": layer_descs,
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    mdigest = put(manifest_bytes)
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    index = {
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "manifests": [
            {
                "mediaType": MT_MANIFEST,
                "digest": mdigest,
                "size": len(manifest_bytes),
                "annotations": {REF_NAME: tag},
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index, sort_keys=True, separators=(",", ":")))
    return mdigest


def build_base_layout(layout: Path, tag: str = "latest", busybox: Path = BUSYBOX) -> str:
    """The Modelcar base image (busybox only) as an OCI layout; returns its manifest digest."""
    return write_layout(layout, [base_layer(busybox)], tag)


def build_modelcar_layout(
    layout: Path, models: dict[str, Path], tag: str = "latest", busybox: Path = BUSYBOX
) -> str:
    """A Modelcar image: the base layer plus one layer per model directory, placed at
    /models/<key> (key "" puts the files directly in /models). Deterministic."""
    layers = [base_layer(busybox)]
    for sub, src in sorted(models.items()):
        layers.append(dir_layer(Path(src), "models/" + sub.strip("/") if sub.strip("/") else "models"))
    return write_layout(layout, layers, tag)


# ---------------------------------------------------------------- skopeo
def _skopeo(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    if not shutil.which(SKOPEO_BIN):
        raise RegistryError("skopeo not found: install the Debian package skopeo (make installs it)")
    env = dict(os.environ)
    res = subprocess.run([SKOPEO_BIN, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        raise RegistryError(f"skopeo {' '.join(args)} failed: {(res.stderr or res.stdout).strip()[-1500:]}")
    return res


def push(layout: Path, ref: str, tag: str = "latest") -> None:
    """Push an OCI layout to ``ref`` (``HOST:PORT/repo:tag``) over plain HTTP, digests kept."""
    _skopeo(
        [
            "copy",
            "--quiet",
            "--preserve-digests",
            "--dest-tls-verify=false",
            f"oci:{layout}:{tag}",
            f"docker://{ref}",
        ]
    )


def inspect_digest(ref: str) -> str:
    res = _skopeo(["inspect", "--tls-verify=false", "--raw", f"docker://{ref}"])
    return _sha256(res.stdout.encode())


def pull(ref: str, layout: Path, tag: str = "latest") -> None:
    """Copy ``docker://ref`` into an OCI layout directory."""
    _skopeo(
        [
            "copy",
            "--quiet",
            "--preserve-digests",
            "--src-tls-verify=false",
            f"docker://{ref}",
            f"oci:{layout}:{tag}",
        ]
    )


def unpack_layout(layout: Path, dest: Path, tag: str | None = None) -> Path:
    """Apply the image's layers in order under dest (whiteouts honoured); return dest."""
    layout, dest = Path(layout), Path(dest)
    index = json.loads((layout / "index.json").read_text())
    descs = index["manifests"]
    if tag is not None:
        descs = [d for d in descs if d.get("annotations", {}).get(REF_NAME) == tag] or descs
    blob = lambda digest: layout / "blobs" / digest.split(":", 1)[0] / digest.split(":", 1)[1]  # noqa: E731
    manifest = json.loads(blob(descs[0]["digest"]).read_text())
    dest.mkdir(parents=True, exist_ok=True)
    for layer in manifest["layers"]:
        with tarfile.open(blob(layer["digest"]), mode="r:*") as tf:
            members = []
            for m in tf.getmembers():
                base = os.path.basename(m.name)
                parent = os.path.dirname(m.name)
                if base == ".wh..wh..opq":
                    target = dest / parent
                    if target.is_dir():
                        for child in target.iterdir():
                            (
                                shutil.rmtree(child)
                                if child.is_dir() and not child.is_symlink()
                                else child.unlink()
                            )
                    continue
                if base.startswith(".wh."):
                    target = dest / parent / base[4:]
                    if target.is_dir() and not target.is_symlink():
                        shutil.rmtree(target)
                    elif target.exists() or target.is_symlink():
                        target.unlink()
                    continue
                if m.isdev():
                    continue
                members.append(m)
            tf.extractall(dest, members=members, filter="tar")
    return dest


def pull_and_unpack(ref: str, dest: Path, work_dir: Path | None = None) -> Path:
    """skopeo-pull ``ref`` and unpack its filesystem into dest; return dest/models (the
    Modelcar's model directory) when it exists, else dest."""
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        layout = Path(tmp) / "layout"
        pull(ref, layout)
        if dest.exists():
            shutil.rmtree(dest)
        unpack_layout(layout, dest)
    models = dest / "models"
    return models if models.is_dir() else dest


# ---------------------------------------------------------------- lab process
def serve(state_dir: Path, port: int = 0, ready_file: Path | None = None) -> int:
    """Run the registry in the foreground (the lab's managed process): start docker-registry,
    write the ready file once /v2/ answers, stop it on SIGTERM/SIGINT."""
    import sys
    import threading

    reg = Registry(state_dir, port or None)
    try:
        reg.start()
    except RegistryError as exc:
        print(f"registry: {exc}", file=sys.stderr, flush=True)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    info = {
        "addr": reg.addr,
        "url": f"http://{reg.addr}",
        "pid": os.getpid(),
        "registry_pid": reg.proc.pid,
        "storage": str((registry_dir(state_dir) / "data").resolve()),
    }
    if ready_file is not None:
        tmp = Path(str(ready_file) + ".tmp")
        tmp.write_text(json.dumps(info))
        os.replace(tmp, ready_file)
    print(f"registry: serving http://{reg.addr} (storage {info['storage']})", flush=True)
    try:
        while not stop.wait(0.5):
            if reg.proc is None or reg.proc.poll() is not None:
                print("registry: docker-registry exited", file=sys.stderr, flush=True)
                return 1
    finally:
        reg.stop()
        if ready_file is not None:
            Path(ready_file).unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m specpilot_lab.registry", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the lab registry in the foreground")
    s.add_argument("--state-dir", type=Path, required=True)
    s.add_argument("--port", type=int, default=int(os.environ.get("SPECPILOT_LAB_REGISTRY_PORT", "0")))
    s.add_argument("--ready-file", type=Path)
    b = sub.add_parser("base-layout", help="write the Modelcar base image (static busybox) as an OCI layout")
    b.add_argument("dest", type=Path)
    b.add_argument("--tag", default="latest")
    args = p.parse_args(argv)
    if args.cmd == "serve":
        return serve(args.state_dir, args.port, args.ready_file)
    print(build_base_layout(args.dest, args.tag))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
