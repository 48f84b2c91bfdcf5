"""The lab controller: KServe (Standard and Knative modes), the Deployment/ReplicaSet controllers, a
scheduler, a kubelet, the PVC binder and the Job controller, for one lab node.

One worker thread reconciles keys from a queue fed by list+watch informers and by the pod
threads (engine ready, engine exited, job container finished). Pods run on this machine:
predictor pods as vLLM engines (podrun.PredictorRun) and Job pods (jobs.JobPodRun), both under
bubblewrap with the pod's volumes at their mountPaths (sandbox.py, jobs.py).
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from .. import registry
from ..engine import vllm_python as default_vllm_python
from . import kserve, llmisvc, scheduling
from .jobs import JobPodRun, elapsed_since
from .kube import (
    Informer,
    Kube,
    Recorder,
    WorkQueue,
    conditions_merge,
    now,
    owner_ref,
    parse_time,
    random_suffix,
    short_hash,
)
from .cpus import CpuManager
from .llmisvc_manager import LLMInferenceServices
from .podrun import PredictorRun
from .proxy import ServiceProxy

log = logging.getLogger("specpilot_lab.controller")

KSERVE_COMPONENT = "v1beta1Controllers"
TEMPLATE_HASH_ANNOTATION = "specpilot.io/lab-template-hash"
# a Knative-mode revision's Deployment keeps the InferenceService as that revision was made from it
# (its predictor, its metadata): what a routed revision scaled to zero starts its pod from again
REVISION_SPEC_ANNOTATION = "specpilot.io/lab-revision-spec"
LOCAL_URL_ANNOTATION = "specpilot.io/lab-url"
REGISTRY_ALIASES = ("registry.lab", "lab-registry", "registry.lab.local")


class Controller(LLMInferenceServices):
    def __init__(
        self,
        kubeconfig: str | Path,
        state_dir: str | Path,
        podlogs_dir: str | Path | None = None,
        *,
        node_name: str = "lab-node",
        node_gpus: int = 1,
        node_labels: dict | None = None,
        node_taints: list | None = None,
        node_cpu: str = "32",
        node_memory: str = "256Gi",
        registry_addr: str | None = None,
        vllm_python: Path | None = None,
        crash_backoff: float = 10.0,
        job_backoff: float = 10.0,
    ):
        self.state_dir = Path(state_dir).resolve()
        self.podlogs_dir = Path(podlogs_dir).resolve() if podlogs_dir else self.state_dir
        self.kube = Kube(kubeconfig, self.state_dir / "controller" / "cache")
        self.recorder = Recorder(self.kube, node_name)
        self.queue = WorkQueue()
        self.stop_event = threading.Event()
        self.node_name = node_name
        self.node_config = dict(
            gpus=node_gpus,
            labels=node_labels or {},
            taints=node_taints or [],
            cpu=node_cpu,
            memory=node_memory,
        )
        self._registry_addr = registry_addr
        self.vllm_python = Path(vllm_python) if vllm_python else default_vllm_python()
        self.crash_backoff = crash_backoff
        self.cpus = CpuManager(self.state_dir)
        self.job_backoff = job_backoff
        self.runs: dict[tuple[str, str], PredictorRun] = {}
        self.job_pods: dict[tuple[str, str], JobPodRun] = {}
        self.proxies: dict[tuple[str, str], ServiceProxy] = {}
        self.weights: dict[tuple[str, str], list[tuple[str, int]]] = {}  # (deployment, traffic %)
        # Knative mode's tag routes: (ns, isvc, tag) -> its address, and the revision Deployment behind it
        self.tag_proxies: dict[tuple[str, str, str], ServiceProxy] = {}
        self.tag_routes: dict[tuple[str, str, str], str] = {}
        self.rollout_started: dict[tuple[str, str, str], float] = {}
        self.isvc_keys: set[tuple[str, str]] = set()
        self.llm_keys: set[tuple[str, str]] = set()
        self.llm_proxies: dict[tuple[str, str], ServiceProxy] = {}
        self._informers: list[Informer] = []
        self._worker: threading.Thread | None = None
        self._oci_lock = threading.Lock()

    # ================================================================ lifecycle
    def start(self, sync_timeout: float = 15.0) -> "Controller":
        self.reap_stale_engines()
        self.ensure_node()
        handlers = {
            "isvc": self._on_isvc,
            "sr": self._on_runtime,
            "csr": self._on_runtime,
            "pvc": self._on_pvc,
            "job": self._on_job,
            "pod": self._on_pod,
            "node": self._on_node,
            "llmisvc": self._on_llmisvc,
            "llmisvcconfig": self._on_llmisvc_config,
        }
        self.ensure_llmisvc_configs()
        for key, handler in handlers.items():
            inf = Informer(self.kube, key, handler, self.stop_event)
            inf.start()
            self._informers.append(inf)
        for inf in self._informers:
            inf.synced.wait(sync_timeout)
        self._collect_stale_state()
        self._worker = threading.Thread(target=self._work, name="reconciler", daemon=True)
        self._worker.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.queue.close()
        # the reconcile in progress finishes first: after it, nothing starts a pod any more
        if self._worker is not None:
            self._worker.join(timeout=60)
        threads = []
        for run in list(self.runs.values()):
            t = threading.Thread(target=run.stop, kwargs={"timeout": 5.0}, daemon=True)
            t.start()
            threads.append(t)
        for jr in list(self.job_pods.values()):
            t = threading.Thread(target=jr.kill, daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(timeout=40)
        for p in list(self.proxies.values()) + list(self.tag_proxies.values()) + list(self.llm_proxies.values()):
            p.close()

    def _collect_stale_state(self) -> None:
        """Lab directories of objects the API no longer has (the emulator keeps its state in
        memory, so after a lab restart they belong to nobody): PVC data, engine and job dirs."""
        claims = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in self.kube.list("pvc")}
        for d in (self.state_dir / "pvcs").glob("*/*"):
            if (d.parent.name, d.name) not in claims:
                shutil.rmtree(d, ignore_errors=True)
        for sub in ("engines", "jobs"):
            for d in (self.state_dir / sub).glob("*/*"):
                if (d.parent.name, d.name) not in self.runs and (d.parent.name, d.name) not in self.job_pods:
                    shutil.rmtree(d, ignore_errors=True)

    def reap_stale_engines(self) -> None:
        """Engines a killed controller left behind (their pids are in engines/*/*/engine.pid)."""
        import signal

        for pidfile in (self.state_dir / "engines").glob("*/*/engine.pid"):
            try:
                pid = int(pidfile.read_text().strip())
                environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            except (OSError, ValueError):
                environ = ""
                pid = 0
            # only a process whose environment points into this run directory (pids get reused)
            if pid and str(pidfile.parent) in environ:
                log.warning("stopping engine pid %s left by a previous controller", pid)
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            pidfile.unlink(missing_ok=True)

    def enqueue(self, key: tuple, delay: float = 0.0) -> None:
        self.queue.add(key, delay)

    def _work(self) -> None:
        while not self.stop_event.is_set():
            key = self.queue.get(timeout=0.5)
            if key is None:
                continue
            try:
                kind, ns, name = key
                if kind == "isvc":
                    self.reconcile_isvc(ns, name)
                elif kind == "llmisvc":
                    self.reconcile_llmisvc(ns, name)
                elif kind == "pvc":
                    self.reconcile_pvc(ns, name)
                elif kind == "job":
                    self.reconcile_job(ns, name)
            except ApiException as exc:
                if exc.status == 409:  # a conflict: read again and retry
                    self.enqueue(key, 0.2)
                else:
                    log.warning("reconcile %s: %s %s %s", key, exc.status, exc.reason, (exc.body or "")[:500])
                    self.enqueue(key, 2.0)
            except Exception:
                if not self.stop_event.is_set():
                    log.exception("reconcile %s", key)
                    self.enqueue(key, 5.0)
            finally:
                self.queue.done(key)

    # ================================================================ informer handlers
    def _on_isvc(self, type_: str, obj: dict) -> None:
        md = obj.get("metadata") or {}
        key = (md.get("namespace"), md.get("name"))
        if type_ == "DELETED":
            self.isvc_keys.discard(key)
        else:
            self.isvc_keys.add(key)
        self.enqueue(("isvc", *key))

    def _on_runtime(self, type_: str, obj: dict) -> None:
        for ns, name in list(self.isvc_keys):
            self.enqueue(("isvc", ns, name))

    def _on_pvc(self, type_: str, obj: dict) -> None:
        md = obj.get("metadata") or {}
        self.enqueue(("pvc", md.get("namespace"), md.get("name")))
        if type_ == "DELETED":
            self._forget_pvc(md.get("namespace"), md.get("name"))

    def _on_job(self, type_: str, obj: dict) -> None:
        md = obj.get("metadata") or {}
        self.enqueue(("job", md.get("namespace"), md.get("name")))

    def _on_node(self, type_: str, obj: dict) -> None:
        if type_ == "DELETED" and (obj.get("metadata") or {}).get("name") == self.node_name:
            threading.Thread(target=self.ensure_node, daemon=True).start()
        for run in list(self.runs.values()):
            if not run.scheduled:
                run.notify()

    def _on_pod(self, type_: str, obj: dict) -> None:
        md = obj.get("metadata") or {}
        key = (md.get("namespace"), md.get("name"))
        labels = md.get("labels") or {}
        if type_ == "DELETED" or md.get("deletionTimestamp"):
            run = self.runs.get(key)
            if run is not None and not run.deleted:  # deleted by someone else: the kubelet stops it
                run.deleted = True
                self.runs.pop(key, None)
                threading.Thread(target=lambda: (run.stop(), run.cleanup()), daemon=True).start()
            jr = self.job_pods.get(key)
            if jr is not None and not jr.finished:
                threading.Thread(target=jr.kill, daemon=True).start()
        if kserve.ISVC_LABEL in labels:
            self.enqueue(("isvc", key[0], labels[kserve.ISVC_LABEL]))
        elif llmisvc.owner_of(labels):
            self.enqueue(("llmisvc", key[0], llmisvc.owner_of(labels)))
        elif "job-name" in labels:
            self.enqueue(("job", key[0], labels["job-name"]))
        # a pod leaving frees resources: pending pods may fit now
        if type_ == "DELETED" or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            for run in list(self.runs.values()):
                if not run.scheduled:
                    run.notify()
            for jr in list(self.job_pods.values()):
                if not jr.scheduled:
                    self.enqueue(("job", jr.namespace, jr.job_name))

    # ================================================================ node and scheduling
    def ensure_node(self) -> dict:
        c = self.node_config
        desired = scheduling.node_object(
            self.node_name, c["gpus"], c["labels"], c["taints"], c["cpu"], c["memory"]
        )
        existing = self.kube.get("node", self.node_name)
        if existing is None:
            created = self.kube.create("node", {k: v for k, v in desired.items() if k != "status"})
            self.kube.patch_status("node", self.node_name, None, desired["status"])
            return created
        return existing

    def schedule(self, pod: dict, claims: list[str]) -> str | None:
        """None when the pod fits the lab node now, else the FailedScheduling message."""
        ns = pod["metadata"]["namespace"]
        for claim in claims:
            pvc = self.kube.get("pvc", claim, ns)
            if pvc is None:
                return (
                    f'0/1 nodes are available: persistentvolumeclaim "{claim}" not found. preemption: 0/1 '
                    "nodes are available: 1 Preemption is not helpful for scheduling."
                )
            if (pvc.get("status") or {}).get("phase") != "Bound":
                return (
                    "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
                    "0/1 nodes are available: 1 Preemption is not helpful for scheduling."
                )
        node = self.kube.get("node", self.node_name) or self.ensure_node()
        others = []
        for p in self.kube.list("pod"):
            md = p.get("metadata") or {}
            if md.get("name") == pod["metadata"]["name"] and md.get("namespace") == ns:
                continue
            if (p.get("spec") or {}).get("nodeName") != self.node_name:
                continue
            if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed") or md.get("deletionTimestamp"):
                continue
            others.append(p)
        return scheduling.fit(pod["spec"], node, others)

    def bind(self, pod: dict) -> dict:
        md = pod["metadata"]
        self.kube.bind_pod(md["name"], md["namespace"], self.node_name)
        out = self.kube.get("pod", md["name"], md["namespace"]) or pod
        self.recorder.event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {md['namespace']}/{md['name']} to {self.node_name}",
            "default-scheduler",
        )
        return out

    # ================================================================ helpers for the pod runners
    def pvc_dir(self, namespace: str, claim: str) -> Path:
        return self.state_dir / "pvcs" / namespace / claim

    @property
    def registry_addr(self) -> str | None:
        return self._registry_addr or registry.running_addr(self.state_dir)

    def pull_modelcar(self, image: str) -> Path:
        """Pull an oci:// image from the lab registry (skopeo) and unpack it once per digest;
        returns the image's /models directory."""
        ref = image
        host = ref.split("/", 1)[0]
        if host in REGISTRY_ALIASES:
            if not self.registry_addr:
                raise registry.RegistryError("the lab registry is not running")
            ref = self.registry_addr + "/" + ref.split("/", 1)[1]
        if ":" not in ref.rsplit("/", 1)[-1] and "@" not in ref:
            ref += ":latest"
        with self._oci_lock:
            root = self.state_dir / "oci"
            root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                layout = Path(tmp) / "layout"
                registry.pull(ref, layout)
                index = json.loads((layout / "index.json").read_text())
                digest = index["manifests"][0]["digest"].split(":", 1)[1]
                dest = root / digest[:32]
                if not (dest / ".unpacked").exists():
                    shutil.rmtree(dest, ignore_errors=True)
                    registry.unpack_layout(layout, dest)
                    (dest / ".unpacked").write_text(ref + "\n")
        models = dest / "models"
        if not models.is_dir() or not any(models.iterdir()):
            raise registry.RegistryError(f"image {image} has no non-empty /models (modelcar-init would fail)")
        return models

    def container_env(self, namespace: str, pod: dict, container: dict) -> dict[str, str]:
        """The container's environment: envFrom, then env (value and valueFrom)."""
        env: dict[str, str] = {}
        for src in container.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                obj = self.kube.get("configmap", src["configMapRef"].get("name", ""), namespace) or {}
                env.update({prefix + k: v for k, v in (obj.get("data") or {}).items()})
            if "secretRef" in src:
                obj = self.kube.get("secret", src["secretRef"].get("name", ""), namespace) or {}
                env.update({prefix + k: _b64(v) for k, v in (obj.get("data") or {}).items()})
        md = pod.get("metadata") or {}
        for e in container.get("env") or []:
            name = e.get("name")
            if "value" in e or "valueFrom" not in e:
                from .mapping import expand_vars

                env[name] = expand_vars(str(e.get("value", "")), env)
                continue
            vf = e["valueFrom"]
            if "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                obj = self.kube.get("configmap", ref.get("name", ""), namespace) or {}
                val = (obj.get("data") or {}).get(ref.get("key"))
            elif "secretKeyRef" in vf:
                ref = vf["secretKeyRef"]
                obj = self.kube.get("secret", ref.get("name", ""), namespace) or {}
                raw = (obj.get("data") or {}).get(ref.get("key"))
                val = _b64(raw) if raw is not None else None
            elif "fieldRef" in vf:
                path = vf["fieldRef"].get("fieldPath", "")
                val = {
                    "metadata.name": md.get("name"),
                    "metadata.namespace": namespace,
                    "metadata.uid": md.get("uid"),
                    "spec.nodeName": self.node_name,
                    "status.podIP": "127.0.0.1",
                    "status.hostIP": "127.0.0.1",
                    "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName"),
                }.get(path)
                if path.startswith("metadata.labels['"):
                    val = (md.get("labels") or {}).get(path[len("metadata.labels['") : -2])
                elif path.startswith("metadata.annotations['"):
                    val = (md.get("annotations") or {}).get(path[len("metadata.annotations['") : -2])
            elif "resourceFieldRef" in vf:
                val = "1"
            else:
                val = None
            if val is not None:
                env[name] = str(val)
        return env

    # ================================================================ InferenceService
    def reconcile_isvc(self, ns: str, name: str) -> None:
        isvc = self.kube.get("isvc", name, ns)
        if isvc is None or isvc["metadata"].get("deletionTimestamp"):
            self.teardown_isvc(ns, name)
            return
        try:
            kserve.validate_webhook(isvc)
            kserve.validate_canary(isvc)
            if kserve.is_serverless(isvc):
                plans = [self._plan(kserve.Variant(kserve.predictor_service_name(name), isvc))]
            else:
                plans = [self._plan(v) for v in kserve.predictor_variants(isvc)]
        except kserve.SpecError as exc:
            self.recorder.event(
                isvc,
                "Warning",
                "InternalError",
                exc.status_message if exc.webhook else exc.message,
                KSERVE_COMPONENT,
            )
            self._isvc_failed_status(isvc, exc)
            return
        proxy = self._proxy(ns, name)
        # pods the controller does not run (a previous controller's): gone, as after a node reboot
        for pod in self.kube.list("pod", ns, label_selector=f"{kserve.ISVC_LABEL}={name}"):
            pmd = pod["metadata"]
            if (ns, pmd["name"]) not in self.runs and not pmd.get("deletionTimestamp"):
                self.kube.delete("pod", pmd["name"], ns)
        if kserve.is_serverless(isvc):
            self._reconcile_serverless(isvc, plans[0], proxy)
            return
        # reconcileCanaryDeployments (components/predictor.go@v0.20.0) runs after the stable one
        rolled = [self._reconcile_predictor(isvc, plan) for plan in plans]
        self._delete_orphans(ns, name, {plan["variant"].deployment for plan in plans})
        self._replicaset_statuses(ns, name)
        stable, canaries = rolled[0], rolled[1:]
        self.weights[(ns, name)] = _traffic_weights(stable, canaries)
        self._isvc_status(isvc, stable, canaries, proxy)

    def _replicaset_statuses(self, ns: str, name: str) -> None:
        runs = [r for r in self.runs.values() if r.namespace == ns and r.isvc == name and r.owner_kind == "isvc"]
        for stale in self.kube.list("replicaset", ns, label_selector=f"{kserve.ISVC_LABEL}={name}"):
            live = [r for r in runs if f"{r.deployment}-{r.hash}" == stale["metadata"]["name"]]
            self._rs_status(stale, live)

    # ---------------------------------------------------------------- Knative (Serverless) mode
    def _reconcile_serverless(self, isvc: dict, current: dict, proxy: ServiceProxy) -> None:
        """Knative mode: a new revision for each new predictor template, the traffic split over the
        revisions as KServe's Knative Service asks (canaryTrafficPercent; kserve.traffic_targets) and
        the Route resolves it (kserve.route_traffic), the revisions that take no traffic scaled to zero
        (the newest always runs: it must become ready), and status.components.predictor as KServe's
        PropagateStatus writes it (kserve.propagate_rollout)."""
        md = isvc["metadata"]
        ns, name = md["namespace"], md["name"]
        pred = (isvc.get("spec") or {}).get("predictor") or {}
        comp = ((isvc.get("status") or {}).get("components") or {}).get("predictor") or {}
        revisions = self._revisions(ns, name)
        if not revisions or _revision_hash(revisions[-1]) != current["hash"]:
            generation = (
                int(revisions[-1]["metadata"]["labels"][kserve.KN_GENERATION_LABEL]) + 1 if revisions else 1
            )
            revisions.append(
                self._reconcile_predictor(isvc, self._revision_plan(current, generation))["deploy"]
            )
        names = [d["metadata"]["labels"][kserve.KN_REVISION_LABEL] for d in revisions]
        by_name = dict(zip(names, revisions))
        latest = names[-1]
        rolled = {
            latest: self._reconcile_predictor(isvc, self._stored_revision_plan(by_name[latest], current))
        }
        ready = latest if _ready(rolled[latest]) else comp.get("latestReadyRevision")
        ready = ready if ready in by_name else None
        annotations = md.get("annotations") or {}
        rolledout = (
            comp.get("latestRolledoutRevision") if comp.get("latestRolledoutRevision") in by_name else ""
        )
        targets = kserve.traffic_targets(
            pred.get("canaryTrafficPercent"),
            rolledout,
            annotations.get(kserve.TAG_ROUTING_ANNOTATION) == "true",
        )
        traffic = kserve.route_traffic(targets, ready)
        # a revision with traffic, or reachable at a tag, runs; the others are scaled to zero
        routed = {t["revisionName"] for t in traffic if int(t.get("percent") or 0) > 0 or t.get("tag")}
        for rev in names[:-1]:
            if rev in routed:
                rolled[rev] = self._reconcile_predictor(
                    isvc, self._stored_revision_plan(by_name[rev], current)
                )
            else:
                self._scale_to_zero(by_name[rev])
        self._delete_orphans(ns, name, {d["metadata"]["name"] for d in revisions})
        self._replicaset_statuses(ns, name)
        weights: dict[str, int] = {}
        for t in traffic:
            dname = f"{t['revisionName']}-deployment"
            weights[dname] = weights.get(dname, 0) + int(t.get("percent") or 0)
            if t.get("tag"):
                self.tag_routes[(ns, name, t["tag"])] = dname
                t["url"] = self._tag_proxy(ns, name, t["tag"]).url
        self.weights[(ns, name)] = list(weights.items())
        new_comp = kserve.propagate_rollout(comp, latest, ready, traffic)
        if new_comp.get("latestRolledoutRevision") != comp.get("latestRolledoutRevision"):
            self.enqueue(("isvc", ns, name), 0.1)  # KServe's next reconcile writes the new targets
        self._serverless_status(isvc, current, rolled, new_comp, proxy)

    def _revisions(self, ns: str, name: str) -> list[dict]:
        """The revisions' Deployments, oldest first."""
        sel = f"{kserve.KN_CONFIGURATION_LABEL}={kserve.predictor_service_name(name)}"
        items = self.kube.list("deployment", ns, label_selector=sel)
        return sorted(items, key=lambda d: int(d["metadata"]["labels"][kserve.KN_GENERATION_LABEL]))

    def _revision_plan(self, current: dict, generation: int) -> dict:
        """A new revision of the current predictor: its pod template with Knative's labels."""
        isvc = current["variant"].isvc
        rev = kserve.revision_name(isvc["metadata"]["name"], generation)
        template = copy.deepcopy(current["template"])
        template["metadata"]["labels"].update(
            kserve.revision_labels(isvc["metadata"]["name"], rev, generation)
        )
        view = {
            "metadata": {k: isvc["metadata"].get(k) for k in ("name", "namespace", "labels", "annotations")},
            "spec": {"predictor": pred_without_traffic((isvc.get("spec") or {}).get("predictor") or {})},
        }
        return dict(
            current,
            variant=kserve.Variant(f"{rev}-deployment", isvc),
            template=template,
            revision=rev,
            revision_spec=json.dumps(view, sort_keys=True),
        )

    def _stored_revision_plan(self, deploy: dict, current: dict) -> dict:
        """A revision as its Deployment keeps it (a revision never changes): its template and hash; the
        mounts of the InferenceService it was made from."""
        ann = deploy["metadata"].get("annotations") or {}
        view = json.loads(ann.get(REVISION_SPEC_ANNOTATION) or "{}")
        isvc = current["variant"].isvc
        rev_isvc = copy.deepcopy(isvc)
        rev_isvc["metadata"].update(view.get("metadata") or {})
        rev_isvc["spec"]["predictor"] = (view.get("spec") or {}).get("predictor") or {}
        return dict(
            current,
            variant=kserve.Variant(deploy["metadata"]["name"], rev_isvc),
            template=copy.deepcopy(deploy["spec"]["template"]),
            hash=_revision_hash(deploy),
            mounts=kserve.resolve_storage(rev_isvc),
            revision=deploy["metadata"]["labels"][kserve.KN_REVISION_LABEL],
            revision_spec=ann.get(REVISION_SPEC_ANNOTATION),
        )

    def _scale_to_zero(self, deploy: dict) -> None:
        """A revision that no route reaches any more: its pods stop (Knative's autoscaler scales an
        unreachable revision to zero whatever its min-scale), its Deployment stays, at 0 replicas."""
        md = deploy["metadata"]
        for r in [
            r for r in self.runs.values() if r.namespace == md["namespace"] and r.deployment == md["name"]
        ]:
            self._kill(r)
        if (deploy.get("spec") or {}).get("replicas") != 0:
            self.kube.patch("deployment", md["name"], md["namespace"], {"spec": {"replicas": 0}})
        status = {"replicas": 0, "updatedReplicas": 0, "readyReplicas": 0, "availableReplicas": 0}
        if any((deploy.get("status") or {}).get(k) for k in status):
            self.kube.patch_status("deployment", md["name"], md["namespace"], status)

    def _tag_proxy(self, ns: str, name: str, tag: str) -> ServiceProxy:
        """The tag's own address (Knative's {tag}-{route} URL): always the revision behind the tag."""
        proxy = self.tag_proxies.get((ns, name, tag))
        if proxy is None:

            def target(key=(ns, name, tag)) -> int | None:
                dname = self.tag_routes.get(key)
                ready = [
                    r
                    for r in list(self.runs.values())
                    if r.namespace == ns and r.deployment == dname and r.ready
                ]
                return ready[-1].port if ready else None

            proxy = self.tag_proxies[(ns, name, tag)] = ServiceProxy(target)
        return proxy

    def _serverless_status(
        self, isvc: dict, current: dict, rolled: dict, comp: dict, proxy: ServiceProxy
    ) -> None:
        """The InferenceService's status in Serverless mode: the Knative Service's conditions propagated
        (PredictorConfigurationReady: the latest revision ready; PredictorRouteReady: traffic routed;
        PredictorReady and Ready: both), status.components.predictor, url and address."""
        prev = isvc.get("status") or {}
        latest = rolled[comp["latestCreatedRevision"]]
        newest = latest["new"][-1] if latest["new"] else None
        snap = _shown_snapshot(newest, latest["shown_ready"])
        config_ok = comp["latestReadyRevision"] == comp["latestCreatedRevision"]
        route_ok = bool(comp["traffic"])
        detail = _pod_detail(newest, snap)
        config = (
            {"type": "PredictorConfigurationReady", "status": "True"}
            if config_ok
            else {
                "type": "PredictorConfigurationReady",
                "status": "Unknown",
                "reason": "RevisionMissing",
                "message": f"Configuration is waiting for a Revision to become ready. {detail}".strip(),
            }
        )
        route = (
            {"type": "PredictorRouteReady", "status": "True"}
            if route_ok
            else {"type": "PredictorRouteReady", "status": "Unknown", "reason": "RevisionMissing"}
        )
        bad = config if not config_ok else route
        pred = (
            {"type": "PredictorReady", "status": "True"}
            if config_ok and route_ok
            else {
                "type": "PredictorReady",
                "status": bad["status"],
                "reason": bad["reason"],
                "message": bad.get("message", ""),
            }
        )
        top = dict(pred, type="Ready")
        ingress = (
            {"type": "IngressReady", "status": "True"}
            if route_ok
            else {"type": "IngressReady", "status": "Unknown"}
        )
        url = proxy.url
        component = dict(comp, url=url, address={"url": url})
        if not component.get("previousRolledoutRevision"):
            component["previousRolledoutRevision"] = None
        serving = [r for x in rolled.values() for r in x["shown_ready"]]  # as written (see _isvc_status)
        kind, rt = current["kind"], current["rt"]
        status = {
            "url": url,
            "address": {"url": url},
            "components": {"predictor": component},
            "conditions": conditions_merge(prev.get("conditions"), [ingress, config, route, pred, top]),
            "deploymentMode": "Serverless",
            "modelStatus": _model_status(serving, newest, snap),
            "observedGeneration": isvc["metadata"].get("generation", 1),
            "servingRuntimeName" if kind == "ServingRuntime" else "clusterServingRuntimeName": rt["metadata"][
                "name"
            ],
        }
        self.kube.patch_status("isvc", isvc["metadata"]["name"], isvc["metadata"]["namespace"], status)

    def _plan(self, variant: kserve.Variant) -> dict:
        """What one predictor Deployment should run (raises SpecError)."""
        isvc = variant.isvc
        ns = isvc["metadata"]["namespace"]
        model = ((isvc.get("spec") or {}).get("predictor") or {}).get("model") or {}
        kind, rt = kserve.select_runtime(isvc, self.kube.list("sr", ns), self.kube.list("csr"))
        container = kserve.merge_container(kserve.runtime_container(rt), model)
        container = kserve.replace_placeholders(container, isvc["metadata"])
        mounts = kserve.resolve_storage(isvc)
        template = kserve.pod_template(isvc, kind, rt, container, mounts)
        thash = short_hash(json.dumps(template, sort_keys=True))
        return {
            "variant": variant,
            "kind": kind,
            "rt": rt,
            "template": template,
            "mounts": mounts,
            "hash": thash,
        }

    def _reconcile_predictor(self, isvc: dict, plan: dict) -> dict:
        """One predictor Deployment, its Service, ReplicaSet and pod (the rollout rules)."""
        variant, template, thash = plan["variant"], plan["template"], plan["hash"]
        ns, name, dname = isvc["metadata"]["namespace"], isvc["metadata"]["name"], variant.deployment
        key = ("isvc", ns, name)
        deploy = self._ensure_deployment(
            variant.isvc, dname, template, thash, plan.get("revision"), plan.get("revision_spec")
        )
        if not plan.get("revision"):  # Knative's revisions have their own Services; nothing reads them
            self._ensure_service(variant.isvc, dname)
        return self._roll_out(variant.isvc, deploy, plan, key)

    def _roll_out(self, owner: dict, deploy: dict, plan: dict, key: tuple, **run_kw) -> dict:
        """The Deployment controller, scheduler and kubelet for one Deployment of an owner (an
        InferenceService's predictor, an LLMInferenceService's workload): its ReplicaSet and pod,
        the rollout rules, the pods' and the Deployment's status. key: the owner's reconcile key."""
        template, thash = plan["template"], plan["hash"]
        ns, dname = deploy["metadata"]["namespace"], deploy["metadata"]["name"]
        rs = self._ensure_replicaset(deploy, template, thash)
        runs = sorted(
            (r for r in self.runs.values() if r.namespace == ns and r.deployment == dname),
            key=lambda r: r.pod["metadata"].get("creationTimestamp") or "",
        )
        new = [r for r in runs if r.hash == thash]
        old = [r for r in runs if r.hash != thash]
        if not new:
            if old and _max_surge(deploy) == 0:
                for r in old:
                    self._kill(r)
                old = []
            new = [self._create_pod(owner, rs, template, thash, plan["mounts"], dname, **run_kw)]
            self.rollout_started[(ns, dname, thash)] = time.time()
        for r in new:
            if not r.scheduled:
                msg = self.schedule(r.pod, [m.claim for m in r.mounts if m.kind == "pvc"])
                if msg:
                    with r.lock:
                        r.unschedulable = msg
                    self.recorder.event(r.pod, "Warning", "FailedScheduling", msg, "default-scheduler")
                    self.enqueue(key, 5.0)
                elif not self.stop_event.is_set():
                    r.pod = self.bind(r.pod)
                    r.start()
        if any(r.ready for r in new) and old:
            for r in old:
                self._kill(r)
            old = []
        shown_ready = []
        for r in old + new:
            # the engine's address before Ready: a reader that finds the pod Ready finds where it answers (a canary
            # step read a Ready pod between the two writes and scraped podIP:8080, which nothing serves in the lab)
            status = r.pod_status()
            if any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
            ):
                self._annotate_engine_url(r)
                shown_ready.append(r)
            self.kube.patch_status("pod", r.name, ns, status)
        self._deployment_status(deploy, old, new, thash, shown_ready)
        return dict(plan, deploy=deploy, old=old, new=new, shown_ready=shown_ready)

    def _annotate_engine_url(self, run: PredictorRun) -> None:
        """The pod's engine as this machine reaches it (podIP:8080 on a cluster; here the engine's
        own port), once it serves: what reads one pod's /metrics (the canary's arms) uses it."""
        url = f"http://127.0.0.1:{run.port}"
        if not run.ready or (run.pod["metadata"].get("annotations") or {}).get(LOCAL_URL_ANNOTATION) == url:
            return
        pod = self.kube.patch(
            "pod", run.name, run.namespace, {"metadata": {"annotations": {LOCAL_URL_ANNOTATION: url}}}
        )
        if pod is not None:
            run.pod["metadata"].setdefault("annotations", {})[LOCAL_URL_ANNOTATION] = url

    def _delete_orphans(self, ns: str, name: str, expected: set[str]) -> None:
        """Predictor Deployments and Services of the InferenceService that no predictor or canary
        names any more (a removed canary, the old stable one after a promotion): gone, with their
        pods, as reconcileCanaryDeployments' cleanup and the garbage collector do."""
        sel = f"{kserve.ISVC_LABEL}={name},{kserve.COMPONENT_LABEL}=predictor"
        for deploy in self.kube.list("deployment", ns, label_selector=sel):
            dname = deploy["metadata"]["name"]
            if dname in expected:
                continue
            for r in [r for r in self.runs.values() if r.namespace == ns and r.deployment == dname]:
                self._kill(r)
            for rs in self.kube.list("replicaset", ns, label_selector=f"{kserve.ISVC_LABEL}={name}"):
                if any(o.get("name") == dname for o in rs["metadata"].get("ownerReferences") or []):
                    self.kube.delete("replicaset", rs["metadata"]["name"], ns)
            self.kube.delete("deployment", dname, ns)
        for svc in self.kube.list("service", ns, label_selector=sel):
            if svc["metadata"]["name"] not in expected:
                self.kube.delete("service", svc["metadata"]["name"], ns)

    def teardown_isvc(self, ns: str, name: str) -> None:
        for r in [r for r in self.runs.values() if r.namespace == ns and r.isvc == name and r.owner_kind == "isvc"]:
            self._kill(r)
        proxy = self.proxies.pop((ns, name), None)
        self.weights.pop((ns, name), None)
        for key in [k for k in self.tag_proxies if k[:2] == (ns, name)]:
            self.tag_proxies.pop(key).close()
            self.tag_routes.pop(key, None)
        if proxy is not None:
            proxy.close()
        # what a garbage collector would remove with its owner
        for pod in self.kube.list("pod", ns, label_selector=f"{kserve.ISVC_LABEL}={name}"):
            self.kube.delete("pod", pod["metadata"]["name"], ns)
        for rs in self.kube.list("replicaset", ns, label_selector=f"{kserve.ISVC_LABEL}={name}"):
            self.kube.delete("replicaset", rs["metadata"]["name"], ns)
        self._delete_orphans(ns, name, set())

    def _kill(self, run: PredictorRun) -> None:
        run.deleted = True
        self.recorder.event(run.pod, "Normal", "Killing", f"Stopping container {run.container_name}", "kubelet")
        run.stop()
        self.kube.delete("pod", run.name, run.namespace)
        self.runs.pop((run.namespace, run.name), None)
        run.cleanup()

    def _ensure_deployment(
        self,
        isvc: dict,
        name: str,
        template: dict,
        thash: str,
        revision: str | None = None,
        revision_spec=None,
    ) -> dict:
        md = isvc["metadata"]
        pred = isvc["spec"].get("predictor") or {}
        # a Knative revision's Deployment selects its pods by revision, and carries the revision's labels
        selector = {kserve.KN_REVISION_LABEL: revision} if revision else {"app": f"isvc.{name}"}
        spec = {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": copy.deepcopy(template),
            "strategy": copy.deepcopy(pred.get("deploymentStrategy"))
            or {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "progressDeadlineSeconds": 600,
            "revisionHistoryLimit": 10,
        }
        existing = self.kube.get("deployment", name, md["namespace"])
        labels = {
            kserve.ISVC_LABEL: md["name"],
            kserve.COMPONENT_LABEL: "predictor",
            "app": f"isvc.{name}",
        }
        if revision:
            labels = {
                k: v
                for k, v in template["metadata"]["labels"].items()
                if k in labels or k.startswith("serving.")
            }
        if existing is None:
            body = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": name,
                    "namespace": md["namespace"],
                    "labels": labels,
                    "annotations": {
                        TEMPLATE_HASH_ANNOTATION: thash,
                        "deployment.kubernetes.io/revision": "1",
                        **({REVISION_SPEC_ANNOTATION: revision_spec} if revision_spec else {}),
                    },
                    "ownerReferences": [owner_ref(isvc)],
                },
                "spec": spec,
            }
            return self.kube.create("deployment", body, namespace=md["namespace"])
        if revision and (existing.get("spec") or {}).get("replicas") == 0:  # routed again: scaled from zero
            return self.kube.patch("deployment", name, md["namespace"], {"spec": {"replicas": 1}}) or existing
        ann = existing["metadata"].get("annotations") or {}
        strategy_now = json.dumps(existing["spec"].get("strategy"), sort_keys=True)
        if ann.get(TEMPLATE_HASH_ANNOTATION) != thash or (
            pred.get("deploymentStrategy") and strategy_now != json.dumps(spec["strategy"], sort_keys=True)
        ):
            body = copy.deepcopy(existing)
            body.pop("status", None)
            body["spec"].update(spec)
            anns = body["metadata"].setdefault("annotations", {})
            if ann.get(TEMPLATE_HASH_ANNOTATION) != thash:
                anns["deployment.kubernetes.io/revision"] = str(
                    int(ann.get("deployment.kubernetes.io/revision", "1")) + 1
                )
            anns[TEMPLATE_HASH_ANNOTATION] = thash
            return self.kube.replace("deployment", body)
        return existing

    def _ensure_service(self, isvc: dict, name: str) -> None:
        md = isvc["metadata"]
        if self.kube.get("service", name, md["namespace"]) is not None:
            return
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": md["namespace"],
                "labels": {kserve.ISVC_LABEL: md["name"], kserve.COMPONENT_LABEL: "predictor"},
                "ownerReferences": [owner_ref(isvc)],
            },
            "spec": {
                "selector": {"app": f"isvc.{name}"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
            },
        }
        try:
            self.kube.create("service", body, namespace=md["namespace"])
        except ApiException as exc:
            if exc.status != 409:
                raise

    def _ensure_replicaset(self, deploy: dict, template: dict, thash: str) -> dict:
        md = deploy["metadata"]
        name = f"{md['name']}-{thash}"
        existing = self.kube.get("replicaset", name, md["namespace"])
        if existing is not None:
            return existing
        tmpl = copy.deepcopy(template)
        tmpl["metadata"]["labels"]["pod-template-hash"] = thash
        sel = dict(deploy["spec"]["selector"]["matchLabels"], **{"pod-template-hash": thash})
        body = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": md["namespace"],
                "labels": dict(tmpl["metadata"]["labels"]),
                "annotations": {
                    "deployment.kubernetes.io/revision": (md.get("annotations") or {}).get(
                        "deployment.kubernetes.io/revision", "1"
                    ),
                    "deployment.kubernetes.io/desired-replicas": "1",
                    "deployment.kubernetes.io/max-replicas": "2",
                },
                "ownerReferences": [owner_ref(deploy)],
            },
            "spec": {"replicas": 1, "selector": {"matchLabels": sel}, "template": tmpl},
        }
        return self.kube.create("replicaset", body, namespace=md["namespace"])

    def _create_pod(
        self, isvc: dict, rs: dict, template: dict, thash: str, mounts: list, deployment: str, **run_kw
    ) -> PredictorRun:
        ns = rs["metadata"]["namespace"]
        pod_name = f"{rs['metadata']['name']}-{random_suffix(5)}"
        meta = copy.deepcopy(template["metadata"])
        meta["labels"]["pod-template-hash"] = thash
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": ns,
                "generateName": rs["metadata"]["name"] + "-",
                "labels": meta["labels"],
                "annotations": meta.get("annotations") or {},
                "ownerReferences": [owner_ref(rs)],
            },
            "spec": copy.deepcopy(template["spec"]),
        }
        pod = self.kube.create("pod", body, namespace=ns)
        run = PredictorRun(self, ns, pod_name, isvc["metadata"]["name"], thash, pod, mounts, **run_kw)
        run.deployment = deployment
        self.runs[(ns, pod_name)] = run
        self.recorder.event(
            rs, "Normal", "SuccessfulCreate", f"Created pod: {pod_name}", "replicaset-controller"
        )
        return run

    def _proxy(self, ns: str, name: str) -> ServiceProxy:
        proxy = self.proxies.get((ns, name))
        if proxy is None:

            def target(ns=ns, name=name) -> int | None:
                return self._pick_port(ns, name)

            proxy = self.proxies[(ns, name)] = ServiceProxy(target)
        return proxy

    def _pick_port(self, ns: str, name: str) -> int | None:
        """The engine port one connection goes to: a predictor Deployment drawn by its traffic
        weight (the HTTPRoute's weighted backendRefs, see _traffic_weights), then its newest
        ready pod."""
        weights = [(d, w) for d, w in self.weights.get((ns, name)) or [] if w > 0]
        if not weights:
            return None
        dname = random.choices([d for d, _ in weights], [w for _, w in weights])[0]
        ready = [
            r for r in list(self.runs.values()) if r.namespace == ns and r.deployment == dname and r.ready
        ]
        return ready[-1].port if ready else None

    # ---------------------------------------------------------------- statuses
    def _rs_status(self, rs: dict, runs: list[PredictorRun]) -> None:
        ready = sum(1 for r in runs if r.ready)
        md = rs["metadata"]
        if not runs and (rs.get("spec") or {}).get("replicas", 1) != 0:
            self.kube.patch("replicaset", md["name"], md["namespace"], {"spec": {"replicas": 0}})
        self.kube.patch_status(
            "replicaset",
            md["name"],
            md["namespace"],
            {
                "replicas": len(runs),
                "fullyLabeledReplicas": len(runs),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": md.get("generation", 1),
            },
        )

    def _deployment_status(self, deploy: dict, old: list, new: list, thash: str, shown_ready: list) -> None:
        """shown_ready: the pods this reconcile wrote Ready. The Deployment controller counts ready and
        available replicas from the pods' Ready conditions (podutil.IsPodAvailable), never from an engine
        that became ready after its pod was written."""
        md = deploy["metadata"]
        prev = deploy.get("status") or {}
        ready_new = [r for r in new if r in shown_ready]
        ready_all = [r for r in old + new if r in shown_ready]
        gen = md.get("generation", 1)
        observed = gen if ready_new else prev.get("observedGeneration")
        rs_name = f"{md['name']}-{thash}"
        started = self.rollout_started.get((md["namespace"], md["name"], thash), time.time())
        deadline = (deploy.get("spec") or {}).get("progressDeadlineSeconds", 600)
        if ready_new:
            progressing = {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "message": f'ReplicaSet "{rs_name}" has successfully progressed.',
            }
        elif time.time() - started > deadline:
            progressing = {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": f'ReplicaSet "{rs_name}" has timed out progressing.',
            }
        else:
            progressing = {
                "type": "Progressing",
                "status": "True",
                "reason": "ReplicaSetUpdated",
                "message": f'ReplicaSet "{rs_name}" is progressing.',
            }
            self.enqueue(
                _owner_key(md),
                max(1.0, deadline - (time.time() - started) + 1),
            )
        min_available = 1 - _max_unavailable(deploy)
        available = (
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability.",
            }
            if len(ready_all) >= max(min_available, 0) and (ready_all or min_available <= 0)
            else {
                "type": "Available",
                "status": "False",
                "reason": "MinimumReplicasUnavailable",
                "message": "Deployment does not have minimum availability.",
            }
        )
        ts = now()
        conds = conditions_merge(
            prev.get("conditions"), [dict(available, lastUpdateTime=ts), dict(progressing, lastUpdateTime=ts)]
        )
        status = {
            "replicas": len(old) + len(new),
            "updatedReplicas": len(new),
            "readyReplicas": len(ready_all),
            "availableReplicas": len(ready_all),
            "unavailableReplicas": max(0, 1 - len(ready_all)),
            "conditions": conds,
        }
        if observed is not None:
            status["observedGeneration"] = observed
        if not ready_all:
            status["readyReplicas"] = 0
        self.kube.patch_status("deployment", md["name"], md["namespace"], status)
        deploy["status"] = status

    def _isvc_status(self, isvc: dict, stable: dict, canaries: list[dict], proxy: ServiceProxy) -> None:
        kind, rt, deploy, old, new = (stable[k] for k in ("kind", "rt", "deploy", "old", "new"))
        prev = isvc.get("status") or {}
        dstatus = deploy.get("status") or {}
        # ready as this reconcile wrote the pods (stable["shown_ready"]), not as the engines are now: an
        # engine that becomes ready while this reconcile runs has its pod still written not Ready, and
        # KServe's PredictorReady follows the Deployment's availability, which follows the pods' Ready
        # conditions; a reader that finds the InferenceService Ready must find its pod Ready (the next
        # reconcile, which the engine's readiness queues, writes both)
        shown = stable["shown_ready"]
        serving = [r for r in old + new if r in shown]
        newest = new[-1] if new else None
        snap = _shown_snapshot(newest, shown)
        progress = next((c for c in dstatus.get("conditions") or [] if c["type"] == "Progressing"), {})
        ready = bool(serving) and progress.get("status") != "False"
        if ready:
            pred = {"type": "PredictorReady", "status": "True"}
        else:
            reason, msg = "MinimumReplicasUnavailable", "Deployment does not have minimum availability."
            if progress.get("status") == "False":
                reason, msg = progress["reason"], progress["message"]
            detail = _pod_detail(newest, snap)
            pred = {
                "type": "PredictorReady",
                "status": "False",
                "reason": reason,
                "message": f"{msg} {detail}".strip(),
            }
        ingress = {"type": "IngressReady", "status": "True"}
        top = (
            {"type": "Ready", "status": "True"}
            if ready
            else {"type": "Ready", "status": "False", "reason": pred["reason"], "message": pred["message"]}
        )
        canary_statuses, canary_cond = _canary_status(canaries)
        conds = conditions_merge(prev.get("conditions"), [ingress, pred, top] + canary_cond)
        url = proxy.url
        status = {
            "url": url,
            "address": {"url": url},
            "components": {"predictor": {"url": url, "address": {"url": url}}},
            "conditions": conds,
            "deploymentMode": "Standard",
            "modelStatus": _model_status(serving, newest, snap),
        }
        status["servingRuntimeName" if kind == "ServingRuntime" else "clusterServingRuntimeName"] = rt[
            "metadata"
        ]["name"]
        if dstatus.get("observedGeneration") is not None:
            status["observedGeneration"] = dstatus["observedGeneration"]
        if canary_statuses:
            status["canaryStatuses"] = canary_statuses
        drop = {"servingRuntimeName", "clusterServingRuntimeName", "canaryStatuses"} - set(status)
        patch = dict(status)
        for k in drop:
            if k in prev:
                patch[k] = None
        if (
            "lastFailureInfo" in (prev.get("modelStatus") or {})
            and "lastFailureInfo" not in status["modelStatus"]
        ):
            patch["modelStatus"] = dict(status["modelStatus"], lastFailureInfo=None)
        self.kube.patch_status("isvc", isvc["metadata"]["name"], isvc["metadata"]["namespace"], patch)

    def _isvc_failed_status(self, isvc: dict, exc: kserve.SpecError) -> None:
        prev = isvc.get("status") or {}
        pred = {
            "type": "PredictorReady",
            "status": "False",
            "reason": exc.reason,
            "message": exc.status_message,
        }
        top = {"type": "Ready", "status": "False", "reason": exc.reason, "message": exc.status_message}
        conds = [c for c in prev.get("conditions") or [] if c.get("type") == "IngressReady"] or [
            {"type": "IngressReady", "status": "False", "reason": exc.reason}
        ]
        states = dict((prev.get("modelStatus") or {}).get("states") or {"activeModelState": ""})
        states["targetModelState"] = "FailedToLoad"
        old_info = (prev.get("modelStatus") or {}).get("lastFailureInfo") or {}
        when = old_info.get("time") if old_info.get("message") == exc.status_message else None
        status = {
            "conditions": conditions_merge(prev.get("conditions"), conds + [pred, top]),
            "modelStatus": {
                "transitionStatus": exc.transition,
                "states": states,
                "lastFailureInfo": {
                    "reason": exc.reason,
                    "message": exc.status_message,
                    "time": when or now(),
                },
                "copies": {"failedCopies": 0, "totalCopies": 0},
            },
        }
        self.kube.patch_status("isvc", isvc["metadata"]["name"], isvc["metadata"]["namespace"], status)

    # ================================================================ PersistentVolumeClaim
    def reconcile_pvc(self, ns: str, name: str) -> None:
        pvc = self.kube.get("pvc", name, ns)
        if pvc is None or pvc["metadata"].get("deletionTimestamp"):
            return
        d = self.pvc_dir(ns, name)
        d.mkdir(parents=True, exist_ok=True)
        status = pvc.get("status") or {}
        if status.get("phase") == "Bound":
            return
        spec = pvc.get("spec") or {}
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        pv_name = spec.get("volumeName") or f"pvc-{pvc['metadata']['uid']}"
        modes = spec.get("accessModes") or ["ReadWriteOnce"]
        if self.kube.get("pv", pv_name) is None:
            pv = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {
                    "name": pv_name,
                    "labels": {"specpilot.io/lab": "true"},
                    "annotations": {"pv.kubernetes.io/provisioned-by": "specpilot.io/lab-hostpath"},
                },
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": modes,
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": spec.get("storageClassName") or "",
                    "hostPath": {"path": str(d)},
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": ns,
                        "name": name,
                        "uid": pvc["metadata"]["uid"],
                    },
                },
            }
            try:
                self.kube.create("pv", pv)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            self.kube.patch_status("pv", pv_name, None, {"phase": "Bound"})
        if not spec.get("volumeName"):
            self.kube.patch(
                "pvc",
                name,
                ns,
                {
                    "spec": {"volumeName": pv_name},
                    "metadata": {
                        "annotations": {
                            "pv.kubernetes.io/bind-completed": "yes",
                            "pv.kubernetes.io/bound-by-controller": "yes",
                            LOCAL_URL_ANNOTATION: str(d),
                        }
                    },
                },
            )
        self.kube.patch_status(
            "pvc", name, ns, {"phase": "Bound", "accessModes": modes, "capacity": {"storage": size}}
        )
        self.recorder.event(
            pvc,
            "Normal",
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {pv_name} (lab: {d})",
            "specpilot.io/lab-hostpath",
        )

    def _forget_pvc(self, ns: str, name: str) -> None:
        """Reclaim policy Delete: the claim's data goes with it."""
        for pv in self.kube.list("pv"):
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if ref.get("namespace") == ns and ref.get("name") == name:
                self.kube.delete("pv", pv["metadata"]["name"])
        shutil.rmtree(self.pvc_dir(ns, name), ignore_errors=True)

    # ================================================================ Job
    def job_may_retry(self, jr: JobPodRun) -> bool:
        job = self.kube.get("job", jr.job_name, jr.namespace)
        if job is None:
            return False
        limit = (job.get("spec") or {}).get("backoffLimit", 6)
        failed = (job.get("status") or {}).get("failed", 0) + jr.failures
        return failed <= limit

    def reconcile_job(self, ns: str, name: str) -> None:
        job = self.kube.get("job", name, ns)
        mine = [jr for jr in self.job_pods.values() if jr.namespace == ns and jr.job_name == name]
        if job is None or job["metadata"].get("deletionTimestamp"):
            for jr in mine:
                jr.kill()
                self.job_pods.pop((jr.namespace, jr.name), None)
                self.kube.delete("pod", jr.name, ns)
            return
        spec = job.get("spec") or {}
        status = dict(job.get("status") or {})
        conds = list(status.get("conditions") or [])
        finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conds)
        # collect finished pods into the counts (each once)
        succeeded = int(status.get("succeeded", 0))
        failed = int(status.get("failed", 0))
        # one consistent view: a pod thread may finish while this runs
        done = {id(jr): jr.finished for jr in mine}
        for jr in mine:
            if done[id(jr)] and not hasattr(jr, "finished_at"):
                jr.finished_at = now()
        for jr in mine:
            if done[id(jr)] and not getattr(jr, "counted", False):
                jr.counted = True
                if jr.phase == "Succeeded":
                    succeeded += 1
                elif jr.reason != "DeadlineExceeded":
                    failed += max(1, jr.failures)
            self.kube.patch_status("pod", jr.name, ns, jr.pod_status())
        active = [jr for jr in mine if not done[id(jr)]]
        completions = spec.get("completions", 1) or 1
        parallelism = spec.get("parallelism", 1)
        backoff_limit = spec.get("backoffLimit", 6)
        start_time = status.get("startTime")
        ts = now()
        new_conds: list[dict] = []
        if not finished:
            deadline = spec.get("activeDeadlineSeconds")
            if succeeded >= completions:
                new_conds = [
                    {
                        "type": "SuccessCriteriaMet",
                        "status": "True",
                        "reason": "CompletionsReached",
                        "message": "Reached expected number of succeeded pods",
                    },
                    {
                        "type": "Complete",
                        "status": "True",
                        "reason": "CompletionsReached",
                        "message": "Reached expected number of succeeded pods",
                    },
                ]
            elif failed > backoff_limit:
                new_conds = [
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                    },
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                    },
                ]
            elif deadline is not None and start_time and elapsed_since(start_time) >= float(deadline):
                for jr in active:
                    jr.kill(
                        "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
                    )
                    jr.counted = True
                    self.kube.patch_status("pod", jr.name, ns, jr.pod_status())
                    self.recorder.event(
                        job, "Normal", "SuccessfulDelete", f"Deleted pod: {jr.name}", "job-controller"
                    )
                    self.kube.delete("pod", jr.name, ns)
                    self.job_pods.pop((ns, jr.name), None)
                active = []
                new_conds = [
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": "DeadlineExceeded",
                        "message": "Job was active longer than specified deadline",
                    },
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "DeadlineExceeded",
                        "message": "Job was active longer than specified deadline",
                    },
                ]
                self.recorder.event(
                    job,
                    "Warning",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                    "job-controller",
                )
            elif not spec.get("suspend"):
                want = min(parallelism, completions - succeeded) - len(active)
                retry_wait = 0.0
                if want > 0 and failed > 0:
                    last_fail = (
                        max((parse_time(getattr(jr, "finished_at", None)) or 0) for jr in mine) if mine else 0
                    )
                    retry_wait = self.job_backoff * 2 ** (failed - 1) - (time.time() - last_fail)
                if want > 0 and retry_wait > 0:
                    self.enqueue(("job", ns, name), min(retry_wait, 360))
                else:
                    log.debug(
                        "job %s/%s: succeeded %s failed %s active %s -> %s new pod(s)",
                        ns,
                        name,
                        succeeded,
                        failed,
                        len(active),
                        max(0, want),
                    )
                    for _ in range(max(0, want)):
                        jr = self._create_job_pod(job)
                        active.append(jr)
                        mine.append(jr)
                if start_time is None:
                    start_time = ts
            for jr in active:
                if not jr.scheduled:
                    msg = self.schedule(
                        jr.pod,
                        [
                            v["persistentVolumeClaim"]["claimName"]
                            for v in jr.pod["spec"].get("volumes") or []
                            if "persistentVolumeClaim" in v
                        ],
                    )
                    if msg:
                        jr.unschedulable = msg
                        self.recorder.event(jr.pod, "Warning", "FailedScheduling", msg, "default-scheduler")
                        self.enqueue(("job", ns, name), 5.0)
                    elif not self.stop_event.is_set():
                        jr.pod = self.bind(jr.pod)
                        jr.start()
                self.kube.patch_status("pod", jr.name, ns, jr.pod_status())
            if deadline is not None and start_time and not new_conds:
                self.enqueue(("job", ns, name), max(0.2, float(deadline) - elapsed_since(start_time) + 0.1))
        new_status = {
            "active": len([jr for jr in active if not jr.finished]) or None,
            "succeeded": succeeded or None,
            "failed": failed or None,
            "ready": len([jr for jr in active if jr.phase == "Running"]),
            "terminating": 0,
            "uncountedTerminatedPods": {},
        }
        if start_time:
            new_status["startTime"] = start_time
        if new_conds:
            new_status["conditions"] = conds + [
                dict(c, lastProbeTime=ts, lastTransitionTime=ts) for c in new_conds
            ]
            if any(c["type"] == "Complete" for c in new_conds):
                new_status["completionTime"] = ts
                self.recorder.event(job, "Normal", "Completed", "Job completed", "job-controller")
            else:
                self.recorder.event(
                    job, "Warning", new_conds[-1]["reason"], new_conds[-1]["message"], "job-controller"
                )
            if spec.get("ttlSecondsAfterFinished") is not None:
                self.enqueue(("job", ns, name), float(spec["ttlSecondsAfterFinished"]) + 0.1)
        elif finished and spec.get("ttlSecondsAfterFinished") is not None:
            done_at = max((parse_time(c.get("lastTransitionTime")) or 0) for c in conds)
            if time.time() - done_at >= float(spec["ttlSecondsAfterFinished"]):
                self.kube.delete("job", name, ns)
                for jr in mine:
                    self.kube.delete("pod", jr.name, ns)
                    self.job_pods.pop((ns, jr.name), None)
                return
            self.enqueue(
                ("job", ns, name), float(spec["ttlSecondsAfterFinished"]) - (time.time() - done_at) + 0.1
            )
        self.kube.patch_status("job", name, ns, new_status)

    def _create_job_pod(self, job: dict) -> JobPodRun:
        md = job["metadata"]
        ns = md["namespace"]
        tmpl = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        labels = dict((tmpl.get("metadata") or {}).get("labels") or {})
        uid = md["uid"]
        labels.update(
            {
                "controller-uid": uid,
                "job-name": md["name"],
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": md["name"],
            }
        )
        name = f"{md['name']}-{random_suffix(5)}"
        spec = tmpl.get("spec") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "generateName": md["name"] + "-",
                "labels": labels,
                "annotations": (tmpl.get("metadata") or {}).get("annotations") or {},
                "ownerReferences": [owner_ref(job)],
            },
            "spec": spec,
        }
        pod = self.kube.create("pod", body, namespace=ns)
        self.recorder.event(job, "Normal", "SuccessfulCreate", f"Created pod: {name}", "job-controller")
        jr = JobPodRun(self, job, pod)
        self.job_pods[(ns, name)] = jr
        return jr


