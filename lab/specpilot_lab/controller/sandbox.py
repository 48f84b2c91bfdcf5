"""A predictor pod's engine in the pod's filesystem: the engine process runs under bubblewrap, as
Job pods do (jobs.py), so the container's args and env reach it unchanged.

What the engine sees (its mount namespace):

- the pod's volumes at the kserve-container's mountPaths: the models PVC at ``/mnt/models`` (its
  ``subPath``, ``readOnly``), a storageUris PVC at its own mountPath, emptyDirs (``medium: Memory``,
  the runtime's ``/dev/shm``, as a tmpfs), configMaps, secrets, hostPaths; a Modelcar image's
  ``/models`` at its mount path, over the shared emptyDir that KServe mounts at the parent (on a
  cluster the modelcar sidecar links it there);
- ``/tmp`` (the container's own, under the lab's run directory), ``HOME=/root`` (likewise), with
  vLLM's model-inspection cache (``~/.cache/vllm/modelinfos``) shared between engines as on one
  node (engine.MODELINFO_CACHE);
- the "image": this machine's ``/usr``, ``/etc``, ``/opt``, ``/sys`` read-only, and the engine's
  interpreter at the path it has here (a virtualenv and the Python it was made from; a wrapper
  script - the lab's stand-in engines - with the files it names), read-only;
- private ``/proc``, ``/dev``, pid, ipc and uts namespaces (hostname: the pod's name); the network
  is this machine's: the engine listens on a 127.0.0.1 port that the controller proxies to.

The environment is the container's (``env``, ``envFrom``) over a small base: ``PATH`` (the
interpreter's directory first), ``HOME``, ``HOSTNAME``, offline Hugging Face, no usage stats, and
``VLLM_CPU_KVCACHE_SPACE`` 1 and ``VLLM_LOG_STATS_INTERVAL`` 1 (stats logged every second, not every 10)
unless the container sets them.

What is still rewritten, and only that (mapping.engine_argv, mapping.engine_args): the interpreter
(``.venv-vllm/bin/python``, running the entry point the container names: ``vllm serve``, or the
module path), ``--host 127.0.0.1`` and the port.
Model paths and ``--speculative-config`` never are.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .. import engine
from .jobs import DEFAULT_PATH, VolumeError, bwrap_base

HOME = "/root"
# bwrap_base binds these (read-only): nothing under them needs exposing
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/sys", "/proc", "/dev")
PASS_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
# VLLM_LOG_STATS_INTERVAL: vLLM 0.32 logs its stats, the SpecDecoding metrics lines among them, every that many
# seconds (vllm/envs.py: default 10; vllm/entrypoints/launchers/utils/server_utils.py lifespan, _force_log), and
# only when the engine was busy. smoke.yml waits after its probes until the log holds the drafts /metrics counted
# (roles/specpilot_smoke/tasks/log_window.yml): at 10 s that wait was up to 10 s a smoke check of every real
# engine in the lab; at 1 s, as often as the stand-in engine logs (fake_engine.py, FAKE_LOG_INTERVAL), about 1 s.
BASE_ENV = dict(engine.OFFLINE_ENV, VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOG_STATS_INTERVAL="1")
_SCRIPT_PATH = re.compile(r"(?<![\w$./-])(/[\w.+@%=:,/-]+)")


@dataclass
class Bind:
    """One mount of the sandbox: src at dest (src None: a tmpfs)."""

    dest: str
    src: Path | None
    read_only: bool = False


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _venv_home(venv: Path) -> Path | None:
    try:
        for line in (venv / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                return Path(value.strip())
    except OSError:
        pass
    return None


def runtime_paths(exe: Path) -> list[Path]:
    """What the engine's interpreter needs to run at the path it has on this machine: a
    virtualenv's python -> the virtualenv and the Python installation it was made from; another
    python -> its installation; a script (``#!``: the lab's stand-in engines, see
    engine.fake_engine_python) -> the script and, in turn, the absolute paths of files it names.
    Paths under the system directories are left out (the sandbox has those)."""
    out: list[Path] = []
    seen: set[str] = set()

    def add(p: Path) -> None:
        if str(p) not in seen and not _under(os.path.realpath(p), SYSTEM_DIRS):
            seen.add(str(p))
            out.append(p)

    def visit(p: Path, depth: int) -> None:
        if depth > 3 or not p.is_absolute() or not p.exists() or p.is_dir():
            return
        venv = p.parent.parent
        if p.parent.name == "bin" and (venv / "pyvenv.cfg").is_file():
            add(venv)
            home = _venv_home(venv)
            if home is not None and home.name == "bin":
                add(home.parent)
            real = Path(os.path.realpath(p))
            if real.parent.name == "bin":
                add(real.parent.parent)
            return
        try:
            with open(p, "rb") as fh:
                head = fh.read(65536)
        except OSError:
            return
        if head.startswith(b"#!"):
            add(p)
            for word in _SCRIPT_PATH.findall(head.decode("utf-8", "replace")):
                visit(Path(word), depth + 1)
            return
        real = Path(os.path.realpath(p))
        if real.parent.name == "bin":  # an interpreter outside a virtualenv: its installation
            add(real.parent.parent)
        else:
            add(p)

    visit(Path(exe), 0)
    return out


def expose_args(paths: list[Path]) -> list[str]:
    """bwrap arguments that make each path resolve in the sandbox as it does here, read-only: the
    symlinks on the way recreated (``.venv-vllm`` may be a link to another checkout's), the real
    file or directory bound at its real path."""
    args: list[str] = []
    bound: list[str] = []
    links: set[str] = set()

    def expose(path: Path, depth: int = 0) -> None:
        if depth > 16:
            return
        parts = Path(os.path.normpath(path)).parts
        cur = Path("/")
        for i, part in enumerate(parts[1:], 1):
            nxt = cur / part
            if _under(str(nxt), SYSTEM_DIRS) or _under(str(nxt), bound):
                return  # there already
            if nxt.is_symlink():
                target = os.readlink(nxt)
                if str(nxt) not in links:
                    links.add(str(nxt))
                    args.extend(["--symlink", target, str(nxt)])
                expose(Path(os.path.normpath(cur / target)).joinpath(*parts[i + 1 :]), depth + 1)
                return
            cur = nxt
        if cur.exists():
            bound.append(str(cur))
            args.extend(["--ro-bind", str(cur), str(cur)])

    for p in paths:
        expose(Path(p))
    return args


def is_memory(volume: dict) -> bool:
    return (volume.get("emptyDir") or {}).get("medium") == "Memory"


def volume_binds(
    pod: dict, container: dict, volumes: dict[str, Path], models: dict[str, Path]
) -> list[Bind]:
    """The container's volumeMounts (volumes: name -> directory here, from jobs.pod_volumes; an
    emptyDir of medium Memory becomes a tmpfs), then models: mount path -> directory (a Modelcar's
    unpacked /models). Parents before children, so a Modelcar's files land in its emptyDir."""
    specs = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    binds: list[Bind] = []
    for vm in container.get("volumeMounts") or []:
        name, dest = vm.get("name"), vm.get("mountPath", "")
        spec = specs.get(name)
        if spec is None:
            raise VolumeError(f'volumeMount {dest}: volume "{name}" not found')
        if is_memory(spec):
            binds.append(Bind(dest, None))
            continue
        src = volumes.get(name)
        if src is None:
            raise VolumeError(f'volumeMount {dest}: volume "{name}" not found')
        if vm.get("subPath"):
            src = src / vm["subPath"]
            src.mkdir(parents=True, exist_ok=True)  # as the kubelet does
        binds.append(Bind(dest, src, bool(vm.get("readOnly"))))
    for dest, src in models.items():
        binds.append(Bind(dest, src, True))
    binds.sort(key=lambda b: len(Path(b.dest).parts))  # stable: the container's order otherwise
    return binds


