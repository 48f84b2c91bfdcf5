"""Job pods on this machine: each container's command runs under bubblewrap with the pod's
volumeMounts bind-mounted at their paths.

The image is NOT pulled (there is no container engine): the command runs with this
machine's own programs (``/usr``, ``/etc`` read-only; a private ``/tmp``, ``/dev``, ``/proc``),
so ``sh``, ``python3``, ``cp``... are Debian's. A command the machine does not have fails
like a missing binary in an image would (exit code 127). One image is mapped: a container of the lab's
runtime image (``specpilot-lab/vllm-cpu:<release>``, what the lab's services run) that calls ``python3``
gets the lab engine's interpreter (``.venv-vllm``, where ``import vllm`` works), exposed in the sandbox
as a predictor's engine is (sandbox.runtime_paths): specpilot.core.cluster_probe reads
``vllm.__version__`` in that image. Volumes: ``persistentVolumeClaim``
(the lab PVC's directory), ``emptyDir``, ``configMap``, ``secret``, ``hostPath``; ``subPath``
and ``readOnly`` are honoured. Env: ``value``, ``valueFrom`` (configMapKeyRef, secretKeyRef,
fieldRef), ``envFrom``; ``$(VAR)`` in command and args is expanded.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from .. import engine, podlogs
from .kube import now
from .mapping import expand_vars

log = logging.getLogger("specpilot_lab.controller")

BWRAP = "bwrap"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# the lab's runtime image (inventories/lab, seed.py): its python3 is the lab engine's interpreter
LAB_RUNTIME_IMAGE = re.compile(r"^specpilot-lab/vllm-cpu([:@].*)?$")
IMAGE_PYTHONS = ("python3", "python", "/usr/bin/python3", "/usr/local/bin/python3")


class VolumeError(Exception):
    pass


def image_interpreter(image: str, argv0: str | None) -> Path | None:
    """The interpreter that stands for the image's ``python3`` (the lab runtime image's: .venv-vllm, the
    real one even when the controller's engines are stand-ins), or None: this machine's programs."""
    if argv0 in IMAGE_PYTHONS and LAB_RUNTIME_IMAGE.match(image or ""):
        python = engine.vllm_python()
        return python if python.exists() else None
    return None


def image_argv(image: str, argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv, bwrap arguments exposing its interpreter) of a container of ``image``."""
    python = image_interpreter(image, argv[0] if argv else None)
    if python is None:
        return argv, []
    from .sandbox import expose_args, runtime_paths  # sandbox imports this module

    return [str(python), *argv[1:]], expose_args(runtime_paths(python))


def bwrap_base(hostname: str, mount_paths: list[str] = (), new_session: bool = True) -> list[str]:
    """The sandbox: this machine's /usr, /etc, /opt read-only, private /tmp, /run, /dev, /proc.
    A read-only system directory that holds a mount path (a configMap at /etc/app) becomes a
    tmpfs with the host's entries bound into it, so the mount point can be created.
    new_session False keeps the command in the caller's process group (predictor engines: the
    controller stops them with a signal to the group, see engine.Engine.stop)."""

    def holds_mount(d: str) -> bool:
        return any(m == d or m.startswith(d + "/") for m in mount_paths)

    def ro(d: str) -> list[str]:
        host = Path(d)
        if not host.is_dir():
            return []
        if not holds_mount(d):
            return ["--ro-bind", d, d]
        out = ["--tmpfs", d]
        for entry in sorted(host.iterdir()):
            target = f"{d}/{entry.name}"
            if holds_mount(target) and entry.is_dir() and not entry.is_symlink():
                out += ro(target)
            elif entry.is_symlink():
                out += ["--symlink", os.readlink(entry), target]
            else:
                out += ["--ro-bind", str(entry), target]
        return out

    cmd = [
        BWRAP,
        "--die-with-parent",
        *(["--new-session"] if new_session else []),
        "--unshare-uts",
        "--unshare-ipc",
        "--unshare-pid",
        "--hostname",
        hostname[:63],
    ]
    cmd += ro("/usr")
    for d in ("bin", "sbin", "lib", "lib64", "lib32"):
        p = Path("/") / d
        if p.is_symlink():
            cmd += ["--symlink", os.readlink(p), f"/{d}"]
        elif p.is_dir():
            cmd += ro(f"/{d}")
    cmd += ro("/etc") + ro("/opt")
    cmd += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run", "--dir", "/var/tmp"]
    return cmd


