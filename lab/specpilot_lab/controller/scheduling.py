"""The lab node and a scheduler's filter step (taints, node selector/affinity, resources).

The lab has one Node object. Its capacity (``nvidia.com/gpu`` included), labels and taints
come from the controller's options and can be changed later through the API like any Node;
the scheduler always reads the live object. Engines always run on this machine's CPU: GPUs
are only counted, so that a pod asking for more than the node has stays Pending, as it would
on a real cluster. Messages follow kube-scheduler 1.31.
"""

from __future__ import annotations

import os
import platform
import re
from decimal import Decimal

GPU = "nvidia.com/gpu"

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def quantity(value) -> Decimal:
    """A Kubernetes resource quantity as a number (cpu in cores, memory in bytes)."""
    if value is None:
        return Decimal(0)
    s = str(value).strip()
    m = re.match(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$", s)
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"bad quantity {value!r}")
    return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2)])


def parse_labels(text: str) -> dict[str, str]:
    out = {}
    for part in (text or "").replace(";", ",").split(","):
        part = part.strip()
        if part:
            k, _, v = part.partition("=")
            out[k.strip()] = v.strip()
    return out


def parse_taints(text: str) -> list[dict]:
    """``key=value:Effect,key2:Effect`` -> taints."""
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        kv, _, effect = part.rpartition(":")
        key, _, value = kv.partition("=")
        taint = {"key": key, "effect": effect or "NoSchedule"}
        if value:
            taint["value"] = value
        out.append(taint)
    return out


def node_object(
    name: str,
    gpus: int,
    labels: dict[str, str],
    taints: list[dict],
    cpu: str,
    memory: str,
    kubelet_version: str = "v1.31.4",
) -> dict:
    cap = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi", "hugepages-2Mi": "0"}
    if gpus:
        cap[GPU] = str(gpus)
    base_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "specpilot-lab",
        "node-role.kubernetes.io/worker": "",
    }
    if gpus:
        base_labels["nvidia.com/gpu.present"] = "true"
    base_labels.update(labels)
    spec: dict = {}
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": base_labels,
            "annotations": {
                "specpilot.io/lab-node": "engines run on this machine's CPU; "
                "nvidia.com/gpu is counted for scheduling only"
            },
        },
        "spec": spec,
        "status": node_status(cap, kubelet_version),
    }


def node_status(capacity: dict, kubelet_version: str = "v1.31.4") -> dict:
    now_cond = {
        "status": "True",
        "type": "Ready",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
    }
    return {
        "capacity": dict(capacity),
        "allocatable": dict(capacity),
        "conditions": [
            {
                "type": "MemoryPressure",
                "status": "False",
                "reason": "KubeletHasSufficientMemory",
                "message": "kubelet has sufficient memory available",
            },
            {
                "type": "DiskPressure",
                "status": "False",
                "reason": "KubeletHasNoDiskPressure",
                "message": "kubelet has no disk pressure",
            },
            {
                "type": "PIDPressure",
                "status": "False",
                "reason": "KubeletHasSufficientPID",
                "message": "kubelet has sufficient PID available",
            },
            now_cond,
        ],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": platform.node() or "localhost"},
        ],
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "osImage": "specpilot lab",
            "kernelVersion": platform.release(),
            "kubeletVersion": kubelet_version,
            "kubeProxyVersion": kubelet_version,
            "containerRuntimeVersion": "specpilot-lab://1",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }


def default_memory() -> str:
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return f"{pages // 1024}Ki"
    except (ValueError, OSError):
        return "16Gi"


# ---------------------------------------------------------------- filter
def pod_requests(spec: dict) -> dict[str, Decimal]:
    """Effective requests: max(sum over containers, max over init containers), per resource.
    Extended resources (GPUs) count their limits when no request is given."""

    def one(c: dict) -> dict[str, Decimal]:
        res = c.get("resources") or {}
        req = dict(res.get("requests") or {})
        for k, v in (res.get("limits") or {}).items():
            req.setdefault(k, v)
        out = {}
        for k, v in req.items():
            try:
                out[k] = quantity(v)
            except ValueError:
                continue
        return out

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in one(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in one(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    for t in tolerations or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key") and op == "Exists":
            return True
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _expr_match(expr: dict, labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    has = key in labels
    val = labels.get(key)
    if op == "In":
        return has and val in values
    if op == "NotIn":
        return not has or val not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt") and has and values:
        try:
            a, b = int(val), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _affinity_match(spec: dict, node: dict) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = req.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in terms:
        exprs = term.get("matchExpressions") or []
        fexprs = term.get("matchFields") or []
        if not exprs and not fexprs:
            continue
        if all(_expr_match(e, labels) for e in exprs) and all(_expr_match(e, fields) for e in fexprs):
            return True
    return False


def fit(pod_spec: dict, node: dict, other_pods: list[dict]) -> str | None:
    """None when the pod fits the node, else kube-scheduler's FailedScheduling message.
    other_pods: the pods already bound to the node (this one excluded)."""
    reasons: list[str] = []
    preemption = "Preemption is not helpful for scheduling."
    untolerated = [
        t
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute")
        and not _tolerates(pod_spec.get("tolerations") or [], t)
    ]
    if (node.get("spec") or {}).get("unschedulable"):
        reasons.append("1 node(s) were unschedulable")
    elif untolerated:
        t = untolerated[0]
        reasons.append(f"1 node(s) had untolerated taint {{{t.get('key')}: {t.get('value', '')}}}")
    elif not _affinity_match(pod_spec, node):
        reasons.append("1 node(s) didn't match Pod's node affinity/selector")
    else:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        used: dict[str, Decimal] = {}
        for p in other_pods:
            for k, v in pod_requests(p.get("spec") or {}).items():
                used[k] = used.get(k, Decimal(0)) + v
        want = pod_requests(pod_spec)
        insufficient = []
        for res, amount in sorted(want.items()):
            if amount <= 0:
                continue
            try:
                have = quantity(alloc.get(res)) if res in alloc else Decimal(0)
            except ValueError:
                have = Decimal(0)
            if amount > have - used.get(res, Decimal(0)):
                insufficient.append(f"1 Insufficient {res}")
        if len(other_pods) + 1 > int(quantity(alloc.get("pods", "110"))):
            insufficient.append("1 Too many pods")
        if insufficient:
            reasons.extend(sorted(insufficient))
            preemption = "No preemption victims found for incoming pod."
    if not reasons:
        return None
    return (
        f"0/1 nodes are available: {', '.join(reasons)}. preemption: 0/1 nodes are available: 1 {preemption}"
    )
