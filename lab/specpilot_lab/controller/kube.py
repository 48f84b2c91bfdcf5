"""Kubernetes API access for the lab controller: the kubernetes client's public dynamic API,
dict in and dict out, plus an Event recorder, a work queue and list+watch informers."""

from __future__ import annotations

import hashlib
import heapq
import logging
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

log = logging.getLogger("specpilot_lab.controller")

MERGE = "application/merge-patch+json"

# short name -> (apiVersion, kind)
KINDS = {
    "isvc": ("serving.kserve.io/v1beta1", "InferenceService"),
    "sr": ("serving.kserve.io/v1alpha1", "ServingRuntime"),
    "csr": ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"),
    "llmisvc": ("serving.kserve.io/v1alpha2", "LLMInferenceService"),
    "llmisvcconfig": ("serving.kserve.io/v1alpha2", "LLMInferenceServiceConfig"),
    "namespace": ("v1", "Namespace"),
    "pod": ("v1", "Pod"),
    "service": ("v1", "Service"),
    "pvc": ("v1", "PersistentVolumeClaim"),
    "pv": ("v1", "PersistentVolume"),
    "node": ("v1", "Node"),
    "event": ("v1", "Event"),
    "configmap": ("v1", "ConfigMap"),
    "secret": ("v1", "Secret"),
    "deployment": ("apps/v1", "Deployment"),
    "replicaset": ("apps/v1", "ReplicaSet"),
    "job": ("batch/v1", "Job"),
}


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def short_hash(data: str, n: int = 10) -> str:
    """A name-safe hash like the ones Kubernetes appends (pod-template-hash)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    num = int(hashlib.sha256(data.encode()).hexdigest(), 16)
    out = []
    for _ in range(n):
        num, r = divmod(num, len(alphabet))
        out.append(alphabet[r])
    return "".join(out)


def random_suffix(n: int = 5) -> str:
    return short_hash(uuid.uuid4().hex, n)


class Kube:
    """The few verbs the controller needs, over DynamicClient, with plain dicts."""

    def __init__(self, kubeconfig: str | Path, cache_dir: Path):
        self.kubeconfig = str(kubeconfig)
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._lock = threading.Lock()

    def _new_dyn(self) -> DynamicClient:
        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
        api = client.ApiClient(cfg)
        return DynamicClient(api, cache_file=str(self.cache_dir / f"discovery-{threading.get_ident()}.json"))

    @property
    def dyn(self) -> DynamicClient:
        d = getattr(self._local, "dyn", None)
        if d is None:
            d = self._local.dyn = self._new_dyn()
            self._local.res = {}
        return d

    def res(self, key: str):
        dyn = self.dyn
        cache = self._local.res
        if key not in cache:
            api_version, kind = KINDS[key]
            try:
                cache[key] = dyn.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                dyn.resources.invalidate_cache()
                cache[key] = dyn.resources.get(api_version=api_version, kind=kind)
        return cache[key]

    def available(self, key: str) -> bool:
        try:
            self.res(key)
            return True
        except ResourceNotFoundError:
            return False

    # ---------------------------------------------------------------- verbs
    def get(self, key: str, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.dyn.get(self.res(key), name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def list(self, key: str, namespace: str | None = None, label_selector: str | None = None) -> list[dict]:
        try:
            out = self.dyn.get(self.res(key), namespace=namespace, label_selector=label_selector).to_dict()
        except (NotFoundError, ResourceNotFoundError):
            return []
        return out.get("items") or []

    def create(self, key: str, body: dict, namespace: str | None = None) -> dict:
        return self.dyn.create(self.res(key), body=body, namespace=namespace).to_dict()

    def replace(self, key: str, body: dict) -> dict:
        md = body["metadata"]
        return self.dyn.replace(
            self.res(key), body=body, name=md["name"], namespace=md.get("namespace")
        ).to_dict()

    def patch(self, key: str, name: str, namespace: str | None, body: dict) -> dict | None:
        try:
            return self.dyn.patch(
                self.res(key), body=body, name=name, namespace=namespace, content_type=MERGE
            ).to_dict()
        except NotFoundError:
            return None

    def patch_status(self, key: str, name: str, namespace: str | None, status: dict) -> dict | None:
        try:
            return self.dyn.patch(
                self.res(key).status,
                body={"status": status},
                name=name,
                namespace=namespace,
                content_type=MERGE,
            ).to_dict()
        except NotFoundError:
            return None

    def bind_pod(self, name: str, namespace: str, node: str) -> None:
        """POST pods/NAME/binding, as a scheduler does (spec.nodeName is immutable otherwise)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        sub = self.res("pod").subresources["binding"]
        self.dyn.request("post", sub.path(name=name, namespace=namespace), body=body)

    def delete(self, key: str, name: str, namespace: str | None = None) -> bool:
        try:
            self.dyn.delete(self.res(key), name=name, namespace=namespace)
            return True
        except NotFoundError:
            return False