class JobPodRun:
    """One Job pod: init containers in order, then the containers together."""

    def __init__(self, ctl, job: dict, pod: dict):
        self.ctl = ctl
        self.job = job
        self.pod = pod
        self.namespace = pod["metadata"]["namespace"]
        self.name = pod["metadata"]["name"]
        self.job_name = job["metadata"]["name"]
        self.run_dir = ctl.state_dir / "jobs" / self.namespace / self.name
        self.lock = threading.RLock()
        self.phase = "Pending"
        self.statuses: dict[str, dict] = {}
        self.init_statuses: dict[str, dict] = {}
        self.restart_policy = pod["spec"].get("restartPolicy", "Never")
        self.scheduled = False
        self.unschedulable: str | None = None
        self.start_time: str | None = None
        self.finished = False
        self.failures = 0  # container failures (OnFailure restarts count too)
        self.reason: str | None = None
        self.message: str | None = None
        self._procs: dict[str, subprocess.Popen] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for c in pod["spec"].get("containers") or []:
            self.statuses[c["name"]] = {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        for c in pod["spec"].get("initContainers") or []:
            self.init_statuses[c["name"]] = {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"waiting": {"reason": "PodInitializing"}},
            }

    def notify(self) -> None:
        self.ctl.enqueue(("job", self.namespace, self.job_name))

    def event(self, type_: str, reason: str, message: str, container: str | None = None) -> None:
        self.ctl.recorder.event(
            self.pod,
            type_,
            reason,
            message,
            "kubelet",
            field_path=f"spec.containers{{{container}}}" if container else None,
        )

    def start(self) -> None:
        with self.lock:
            self.scheduled = True
            self.unschedulable = None
            self.start_time = now()
        self._thread = threading.Thread(
            target=self._main, name=f"job-{self.namespace}-{self.name}", daemon=True
        )
        self._thread.start()

    def kill(self, reason: str | None = None, message: str | None = None) -> None:
        """Stop the pod's processes (the Job's deadline, a deletion)."""
        self._stop.set()
        for proc in list(self._procs.values()):
            _kill_group(proc)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=15)
        with self.lock:
            if not self.finished:
                self.finished = True
                self.phase = "Failed"
                self.reason, self.message = reason, message

    # ---------------------------------------------------------------- running
    def _main(self) -> None:
        try:
            volumes = self._volumes()
        except VolumeError as exc:
            with self.lock:
                for st in self.statuses.values():
                    st["state"] = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self.event("Warning", "FailedMount", str(exc))
            self.notify()
            return
        with self.lock:
            self.phase = "Pending"
        for c in self.pod["spec"].get("initContainers") or []:
            code = self._run_container(c, volumes, self.init_statuses[c["name"]])
            if self._stop.is_set():
                return
            if code != 0:
                self._finish("Failed")
                return
        with self.lock:
            self.phase = "Running"
        self.notify()
        while not self._stop.is_set():
            codes: dict[str, int] = {}
            threads = []
            for c in self.pod["spec"].get("containers") or []:
                t = threading.Thread(
                    target=lambda c=c: codes.__setitem__(
                        c["name"], self._run_container(c, volumes, self.statuses[c["name"]])
                    ),
                    daemon=True,
                )
                t.start()
                threads.append(t)
            for t in threads:
                t.join()
            if self._stop.is_set():
                return
            if len(codes) == len(threads) and all(code == 0 for code in codes.values()):
                self._finish("Succeeded")
                return
            with self.lock:
                self.failures += 1
            if self.restart_policy != "OnFailure" or not self.ctl.job_may_retry(self):
                self._finish("Failed")
                return
            delay = min(self.ctl.job_backoff * 2 ** (self.failures - 1), 360)
            for name, code in codes.items():
                if code != 0:
                    st = self.statuses[name]
                    with self.lock:
                        st["lastState"] = st["state"]
                        st["restartCount"] += 1
                        st["state"] = {
                            "waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": f"back-off {int(delay)}s restarting failed "
                                f"container={name} pod={self.name}_{self.namespace}",
                            }
                        }
                    self.event(
                        "Warning",
                        "BackOff",
                        f"Back-off restarting failed container {name} in pod "
                        f"{self.name}_{self.namespace}",
                        name,
                    )
            self.notify()
            if self._stop.wait(delay):
                return

    def _finish(self, phase: str) -> None:
        with self.lock:
            self.phase = phase
            self.finished = True
        self.notify()

    def _run_container(self, c: dict, volumes: dict[str, Path], status: dict) -> int:
        name = c["name"]
        env = self.ctl.container_env(self.namespace, self.pod, c)
        env.setdefault("PATH", DEFAULT_PATH)
        env.setdefault("HOSTNAME", self.name)
        env.setdefault("HOME", "/root")
        command = [expand_vars(x, env) for x in (c.get("command") or [])]
        args = [expand_vars(x, env) for x in (c.get("args") or [])]
        argv = command + args
        writer = podlogs.PodLogWriter(self.ctl.podlogs_dir, self.namespace, self.name, name)
        if status.get("restartCount"):
            writer.rotate()
        if not command:
            msg = (
                f"lab: container {name} has no command; the lab does not pull images, so their "
                "entrypoint is unknown: give the Job's container an explicit command"
            )
            with self.lock:
                status["state"] = {
                    "terminated": {
                        "exitCode": 128,
                        "reason": "StartError",
                        "message": msg,
                        "startedAt": now(),
                        "finishedAt": now(),
                    }
                }
            writer.write_line(msg)
            writer.close()
            self.event("Warning", "Failed", f"Error: {msg}", name)
            return 128
        cmd = bwrap_base(self.name, [vm.get("mountPath", "") for vm in c.get("volumeMounts") or []])
        argv, exposed = image_argv(c.get("image", ""), argv)
        for vm in c.get("volumeMounts") or []:
            src = volumes.get(vm.get("name"))
            if src is None:
                msg = f'lab: volumeMount {vm.get("mountPath")}: volume "{vm.get("name")}" not found'
                with self.lock:
                    status["state"] = {
                        "terminated": {
                            "exitCode": 128,
                            "reason": "StartError",
                            "message": msg,
                            "startedAt": now(),
                            "finishedAt": now(),
                        }
                    }
                writer.write_line(msg)
                writer.close()
                self.event("Warning", "Failed", f"Error: {msg}", name)
                return 128
            if vm.get("subPath"):
                src = src / vm["subPath"]
                src.mkdir(parents=True, exist_ok=True)
            cmd += ["--ro-bind" if vm.get("readOnly") else "--bind", str(src), vm["mountPath"]]
        # the image's interpreter after the volumes: an emptyDir at /tmp (the probe Job's) must not hide a
        # checkout that lives under /tmp (the sandbox's /tmp is not this machine's)
        cmd += exposed
        cmd += ["--chdir", c.get("workingDir") or "/", "--clearenv"]
        for k, v in env.items():
            cmd += ["--setenv", k, v]
        cmd += ["--", *argv]
        self.event(
            "Normal",
            "Pulled",
            f'Container image "{c.get("image", "")}" already present on machine '
            "(lab: images are not pulled; the command runs with this machine's programs)",
            name,
        )
        self.event("Normal", "Created", f"Created container: {name}", name)
        started = now()
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._procs[name] = proc
        with self.lock:
            status["state"] = {"running": {"startedAt": started}}
            status["started"] = True
            status["ready"] = True
        self.event("Normal", "Started", f"Started container {name}", name)
        self.notify()
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            writer.write(raw)
        code = proc.wait()
        writer.close()
        if code < 0:  # killed by a signal: report it like a container runtime (128 + signal)
            code = 128 - code
        self._procs.pop(name, None)
        with self.lock:
            status["ready"] = False
            status["started"] = False
            status["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": started,
                    "finishedAt": now(),
                    "containerID": f"lab://{proc.pid}",
                }
            }
        return code

    # ---------------------------------------------------------------- volumes
    def _volumes(self) -> dict[str, Path]:
        return pod_volumes(self.ctl, self.namespace, self.pod, self.run_dir / "volumes")

    # ---------------------------------------------------------------- status
    def pod_status(self) -> dict:
        with self.lock:
            phase = self.phase
            containers = [dict(s) for s in self.statuses.values()]
            inits = [dict(s) for s in self.init_statuses.values()]
        status: dict = {
            "phase": phase,
            "qosClass": (self.pod.get("status") or {}).get("qosClass", "BestEffort"),
        }
        if not self.scheduled:
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": self.unschedulable or "",
                }
            ]
            return status
        ready = phase == "Running" and all(c.get("ready") for c in containers)
        done_reason = (
            {}
            if ready
            else {"reason": "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"}
        )
        status.update(
            {
                "hostIP": "127.0.0.1",
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": self.start_time,
                "containerStatuses": containers,
                "conditions": [
                    {"type": "PodReadyToStartContainers", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True" if ready else "False", **done_reason},
                    {"type": "ContainersReady", "status": "True" if ready else "False", **done_reason},
                    {"type": "PodScheduled", "status": "True"},
                ],
            }
        )
        if inits:
            status["initContainerStatuses"] = inits
        if self.reason:
            status["reason"] = self.reason
            status["message"] = self.message or ""
        return status


def pod_volumes(ctl, namespace: str, pod: dict, vroot: Path, skip=lambda v: False) -> dict[str, Path]:
    """The pod's volumes on this machine, by name: a PVC's lab directory, a hostPath, a configMap's or
    secret's files written under vroot, a fresh directory under vroot for emptyDir (and anything
    else). Volumes for which skip(volume) is true are left out. VolumeError for a missing claim,
    configMap or secret."""
    out: dict[str, Path] = {}
    for v in pod["spec"].get("volumes") or []:
        name = v["name"]
        if skip(v):
            continue
        if "persistentVolumeClaim" in v:
            claim = v["persistentVolumeClaim"].get("claimName", "")
            if ctl.kube.get("pvc", claim, namespace) is None:
                raise VolumeError(f'persistentvolumeclaim "{claim}" not found')
            out[name] = ctl.pvc_dir(namespace, claim)
            out[name].mkdir(parents=True, exist_ok=True)
        elif "hostPath" in v:
            out[name] = Path(v["hostPath"].get("path", "/"))
        elif "configMap" in v or "secret" in v:
            kind = "configmap" if "configMap" in v else "secret"
            src = v.get("configMap") or v.get("secret") or {}
            obj_name = src.get("name") or src.get("secretName") or ""
            obj = ctl.kube.get(kind, obj_name, namespace)
            if obj is None:
                if src.get("optional"):
                    obj = {}
                else:
                    raise VolumeError(
                        f'{"configmap" if kind == "configmap" else "secret"} "{obj_name}" not found'
                    )
            d = vroot / name
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            data = dict(obj.get("data") or {})
            if kind == "secret":
                data = {k: base64.b64decode(x).decode("utf-8", "replace") for k, x in data.items()}
                data.update(obj.get("stringData") or {})
            items = src.get("items")
            files = {i["path"]: data.get(i["key"], "") for i in items} if items else data
            for rel, text in files.items():
                f = d / rel
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(text)
                f.chmod(src.get("defaultMode", 0o644) & 0o777)
            out[name] = d
        else:  # emptyDir and anything else: a fresh directory
            d = vroot / name
            d.mkdir(parents=True, exist_ok=True)
            out[name] = d
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


BWRAP_FIX = (
    "the lab runs Job pods and predictor engines under bubblewrap: install it (`make system-packages`, "
    "Debian package bubblewrap) and let it create namespaces: run the lab as root, or allow unprivileged "
    "user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also "
    "kernel.apparmor_restrict_unprivileged_userns=0); in a container, one started with "
    "--security-opt seccomp=unconfined (or --privileged)"
)


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """None when bubblewrap can run a sandbox on this machine, else what is wrong and the fix
    (probed once per process: a sandbox that runs `true`, about 10 ms)."""
    if not shutil.which(BWRAP):
        return f"bubblewrap (bwrap) is not installed; {BWRAP_FIX}"
    try:
        res = subprocess.run(bwrap_base("probe") + ["--", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run here ({exc}); {BWRAP_FIX}"
    if res.returncode != 0:
        err = res.stderr.decode("utf-8", "replace").strip() or f"exit code {res.returncode}"
        return f"bubblewrap cannot create its sandbox here ({err}); {BWRAP_FIX}"
    return None


def bwrap_available() -> bool:
    return bwrap_problem() is None


def elapsed_since(ts: str | None) -> float:
    from .kube import parse_time

    t = parse_time(ts)
    return 0.0 if t is None else time.time() - t
