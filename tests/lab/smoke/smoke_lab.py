"""Helpers of the smoke-role lab tests: an emulator and the lab controller (in this process), with
either the fake spec-decoding engine (fast) or the real vLLM engine (.venv-vllm),
deploying a service with playbooks/deploy.yml and running playbooks/smoke.yml against it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from specpilot_lab.controller import Controller
from specpilot_lab.testing import LAB_CRDS, Emulator

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
DEPLOY = ROOT / "playbooks" / "deploy.yml"
SMOKE = ROOT / "playbooks" / "smoke.yml"
INVENTORY = ROOT / "inventories" / "lab"
VENV_BIN = Path(sys.executable).parent
NAMESPACE = "specpilot-lab"
PVC = "specpilot-lab-models"
# see tests/lab/conftest.py: a busy machine gets this many times the waits of a quiet one
WAIT_SCALE = float(os.environ.get("SPECPILOT_TEST_WAIT_SCALE", "3"))
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


class SmokeLab:
    """Emulator + controller, and ansible-playbook runs against them."""

    def __init__(self, root: Path, vllm_python: Path, **controller_kw):
        self.root = root
        self.emu = Emulator(root / "lab", [str(LAB_CRDS)]).start()
        kw = dict(crash_backoff=2.0, job_backoff=0.5)
        kw.update(controller_kw)
        self.ctl = Controller(self.emu.kubeconfig, root / "lab", vllm_python=vllm_python, **kw).start()
        self.dyn = self.emu.dynamic_client()

    # ------------------------------------------------------------------ objects
    def res(self, api_version: str, kind: str):
        return self.dyn.resources.get(api_version=api_version, kind=kind)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            return self.res(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def isvc(self, name: str) -> dict | None:
        return self.get("serving.kserve.io/v1beta1", "InferenceService", name, NAMESPACE)

    def delete_isvc(self, name: str, timeout: float = 60.0) -> None:
        self.res("serving.kserve.io/v1beta1", "InferenceService").delete(name=name, namespace=NAMESPACE)
        self.wait(
            lambda: not [r for r in self.ctl.runs.values() if r.isvc == name], timeout, f"{name} engines gone"
        )

    def pods(self, name: str) -> list[dict]:
        return (
            self.res("v1", "Pod")
            .get(namespace=NAMESPACE, label_selector=(f"serving.kserve.io/inferenceservice={name}"))
            .to_dict()["items"]
        )

    def live_pods(self, name: str) -> list[str]:
        """Names of the service's pods that are not being deleted."""
        return [p["metadata"]["name"] for p in self.pods(name) if not p["metadata"].get("deletionTimestamp")]

    def engine_log(self, pod: str) -> str:
        """The engine container's log of a predictor pod."""
        from kubernetes import client

        return client.CoreV1Api(self.emu.api_client()).read_namespaced_pod_log(
            pod, NAMESPACE, container="kserve-container"
        )

    def wait(self, pred, timeout: float, what: str, interval: float = 0.5):
        timeout *= WAIT_SCALE
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = pred()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

    def ready(self, name: str) -> bool:
        conds = ((self.isvc(name) or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    def wait_single_ready_pod(self, name: str, timeout: float, not_pod: str | None = None) -> dict:
        """Ready, one pod left (an older one gone), and that pod is not ``not_pod``."""

        def done():
            pods = [p for p in self.pods(name) if not p["metadata"].get("deletionTimestamp")]
            if self.ready(name) and len(pods) == 1 and pods[0]["metadata"]["name"] != not_pod:
                return pods[0]
            return None

        return self.wait(done, timeout, f"{name} Ready with a single new pod")

    @property
    def pvc_dir(self) -> Path:
        """The directory behind the lab's models PVC (what the lab's engines see as /mnt/models)."""
        return self.root / "lab" / "pvcs" / NAMESPACE / PVC

    def models_pvc(self, models: Path | None) -> Path:
        """The lab's models PVC, filled with ``models`` (a directory tree)."""
        self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        self.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": PVC},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            },
            NAMESPACE,
        )
        self.wait(
            lambda: ((self.get("v1", "PersistentVolumeClaim", PVC, NAMESPACE) or {}).get("status") or {}).get(
                "phase"
            )
            == "Bound",
            20,
            "PVC Bound",
        )
        d = self.pvc_dir
        if models is not None:
            shutil.copytree(models, d, dirs_exist_ok=True)
        return d

    def create(self, body: dict, namespace: str | None = None) -> None:
        from kubernetes.dynamic.exceptions import ConflictError

        r = self.res(body["apiVersion"], body["kind"])
        try:
            r.create(body=body, namespace=namespace if r.namespaced else None)
        except ConflictError:
            pass

    # ------------------------------------------------------------------ ansible
    def env(self) -> dict[str, str]:
        env = self.emu.env
        env.update(
            {
                "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                "ANSIBLE_FORCE_COLOR": "0",
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_SHOW_CUSTOM_STATS": "1",
                "ANSIBLE_STDOUT_CALLBACK": "default",
                "ANSIBLE_LOCAL_TEMP": str(self.root / "ansible-tmp"),
                "PYTHONPATH": "",
                "MPLCONFIGDIR": str(self.root / "mpl"),
            }
        )
        env["PATH"] = str(VENV_BIN) + os.pathsep + env.get("PATH", "")
        return env

    def playbook(
        self,
        playbook: Path,
        service: str,
        *args: str,
        extra: dict | None = None,
        timeout: float = 600,
        env: dict | None = None,
    ) -> "Run":
        cmd = [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(INVENTORY),
            str(playbook),
            "--limit",
            service,
            *args,
        ]
        if extra:
            cmd += ["-e", json.dumps(extra)]
        t0 = time.monotonic()
        proc = subprocess.run(
            cmd, cwd=str(ROOT), env=env or self.env(), capture_output=True, text=True, timeout=timeout
        )
        return Run(proc, time.monotonic() - t0)

    def deploy(
        self, service: str, *args: str, extra: dict | None = None, without_speculative: bool = False
    ) -> "Run":
        """playbooks/deploy.yml for one service (or a --limit pattern; ``args``: more
        ansible-playbook options, e.g. ``-i`` another inventory); ``without_speculative`` deploys
        it with ``specpilot_speculative: null`` (what a rollback leaves running)."""
        extra = dict(extra or {})
        if without_speculative:
            extra.update(specpilot_speculative=None, specpilot_acknowledged_warnings=[])
        run = self.playbook(DEPLOY, service, *args, extra=extra)
        assert run.rc == 0, run.output
        return run

    def smoke(self, service: str, report_dir: Path, *args: str, extra: dict | None = None) -> "Run":
        extra = dict(extra or {})
        extra.setdefault("specpilot_smoke_report_dir", str(report_dir))
        return self.playbook(SMOKE, service, *args, extra=extra)

    def close(self) -> None:
        self.ctl.stop()
        self.emu.stop()


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, seconds: float):
        self.rc = proc.returncode
        self.output = proc.stdout + proc.stderr
        self.seconds = seconds

    def recap(self) -> dict[str, dict[str, int]]:
        return {
            m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "failed": int(m.group(5))}
            for m in RECAP.finditer(self.output)
        }


def report(report_dir: Path, service: str, basename: str = "smoke") -> dict:
    with open(report_dir / service / f"{basename}.json") as fh:
        return json.load(fh)


def checks(rep: dict) -> dict[str, dict]:
    return {c["id"]: c for c in rep["checks"]}


def fake_env(**env) -> dict:
    """specpilot_env for the fake engine (on top of the lab's KV cache setting), e.g.
    ``fake_env(FAKE_ACCEPTANCE="0.2")``."""
    items = [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}]
    items += [{"name": k, "value": str(v)} for k, v in env.items()]
    return {"specpilot_env": items}
