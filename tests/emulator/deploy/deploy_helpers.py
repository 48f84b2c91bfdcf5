"""Helpers for the deploy role tests against the API emulator (imported by name).

* :func:`write_inventory`: a throw-away inventory of lab-like services (PVC delivery, vLLM 0.32);
* :func:`run_deploy` / :class:`Run`: ``ansible-playbook playbooks/deploy.yml`` as a subprocess,
  isolated to one emulator (KUBECONFIG, TMPDIR, HOME), optionally in the background;
* :class:`FakeKServe`: plays KServe and the kubelet without running anything: for every
  InferenceService it renders the Deployment ``<name>-predictor`` (runtime args + the service's
  args, the service's annotations on the pod template, as KServe does), and writes the status a
  finished rollout has - unless a test says to hold it back (stale Ready, crash, pending).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import yaml

from ansible_collections.specpilot.core.plugins.module_utils.service import render
from specpilot_lab.apiserver.auth import ADMIN_TOKEN

ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = ROOT / ".venv" / "bin"
ISVC = ("serving.kserve.io/v1beta1", "InferenceService")

GROUP_VARS = {
    "ansible_connection": "local",
    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
    "specpilot_kserve_version": "0.20",
    "specpilot_deployment_mode": "Standard",
    "specpilot_vllm_version": "0.32.0",
    "specpilot_runtime": {
        "image": "specpilot-lab/vllm-cpu:0.32.0",
        "image_pull_policy": "IfNotPresent",
        "shm_size": "1Gi",
    },
    "specpilot_gpu": {"count": 0},
    "specpilot_resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "6Gi"}},
    "specpilot_vllm_args": {
        "max_model_len": 512,
        "max_num_seqs": 4,
        "dtype": "float32",
        "enforce_eager": True,
    },
    "specpilot_delivery": "pvc",
    "specpilot_pvc": {"name": "specpilot-lab-models"},
    "specpilot_target": {
        "subdir": "target",
        "params_b": 0.000657,
        "dtype": "float32",
        "architecture": "LlamaForCausalLM",
        "model_type": "llama",
        "hidden_size": 128,
        "vocab_size": 2048,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tokenizer": "specpilot-lab/tiny-bpe-2048",
    },
    "specpilot_acknowledged_warnings": ["async-scheduling-disabled"],
    # fast polls and short grace periods for tests
    "specpilot_deploy_wait_delay": 0.5,
    "specpilot_deploy_api_retries": 8,
}

# the lab's tiny draft model (inventories/lab group_vars), for services that need a draft
DRAFT = {
    "subdir": "draft",
    "params_b": 0.000461,
    "dtype": "float32",
    "architecture": "LlamaForCausalLM",
    "model_type": "llama",
    "hidden_size": 128,
    "vocab_size": 2048,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tokenizer": "specpilot-lab/tiny-bpe-2048",
}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def write_inventory(path: Path, namespace: str, services: dict[str, dict], group: dict | None = None) -> Path:
    """An inventory at ``path`` with ``services`` (host -> host vars) in specpilot_services."""
    inv = Path(path)
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "host_vars").mkdir(parents=True, exist_ok=True)
    gv = dict(GROUP_VARS, specpilot_namespace=namespace)
    gv.update(group or {})
    (inv / "group_vars" / "specpilot_services.yml").write_text("---\n" + yaml.safe_dump(gv, sort_keys=False))
    for host, hv in services.items():
        (inv / "host_vars" / f"{host}.yml").write_text("---\n" + yaml.safe_dump(hv, sort_keys=False))
    (inv / "hosts.yml").write_text(
        "---\n" + yaml.safe_dump({"specpilot_services": {"hosts": {h: {} for h in services}}})
    )
    return inv


def ansible_env(emu, tmp: Path) -> dict:
    env = dict(emu.env)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_STDOUT_CALLBACK="default",
        PWD=str(ROOT),
    )
    env.pop("K8S_AUTH_KUBECONFIG", None)
    return env


class Run:
    """One ansible-playbook run (``wait()`` returns self with ``rc``, ``out``)."""

    def __init__(self, emu, tmp: Path, inventory: Path, *args: str, playbook: str = "playbooks/deploy.yml"):
        tmp.mkdir(parents=True, exist_ok=True)
        self.cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(ROOT / playbook), *args]
        self.log = tmp / f"run-{time.monotonic_ns()}.log"
        self.fh = open(self.log, "w")
        self.proc = subprocess.Popen(
            self.cmd, cwd=ROOT, env=ansible_env(emu, tmp), stdout=self.fh, stderr=subprocess.STDOUT, text=True
        )
        self.rc: int | None = None
        self.out = ""
        self.seconds = 0.0
        self._t0 = time.monotonic()

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = 600) -> "Run":
        try:
            self.rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.rc = self.proc.wait()
        self.seconds = time.monotonic() - self._t0
        self.fh.close()
        self.out = self.log.read_text()
        return self

    # ------------------------------------------------------------ output helpers
    def recap(self) -> dict[str, dict[str, int]]:
        return parse_recap(self.out)

    def changed_tasks(self) -> list[str]:
        """TASK headers followed by a 'changed:' line."""
        tasks, current = [], None
        for line in self.out.splitlines():
            if line.startswith("TASK ["):
                current = line
            elif line.startswith("changed:") and current:
                tasks.append(current)
        return tasks


def run_deploy(emu, tmp: Path, inventory: Path, *args: str, timeout: float = 600) -> Run:
    return Run(emu, tmp, inventory, *args).wait(timeout)


def parse_recap(out: str) -> dict[str, dict[str, int]]:
    """{host: {ok, changed, unreachable, failed, skipped, rescued, ignored}} from ansible-playbook's PLAY RECAP."""
    recap = {}
    for line in out.split("PLAY RECAP", 1)[-1].splitlines():
        if ":" not in line or "ok=" not in line:
            continue
        host, _, rest = line.partition(":")
        recap[host.strip()] = {k: int(v) for k, v in (kv.split("=") for kv in rest.split())}
    return recap


