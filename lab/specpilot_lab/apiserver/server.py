"""Run the emulator: in-process (:func:`start`) or as a process (``python -m specpilot_lab.apiserver``)."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Iterable

import yaml

from .core import Cluster
from .handler import APIServer

CONTEXT = "specpilot-lab"
TOKEN = "specpilot-lab-token"  # the emulator accepts any token; kubeconfig needs one


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


def kubeconfig_dict(url: str, namespace: str = "default") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {"token": TOKEN}}],
        "contexts": [
            {"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: str | os.PathLike, url: str, namespace: str = "default") -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(yaml.safe_dump(kubeconfig_dict(url, namespace), sort_keys=False))
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
    return APIServer(cluster, host, port)


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
