"""Test support for artifact staging: tiny model directories, a loopback HTTP server holding
model files, archives and a fake Hugging Face hub, and an S3 server (moto in server mode).

Every server binds 127.0.0.1 on a free port and is stopped by its owner (context managers).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from ansible_collections.specpilot.core.plugins.module_utils.staging.pvc_staging import program_files

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = ROOT / "collections" / "ansible_collections" / "specpilot" / "core"
STAGING_VENV = ROOT / ".venv-staging"
STAGING_PYTHON = STAGING_VENV / "bin" / "python"
SYSTEM_PYTHON = Path("/usr/bin/python3")


def staging_site_packages() -> Path | None:
    """site-packages of .venv-staging (boto3, huggingface_hub, moto), or None."""
    found = sorted(STAGING_VENV.glob("lib/python3*/site-packages"))
    return found[0] if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- model files
def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    """A valid safetensors file: {name: (dtype, shape, data)}."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)


def make_model(
    path: Path,
    *,
    vocab_size: int = 2048,
    hidden: int = 64,
    layers: int = 2,
    weight_bytes: int = 64 * 1024,
    seed: int = 0,
    shards: int = 1,
    tokenizer: bool = True,
    arch: str = "LlamaForCausalLM",
) -> Path:
    """A small HF-style model directory: config.json, tokenizer files, safetensors weights
    (``weight_bytes`` of pseudo-random data in ``shards`` files, with an index when > 1)."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": [arch],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    if tokenizer:
        (path / "tokenizer.json").write_text(
            json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(64)}}})
        )
        (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    per = max(16, weight_bytes // shards)
    index = {}
    for s in range(shards):
        data = pseudo_random(per - per % 4, seed * 1000 + s)
        name = "model.safetensors" if shards == 1 else f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tname = f"layers.{s}.weight"
        (path / name).write_bytes(safetensors_bytes({tname: ("F32", [len(data) // 4], data)}))
        index[tname] = name
    if shards > 1:
        (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))
    return path


def pseudo_random(n: int, seed: int) -> bytes:
    """n deterministic, incompressible bytes."""
    import random

    return random.Random(seed).randbytes(n)


def sha256sums(path: Path, name: str = "SHA256SUMS") -> Path:
    lines = []
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.name != name):
        lines.append(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.relative_to(path).as_posix()}")
    out = path / name
    out.write_text("\n".join(lines) + "\n")
    return out


def make_archive(src: Path, dest: Path, top: str | None = "model") -> Path:
    """A .tar.gz / .tar / .zip of src's files (under ``top/`` when given)."""
    files = sorted(p for p in src.rglob("*") if p.is_file())
    name = dest.name
    if name.endswith(".zip"):
        with zipfile.ZipFile(dest, "w") as zf:
            for f in files:
                zf.write(f, (f"{top}/" if top else "") + f.relative_to(src).as_posix())
    else:
        mode = "w:gz" if name.endswith((".tar.gz", ".tgz")) else "w"
        with tarfile.open(dest, mode) as tf:
            for f in files:
                tf.add(f, (f"{top}/" if top else "") + f.relative_to(src).as_posix())
    return dest


def tree_digest(path: Path, ignore=(".specpilot-staged.json",)) -> dict[str, str]:
    return {
        p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name not in ignore and ".specpilot-partial" not in p.parts
    }