# ---------------------------------------------------------------------------- fake KServe
class FakeKServe:
    """Writes what KServe (Standard mode) and a kubelet would, for every InferenceService of a namespace.

    ``policy(name, isvc) -> str`` decides per service and poll: ``"ready"`` (roll out the current spec
    at once), ``"hold"`` (leave everything as it is: a stale Deployment and a stale Ready stay),
    ``"crash"`` / ``"pending"`` (new pod crash-looping / unschedulable).
    """

    def __init__(self, emu, namespace: str, policy=None, interval: float = 0.3):
        self.emu = emu
        self.ns = namespace
        self.policy = policy or (lambda name, isvc: "ready")
        self.interval = interval
        self.dyn = emu.dynamic_client()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.rollouts: dict[str, int] = {}

    def res(self, api_version: str, kind: str):
        return self.dyn.resources.get(api_version=api_version, kind=kind)

    def __enter__(self) -> "FakeKServe":
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        if self.thread:
            self.thread.join(10)

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.reconcile_all()
            except Exception as exc:  # noqa: BLE001 - keep playing; faults may be injected
                self.errors.append(repr(exc))
            self.stop_event.wait(self.interval)

    def reconcile_all(self) -> None:
        for isvc in self.res(*ISVC).get(namespace=self.ns).to_dict()["items"]:
            name = isvc["metadata"]["name"]
            self.reconcile(isvc, self.policy(name, isvc))

    # the pieces
    def runtime_args(self, isvc: dict) -> list[str]:
        model = isvc["spec"]["predictor"]["model"]
        try:
            rt = (
                self.res("serving.kserve.io/v1alpha1", "ServingRuntime")
                .get(name=model.get("runtime"), namespace=self.ns)
                .to_dict()
            )
        except Exception:  # noqa: BLE001
            return []
        return list(rt["spec"]["containers"][0].get("args", []))

    def template(self, isvc: dict) -> dict:
        model = isvc["spec"]["predictor"]["model"]
        anns = {k: v for k, v in (isvc["metadata"].get("annotations") or {}).items()}
        containers = [
            {
                "name": "kserve-container",
                "image": "vllm",
                # KServe's merged container, {{.Name}} filled in (ReplacePlaceholders)
                "args": render.in_pod(
                    self.runtime_args(isvc) + list(model.get("args") or []),
                    isvc["metadata"]["name"],
                    isvc["metadata"].get("namespace"),
                ),
            }
        ]
        uri = model.get("storageUri") or ""
        if uri.startswith("oci://"):  # KServe's Modelcar: the image runs beside the engine
            containers.append({"name": "modelcar", "image": uri[len("oci://") :]})
        return {
            "metadata": {
                "labels": {
                    "serving.kserve.io/inferenceservice": isvc["metadata"]["name"],
                    "app": "isvc.%s-predictor" % isvc["metadata"]["name"],
                },
                "annotations": anns,
            },
            "spec": {"containers": containers},
        }

    def reconcile(self, isvc: dict, action: str) -> None:
        if action == "hold":
            return
        name = isvc["metadata"]["name"]
        dep_api = self.res("apps/v1", "Deployment")
        dname = f"{name}-predictor"
        tmpl = self.template(isvc)
        try:
            dep = dep_api.get(name=dname, namespace=self.ns).to_dict()
        except Exception:  # noqa: BLE001
            dep = None
        if dep is None:
            dep = dep_api.create(
                namespace=self.ns,
                body={
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": dname, "labels": {"serving.kserve.io/inferenceservice": name}},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": {"app": f"isvc.{name}-predictor"}},
                        "template": tmpl,
                    },
                },
            ).to_dict()
        elif dep["spec"]["template"] != tmpl:
            dep["spec"]["template"] = tmpl
            dep.pop("status", None)
            dep = dep_api.replace(namespace=self.ns, body=dep).to_dict()
        gen = dep["metadata"]["generation"]
        pod_name = f"{dname}-{gen}-abcde"
        self._pods(name, pod_name, tmpl, action)
        ready = action == "ready"
        dstatus = {
            "observedGeneration": gen if ready else max(gen - 1, 1),
            "replicas": 1,
            "updatedReplicas": 1 if ready else 0,
            "availableReplicas": 1 if ready else 0,
            "readyReplicas": 1 if ready else 0,
        }
        if any((dep.get("status") or {}).get(k) != v for k, v in dstatus.items()):
            self._status("apps/v1", "Deployment", dname, dstatus)
        cond = (
            {"type": "Ready", "status": "True"}
            if ready
            else {
                "type": "Ready",
                "status": "False",
                "reason": "MinimumReplicasUnavailable",
                "message": "Deployment does not have minimum availability.",
            }
        )
        self._status(
            *ISVC,
            name,
            {
                "conditions": [
                    cond,
                    dict(cond, type="PredictorReady"),
                    {"type": "IngressReady", "status": "True"},
                ],
                "url": f"http://{name}.{self.ns}.example",
                "observedGeneration": gen,
            },
        )
        if ready:
            self.rollouts[name] = gen

    def _status(self, api_version: str, kind: str, name: str, status: dict) -> None:
        import urllib.request

        res = self.res(api_version, kind)
        path = res.path(name=name, namespace=self.ns) + "/status"
        body = json.dumps({"status": status}).encode()
        req = urllib.request.Request(
            self.emu.url + path,
            data=body,
            method="PATCH",
            headers={
                "Content-Type": "application/merge-patch+json",
                "Authorization": f"Bearer {ADMIN_TOKEN}",
            },
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    def _pods(self, isvc_name: str, pod_name: str, tmpl: dict, action: str) -> None:
        pod_api = self.res("v1", "Pod")
        existing = pod_api.get(
            namespace=self.ns, label_selector=f"serving.kserve.io/inferenceservice={isvc_name}"
        )
        for pod in existing.to_dict()["items"]:
            if pod["metadata"]["name"] != pod_name and action == "ready":
                pod_api.delete(name=pod["metadata"]["name"], namespace=self.ns)
        names = {p["metadata"]["name"] for p in existing.to_dict()["items"]}
        if pod_name not in names:
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "labels": tmpl["metadata"]["labels"],
                    "annotations": tmpl["metadata"]["annotations"],
                },
                "spec": copy.deepcopy(tmpl["spec"]),
            }
            pod_api.create(namespace=self.ns, body=body)
        if action == "ready":
            status = {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "PodScheduled", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": "kserve-container",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    }
                ],
            }
        elif action == "crash":
            status = {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "PodScheduled", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": "kserve-container",
                        "ready": False,
                        "restartCount": 3,
                        "state": {
                            "waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": "back-off 40s restarting failed",
                            }
                        },
                        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
                    }
                ],
            }
        elif action == "progress":
            status = {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "PodScheduled", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": "kserve-container",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    }
                ],
            }
        else:  # pending
            status = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
                        "available: 1 No preemption victims found for incoming pod.",
                    }
                ],
            }
        self._status("v1", "Pod", pod_name, status)


