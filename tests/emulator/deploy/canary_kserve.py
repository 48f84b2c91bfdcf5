"""KServe 0.20's spec.canary without running anything, for playbooks/canary.yml against the API
emulator (imported by name; the fault matrix uses it).

* :class:`ArmPages`: each predictor pod's vLLM /metrics, served from a local HTTP server; every
  scrape is ``per_scrape`` requests later. A pod whose engine has a --speculative-config answers
  faster (TPOT 18 ms against 40 ms) and exports the spec-decode counters (acceptance 0.8), so a
  canary of the speculative spec is promoted step by step on a short window. Its TTFT (15 ms against 30 ms) falls in
  another bucket too: every figure is resolved by the buckets, none needs the batch means of a longer hold
  (canary_means), so each step is decided at its first poll.
* :class:`CanaryKServe`: :class:`deploy_helpers.FakeKServe` with KServe 0.20's predictor naming
  (``{isvc}-{predictor.name}-predictor``) and ``spec.canary[]``: one Deployment and one Ready pod per
  predictor (the lab controller's ``predictor_variants`` renders them), the pod annotated with its
  page's URL (``specpilot.io/lab-url``, where the lab publishes a pod's engine), ``status.canaryStatuses``,
  and the Deployments of predictors that are gone deleted (an aborted canary's, the old stable one
  after a promotion)."""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from deploy_helpers import ISVC, FakeKServe
from kubernetes.dynamic.exceptions import NotFoundError
from specpilot_lab.controller.kserve import predictor_variants

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "canary"))
from test_canary_window import page  # noqa: E402

LAB_URL = "specpilot.io/lab-url"
SPEC = (0.25, 0.75, 0.6)  # drafts, draft tokens, accepted per request: acceptance 0.8
POD_READY = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
    "containerStatuses": [
        {
            "name": "kserve-container",
            "ready": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        }
    ],
}