class Recorder:
    """core/v1 Events, counted like the real recorder: the same object, reason and message
    bump ``count`` and ``lastTimestamp`` of one Event."""

    def __init__(self, kube: Kube, host: str = "lab-node"):
        self.kube = kube
        self.host = host
        self._seen: dict[tuple, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def event(
        self, obj: dict, type_: str, reason: str, message: str, component: str, field_path: str | None = None
    ) -> None:
        md = obj.get("metadata") or {}
        ns = md.get("namespace") or "default"
        key = (md.get("uid"), reason, message, component)
        with self._lock:
            seen = self._seen.get(key)
        ts = now()
        try:
            if seen is not None:
                name, count = seen
                if self.kube.patch("event", name, ns, {"count": count + 1, "lastTimestamp": ts}) is not None:
                    with self._lock:
                        self._seen[key] = (name, count + 1)
                    return
            involved = {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": md.get("name"),
                "namespace": md.get("namespace"),
                "uid": md.get("uid"),
                "resourceVersion": md.get("resourceVersion"),
            }
            if field_path:
                involved["fieldPath"] = field_path
            name = f"{md.get('name')}.{uuid.uuid4().hex[:16]}"
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": ns},
                "involvedObject": {k: v for k, v in involved.items() if v is not None},
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": component, **({"host": self.host} if component == "kubelet" else {})},
                "firstTimestamp": ts,
                "lastTimestamp": ts,
                "count": 1,
                "reportingComponent": component,
                "reportingInstance": self.host,
            }
            self.kube.create("event", body, namespace=ns)
            with self._lock:
                self._seen[key] = (name, 1)
        except (ApiException, NotFoundError, ResourceNotFoundError, OSError) as exc:
            log.warning("event %s/%s %s not recorded: %s", ns, md.get("name"), reason, exc)


class WorkQueue:
    """Keys to reconcile, deduplicated; a key added while it is processed runs again after."""

    def __init__(self):
        self._cond = threading.Condition()
        self._ready: list = []
        self._queued: set = set()
        self._delayed: list = []
        self._processing: set = set()
        self._dirty: set = set()
        self._closed = False
        self._seq = 0

    def add(self, key, delay: float = 0.0) -> None:
        with self._cond:
            if delay > 0:
                self._seq += 1
                heapq.heappush(self._delayed, (time.monotonic() + delay, self._seq, key))
            elif key in self._processing:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
            self._cond.notify_all()

    def get(self, timeout: float = 1.0):
        with self._cond:
            deadline = time.monotonic() + timeout
            while True:
                now_ = time.monotonic()
                while self._delayed and self._delayed[0][0] <= now_:
                    _, _, key = heapq.heappop(self._delayed)
                    if key in self._processing:
                        self._dirty.add(key)
                    elif key not in self._queued:
                        self._queued.add(key)
                        self._ready.append(key)
                if self._ready:
                    key = self._ready.pop(0)
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                if self._closed or now_ >= deadline:
                    return None
                wait = deadline - now_
                if self._delayed:
                    wait = min(wait, max(0.01, self._delayed[0][0] - now_))
                self._cond.wait(wait)

    def done(self, key) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    self._ready.append(key)
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class Informer(threading.Thread):
    """List, then watch (with timeoutSeconds), then list again: every object is handed to
    handler(event_type, obj) at least once per cycle, so a missed event heals itself."""

    def __init__(
        self,
        kube: Kube,
        key: str,
        handler: Callable[[str, dict], None],
        stop: threading.Event,
        cycle_seconds: int = 30,
    ):
        super().__init__(name=f"informer-{key}", daemon=True)
        self.kube = kube
        self.key = key
        self.handler = handler
        self.stop_event = stop
        self.cycle = cycle_seconds
        self.synced = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                res = self.kube.res(self.key)
                lst = self.kube.dyn.get(res).to_dict()
                for item in lst.get("items") or []:
                    self._call("SYNC", item)
                self.synced.set()
                rv = (lst.get("metadata") or {}).get("resourceVersion")
                w = watch.Watch()
                for ev in self.kube.dyn.watch(res, resource_version=rv, timeout=self.cycle, watcher=w):
                    if self.stop_event.is_set():
                        w.stop()
                        break
                    obj = ev.get("raw_object") or {}
                    if ev.get("type") == "ERROR":
                        break
                    self._call(ev.get("type", "MODIFIED"), obj)
            except ResourceNotFoundError:
                self.synced.set()  # the CRD is not installed (yet)
                self.stop_event.wait(2.0)
            except Exception as exc:  # the API went away, a 410, ...: list again shortly
                log.debug("informer %s: %s", self.key, exc)
                self.stop_event.wait(1.0)

    def _call(self, type_: str, obj: dict) -> None:
        try:
            self.handler(type_, obj)
        except Exception:
            log.exception("informer %s handler", self.key)


def owner_ref(obj: dict, controller: bool = True) -> dict:
    md = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": md["name"],
        "uid": md["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def conditions_merge(old: Iterable[dict] | None, new: list[dict]) -> list[dict]:
    """New conditions, keeping lastTransitionTime where status did not change."""
    prev = {c.get("type"): c for c in old or []}
    out = []
    ts = now()
    for c in new:
        p = prev.get(c["type"])
        c = dict(c)
        if p is not None and p.get("status") == c.get("status") and p.get("lastTransitionTime"):
            c["lastTransitionTime"] = p["lastTransitionTime"]
        else:
            c.setdefault("lastTransitionTime", ts)
        if (
            "lastUpdateTime" in c
            and p is not None
            and p.get("lastUpdateTime")
            and all(p.get(k) == c.get(k) for k in ("status", "reason", "message"))
        ):
            c["lastUpdateTime"] = p["lastUpdateTime"]  # nothing new: no write, no event
        out.append(c)
    return out