def get(emu, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
    from kubernetes.dynamic.exceptions import NotFoundError

    try:
        return (
            emu.dynamic_client()
            .resources.get(api_version=api_version, kind=kind)
            .get(name=name, namespace=namespace)
            .to_dict()
        )
    except NotFoundError:
        return None


def create_namespace(emu, name: str) -> None:
    emu.dynamic_client().resources.get(api_version="v1", kind="Namespace").create(
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )


def hold_deploy_lock(emu, namespace: str, service: str, holder: str):
    """The service's deploy lock (Lease specpilot-deploy-<service>) held by ``holder`` until 2099, as another
    run would hold it; returns the Lease resource, to delete it as its holder would."""
    leases = emu.dynamic_client().resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
    leases.create(
        namespace=namespace,
        body={
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "specpilot-deploy-%s" % service},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 3600,
                "renewTime": "2099-01-01T00:00:00.000000Z",
                "acquireTime": "2099-01-01T00:00:00.000000Z",
            },
        },
    )
    return leases


def wait_for(pred, timeout: float = 60.0, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def children(pid):
    """The processes ``pid`` forked (ansible-playbook's task workers), by /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    return out


def kill_with_workers(pid):
    """SIGKILL ansible-playbook ``pid`` and its task workers at once, as a node's crash would: none of them lives on
    to release what they hold. The parent is stopped first, so that it forks no new worker meanwhile; a worker that
    ended by itself between the listing and its kill is fine (seen in CI on 2026-11-29: ProcessLookupError on a
    worker of a short task, which left the run alive to write into the next test's window)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
    for each in children(pid) + [pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)


def running(pid):
    """Whether process ``pid`` runs (exists and is not a zombie)."""
    try:
        return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