class ArmPages:
    """/pod/<name>/metrics: the pod's engine ``per_scrape`` requests later at every GET."""

    def __init__(self, per_scrape: int = 40):
        self.per_scrape = per_scrape
        self.pods: dict[str, dict] = {}
        self.lock = threading.Lock()
        pages = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                parts = self.path.strip("/").split("/")
                body = pages.page(parts[1]) if len(parts) == 3 and parts[0] == "pod" else None
                if body is None:
                    self.send_error(404)
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add(self, pod: str, speculative: bool) -> str:
        with self.lock:
            self.pods.setdefault(pod, {"speculative": speculative, "n": 0})
        return "http://127.0.0.1:%d/pod/%s" % (self.httpd.server_address[1], pod)

    def page(self, pod: str) -> str | None:
        with self.lock:
            if pod not in self.pods:
                return None
            p = self.pods[pod]
            p["n"] += self.per_scrape
            n, speculative = p["n"], p["speculative"]
        if speculative:
            return page(0.015, 0.018, n, spec=tuple(int(x * n) for x in SPEC))
        return page(0.03, 0.04, n)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class CanaryKServe(FakeKServe):
    """FakeKServe with named predictors and spec.canary (every predictor rolled out at once).

    Like a controller it retries an API call that fails with a transient error (409, 429, 5xx), at
    once, so that faults injected into a namespace slow it down without making it write what it
    did not mean (FakeKServe's template has no runtime args when it cannot read the runtime). It
    never lists Deployments (it deletes those it made), so that a test may inject faults into the
    playbook's lists of Deployments alone. ``when(predicate, action)``: ``action()`` runs once, the
    first time ``predicate(isvc)`` holds, before that spec is rolled out - a fault injected there is
    in place before the playbook sees the rollout (:func:`canary_at`, :func:`promoted`)."""

    def __init__(self, emu, namespace: str, pages: ArmPages, interval: float = 0.1):
        super().__init__(emu, namespace, interval=interval)
        self.pages = pages
        self.made: dict[str, set] = {}
        self.hooks: list[list] = []

    def when(self, predicate, action) -> "CanaryKServe":
        self.hooks.append([predicate, action])
        return self

    @staticmethod
    def call(fn, tries: int = 40):
        """fn(), again while it fails with a transient error; None when it answers 404."""
        for attempt in range(tries):
            try:
                return fn()
            except NotFoundError:
                return None
            except Exception as exc:  # noqa: BLE001 - the dynamic client's and urllib's errors
                code = getattr(exc, "status", None) or getattr(exc, "code", None)
                if code not in (409, 429, 500, 502, 503, 504) or attempt == tries - 1:
                    raise
                time.sleep(0.02)

    def reconcile_all(self) -> None:
        for isvc in self.call(lambda: self.res(*ISVC).get(namespace=self.ns)).to_dict()["items"]:
            self.reconcile(isvc, "ready")

    def runtime_args(self, isvc: dict) -> list[str]:
        name = isvc["spec"]["predictor"]["model"].get("runtime")
        api = self.res("serving.kserve.io/v1alpha1", "ServingRuntime")
        rt = self.call(lambda: api.get(name=name, namespace=self.ns))
        return list(rt.to_dict()["spec"]["containers"][0].get("args", [])) if rt else []

    def reconcile(self, isvc: dict, action: str) -> None:
        for hook in [h for h in self.hooks if h[0](isvc)]:
            self.hooks.remove(hook)
            hook[1]()
        name = isvc["metadata"]["name"]
        variants = predictor_variants(isvc)
        made = self.made.setdefault(name, set())
        for v in variants:
            made.add(v.deployment)
            self._variant(name, v.deployment, v.isvc)
        keep = {v.deployment for v in variants}
        dep_api, pod_api = self.res("apps/v1", "Deployment"), self.res("v1", "Pod")
        for dname in sorted(made - keep):  # an orphan: KServe deletes it, and the kubelet its pods
            self.call(lambda: dep_api.delete(name=dname, namespace=self.ns))
            made.discard(dname)
        selector = "serving.kserve.io/inferenceservice=%s" % name
        for pod in self.call(lambda: pod_api.get(namespace=self.ns, label_selector=selector)).to_dict()[
            "items"
        ]:
            if pod["metadata"]["labels"].get("app", "")[len("isvc.") :] not in keep:
                self.call(lambda: pod_api.delete(name=pod["metadata"]["name"], namespace=self.ns))
        ready = [{"type": t, "status": "True"} for t in ("Ready", "PredictorReady", "IngressReady")]
        canaries = [
            {"name": v.canary, "ready": True, "trafficPercent": v.traffic_percent} for v in variants[1:]
        ]
        status = {
            "conditions": ready + ([{"type": "CanaryPredictorReady", "status": "True"}] if canaries else []),
            "url": "http://%s.%s.example" % (name, self.ns),
            "observedGeneration": isvc["metadata"]["generation"],
            "canaryStatuses": canaries or None,
        }
        if any((isvc.get("status") or {}).get(k) != v for k, v in status.items()):
            self.call(lambda: self._status(*ISVC, name, status))

    def _variant(self, name: str, dname: str, view: dict) -> None:
        dep_api, pod_api = self.res("apps/v1", "Deployment"), self.res("v1", "Pod")
        tmpl = self.template(view)
        tmpl["metadata"]["labels"]["app"] = "isvc.%s" % dname
        dep = self.call(lambda: dep_api.get(name=dname, namespace=self.ns))
        dep = dep and dep.to_dict()
        if dep is None:
            body = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": dname, "labels": {"serving.kserve.io/inferenceservice": name}},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "isvc.%s" % dname}},
                    "template": tmpl,
                },
            }
            dep = self.call(lambda: dep_api.create(namespace=self.ns, body=body)).to_dict()
        elif dep["spec"]["template"] != tmpl:
            dep["spec"]["template"] = tmpl
            dep.pop("status", None)
            dep = self.call(lambda: dep_api.replace(namespace=self.ns, body=dep)).to_dict()
        gen = dep["metadata"]["generation"]
        pod_name = "%s-%d-abcde" % (dname, gen)
        selector = "app=isvc.%s" % dname
        pods = self.call(lambda: pod_api.get(namespace=self.ns, label_selector=selector)).to_dict()["items"]
        for old in [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != pod_name]:
            self.call(lambda: pod_api.delete(name=old, namespace=self.ns))
        pod = next((p for p in pods if p["metadata"]["name"] == pod_name), None)
        if pod is None:
            args = tmpl["spec"]["containers"][0]["args"]
            url = self.pages.add("%s.%s" % (self.ns, pod_name), any("speculative" in a for a in args))
            meta = {
                "name": pod_name,
                "labels": tmpl["metadata"]["labels"],
                "annotations": dict(tmpl["metadata"]["annotations"], **{LAB_URL: url}),
            }
            body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]}
            pod = self.call(lambda: pod_api.create(namespace=self.ns, body=body)).to_dict()
        if (pod.get("status") or {}).get("phase") != "Running":
            self.call(lambda: self._status("v1", "Pod", pod_name, POD_READY))
        dstatus = {
            "observedGeneration": gen,
            "replicas": 1,
            "updatedReplicas": 1,
            "availableReplicas": 1,
            "readyReplicas": 1,
        }
        if any((dep.get("status") or {}).get(k) != v for k, v in dstatus.items()):
            self.call(lambda: self._status("apps/v1", "Deployment", dname, dstatus))


def canary_at(percent: int):
    """A predicate of :meth:`CanaryKServe.when`: the canary takes ``percent`` % of the traffic."""
    return lambda isvc: any(
        int(c.get("trafficPercent") or 0) == percent for c in (isvc.get("spec") or {}).get("canary") or []
    )


def promoted(isvc: dict) -> bool:
    """A predicate of :meth:`CanaryKServe.when`: the predictor took the canary's name, no canary left."""
    spec = isvc.get("spec") or {}
    return bool((spec.get("predictor") or {}).get("name")) and not spec.get("canary")