# ---------------------------------------------------------------- HTTP server
def _hub_oid(rel: str, data: bytes) -> str:
    """The hub's ETag of a file: an LFS file's sha256 (the safetensors here), else its git blob sha1."""
    if rel.endswith(".safetensors"):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _hub_tree(root: Path) -> list[dict]:
    """A repository's recursive tree as the hub's /api/models/<repo>/tree/<rev>?recursive=true lists it."""
    out = []
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        rel, data = f.relative_to(root).as_posix(), f.read_bytes()
        entry = {"type": "file", "path": rel, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
        if rel.endswith(".safetensors"):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        out.append(entry)
    return out


class ModelHTTPServer:
    """Serves ``root`` at ``/files/...`` (HEAD, GET, Range, ETag, optional Repr-Digest) and a fake
    Hugging Face hub for the repositories registered with :meth:`add_hf_repo`.

    Knobs: ``throttle_bps`` (bytes per second per response), ``corrupt`` (relative paths served with
    one byte flipped), ``token`` (require ``Authorization: Bearer <token>``), ``repr_digest`` (publish
    sha256 headers), ``no_ranges``. Counters: ``bytes_sent``, ``requests`` (method, path, range,
    authorization present)."""

    def __init__(
        self,
        root: Path,
        *,
        throttle_bps: int | None = None,
        token: str | None = None,
        repr_digest: bool = False,
    ):
        self.root = Path(root)
        self.throttle_bps = throttle_bps
        self.token = token
        self.repr_digest = repr_digest
        self.no_ranges = False
        self.corrupt: set[str] = set()
        self.hf_repos: dict[str, dict] = {}
        self.bytes_sent = 0
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.port = free_port()
        self.httpd: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def settled_bytes_sent(self, quiet: float = 0.5, timeout: float = 15.0) -> int:
        """``bytes_sent`` once it has not moved for ``quiet`` seconds: a response to a client that was killed
        goes on being written until the server's write fails, one more chunk may still land after the kill."""
        deadline = time.monotonic() + timeout
        last = self.bytes_sent
        while time.monotonic() < deadline:
            time.sleep(quiet)
            if self.bytes_sent == last:
                return last
            last = self.bytes_sent
        return last

    def files_url(self, rel: str = "") -> str:
        return f"{self.url}/files/{rel}"

    def add_hf_repo(self, repo: str, path: Path, sha: str = "0" * 40, revisions=("main",)) -> None:
        self.hf_repos[repo] = {"path": Path(path), "sha": sha, "revisions": set(revisions) | {sha}}

    def start(self) -> "ModelHTTPServer":
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _record(self):
                with server.lock:
                    server.requests.append(
                        {
                            "method": self.command,
                            "path": self.path,
                            "range": self.headers.get("Range"),
                            "authorization": self.headers.get("Authorization") is not None,
                            "host": self.headers.get("Host"),
                        }
                    )

            def _authorized(self):
                if not server.token:
                    return True
                if self.headers.get("Authorization") == f"Bearer {server.token}":
                    return True
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return False

            def do_HEAD(self):
                self._serve(head=True)

            def do_GET(self):
                self._serve(head=False)

            def _serve(self, head):
                self._record()
                path = urllib.parse.urlsplit(self.path).path
                if path.startswith("/redirect/"):
                    target = f"http://localhost:{server.port}/files/" + path[len("/redirect/") :]
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path.startswith("/api/models/"):
                    return self._hf_api(path)
                rel, file = self._resolve(path)
                if file is None or not file.is_file():
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if not path.startswith("/files/") and not self._authorized():
                    return
                data = file.read_bytes()
                if rel in server.corrupt and data:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                start = 0
                rng = self.headers.get("Range")
                status = 200
                if rng and not server.no_ranges and rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0] or 0)
                    status = 206
                body = data[start:]
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Accept-Ranges", "none" if server.no_ranges else "bytes")
                st = file.stat()
                if path.startswith("/files/"):
                    self.send_header("ETag", f'"{st.st_size:x}-{int(st.st_mtime_ns):x}"')
                else:  # the hub's file headers, as huggingface_hub reads them (get_hf_file_metadata)
                    repo = "/".join(path.strip("/").split("/")[:2])
                    self.send_header("ETag", '"%s"' % _hub_oid(rel, file.read_bytes()))
                    self.send_header("X-Repo-Commit", server.hf_repos[repo]["sha"])
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                if server.repr_digest:
                    digest = base64.b64encode(hashlib.sha256(file.read_bytes()).digest()).decode()
                    self.send_header("Repr-Digest", f"sha-256=:{digest}:")
                self.end_headers()
                if head:
                    return
                step = 64 * 1024
                for i in range(0, len(body), step):
                    chunk = body[i : i + step]
                    try:
                        self.wfile.write(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        return
                    with server.lock:
                        server.bytes_sent += len(chunk)
                    if server.throttle_bps:
                        time.sleep(len(chunk) / server.throttle_bps)

            def _resolve(self, path):
                if path.startswith("/files/"):
                    rel = urllib.parse.unquote(path[len("/files/") :])
                    return rel, server.root / rel
                # fake hub: /<org>/<repo>/resolve/<rev>/<file>
                parts = path.strip("/").split("/")
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo = "/".join(parts[:2])
                    info = server.hf_repos.get(repo)
                    rev = urllib.parse.unquote(parts[3])
                    if info and rev in info["revisions"]:
                        rel = urllib.parse.unquote("/".join(parts[4:]))
                        return rel, info["path"] / rel
                return None, None

            def _hf_api(self, path):
                # /api/models/<org>/<repo>[/revision/<rev>], and .../tree/<rev> (the file list
                # huggingface_hub's snapshot_download reads)
                rest = path[len("/api/models/") :].split("/")
                repo = "/".join(rest[:2])
                at_rev = len(rest) >= 4 and rest[2] in ("revision", "tree")
                rev = urllib.parse.unquote(rest[3]) if at_rev else "main"
                info = server.hf_repos.get(repo)
                if info is None or rev not in info["revisions"]:
                    body = json.dumps({"error": "Repository not found"}).encode()
                    self.send_response(404)
                    self.send_header("X-Error-Code", "RepoNotFound" if info is None else "RevisionNotFound")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if not self._authorized():
                    return
                if len(rest) >= 4 and rest[2] == "tree":
                    return self._json(_hub_tree(info["path"]))
                siblings = []
                for f in sorted(p for p in info["path"].rglob("*") if p.is_file()):
                    rel = f.relative_to(info["path"]).as_posix()
                    data = f.read_bytes()
                    sib = {"rfilename": rel, "size": len(data), "blobId": hashlib.sha1(data).hexdigest()}
                    if rel.endswith(".safetensors"):
                        sib["lfs"] = {
                            "sha256": hashlib.sha256(data).hexdigest(),
                            "size": len(data),
                            "pointerSize": 134,
                        }
                    siblings.append(sib)
                body = json.dumps(
                    {
                        "id": repo,
                        "modelId": repo,
                        "sha": info["sha"],
                        "siblings": siblings,
                        "private": False,
                        "tags": [],
                        "downloads": 0,
                        "likes": 0,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, doc):
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, name="model-http", daemon=True).start()
        return self

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------- S3 (moto server)
# Made-up credentials of the throw-away moto server: the tests look for them in outputs and logs
# to prove that no secret value leaks.
S3_KEY = "AKIASPECPILOTTEST0001"
S3_SECRET = "specpilot-test-secret-Zq8w1XvB3nM5"


class MotoS3:
    """``moto_server`` from .venv-staging on 127.0.0.1; :meth:`upload` puts a directory under a
    prefix (through boto3 in that virtualenv, since boto3 cannot live in .venv)."""

    def __init__(self, work: Path):
        self.work = Path(work)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        return (STAGING_VENV / "bin" / "moto_server").exists()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": S3_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def start(self) -> "MotoS3":
        self.work.mkdir(parents=True, exist_ok=True)
        log = open(self.work / "moto.log", "ab")
        self.proc = subprocess.Popen(
            [str(STAGING_VENV / "bin" / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("moto_server exited: " + (self.work / "moto.log").read_text()[-2000:])
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("moto_server did not answer within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def upload(self, src: Path, bucket: str, prefix: str, multipart_threshold: int | None = None) -> None:
        script = (
            "import boto3,sys,os\n"
            "from boto3.s3.transfer import TransferConfig\n"
            "src,bucket,prefix,thr=sys.argv[1:5]\n"
            "s3=boto3.client('s3',endpoint_url=os.environ['AWS_ENDPOINT_URL'])\n"
            "try:\n s3.create_bucket(Bucket=bucket)\nexcept s3.exceptions.BucketAlreadyOwnedByYou:\n pass\n"
            "cfg=TransferConfig(multipart_threshold=int(thr),multipart_chunksize=max(5*1024*1024,int(thr)))\n"
            "for base,dirs,files in os.walk(src):\n"
            " for f in files:\n"
            "  p=os.path.join(base,f); rel=os.path.relpath(p,src)\n"
            "  s3.upload_file(p,bucket,(prefix.rstrip('/')+'/'+rel) if prefix else rel,Config=cfg)\n"
        )
        env = dict(os.environ, **self.env)
        subprocess.run(
            [
                str(STAGING_PYTHON),
                "-c",
                script,
                str(src),
                bucket,
                prefix,
                str(multipart_threshold or 8 * 1024 * 1024 * 1024),
            ],
            check=True,
            env=env,
            timeout=120,
        )

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------- running the program
def run_stager(
    request: dict, work: Path, env: dict | None = None, python: Path | None = None, timeout: float = 300
) -> tuple[int, str, dict | None]:
    """Run stager.py as the Job would (a subprocess with a request file); returns (exit code,
    output, parsed result or error)."""
    work.mkdir(parents=True, exist_ok=True)
    program = work / "program"  # the Job's ConfigMap mount: stager.py and the retry policy beside it
    program.mkdir(exist_ok=True)
    for name, text in program_files().items():
        (program / name).write_text(text)
    req = work / f"request-{time.monotonic_ns()}.json"
    req.write_text(json.dumps(request))
    run_env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "HOME": str(work)}
    site = staging_site_packages()
    if site:
        run_env["PYTHONPATH"] = str(site)
    run_env.update(env or {})
    exe = python or (SYSTEM_PYTHON if SYSTEM_PYTHON.exists() else Path(sys.executable))
    proc = subprocess.run(
        [str(exe), str(program / "stager.py"), "--request", str(req)],
        capture_output=True,
        text=True,
        env=run_env,
        timeout=timeout,
    )
    out = proc.stdout + proc.stderr
    parsed = None
    for line in out.splitlines():
        for prefix in ("SPECPILOT-RESULT ", "SPECPILOT-ERROR "):
            if line.startswith(prefix):
                parsed = json.loads(line[len(prefix) :])
    return proc.returncode, out, parsed


def copy_tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, dirs_exist_ok=True)


# ---------------------------------------------------------------- ansible-playbook against a lab
LAB_GROUP_VARS = ROOT / "inventories" / "lab" / "group_vars" / "specpilot_services.yml"
LAB_DRAFT_VARS = ROOT / "inventories" / "lab" / "host_vars" / "lab-draft.yml"


def modelcar_inputs(root: Path, target_bytes: int, draft_bytes: int) -> Path:
    """A target and a draft model under <root>/m and the lab's busybox base layout under
    <root>/base: what the Modelcar tests build from."""
    from specpilot_lab import registry as lab_registry

    make_model(root / "m" / "target", weight_bytes=target_bytes)
    make_model(root / "m" / "draft", weight_bytes=draft_bytes, layers=1, seed=1)
    lab_registry.build_base_layout(root / "base", tag="busybox")
    return root


def modelcar_params(root: Path, image: str, **kw) -> dict:
    """modelcar.build_push parameters for the models of modelcar_inputs(root)."""
    p = {
        "image": image,
        "base": f"oci:{root / 'base'}:busybox",
        "work_dir": str(root / "work"),
        "tls_verify": False,
        "artifacts": [
            {"role": "target", "subdir": "target", "path": str(root / "m" / "target")},
            {"role": "draft", "subdir": "draft", "path": str(root / "m" / "draft")},
        ],
    }
    p.update(kw)
    return p


def write_inventory(root: Path, hosts: dict[str, dict], group: dict | None = None) -> Path:
    """An inventory like inventories/lab (its group_vars and the lab-draft service as the base of
    every host), with ``group`` merged into the group vars and each host's vars merged in."""
    import yaml

    inv = root / "inventory"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "host_vars").mkdir(parents=True, exist_ok=True)
    base_group = yaml.safe_load(LAB_GROUP_VARS.read_text())
    base_group.update(group or {})
    base_group = {k: v for k, v in base_group.items() if v is not None}  # None: drop that lab default
    (inv / "group_vars" / "specpilot_services.yml").write_text(yaml.safe_dump(base_group))
    draft = yaml.safe_load(LAB_DRAFT_VARS.read_text())
    for name, hv in hosts.items():
        merged = dict(draft)
        for key, value in hv.items():
            if isinstance(value, dict) and isinstance(merged.get(key, base_group.get(key)), dict):
                merged[key] = dict(merged.get(key) or base_group.get(key), **value)
            else:
                merged[key] = value
        (inv / "host_vars" / f"{name}.yml").write_text(yaml.safe_dump(merged))
    (inv / "hosts.yml").write_text(yaml.safe_dump({"specpilot_services": {"hosts": {h: {} for h in hosts}}}))
    return inv


def ansible_env(base: dict | None = None) -> dict[str, str]:
    env = dict(base or os.environ)
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["ANSIBLE_NOCOLOR"] = "1"
    return env


def run_playbook(
    inventory: Path,
    env: dict,
    *args: str,
    playbook: str = "playbooks/stage.yml",
    timeout: float = 600,
    background: bool = False,
):
    cmd = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(inventory),
        str(ROOT / playbook),
        *args,
    ]
    if background:
        return subprocess.Popen(
            cmd,
            cwd=str(ROOT),
            env=ansible_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    return subprocess.run(
        cmd, cwd=str(ROOT), env=ansible_env(env), capture_output=True, text=True, timeout=timeout
    )


def recap(output: str) -> dict[str, dict[str, int]]:
    import re

    out = {}
    for m in re.finditer(
        r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output, re.M
    ):
        out[m.group(1)] = {"ok": int(m.group(2)), "changed": int(m.group(3)), "failed": int(m.group(5))}
    return out


def lab_staging_vars(site_packages: Path | None = None) -> dict:
    """Role variables that make the staging Job work in the lab: the machine's python3 runs it
    (images are not pulled), with .venv-staging's boto3/huggingface_hub on PYTHONPATH through a
    hostPath volume, fast polling, no retries."""
    v = {
        "specpilot_stage_pvc_image": "specpilot-lab/python:3",
        "specpilot_stage_pvc_image_schemes": ["hf", "s3"],  # the lab's Jobs import them from .venv-staging
        "specpilot_stage_pvc_poll_interval": 1,
        "specpilot_stage_pvc_progress_interval": 1,
        "specpilot_stage_pvc_backoff_limit": 0,
    }
    site = site_packages or staging_site_packages()
    if site:
        v["specpilot_stage_pvc_extra_volumes"] = [{"name": "staging-libs", "hostPath": {"path": str(site)}}]
        v["specpilot_stage_pvc_extra_volume_mounts"] = [
            {"name": "staging-libs", "mountPath": "/opt/specpilot-staging", "readOnly": True}
        ]
        v["specpilot_stage_pvc_extra_env"] = [{"name": "PYTHONPATH", "value": "/opt/specpilot-staging"}]
    return v


# ---------------------------------------------------------------- a registry that wants credentials
# Made-up credentials of the throw-away test registry (never a real account): the tests plant them
# and look for them in outputs, logs and files to prove that no secret value leaks.
REGISTRY_USER = "robot"
REGISTRY_PASSWORD = "Reg1stry-Passw0rd-must-not-leak"


def robot_authfile(path: Path, addr: str) -> Path:
    """A containers-auth.json at ``path`` holding the robot's credentials for the registry at ``addr``."""
    token = base64.b64encode(f"{REGISTRY_USER}:{REGISTRY_PASSWORD}".encode()).decode()
    path.write_text(json.dumps({"auths": {addr: {"auth": token}}}))
    return path


def reclaim_by_authfile(reclaim, image: str, authfile: Path) -> dict:
    """modelcar_reclaim's ``reclaim`` of ``image``'s draft with the credentials of ``authfile`` only."""
    return reclaim({"image": image, "draft_subdir": "draft", "tls_verify": False, "authfile": str(authfile)})


def record_skopeo_calls(monkeypatch, skopeo_class) -> list[list[str]]:
    """Every command line ``skopeo_class.run`` (modelcar.Skopeo) runs from now on, in a list."""
    seen = []
    orig = skopeo_class.run

    def run(self, args, *a, **kw):
        seen.append(list(args))
        return orig(self, args, *a, **kw)

    monkeypatch.setattr(skopeo_class, "run", run)
    return seen


def bcrypt_hash(password: str) -> str | None:
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt  # libxcrypt's bcrypt, what docker-registry's htpasswd wants
        h = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))  # cost 4: fast tests
        return h if h and h.startswith("$2") else None
    except (ImportError, AttributeError, OSError):
        return None


