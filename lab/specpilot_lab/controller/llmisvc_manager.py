"""The lab controller's LLMInferenceService reconciler (KServe v0.20.0
``pkg/controller/v1alpha2/llmisvc/controller.go`` ``reconcile``: base refs, workload, router), a
mixin of manager.Controller. The decisions are llmisvc.py's; the Deployments roll out through the
controller's own Deployment controller and kubelet (``Controller._roll_out``), their pods running the
engine in the container ``main`` with its command and args as the merged template has them
(mapping.py: KServe's ``/bin/bash -c`` script runs as it is).

What a client can tell and the lab does: the merged spec's workloads (``{name}-kserve``, and
``{name}-kserve-prefill`` with ``spec.prefill``), the workload Service, the status (conditions,
``url`` with a router route, ``addresses``, ``appliedConfigs``, ``observedGeneration``), the
cleanup of a workload the spec no longer has, and of everything on delete. The router (gateway,
HTTPRoute, inference pool, scheduler) is not run: the address at ``status.url`` and
``status.addresses`` is a local port proxying to a ready pod of the decode (main) workload.
"""

from __future__ import annotations

import copy
import json

from kubernetes.client.exceptions import ApiException

from ..apiserver.patch import PatchError
from . import kserve, llmisvc, llmisvc_configs
from .kube import conditions_merge, owner_ref, short_hash
from .proxy import ServiceProxy

TEMPLATE_HASH_ANNOTATION = "specpilot.io/lab-template-hash"


