"""Start and stop throw-away emulators for tests, and the pytest fixtures built on them.

Use from a conftest.py::

    from specpilot_lab.testing import emulator, emulator_upstream, emulator_any, fresh_emulator  # noqa: F401

Every fixture yields an :class:`Emulator`, which unpacks as ``url, kubeconfig, control`` and
carries more: ``state_dir``, ``env`` (KUBECONFIG, TMPDIR and HOME pointing into the emulator's
own directory, for kubectl / ansible subprocesses), ``api_client()`` for the kubernetes client.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from .apiserver.auth import ADMIN_TOKEN
from .apiserver.control import ControlClient

REPO_ROOT = Path(__file__).resolve().parents[2]
LAB_CRDS = REPO_ROOT / "lab" / "crds"
UPSTREAM_CRDS = REPO_ROOT.parent / "shared" / "reference" / "kserve-crds" / "v0.20.0"


class EmulatorError(RuntimeError):
    pass


class Response:
    """A raw HTTP response: ``status``, ``headers`` (list of pairs), ``body`` bytes, ``json()``."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def header_all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self):
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def __repr__(self) -> str:
        return f"Response({self.status}, {self.body[:300]!r})"


class Emulator:
    """A running emulator process with its own state directory."""

    def __init__(
        self,
        state_dir: str | os.PathLike,
        crds: list[str | os.PathLike] | None = None,
        name: str = "emulator",
        extra_args: list[str] | None = None,
    ):
        self.state_dir = Path(state_dir)
        self.extra_args = list(extra_args or [])
        self.crds = [str(c) for c in crds] if crds is not None else None
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.port = 0
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.control: ControlClient | None = None
        self.startup_seconds = 0.0

    # a 3-tuple for tests that just want the basics
    def __iter__(self) -> Iterator:
        return iter((self.url, self.kubeconfig, self.control))

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, ansible) isolated to this emulator."""
        env = dict(os.environ)
        tmp = self.state_dir / "tmp"
        home = self.state_dir / "home"
        tmp.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)
        env.update(
            {
                "KUBECONFIG": str(self.kubeconfig),
                "TMPDIR": str(tmp),
                "HOME": str(home),
                "KUBECACHEDIR": str(home / ".kube" / "cache"),
            }
        )
        return env

    def start(self, timeout: float = 20.0) -> "Emulator":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ready = self.state_dir / "apiserver.ready"
        if ready.exists():
            ready.unlink()
        cmd = [
            sys.executable,
            "-m",
            "specpilot_lab.apiserver",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--state-dir",
            str(self.state_dir),
            "--kubeconfig",
            str(self.kubeconfig),
            "--ready-file",
            str(ready),
        ]
        if self.crds is not None:
            if not self.crds:
                cmd.append("--no-crds")
            for c in self.crds:
                cmd += ["--crd", c]
        cmd += self.extra_args
        env = dict(os.environ)
        lab = str(REPO_ROOT / "lab")
        env["PYTHONPATH"] = lab + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        if self.crds is not None:
            env.pop("SPECPILOT_LAB_CRDS", None)
        out = open(self.state_dir / "apiserver.out", "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(REPO_ROOT), start_new_session=True
        )
        out.close()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EmulatorError(f"emulator exited with {self.proc.returncode}:\n{self.output()}")
            if ready.exists():
                try:
                    info = json.loads(ready.read_text())
                except ValueError:
                    time.sleep(0.02)
                    continue
                self.port = int(info["port"])
                self.url = info["url"]
                break
            time.sleep(0.02)
        else:
            self.stop()
            raise EmulatorError(f"emulator not ready within {timeout}s:\n{self.output()}")
        self.startup_seconds = time.monotonic() - t0
        self.control = ControlClient(self.url)
        with urllib.request.urlopen(self.url + "/readyz", timeout=5) as resp:
            resp.read()
        return self

    def output(self) -> str:
        try:
            return (self.state_dir / "apiserver.out").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def rss_kib(self) -> int:
        """Resident memory of the emulator process (KiB)."""
        if not self.proc:
            return 0
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

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
        self.proc = None

    def request(
        self,
        method: str,
        path: str,
        body=None,
        content_type: str = "application/json",
        accept: str = "application/json",
        headers: dict | None = None,
        timeout: float = 30.0,
        token: str | None = ADMIN_TOKEN,
    ) -> "Response":
        """One raw HTTP request as the lab admin (``token``; None: anonymous); ``body`` may be bytes,
        str, or JSON-able data."""
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = {
            "Accept": accept,
            **({"Authorization": f"Bearer {token}"} if token else {}),
            **(headers or {}),
        }
        data = None
        if body is not None:
            data = (
                body
                if isinstance(body, bytes)
                else body.encode() if isinstance(body, str) else json.dumps(body).encode()
            )
            hdrs["Content-Type"] = content_type
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return Response(resp.status, resp.getheaders(), resp.read())
        finally:
            conn.close()

    def api_client(self):
        """A kubernetes.client.ApiClient for this emulator."""
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        return client.ApiClient(cfg)

    def dynamic_client(self):
        from kubernetes import dynamic

        return dynamic.DynamicClient(self.api_client())

    def __enter__(self) -> "Emulator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def default_crds() -> list[str]:
    """The CRDs the default fixtures load: $SPECPILOT_LAB_CRDS when set (e.g. the upstream ones), else lab/crds."""
    from .apiserver.server import crd_paths_from_env

    return crd_paths_from_env(os.environ.get("SPECPILOT_LAB_CRDS")) or [str(LAB_CRDS)]


def lab_crds_present() -> bool:
    return any(LAB_CRDS.glob("*.yaml"))


def start_emulator(
    state_dir: str | os.PathLike | None = None, crds: list | None = None, timeout: float = 20.0
) -> Emulator:
    """Start an emulator in ``state_dir`` (a new temp dir by default) with ``crds`` (default: lab/crds)."""
    if state_dir is None:
        state_dir = tempfile.mkdtemp(prefix="specpilot-emulator-")
    return Emulator(state_dir, crds if crds is not None else default_crds()).start(timeout)


# ----------------------------------------------------------------------------- pytest fixtures
try:
    import pytest
except ImportError:  # pragma: no cover - the fixtures are only for pytest users
    pytest = None  # type: ignore[assignment]


if pytest is not None:

    def _run(tmp_path_factory, name: str, crds: list) -> Iterator[Emulator]:
        state = tmp_path_factory.mktemp(name)
        emu = Emulator(state, crds, name).start()
        try:
            yield emu
        finally:
            emu.stop()

    @pytest.fixture(scope="module")
    def emulator_factory(tmp_path_factory) -> Iterator:
        """A function ``factory(crds=None, name=..., extra_args=None) -> Emulator`` (default CRDs:
        lab/crds or $SPECPILOT_LAB_CRDS; ``[]`` for none; ``extra_args`` go to the server's command
        line, e.g. ``["--watch-history", "50"]``); every emulator it started stops at the end of the
        module."""
        started: list[Emulator] = []

        def factory(
            crds: list | None = None, name: str = "emulator", extra_args: list[str] | None = None
        ) -> Emulator:
            state = tmp_path_factory.mktemp(name)
            emu = Emulator(
                state, [str(c) for c in crds] if crds is not None else default_crds(), name, extra_args
            )
            started.append(emu)
            return emu.start()

        try:
            yield factory
        finally:
            for emu in started:
                emu.stop()

    @pytest.fixture(scope="module")
    def emulator(tmp_path_factory) -> Iterator[Emulator]:
        """An emulator with the lab's own CRDs (lab/crds, or $SPECPILOT_LAB_CRDS), one per test module."""
        yield from _run(tmp_path_factory, "emulator", default_crds())

    @pytest.fixture(scope="module")
    def emulator_upstream(tmp_path_factory) -> Iterator[Emulator]:
        """An emulator with the upstream KServe v0.20.0 CRDs (skipped where they are absent)."""
        if not UPSTREAM_CRDS.is_dir():
            pytest.skip(
                f"upstream KServe CRDs not found at {UPSTREAM_CRDS} (they sit beside the checkout "
                "in CI); skipping the upstream-CRD variant"
            )
        yield from _run(tmp_path_factory, "emulator-upstream", [str(UPSTREAM_CRDS)])

    @pytest.fixture(scope="module", params=["lab-crds", "upstream-v0.20.0"])
    def emulator_any(request, tmp_path_factory) -> Iterator[Emulator]:
        """Parametrised: once with lab/crds, once with the upstream v0.20.0 CRDs."""
        if request.param == "upstream-v0.20.0":
            if not UPSTREAM_CRDS.is_dir():
                pytest.skip(
                    f"upstream KServe CRDs not found at {UPSTREAM_CRDS} (they sit beside the "
                    "checkout in CI); skipping the upstream-CRD variant"
                )
            crds = [str(UPSTREAM_CRDS)]
        else:
            if not lab_crds_present():
                pytest.skip(f"no lab CRDs in {LAB_CRDS}")
            crds = [str(LAB_CRDS)]
        yield from _run(tmp_path_factory, f"emulator-{request.param}", crds)

    @pytest.fixture
    def fresh_emulator(tmp_path) -> Iterator[Emulator]:
        """A new emulator (lab CRDs, or $SPECPILOT_LAB_CRDS) for one test."""
        emu = Emulator(tmp_path / "emulator", default_crds()).start()
        try:
            yield emu
        finally:
            emu.stop()

    @pytest.fixture
    def bare_emulator(tmp_path) -> Iterator[Emulator]:
        """A new emulator without any CRDs, for one test."""
        emu = Emulator(tmp_path / "emulator", []).start()
        try:
            yield emu
        finally:
            emu.stop()