class AuthRegistry:
    """Debian's docker-registry on 127.0.0.1 with htpasswd (Basic) authentication."""

    def __init__(self, work: Path):
        self.work = Path(work)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        return bool(shutil.which("docker-registry") and shutil.which("skopeo") and bcrypt_hash("x"))

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def auth_config(self) -> dict:
        """The registry config's ``auth`` section."""
        (self.work / "htpasswd").write_text(f"{REGISTRY_USER}:{bcrypt_hash(REGISTRY_PASSWORD)}\n")
        return {"htpasswd": {"realm": "specpilot-test", "path": str(self.work / "htpasswd")}}

    def start(self) -> "AuthRegistry":
        self.work.mkdir(parents=True, exist_ok=True)
        config = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.work / "data")}},
            "http": {"addr": self.addr},
            "auth": self.auth_config(),
        }
        (self.work / "config.yml").write_text(json.dumps(config))
        log = open(self.work / "registry.log", "ab")
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", str(self.work / "config.yml")],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                urllib.request.build_opener().open(f"http://{self.addr}/v2/", timeout=1)  # not the global opener
            except urllib.error.HTTPError as exc:
                if exc.code == 401:
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            "docker-registry with auth did not start: " + (self.work / "registry.log").read_text()[-1500:]
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class TokenAuthRegistry(AuthRegistry):
    """Debian's docker-registry with token authentication (distribution's ``auth: token``), and the token
    service it sends clients to: a loopback server issuing JWTs (ES256, the signing certificate in the
    ``x5c`` header, trusted through ``rootcertbundle``) as the Docker token specification describes -
    Basic credentials on ``GET /token?service=...&scope=repository:NAME:ACTIONS``; the robot gets every
    action it asks for, an anonymous request a token with no access, wrong credentials 401. What was
    asked is kept in ``requests`` (user or None, scopes); credentials are never stored."""

    SERVICE = "specpilot-test-registry"
    ISSUER = "specpilot-test-token-issuer"

    def __init__(self, work: Path, lifetime: int = 300):
        super().__init__(work)
        self.lifetime = lifetime
        self.requests: list[tuple[str | None, list[str]]] = []
        self.token_port = free_port()
        self._httpd: http.server.ThreadingHTTPServer | None = None

    @staticmethod
    def available() -> bool:
        import importlib.util

        has_crypto = importlib.util.find_spec("cryptography") is not None
        return bool(has_crypto and shutil.which("docker-registry") and shutil.which("skopeo"))

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.token_port}/token"

    def auth_config(self) -> dict:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        import datetime

        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.ISSUER)])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self._x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
        (self.work / "token-ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._serve_tokens()
        return {
            "token": {
                "realm": self.realm,
                "service": self.SERVICE,
                "issuer": self.ISSUER,
                "rootcertbundle": str(self.work / "token-ca.pem"),
            }
        }

    def token(self, user: str | None, scopes: list[str]) -> str:
        """A JWT as distribution's registry/auth/token/token.go verifies it: issuer, audience = service,
        exp/nbf, the access list, an ES256 signature (raw r||s) by the key of the x5c certificate."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        def b64(raw: bytes) -> str:
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

        access = []
        for scope in scopes if user else []:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]})
        now = int(time.time())
        claims = {
            "iss": self.ISSUER,
            "sub": user or "",
            "aud": self.SERVICE,
            "exp": now + self.lifetime,
            "nbf": now - 10,
            "iat": now,
            "jti": os.urandom(8).hex(),
            "access": access,
        }
        header = {"typ": "JWT", "alg": "ES256", "x5c": [self._x5c]}
        signed = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
        r, s = decode_dss_signature(self._key.sign(signed.encode(), ec.ECDSA(hashes.SHA256())))
        return signed + "." + b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def _serve_tokens(self) -> None:
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                user = None
                header = self.headers.get("Authorization") or ""
                if header.startswith("Basic "):
                    given = base64.b64decode(header[6:]).decode("utf-8", "replace")
                    if given != f"{REGISTRY_USER}:{REGISTRY_PASSWORD}":
                        return self._reply(
                            401, {"errors": [{"code": "UNAUTHORIZED", "message": "bad login"}]}
                        )
                    user = REGISTRY_USER
                if url.path != "/token" or query.get("service") != [registry.SERVICE]:
                    return self._reply(
                        400, {"errors": [{"code": "BAD_REQUEST", "message": "no such service"}]}
                    )
                scopes = [s for value in query.get("scope", []) for s in value.split(" ") if s]
                registry.requests.append((user, scopes))
                token = registry.token(user, scopes)
                self._reply(200, {"token": token, "access_token": token, "expires_in": registry.lifetime})

            def _reply(self, code, body):
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.token_port), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        super().stop()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