class LLMInferenceServices:
    """Mixin of manager.Controller (self.kube, self.runs, self.enqueue, self._roll_out, ...)."""

    # ---------------------------------------------------------------- informers
    def _on_llmisvc(self, type_: str, obj: dict) -> None:
        md = obj.get("metadata") or {}
        key = (md.get("namespace"), md.get("name"))
        if type_ == "DELETED":
            self.llm_keys.discard(key)
        else:
            self.llm_keys.add(key)
        self.enqueue(("llmisvc", *key))

    def _on_llmisvc_config(self, type_: str, obj: dict) -> None:
        # controller.go watches LLMInferenceServiceConfigs: a changed config re-merges the services
        for ns, name in list(self.llm_keys):
            self.enqueue(("llmisvc", ns, name))

    def ensure_llmisvc_configs(self) -> None:
        """The well-known configs in the kserve namespace, as a KServe install has them (the lab's
        own, llmisvc_configs.py); one a user changed or replaced is left as it is."""
        if not self.kube.available("llmisvcconfig"):
            return
        ns = llmisvc.SYSTEM_NAMESPACE
        if self.kube.get("namespace", ns) is None:
            self._create_quietly("namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for cfg in llmisvc_configs.well_known():
            if self.kube.get("llmisvcconfig", cfg["metadata"]["name"], ns) is None:
                self._create_quietly("llmisvcconfig", cfg, ns)

    def _create_quietly(self, key: str, body: dict, namespace: str | None = None) -> None:
        try:
            self.kube.create(key, body, namespace=namespace)
        except ApiException as exc:
            if exc.status != 409:
                raise

    # ---------------------------------------------------------------- reconcile
    def reconcile_llmisvc(self, ns: str, name: str) -> None:
        svc = self.kube.get("llmisvc", name, ns)
        if svc is None or svc["metadata"].get("deletionTimestamp"):
            self.teardown_llmisvc(ns, name)
            return
        try:
            merged, applied = llmisvc.combine(svc, lambda where, cfg: self.kube.get("llmisvcconfig", cfg, where))
        except llmisvc.ConfigNotFound as exc:
            # config_merge.go reconcileBaseRefs: appliedConfigs cleared, the workloads left as they are
            self._llm_combine_failed(svc, "ConfigNotFound", str(exc))
            return
        except (llmisvc.CombineError, PatchError) as exc:
            self._llm_combine_failed(svc, "CombineBaseError", f"failed to combine base-configurations: {exc}")
            return
        self._delete_foreign_llm_pods(ns, name)
        conds = [llmisvc.condition("PresetsCombined", True)]
        try:
            for prefill in (False, True):
                conds += self._llm_workload(svc, merged, prefill)
        except ApiException as exc:
            if exc.status != 422:
                raise
            # workload.go reconcileWorkload: a write the API refuses (a Deployment's selector is
            # immutable: spec.prefill added or removed changes the main workload's llm-d.ai/role)
            # stops the reconcile, MainWorkloadReady False with the error, the rest left as it is
            self._llm_workload_failed(svc, conds, exc)
            return
        self._ensure_llm_service(svc, llmisvc.workload_service(svc, merged))
        conds += llmisvc.router_conditions(merged)
        self._llm_status(svc, merged, applied, conds)

    def _llm_workload(self, svc: dict, merged: dict, prefill: bool) -> list[dict]:
        """One workload's Deployment rolled out (or deleted when the spec has none); its condition."""
        md = svc["metadata"]
        ns, name = md["namespace"], md["name"]
        dname = (llmisvc.prefill_deployment_name if prefill else llmisvc.main_deployment_name)(name)
        ctype = "PrefillWorkloadReady" if prefill else "MainWorkloadReady"
        body = llmisvc.workload(svc, merged, prefill)
        if body is None:
            self._delete_llm_deployment(ns, dname)
            part = (merged.get("prefill") or {}) if prefill else merged
            if part.get("worker") is not None:  # a LeaderWorkerSet on a cluster
                wtype = "PrefillWorkerWorkloadReady" if prefill else "WorkerWorkloadReady"
                msg = "the lab runs single-node workloads only (spec.worker needs a LeaderWorkerSet)"
                return [llmisvc.condition(wtype, False, "NotSupportedInLab", msg)]
            return []
        template = body["spec"]["template"]
        plan = {"template": template, "hash": short_hash(json.dumps(template, sort_keys=True)), "mounts": _mounts(template)}
        deploy = self._ensure_llm_deployment(svc, body, plan["hash"])
        rolled = self._roll_out(
            svc, deploy, plan, ("llmisvc", ns, name), container_name=llmisvc.CONTAINER, owner_kind="llmisvc"
        )
        return [llmisvc.deployment_condition(ctype, rolled["deploy"])]

    def _delete_foreign_llm_pods(self, ns: str, name: str) -> None:
        """Workload pods the controller does not run (a previous controller's): gone, as after a node reboot."""
        sel = ",".join(f"{k}={v}" for k, v in llmisvc.workload_selector(name).items())
        for pod in self.kube.list("pod", ns, label_selector=sel):
            pmd = pod["metadata"]
            if (ns, pmd["name"]) not in self.runs and not pmd.get("deletionTimestamp"):
                self.kube.delete("pod", pmd["name"], ns)

    def _ensure_llm_deployment(self, svc: dict, body: dict, thash: str) -> dict:
        md = body["metadata"]
        spec = dict(
            copy.deepcopy(body["spec"]),
            strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            progressDeadlineSeconds=600,
            revisionHistoryLimit=10,
        )
        existing = self.kube.get("deployment", md["name"], md["namespace"])
        if existing is None:
            created = copy.deepcopy(body)
            created["metadata"]["ownerReferences"] = [owner_ref(svc)]
            created["metadata"]["annotations"] = {TEMPLATE_HASH_ANNOTATION: thash, "deployment.kubernetes.io/revision": "1"}
            created["spec"] = spec
            return self.kube.create("deployment", created, namespace=md["namespace"])
        ann = existing["metadata"].get("annotations") or {}
        if ann.get(TEMPLATE_HASH_ANNOTATION) == thash and existing["metadata"].get("labels") == md["labels"]:
            return existing
        updated = copy.deepcopy(existing)
        updated.pop("status", None)
        updated["metadata"]["labels"] = md["labels"]
        updated["spec"].update(spec)
        anns = updated["metadata"].setdefault("annotations", {})
        if ann.get(TEMPLATE_HASH_ANNOTATION) != thash:
            anns["deployment.kubernetes.io/revision"] = str(int(ann.get("deployment.kubernetes.io/revision", "1")) + 1)
        anns[TEMPLATE_HASH_ANNOTATION] = thash
        try:
            return self.kube.replace("deployment", updated)
        except ApiException as exc:
            exc.lab_deployment = md["name"]  # which workload's write the API refused
            raise

    def _ensure_llm_service(self, svc: dict, body: dict) -> None:
        md = body["metadata"]
        existing = self.kube.get("service", md["name"], md["namespace"])
        if existing is None:
            created = copy.deepcopy(body)
            created["metadata"]["ownerReferences"] = [owner_ref(svc)]
            self._create_quietly("service", created, md["namespace"])
        elif existing["spec"].get("selector") != body["spec"]["selector"] or existing["metadata"].get("labels") != md["labels"]:
            self.kube.patch("service", md["name"], md["namespace"], {"metadata": {"labels": md["labels"]}, "spec": {"selector": body["spec"]["selector"]}})

    def _delete_llm_deployment(self, ns: str, dname: str) -> None:
        """A workload the spec no longer has (KServe's Delete of the expected object): its pods, ReplicaSets, Deployment."""
        for r in [r for r in self.runs.values() if r.namespace == ns and r.deployment == dname and r.owner_kind == "llmisvc"]:
            self._kill(r)
        if self.kube.get("deployment", dname, ns) is None:
            return
        for rs in self.kube.list("replicaset", ns):
            if any(o.get("name") == dname and o.get("kind") == "Deployment" for o in rs["metadata"].get("ownerReferences") or []):
                self.kube.delete("replicaset", rs["metadata"]["name"], ns)
        self.kube.delete("deployment", dname, ns)

    def teardown_llmisvc(self, ns: str, name: str) -> None:
        """What the garbage collector removes with a deleted LLMInferenceService (owner references)."""
        for r in [r for r in self.runs.values() if r.namespace == ns and r.isvc == name and r.owner_kind == "llmisvc"]:
            self._kill(r)
        proxy = self.llm_proxies.pop((ns, name), None)
        if proxy is not None:
            proxy.close()
        for dname in (llmisvc.main_deployment_name(name), llmisvc.prefill_deployment_name(name)):
            self._delete_llm_deployment(ns, dname)
        sel = ",".join(f"{k}={v}" for k, v in llmisvc.workload_selector(name).items())
        for pod in self.kube.list("pod", ns, label_selector=sel):
            self.kube.delete("pod", pod["metadata"]["name"], ns)
        if self.kube.get("service", llmisvc.workload_service_name(name), ns) is not None:
            self.kube.delete("service", llmisvc.workload_service_name(name), ns)

    # ---------------------------------------------------------------- status
    def _llm_proxy(self, ns: str, name: str) -> ServiceProxy:
        proxy = self.llm_proxies.get((ns, name))
        if proxy is None:
            dname = llmisvc.main_deployment_name(name)

            def target(ns=ns, dname=dname) -> int | None:
                ready = [r for r in list(self.runs.values()) if r.namespace == ns and r.deployment == dname and r.ready]
                return ready[-1].port if ready else None

            proxy = self.llm_proxies[(ns, name)] = ServiceProxy(target)
        return proxy

    def _llm_status(self, svc: dict, merged: dict, applied: list[dict], conds: list[dict]) -> None:
        md = svc["metadata"]
        prev = svc.get("status") or {}
        url = self._llm_proxy(md["namespace"], md["name"]).url
        status = {
            "conditions": conditions_merge(prev.get("conditions"), llmisvc.readiness(conds)),
            "addresses": [{"url": url}],
            "appliedConfigs": applied,
            "observedGeneration": md.get("generation", 1),
            # router.go updateRoutingStatus: a URL only through a router route (the gateway's)
            "url": url if (merged.get("router") or {}).get("route") is not None else None,
        }
        self.kube.patch_status("llmisvc", md["name"], md["namespace"], status)

    def _llm_workload_failed(self, svc: dict, conds: list[dict], exc: ApiException) -> None:
        md = svc["metadata"]
        try:
            api_message = json.loads(exc.body or "{}").get("message", "")
        except ValueError:
            api_message = str(exc.body)
        deploy = exc.lab_deployment if hasattr(exc, "lab_deployment") else ""
        role = "prefill" if deploy.endswith("-kserve-prefill") else "main"
        what = "prefill deployment" if role == "prefill" else "main workload"
        message = (
            f"failed to reconcile {what}: failed to get defaults for v1.Deployment {md['namespace']}/{deploy}: "
            f"{api_message}"
        )
        prev = {c["type"]: c for c in (svc.get("status") or {}).get("conditions") or []}
        keep = [c for t, c in prev.items() if t in ("PrefillWorkloadReady", "GatewaysReady", "HTTPRoutesReady")]
        conds = [c for c in conds if c["type"] != "MainWorkloadReady"] + keep
        conds.append(llmisvc.condition("MainWorkloadReady", False, "ReconcileSingleNodeWorkloadError", message))
        status = {
            "conditions": conditions_merge(prev.values(), llmisvc.readiness(conds)),
            "observedGeneration": md.get("generation", 1),
        }
        self.kube.patch_status("llmisvc", md["name"], md["namespace"], status)
        self.enqueue(("llmisvc", md["namespace"], md["name"]), 10.0)  # an error: requeued with back-off

    def _llm_combine_failed(self, svc: dict, reason: str, message: str) -> None:
        """PresetsCombined False (a non-dependent condition of knative's living set: Ready keeps its
        state, Unknown on a new service as InitializeConditions leaves it); appliedConfigs cleared."""
        md = svc["metadata"]
        prev = svc.get("status") or {}
        conds = [c for c in prev.get("conditions") or [] if c["type"] != "PresetsCombined"]
        conds.append(llmisvc.condition("PresetsCombined", False, reason, message))
        have = {c["type"] for c in conds}
        conds += [{"type": t, "status": "Unknown"} for t in ("Ready", "RouterReady", "WorkloadsReady") if t not in have]
        status = {
            "conditions": conditions_merge(prev.get("conditions"), sorted(conds, key=lambda c: c["type"])),
            "appliedConfigs": None,
            "observedGeneration": md.get("generation", 1),
        }
        self.kube.patch_status("llmisvc", md["name"], md["namespace"], status)


def _mounts(template: dict) -> list[kserve.Mount]:
    """The claims a workload pod needs bound before it is scheduled (its PVC volumes)."""
    out = []
    for v in (template.get("spec") or {}).get("volumes") or []:
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            out.append(kserve.Mount("pvc", f"pvc://{claim}", "", claim=claim))
    return out
