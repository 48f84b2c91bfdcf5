"""One predictor pod on this machine: pull its modelcars, run its vLLM engine, restart it
with back-off when it exits (restartPolicy Always), and report what a kubelet would."""

from __future__ import annotations

import collections
import logging
import shutil
import threading
import time
from pathlib import Path

from .. import podexec, podlogs, registry
from ..engine import Engine, error_summary
from . import cpus, kserve, sandbox
from .jobs import VolumeError, bwrap_problem, pod_volumes
from .kube import now
from .mapping import CommandError, engine_argv, engine_args

log = logging.getLogger("specpilot_lab.controller")


class PredictorRun:
    """State of one predictor pod's kserve-container. Written by its own thread, read by the
    reconciler (under self.lock)."""

    def __init__(
        self,
        ctl,
        namespace: str,
        name: str,
        isvc: str,
        template_hash: str,
        pod: dict,
        mounts: list[kserve.Mount],
        container_name: str = kserve.CONTAINER,
        owner_kind: str = "isvc",
    ):
        self.ctl = ctl
        self.namespace = namespace
        self.name = name
        self.isvc = isvc  # the owner's name: an InferenceService, or an LLMInferenceService (owner_kind)
        self.owner_kind = owner_kind  # the reconcile key's kind: "isvc" or "llmisvc"
        self.container_name = container_name  # kserve-container, or an LLMInferenceService workload's main
        self.deployment = kserve.predictor_service_name(isvc)  # the canary's, when it is one
        self.hash = template_hash
        self.pod = pod  # the Pod object as created (uid, spec)
        self.mounts = mounts
        self.container = next(c for c in pod["spec"]["containers"] if c["name"] == container_name)
        self.run_dir = ctl.state_dir / "engines" / namespace / name
        self.cpu_key = f"{namespace}/{name}"
        self.port = 0
        self.lock = threading.RLock()
        self.scheduled = False
        self.unschedulable: str | None = None  # FailedScheduling message while Pending
        self.phase = "Pending"
        self.state: dict = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict = {}
        self.ready = False
        self.restart_count = 0
        self.started_once = False
        self.start_time: str | None = None
        self.init_done = False
        self.error: str = ""  # the engine's own account of its last exit
        self.deleted = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._engine: Engine | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=400)
        self.peak_rss = 0

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        with self.lock:
            self.scheduled = True
            self.unschedulable = None
            self.start_time = self.start_time or now()
        self._thread = threading.Thread(
            target=self._main, name=f"pod-{self.namespace}-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Kill the engine (SIGTERM, then SIGKILL) and end the thread."""
        self._stop.set()
        eng = self._engine
        if eng is not None:
            eng.stop(timeout=timeout)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout + 10)
        with self.lock:
            self.ready = False

    def cleanup(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def notify(self) -> None:
        self.ctl.enqueue((self.owner_kind, self.namespace, self.isvc))

    def event(self, type_: str, reason: str, message: str) -> None:
        self.ctl.recorder.event(
            self.pod, type_, reason, message, "kubelet", field_path=f"spec.containers{{{self.container_name}}}"
        )

    # ---------------------------------------------------------------- the kubelet's job
    def _main(self) -> None:
        try:
            mounts = self._prepare_storage()
            if mounts is None:
                return
            self._run_loop(mounts)
        except Exception as exc:  # a bug here must show, not hang the pod silently
            log.exception("pod %s/%s", self.namespace, self.name)
            with self.lock:
                self.state = {"waiting": {"reason": "CreateContainerError", "message": f"lab: {exc}"}}
            self.notify()

    def _prepare_storage(self) -> dict[str, Path] | None:
        """Pull the OCI images (modelcars): their mount path -> their unpacked /models. PVCs are
        among the pod's volumes (sandbox.volume_binds)."""
        local: dict[str, Path] = {}
        attempt = 0
        for m in self.mounts:
            if m.kind == "pvc":
                continue
            elif m.kind == "oci":
                while not self._stop.is_set():
                    self.event("Normal", "Pulling", f'Pulling image "{m.image}"')
                    t0 = time.monotonic()
                    try:
                        local[m.mount_path] = self.ctl.pull_modelcar(m.image)
                        self.event(
                            "Normal",
                            "Pulled",
                            f'Successfully pulled image "{m.image}" in ' f"{time.monotonic() - t0:.3f}s",
                        )
                        break
                    except registry.RegistryError as exc:
                        attempt += 1
                        msg = f'Failed to pull image "{m.image}": {exc}'
                        self.event("Warning", "Failed", msg)
                        with self.lock:
                            self.state = {
                                "waiting": {
                                    "reason": "ErrImagePull" if attempt == 1 else "ImagePullBackOff",
                                    "message": msg,
                                }
                            }
                        self.notify()
                        if self._stop.wait(min(10 * 2 ** (attempt - 1), 300)):
                            return None
            else:
                msg = (
                    f"lab: storage {m.uri!r} is not supported: the lab has no network; use pvc:// or oci:// "
                    "from the lab registry"
                )
                with self.lock:
                    self.state = {"waiting": {"reason": "Init:Error", "message": msg}}
                self.event("Warning", "Failed", msg)
                self.notify()
                return None
        with self.lock:
            self.init_done = True
        return local

    def _fail_start(self, reason: str, msg: str) -> None:
        with self.lock:
            self.state = {"waiting": {"reason": reason, "message": msg}}
        self.event("Warning", "Failed", f"Error: {msg}")
        self.notify()

    def _run_loop(self, models: dict[str, Path]) -> None:
        """Run the engine in the pod's filesystem (sandbox.py) with the container's args, restarting
        it with back-off. models: a Modelcar's mount path -> its unpacked /models."""
        writer = podlogs.PodLogWriter(self.ctl.podlogs_dir, self.namespace, self.name, self.container_name)
        # the pod's cores for its life, as a kubelet's CPU manager gives them (cpus.py)
        cpuset = self.ctl.cpus.allocate(self.cpu_key, cpus.requested_cores(self.container))
        try:
            while not self._stop.is_set():
                env = self.ctl.container_env(self.namespace, self.pod, self.container)
                try:
                    prefix, args = engine_argv(self.container, self.ctl.vllm_python, env)
                except CommandError as exc:
                    self._fail_start("CreateContainerError", str(exc))
                    return
                if not self.ctl.vllm_python.exists():
                    msg = f"lab: {self.ctl.vllm_python} not found: the lab's engine is not installed"
                    msg += " (make vllm)"
                    self._fail_start("CreateContainerError", msg)
                    return
                problem = bwrap_problem()
                if problem:
                    self._fail_start("CreateContainerError", f"lab: {problem}")
                    return
                try:
                    volumes = pod_volumes(
                        self.ctl, self.namespace, self.pod, self.run_dir / "volumes", skip=sandbox.is_memory
                    )
                    binds = sandbox.volume_binds(self.pod, self.container, volumes, models)
                except VolumeError as exc:
                    msg = f"MountVolume.SetUp failed: {exc}"
                    with self.lock:
                        self.state = {"waiting": {"reason": "ContainerCreating", "message": msg}}
                    self.event("Warning", "FailedMount", msg)
                    self.notify()
                    if self._stop.wait(10):
                        return
                    continue
                if self.restart_count > 0:
                    writer.rotate()
                if not self.port:
                    from ..engine import free_port

                    self.port = free_port()
                args = engine_args(args, self.port)
                # a fresh container: its own /tmp and HOME (emptyDirs and PVCs keep their data)
                for d in ("container-tmp", "home"):
                    shutil.rmtree(self.run_dir / d, ignore_errors=True)
                container_env = sandbox.engine_env(env, self.name, self.ctl.vllm_python)
                container_env.update(cpuset.env(container_env))
                command = sandbox.engine_command(
                    hostname=self.name,
                    run_dir=self.run_dir,
                    interpreter=self.ctl.vllm_python,
                    binds=binds,
                    env=container_env,
                    working_dir=self.container.get("workingDir"),
                )
                self._tail.clear()

                def sink(line: str, w=writer) -> None:
                    self._tail.append(line)
                    w.write_line(line)

                eng = Engine(
                    args,
                    self.run_dir,
                    port=self.port,
                    command=cpuset.taskset() + command + prefix,
                    line_sink=sink,
                    sandboxed=True,
                )
                image = self.container.get("image", "")
                if not self.started_once:
                    self.event("Normal", "Pulled", f'Container image "{image}" already present on machine')
                self.event("Normal", "Created", f"Created container: {self.container_name}")
                started = now()
                self._engine = eng
                eng.start()
                (self.run_dir / "engine.pid").write_text(f"{eng.proc.pid}\n")
                # kubectl exec / k8s_exec run in this sandbox's namespaces (the pid of its first
                # process), or a fresh one from its argv, while the container runs (podexec.py)
                podexec.publish(
                    self.ctl.podlogs_dir,
                    self.namespace,
                    self.name,
                    self.container_name,
                    command,
                    pid=podexec.sandbox_init(eng.proc.pid),
                    env=container_env,
                    workdir=self.container.get("workingDir") or "/",
                )
                with self.lock:
                    self.phase = "Running"
                    self.started_once = True
                    self.state = {"running": {"startedAt": started}}
                self.event("Normal", "Started", f"Started container {self.container_name}")
                self.notify()
                while eng.alive() and not self._stop.is_set():
                    if not self.ready and eng.healthy(timeout=1.0):
                        with self.lock:
                            self.ready = True
                        self.notify()
                    self.peak_rss = max(self.peak_rss, eng.peak_rss)
                    self._stop.wait(0.5)
                podexec.withdraw(self.ctl.podlogs_dir, self.namespace, self.name, self.container_name)
                if self._stop.is_set():
                    eng.stop()
                    return
                code = eng.wait(5)
                code = eng.returncode if code is None else code
                eng.stop()
                writer.flush_partial()
                self.error = error_summary("\n".join(self._tail))
                finished = now()
                terminated = {
                    "exitCode": code if code is not None else -1,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": started,
                    "finishedAt": finished,
                    "containerID": f"lab://{eng.proc.pid if eng.proc else 0}",
                }
                if self.error:
                    terminated["message"] = self.error
                # keep the crashed instance readable as --previous too, until the next start
                cur = podlogs.log_path(self.ctl.podlogs_dir, self.namespace, self.name, self.container_name)
                try:
                    shutil.copyfile(cur, cur.with_name(podlogs.PREVIOUS))
                except OSError:
                    pass
                delay = min(self.ctl.crash_backoff * 2**self.restart_count, 300)
                with self.lock:
                    self.ready = False
                    self.restart_count += 1
                    self.last_state = {"terminated": terminated}
                    uid = self.pod["metadata"].get("uid", "")
                    self.state = {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": f"back-off {int(delay)}s restarting failed container="
                            f"{self.container_name} pod={self.name}_{self.namespace}({uid})",
                        }
                    }
                self.event(
                    "Warning",
                    "BackOff",
                    f"Back-off restarting failed container {self.container_name} in pod "
                    f"{self.name}_{self.namespace}({self.pod['metadata'].get('uid', '')})",
                )
                self.notify()
                if self._stop.wait(delay):
                    return
        finally:
            writer.close()
            self._engine = None
            self.ctl.cpus.release(self.cpu_key)

    # ---------------------------------------------------------------- status
    def snapshot(self) -> dict:
        with self.lock:
            return {
                "ready": self.ready,
                "scheduled": self.scheduled,
                "unschedulable": self.unschedulable,
                "phase": self.phase,
                "state": dict(self.state),
                "last_state": dict(self.last_state),
                "restart_count": self.restart_count,
                "started_once": self.started_once,
                "start_time": self.start_time,
                "init_done": self.init_done,
                "error": self.error,
                "port": self.port,
            }

    def pod_status(self) -> dict:
        s = self.snapshot()
        ts = now()
        containers = []
        main = {
            "name": self.container_name,
            "image": self.container.get("image", ""),
            "imageID": "",
            "ready": s["ready"],
            "restartCount": s["restart_count"],
            "started": "running" in s["state"],
            "state": s["state"],
        }
        if s["last_state"]:
            main["lastState"] = s["last_state"]
        if "running" in s["state"]:
            main["containerID"] = f"lab://{self.name}"
        containers.append(main)
        for c in self.pod["spec"]["containers"]:
            if c["name"] == self.container_name:
                continue
            running = s["init_done"] and s["scheduled"]
            containers.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": running,
                    "restartCount": 0,
                    "started": running,
                    "state": (
                        {"running": {"startedAt": s["start_time"] or ts}}
                        if running
                        else {"waiting": {"reason": "PodInitializing"}}
                    ),
                }
            )
        status: dict = {
            "phase": s["phase"],
            "qosClass": (self.pod.get("status") or {}).get("qosClass", "BestEffort"),
        }
        if not s["scheduled"]:
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": s["unschedulable"] or "",
                    "lastProbeTime": None,
                }
            ]
            return status
        inits = []
        for c in self.pod["spec"].get("initContainers") or []:
            inits.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": s["init_done"],
                    "restartCount": 0,
                    "started": False,
                    "state": (
                        {
                            "terminated": {
                                "exitCode": 0,
                                "reason": "Completed",
                                "startedAt": s["start_time"],
                                "finishedAt": s["start_time"],
                            }
                        }
                        if s["init_done"]
                        else {"waiting": {"reason": "PodInitializing"}}
                    ),
                }
            )
        all_ready = all(c["ready"] for c in containers)
        status.update(
            {
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": s["start_time"],
                "containerStatuses": containers,
                "conditions": [
                    {"type": "PodReadyToStartContainers", "status": "True"},
                    {"type": "Initialized", "status": "True" if s["init_done"] or not inits else "False"},
                    {
                        "type": "Ready",
                        "status": "True" if all_ready else "False",
                        **(
                            {}
                            if all_ready
                            else {
                                "reason": "ContainersNotReady",
                                "message": f"containers with unready status: [{self.container_name}]",
                            }
                        ),
                    },
                    {
                        "type": "ContainersReady",
                        "status": "True" if all_ready else "False",
                        **(
                            {}
                            if all_ready
                            else {
                                "reason": "ContainersNotReady",
                                "message": f"containers with unready status: [{self.container_name}]",
                            }
                        ),
                    },
                    {"type": "PodScheduled", "status": "True"},
                ],
            }
        )
        if inits:
            status["initContainerStatuses"] = inits
        return status