def engine_env(container_env: dict[str, str], hostname: str, interpreter: Path) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.update(BASE_ENV)
    env.update(
        {"PATH": f"{Path(interpreter).parent}:{DEFAULT_PATH}", "HOME": HOME, "HOSTNAME": hostname}
    )
    env.update(container_env)
    return env


def engine_command(
    *,
    hostname: str,
    run_dir: Path,
    interpreter: Path,
    binds: list[Bind],
    env: dict[str, str],
    working_dir: str | None = None,
) -> list[str]:
    """The bwrap argv up to and including ``--``: append the engine's command and args."""
    tmp, home = run_dir / "container-tmp", run_dir / "home"
    cache = home / ".cache" / "vllm" / "modelinfos"
    for d in (tmp, cache):
        d.mkdir(parents=True, exist_ok=True)
    engine.MODELINFO_CACHE.mkdir(parents=True, exist_ok=True)
    cmd = bwrap_base(hostname, [b.dest for b in binds], new_session=False)
    cmd += ["--bind", str(tmp), "/tmp", "--bind", str(home), HOME, "--ro-bind", "/sys", "/sys"]
    cmd += ["--bind", str(engine.MODELINFO_CACHE), f"{HOME}/.cache/vllm/modelinfos"]
    for b in binds:
        if b.src is None:
            cmd += ["--tmpfs", b.dest]
        else:
            cmd += ["--ro-bind" if b.read_only else "--bind", str(b.src), b.dest]
    # the "image" last: a pod volume at /tmp or /home (KServe's LLMInferenceService templates mount
    # emptyDirs there) must not hide the engine's interpreter, which may live under them here
    cmd += expose_args(runtime_paths(Path(interpreter)))
    cmd += ["--chdir", working_dir or "/", "--clearenv"]
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    return cmd + ["--"]
