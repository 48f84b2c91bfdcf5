"""Run the emulator: in-process (:func:`start`) or as a process (``python -m specpilot_lab.apiserver``)."""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from pathlib import Path
from typing import Iterable

import yaml

from .auth import ADMIN_TOKEN
from . import tls
from .core import Cluster
from .handler import APIServer

CONTEXT = "specpilot-lab"
TOKEN = ADMIN_TOKEN  # the lab admin's token (system:masters, see auth.py)


def default_crd_dir() -> Path:
    """The lab's own KServe CRDs (``lab/crds`` in the repository)."""
    return Path(__file__).resolve().parents[2] / "crds"


def crd_paths_from_env(value: str | None) -> list[str]:
    """SPECPILOT_LAB_CRDS: files or directories separated by ':' or ','."""
    if not value:
        return []
    out = []
    for part in value.replace(",", os.pathsep).split(os.pathsep):
        if part.strip():
            out.append(part.strip())
    return out


def kubeconfig_dict(
    url: str,
    namespace: str = "default",
    token: str = TOKEN,
    user: str = CONTEXT,
    ca_file: str | os.PathLike | None = None,
) -> dict:
    """A kubeconfig for ``url``: the lab admin by default, or ``token`` (e.g. a ServiceAccount's);
    ``ca_file`` (the emulator's certificate) goes in as certificate-authority-data."""
    cluster: dict = {"server": url}
    if ca_file:
        cluster["certificate-authority-data"] = base64.b64encode(Path(ca_file).read_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user, "namespace": namespace}}
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(
    path: str | os.PathLike,
    url: str,
    namespace: str = "default",
    token: str = TOKEN,
    user: str = CONTEXT,
    ca_file: str | os.PathLike | None = None,
) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(yaml.safe_dump(kubeconfig_dict(url, namespace, token, user, ca_file), sort_keys=False))
    os.chmod(tmp, 0o600)
    os.replace(tmp, p)
    return p


def write_ready_file(path: str | os.PathLike, info: dict) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(info) + "\n")
    os.replace(tmp, p)


class RunningServer:
    """An emulator serving from a background thread (tests, embedding)."""

    def __init__(self, server: APIServer):
        self.server = server
        self.thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="apiserver", daemon=True
        )

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def cluster(self) -> Cluster:
        return self.server.cluster

    def start(self) -> "RunningServer":
        self.thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build(
    state_dir: str | os.PathLike,
    crds: Iterable[str | os.PathLike] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    watch_history: int = 4096,
) -> APIServer:
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    crd_list = list(crds) if crds is not None else [default_crd_dir()]
    cluster = Cluster(state, crd_list, watch_history=watch_history)
    cert, key = tls.self_signed(state, [host, "127.0.0.1"])
    server = APIServer(cluster, host, port, tls.server_context(cert, key))
    server.ca_file = cert
    return server


def start(
    state_dir: str | os.PathLike,
    crds: Iterable[str | os.PathLike] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> RunningServer:
    """Build and start an emulator on a background thread."""
    return RunningServer(build(state_dir, crds, host, port)).start()


def configure_logging(state_dir: Path, level: str = "INFO") -> None:
    """Request and error log at STATE_DIR/apiserver.log (rotated at 20 MB, 3 kept)."""
    from logging.handlers import RotatingFileHandler

    handler = RotatingFileHandler(state_dir / "apiserver.log", maxBytes=20 * 1024 * 1024, backupCount=3)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("specpilot_lab")
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
