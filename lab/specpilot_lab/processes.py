"""The lab's managed processes: a small table of process specs, started and stopped in order.

All state lives under the lab directory (``.lab/`` at the repository root unless
``SPECPILOT_LAB_DIR`` says otherwise)::

    .lab/kubeconfig              kubeconfig for the emulator (context specpilot-lab)
    .lab/run/<name>.pid          pid of each managed process
    .lab/run/<name>.ready        written by the process once it serves (JSON)
    .lab/logs/<name>.log         stdout/stderr of each process
    .lab/apiserver.log           the emulator's own request log
    .lab/podlogs/...             pod logs (see specpilot_lab.podlogs)

Further processes (the lab controller, the OCI registry) are added with :func:`register`
from their own modules; ``up`` starts them in registration order after their ``after``
dependencies, ``down`` stops them in reverse order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LabPaths:
    root: Path

    @classmethod
    def default(cls) -> "LabPaths":
        env = os.environ.get("SPECPILOT_LAB_DIR")
        return cls(Path(env).resolve() if env else REPO_ROOT / ".lab")

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def pid_file(self, name: str) -> Path:
        return self.run / f"{name}.pid"

    def ready_file(self, name: str) -> Path:
        return self.run / f"{name}.ready"

    def log_file(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def ensure(self) -> None:
        for d in (self.root, self.run, self.logs):
            d.mkdir(parents=True, exist_ok=True)


@dataclass
class ProcessSpec:
    """How to run one lab process.

    ``command(paths)`` returns the argv; the process must write ``paths.ready_file(name)``
    (JSON) once it serves.  ``describe(paths, ready_info)`` returns status lines.
    """

    name: str
    command: Callable[[LabPaths], list[str]]
    describe: Callable[[LabPaths, dict], list[str]] = lambda paths, info: []
    env: Callable[[LabPaths], dict[str, str]] = lambda paths: {}
    after: tuple[str, ...] = ()
    ready_timeout: float = 30.0
    enabled: Callable[[], bool] = lambda: True
    signature: str = "specpilot_lab"  # must appear in /proc/PID/cmdline (guards against reused pids)
    extra: dict = field(default_factory=dict)


PROCESSES: list[ProcessSpec] = []


def register(spec: ProcessSpec) -> None:
    """Add (or replace) a managed process."""
    for i, existing in enumerate(PROCESSES):
        if existing.name == spec.name:
            PROCESSES[i] = spec
            return
    PROCESSES.append(spec)


def ordered() -> list[ProcessSpec]:
    done: list[ProcessSpec] = []
    names: set[str] = set()
    pending = [p for p in PROCESSES if p.enabled()]
    while pending:
        progressed = False
        for p in list(pending):
            if all(a in names or a not in {q.name for q in pending} for a in p.after):
                done.append(p)
                names.add(p.name)
                pending.remove(p)
                progressed = True
        if not progressed:
            done.extend(pending)
            break
    return done


# ----------------------------------------------------------------------------- the emulator
def _crd_args() -> list[str]:
    from .apiserver.server import crd_paths_from_env

    paths = crd_paths_from_env(os.environ.get("SPECPILOT_LAB_CRDS"))
    out: list[str] = []
    for p in paths:
        out += ["--crd", p]
    return out


def _apiserver_command(paths: LabPaths) -> list[str]:
    return [
        sys.executable,
        "-m",
        "specpilot_lab.apiserver",
        "--host",
        "127.0.0.1",
        "--port",
        os.environ.get("SPECPILOT_LAB_PORT", "0"),
        "--state-dir",
        str(paths.root),
        "--kubeconfig",
        str(paths.kubeconfig),
        "--ready-file",
        str(paths.ready_file("apiserver")),
        *_crd_args(),
    ]


def _apiserver_describe(paths: LabPaths, info: dict) -> list[str]:
    # the kubeconfig's server is the https:// listener (apiserver/__main__.py writes it)
    return [f"url {info.get('https_url') or info.get('url', '?')}", f"kubeconfig {paths.kubeconfig}"]


register(
    ProcessSpec(
        name="apiserver", command=_apiserver_command, describe=_apiserver_describe, ready_timeout=30.0
    )
)


# ----------------------------------------------------------------------------- process control
def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def running_pid(paths: LabPaths, spec: ProcessSpec) -> int | None:
    """The pid of a running instance of ``spec`` (None when not running; stale pid files removed)."""
    pf = paths.pid_file(spec.name)
    try:
        pid = int(pf.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pid = 0
    except PermissionError:
        pass
    if pid and spec.signature in _cmdline(pid):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(") ", 1)[1].split()[0] == "Z":
                    pid = 0
        except (OSError, IndexError):
            pass
        if pid:
            return pid
    pf.unlink(missing_ok=True)
    return None


def ready_info(paths: LabPaths, spec: ProcessSpec) -> dict:
    try:
        return json.loads(paths.ready_file(spec.name).read_text())
    except (OSError, ValueError):
        return {}


def start(paths: LabPaths, spec: ProcessSpec, out=sys.stdout) -> int:
    pid = running_pid(paths, spec)
    if pid:
        print(f"{spec.name}: already running (pid {pid})", file=out)
        return pid
    paths.ensure()
    ready = paths.ready_file(spec.name)
    ready.unlink(missing_ok=True)
    env = dict(os.environ)
    lab_dir = str(REPO_ROOT / "lab")
    env["PYTHONPATH"] = lab_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(spec.env(paths))
    log = open(paths.log_file(spec.name), "ab")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        spec.command(paths),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=str(REPO_ROOT),
        start_new_session=True,
    )
    log.close()
    paths.pid_file(spec.name).write_text(f"{proc.pid}\n")
    deadline = t0 + spec.ready_timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            paths.pid_file(spec.name).unlink(missing_ok=True)
            tail = paths.log_file(spec.name).read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{spec.name} exited with {code} while starting; log tail:\n{tail}")
        if ready.exists() and ready_info(paths, spec):
            print(f"{spec.name}: started (pid {proc.pid}, ready in {time.monotonic() - t0:.2f}s)", file=out)
            return proc.pid
        time.sleep(0.05)
    stop(paths, spec, out=open(os.devnull, "w"))
    raise RuntimeError(f"{spec.name} not ready within {spec.ready_timeout}s; see {paths.log_file(spec.name)}")


def stop(paths: LabPaths, spec: ProcessSpec, out=sys.stdout, timeout: float = 10.0) -> bool:
    pid = running_pid(paths, spec)
    if not pid:
        print(f"{spec.name}: not running", file=out)
        paths.ready_file(spec.name).unlink(missing_ok=True)
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            break
        time.sleep(0.05)
    else:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    paths.pid_file(spec.name).unlink(missing_ok=True)
    paths.ready_file(spec.name).unlink(missing_ok=True)
    print(f"{spec.name}: stopped (pid {pid})", file=out)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# ----------------------------------------------------------------------------- beside the emulator
from . import lab_processes as _lab_processes  # noqa: E402,F401  (registers the OCI registry and the lab controller)