# ---------------------------------------------------------------- small helpers
def _owner_key(md: dict) -> tuple:
    """The reconcile key of a Deployment's owner: its InferenceService or LLMInferenceService."""
    labels = md.get("labels") or {}
    if kserve.ISVC_LABEL in labels:
        return ("isvc", md["namespace"], labels[kserve.ISVC_LABEL])
    return ("llmisvc", md["namespace"], llmisvc.owner_of(labels) or "")


def _revision_hash(deploy: dict) -> str:
    return (deploy["metadata"].get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION, "")


def pred_without_traffic(predictor: dict) -> dict:
    """The predictor as its revision keeps it: canaryTrafficPercent is the Route's, not the revision's."""
    return {k: v for k, v in predictor.items() if k != "canaryTrafficPercent"}


def _ready(rolled: dict) -> bool:
    """The Deployment has an available replica (deploy.Status.AvailableReplicas > 0): a pod this reconcile wrote
    Ready (not one whose engine became ready since: its pod still reads not Ready, and a reader that trusts the
    InferenceService's status - canaryStatuses, the revisions - must find it Ready)."""
    return bool(rolled["shown_ready"])


def _traffic_weights(stable: dict, canaries: list[dict]) -> list[tuple[str, int]]:
    """applyCanaryWeights (reconcilers/ingress/httproute_reconciler.go, kserve/kserve #5912 and
    #5984, after v0.20.0: v0.20.0 itself renders the canary Deployment and Service but routes
    nothing to them): each ready canary gets its trafficPercent, the stable predictor the rest;
    a canary that is not ready gets no traffic."""
    ready = [(c["variant"].deployment, c["variant"].traffic_percent) for c in canaries if _ready(c)]
    return [(stable["variant"].deployment, 100 - sum(w for _, w in ready))] + ready


def _canary_status(canaries: list[dict]) -> tuple[list[dict], list[dict]]:
    """status.canaryStatuses and the CanaryPredictorReady condition, as
    reconcileCanaryDeployments (components/predictor.go@v0.20.0) sets them; no condition
    without canaries (ClearCondition)."""
    statuses = [
        {"name": c["variant"].canary, "ready": _ready(c), "trafficPercent": c["variant"].traffic_percent}
        for c in canaries
    ]
    if not statuses:
        return [], []
    ready = all(s["ready"] for s in statuses)
    cond = {
        "type": "CanaryPredictorReady",
        "status": "True" if ready else "False",
        "reason": "AllCanariesReady" if ready else "CanariesNotReady",
    }
    return statuses, [cond]


def _b64(value: str) -> str:
    try:
        return base64.b64decode(value).decode("utf-8", "replace")
    except (ValueError, TypeError):
        return str(value)


def _int_or_percent(value, total: int, round_up: bool) -> int:
    if value is None:
        return 0
    s = str(value)
    if s.endswith("%"):
        pct = float(s[:-1]) / 100 * total
        import math

        return int(math.ceil(pct) if round_up else math.floor(pct))
    return int(s)


def _max_surge(deploy: dict) -> int:
    strategy = (deploy.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    ru = strategy.get("rollingUpdate") or {}
    return _int_or_percent(ru.get("maxSurge", "25%"), 1, round_up=True)


def _max_unavailable(deploy: dict) -> int:
    strategy = (deploy.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    ru = strategy.get("rollingUpdate") or {}
    return _int_or_percent(ru.get("maxUnavailable", "25%"), 1, round_up=False)


def _shown_snapshot(run: PredictorRun | None, shown_ready: list) -> dict:
    """The run's snapshot with ``ready`` as this reconcile wrote its pod (in ``shown_ready``), not as the
    engine is now (see _isvc_status); {} without a run."""
    return dict(run.snapshot(), ready=run in shown_ready) if run else {}


def _pod_detail(run: PredictorRun | None, snap: dict) -> str:
    """What the newest predictor pod is doing, for the conditions' messages."""
    if run is None:
        return ""
    if not snap.get("scheduled"):
        return f"Pod {run.name} is Pending: {snap.get('unschedulable') or 'waiting to be scheduled'}"
    state = snap.get("state") or {}
    last = (snap.get("last_state") or {}).get("terminated")
    if last:
        why = snap.get("error") or last.get("message") or "see the pod log"
        waiting = (state.get("waiting") or {}).get("reason")
        return (
            f"Container {kserve.CONTAINER} in pod {run.name} exited with code {last.get('exitCode')}"
            f"{' (' + waiting + ', restarts ' + str(snap.get('restart_count')) + ')' if waiting else ''}: {why}"
        )
    if "waiting" in state:
        w = state["waiting"]
        return f"Pod {run.name}: {w.get('reason', '')}{': ' + w['message'] if w.get('message') else ''}"
    if "running" in state:
        return f"Pod {run.name}: engine started, waiting for /health"
    return ""


def _model_status(serving: list, newest: PredictorRun | None, snap: dict) -> dict:
    active = "Loaded" if serving else "Pending"
    copies = {"failedCopies": 0, "totalCopies": 1}
    if newest is not None and snap.get("ready"):
        return {
            "transitionStatus": "UpToDate",
            "states": {"activeModelState": "Loaded", "targetModelState": "Loaded"},
            "copies": copies,
        }
    last = (snap.get("last_state") or {}).get("terminated") if snap else None
    if last:
        info = {
            "reason": "ModelLoadFailed",
            "message": snap.get("error")
            or last.get("message")
            or f"container exited with code {last['exitCode']}",
            "exitCode": last.get("exitCode"),
            "time": last.get("finishedAt"),
        }
        return {
            "transitionStatus": "BlockedByFailedLoad",
            "states": {"activeModelState": active, "targetModelState": "FailedToLoad"},
            "lastFailureInfo": info,
            "copies": {"failedCopies": 1, "totalCopies": 1},
        }
    target = "Loading" if snap and "running" in (snap.get("state") or {}) else "Pending"
    return {
        "transitionStatus": "InProgress",
        "states": {"activeModelState": active, "targetModelState": target},
        "copies": copies,
    }


def lab_dir_default() -> Path:
    env = os.environ.get("SPECPILOT_LAB_DIR")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[3] / ".lab"
