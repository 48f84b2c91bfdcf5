"""Behaviour of built-in kinds: create-time status reset, defaulting, a few validations.

Only what the project and its tools can observe is emulated; these follow the real
registry strategies and ``SetDefaults_*`` functions of Kubernetes 1.31.
"""

from __future__ import annotations

import base64
import binascii
import random
import re
from typing import Any, Callable

from .errors import FieldErr
from .resources import ResourceType

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

DNS_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


# ----------------------------------------------------------------------------- pod templates
def _image_pull_policy(image: str) -> str:
    ref = image.rsplit("/", 1)[-1]
    if "@" in ref:
        return "IfNotPresent"
    if ":" not in ref or ref.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _default_container(c: dict) -> None:
    if "image" in c and "imagePullPolicy" not in c:
        c["imagePullPolicy"] = _image_pull_policy(str(c.get("image") or ""))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    res = c["resources"]
    if isinstance(res, dict) and res.get("limits") and not res.get("requests"):
        res["requests"] = dict(res["limits"])
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    for e in c.get("env") or []:
        if isinstance(e, dict):
            ref = (e.get("valueFrom") or {}).get("fieldRef")
            if isinstance(ref, dict):
                ref.setdefault("apiVersion", "v1")


def default_pod_spec(spec: dict) -> None:
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _default_container(c)
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        for src in ("configMap", "secret"):
            if isinstance(v.get(src), dict):
                v[src].setdefault("defaultMode", 420)
        if not any(k for k in v if k != "name"):
            v["emptyDir"] = {}


def default_pod_template(tmpl: Any) -> None:
    if isinstance(tmpl, dict):
        tmpl.setdefault("metadata", {})
        if "creationTimestamp" not in tmpl["metadata"]:
            tmpl["metadata"]["creationTimestamp"] = None
        default_pod_spec(tmpl.setdefault("spec", {}))


def qos_class(spec: dict) -> str:
    requests: list[dict] = []
    limits: list[dict] = []
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = (c or {}).get("resources") or {}
        requests.append({k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")})
        limits.append({k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")})
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        lim.get("cpu") and lim.get("memory") and req == lim for req, lim in zip(requests, limits)
    )
    return "Guaranteed" if guaranteed else "Burstable"


# ----------------------------------------------------------------------------- per-kind hooks
class ClusterIPs:
    def __init__(self) -> None:
        self.used: set[str] = set()
        self.rand = random.Random()

    def allocate(self) -> str:
        while True:
            ip = f"10.96.{self.rand.randint(0, 255)}.{self.rand.randint(1, 254)}"
            if ip not in self.used and ip != "10.96.0.1" and ip != "10.96.0.10":
                self.used.add(ip)
                return ip


def _pod_create(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("serviceAccountName", "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    tol = spec.setdefault("tolerations", [])
    if isinstance(tol, list):
        keys = {t.get("key") for t in tol if isinstance(t, dict)}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if key not in keys:
                tol.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                )
    default_pod_spec(spec)
    obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def _pod_default(obj: dict, ctx: Any) -> None:
    default_pod_spec(obj.get("spec") or {})


def _deployment_default(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy.get("type") == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", "25%")
        ru.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    default_pod_template(spec.get("template"))


def _replicaset_default(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    default_pod_template(spec.get("template"))


def _job_create(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    uid = obj["metadata"]["uid"]
    name = obj["metadata"].get("name", "")
    if not spec.get("manualSelector"):
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        tmpl = spec.setdefault("template", {})
        labels = tmpl.setdefault("metadata", {}).setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
    obj["status"] = {}


def _job_default(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    completions_set = "completions" in spec
    parallel_set = "parallelism" in spec
    if not completions_set and not parallel_set:
        spec["completions"] = 1
        spec["parallelism"] = 1
    elif not parallel_set:
        spec["parallelism"] = 1
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if not spec.get("podFailurePolicy"):
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    if spec.get("manualSelector") is None:
        spec.pop("manualSelector", None)
    default_pod_template(spec.get("template"))


def _cronjob_default(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    tmpl = spec.setdefault("jobTemplate", {})
    tmpl.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    default_pod_template((tmpl.setdefault("spec", {})).get("template"))


def _service_create(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    typ = spec.setdefault("type", "ClusterIP")
    if typ != "ExternalName":
        if not spec.get("clusterIP"):
            spec["clusterIP"] = ctx.cluster_ips.allocate()
        elif spec["clusterIP"] != "None":
            ctx.cluster_ips.used.add(spec["clusterIP"])
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    obj["status"] = {"loadBalancer": {}}


def _service_default(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if spec.get("clusterIP") != "None" or "targetPort" in p:
                p.setdefault("targetPort", p.get("port"))


def _pvc_create(obj: dict, ctx: Any) -> None:
    obj["status"] = {"phase": "Pending"}


def _pvc_default(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")


def _pv_default(obj: dict, ctx: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")
    obj.setdefault("status", {}).setdefault("phase", "Pending")


def _namespace_create(obj: dict, ctx: Any) -> None:
    obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
    obj["status"] = {"phase": "Active"}


def _namespace_default(obj: dict, ctx: Any) -> None:
    labels = obj["metadata"].setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")


def _secret_default(obj: dict, ctx: Any) -> None:
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = obj.setdefault("data", {}) or {}
        obj["data"] = data
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()


def _generic_create_status_reset(obj: dict, ctx: Any) -> None:
    obj["status"] = {}


CREATE_HOOKS: dict[tuple[str, str], Callable[[dict, Any], None]] = {
    ("", "pods"): _pod_create,
    ("apps", "deployments"): _generic_create_status_reset,
    ("apps", "replicasets"): _generic_create_status_reset,
    ("batch", "jobs"): _job_create,
    ("batch", "cronjobs"): _generic_create_status_reset,
    ("", "services"): _service_create,
    ("", "persistentvolumeclaims"): _pvc_create,
    ("", "namespaces"): _namespace_create,
}

DEFAULT_HOOKS: dict[tuple[str, str], Callable[[dict, Any], None]] = {
    ("", "pods"): _pod_default,
    ("apps", "deployments"): _deployment_default,
    ("apps", "replicasets"): _replicaset_default,
    ("batch", "jobs"): _job_default,
    ("batch", "cronjobs"): _cronjob_default,
    ("", "services"): _service_default,
    ("", "persistentvolumeclaims"): _pvc_default,
    ("", "persistentvolumes"): _pv_default,
    ("", "namespaces"): _namespace_default,
    ("", "secrets"): _secret_default,
}


def prepare_create(rt: ResourceType, obj: dict, ctx: Any) -> None:
    hook = CREATE_HOOKS.get(rt.group_resource)
    if hook:
        hook(obj, ctx)


def apply_defaults(rt: ResourceType, obj: dict, ctx: Any) -> None:
    hook = DEFAULT_HOOKS.get(rt.group_resource)
    if hook:
        hook(obj, ctx)


# ----------------------------------------------------------------------------- validation
def _validate_containers(spec: dict, path: str, errs: list[FieldErr], required: bool = True) -> None:
    containers = spec.get("containers")
    if not containers:
        if required:
            errs.append(FieldErr("Required", f"{path}.containers"))
        return
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            cp = f"{path}.{key}[{i}]"
            if not isinstance(c, dict):
                continue
            name = c.get("name")
            if not name:
                errs.append(FieldErr("Required", f"{cp}.name"))
            elif not _DNS_LABEL.match(name) or len(name) > 63:
                errs.append(FieldErr("Invalid", f"{cp}.name", DNS_LABEL_MSG, name, True))
            elif name in seen:
                errs.append(FieldErr("Duplicate", f"{cp}.name", "", name, True))
            else:
                seen.add(name)
            if not c.get("image"):
                errs.append(FieldErr("Required", f"{cp}.image"))


def _validate_pod_spec(
    spec: Any, path: str, errs: list[FieldErr], restart_policies: tuple[str, ...] | None = None
) -> None:
    if not isinstance(spec, dict):
        errs.append(FieldErr("Required", path))
        return
    _validate_containers(spec, path, errs)
    rp = spec.get("restartPolicy")
    if restart_policies and rp not in restart_policies:
        if rp is None or rp == "":
            errs.append(
                FieldErr(
                    "Required",
                    f"{path}.restartPolicy",
                    "valid values: " + ", ".join(f'"{p}"' for p in restart_policies),
                )
            )
        else:
            errs.append(
                FieldErr(
                    "NotSupported",
                    f"{path}.restartPolicy",
                    "supported values: " + ", ".join(f'"{p}"' for p in restart_policies),
                    rp,
                    True,
                )
            )


POD_UPDATE_MSG = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
    "to 1 if it was previously negative)"
)


def _pod_spec_update_allowed(old: dict, new: dict) -> bool:
    """ValidatePodUpdate: only images, activeDeadlineSeconds, added tolerations, scheduling gates removal."""

    def mutable_cleared(spec: dict) -> dict:
        c = dict(spec)
        for key in ("containers", "initContainers"):
            c[key] = [{k: v for k, v in (x or {}).items() if k != "image"} for x in spec.get(key) or []]
        for key in (
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
            "schedulingGates",
        ):
            c.pop(key, None)
        return c

    old_tol = [t for t in old.get("tolerations") or []]
    new_tol = [t for t in new.get("tolerations") or []]
    if any(t not in new_tol for t in old_tol):
        return False
    return mutable_cleared(old) == mutable_cleared(new)


def _labels_match(selector: dict, labels: dict) -> bool:
    from .selection import selector_from_label_selector

    sel = selector_from_label_selector(selector)
    return sel is not None and sel.matches(labels)


def validate(rt: ResourceType, obj: dict, old: dict | None) -> list[FieldErr]:
    errs: list[FieldErr] = []
    gr = rt.group_resource
    spec = obj.get("spec")
    if gr == ("", "pods"):
        _validate_pod_spec(spec, "spec", errs)
        if (
            old is not None
            and isinstance(spec, dict)
            and not _pod_spec_update_allowed(old.get("spec") or {}, spec)
        ):
            errs.append(FieldErr("Forbidden", "spec", POD_UPDATE_MSG))
    elif gr in (("apps", "deployments"), ("apps", "replicasets")):
        if not isinstance(spec, dict):
            errs.append(FieldErr("Required", "spec"))
            return errs
        sel = spec.get("selector")
        tmpl = spec.get("template") or {}
        labels = (tmpl.get("metadata") or {}).get("labels") or {}
        if not sel:
            errs.append(FieldErr("Required", "spec.selector"))
        elif not (sel.get("matchLabels") or sel.get("matchExpressions")):
            errs.append(
                FieldErr("Invalid", "spec.selector", "empty selector is invalid for deployment", sel, True)
            )
        elif not _labels_match(sel, labels):
            errs.append(
                FieldErr(
                    "Invalid",
                    "spec.template.metadata.labels",
                    "`selector` does not match template `labels`",
                    labels,
                    True,
                )
            )
        _validate_pod_spec(tmpl.get("spec"), "spec.template.spec", errs, ("Always",))
        if old is not None and sel != (old.get("spec") or {}).get("selector"):
            errs.append(FieldErr("Invalid", "spec.selector", "field is immutable", sel, True))
        reps = spec.get("replicas")
        if isinstance(reps, int) and reps < 0:
            errs.append(
                FieldErr("Invalid", "spec.replicas", "must be greater than or equal to 0", reps, True)
            )
    elif gr == ("batch", "jobs"):
        if not isinstance(spec, dict):
            errs.append(FieldErr("Required", "spec"))
            return errs
        tmpl = spec.get("template") or {}
        _validate_pod_spec(tmpl.get("spec"), "spec.template.spec", errs, ("OnFailure", "Never"))
        if old is not None:
            old_spec = old.get("spec") or {}
            if spec.get("template") != old_spec.get("template") and not old_spec.get("suspend"):
                errs.append(
                    FieldErr("Invalid", "spec.template", "field is immutable", spec.get("template"), True)
                )
            if spec.get("completions") != old_spec.get("completions"):
                errs.append(
                    FieldErr(
                        "Invalid", "spec.completions", "field is immutable", spec.get("completions"), True
                    )
                )
    elif gr == ("", "services"):
        if not isinstance(spec, dict):
            spec = {}
        if (
            spec.get("type", "ClusterIP") != "ExternalName"
            and not spec.get("ports")
            and spec.get("clusterIP") != "None"
        ):
            errs.append(FieldErr("Required", "spec.ports"))
        for i, p in enumerate(spec.get("ports") or []):
            if isinstance(p, dict) and not p.get("port"):
                errs.append(FieldErr("Required", f"spec.ports[{i}].port"))
        if old is not None:
            old_ip = (old.get("spec") or {}).get("clusterIP")
            if old_ip and spec.get("clusterIP") not in (None, "", old_ip):
                errs.append(
                    FieldErr(
                        "Invalid",
                        "spec.clusterIPs[0]",
                        "may not change once set",
                        [spec.get("clusterIP")],
                        True,
                    )
                )
    elif gr in (("", "configmaps"), ("", "secrets")):
        for field in ("data", "binaryData"):
            for k in obj.get(field) or {}:
                if not _CONFIG_KEY.match(k) or len(k) > 253:
                    errs.append(
                        FieldErr(
                            "Invalid",
                            f"{field}[{k}]",
                            "a valid config key must consist of alphanumeric characters, '-', "
                            "'_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex "
                            "used for validation is '[-._a-zA-Z0-9]+')",
                            k,
                            True,
                        )
                    )
        if old is not None and old.get("immutable") is True:
            for field in ("data", "binaryData"):
                if obj.get(field) != old.get(field):
                    errs.append(FieldErr("Forbidden", field, "field is immutable when `immutable` is set"))
            if obj.get("immutable") is not True:
                errs.append(FieldErr("Forbidden", "immutable", "field is immutable when `immutable` is set"))
        if gr == ("", "secrets") and old is not None and obj.get("type") != old.get("type"):
            errs.append(FieldErr("Invalid", "type", "field is immutable", obj.get("type"), True))
    elif gr == ("", "persistentvolumeclaims"):
        if not isinstance(spec, dict) or not spec.get("accessModes"):
            errs.append(FieldErr("Required", "spec.accessModes", "at least 1 access mode is required"))
        req = ((spec or {}).get("resources") or {}).get("requests") or {}
        if "storage" not in req:
            errs.append(FieldErr("Required", "spec.resources[storage]"))
    elif gr in (
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
    ):
        ref = obj.get("roleRef") or {}
        if not ref.get("name"):
            errs.append(FieldErr("Required", "roleRef.name"))
        if old is not None and ref != (old.get("roleRef") or {}):
            errs.append(FieldErr("Invalid", "roleRef", "cannot change roleRef", ref, True))
    return errs


def decode_errors(rt: ResourceType, obj: dict) -> str | None:
    """Errors a real server reports while decoding JSON into the Go type (400 BadRequest)."""
    if rt.group_resource == ("", "secrets"):
        for k, v in (obj.get("data") or {}).items():
            if not isinstance(v, str):
                return f"json: cannot unmarshal {type(v).__name__} into Go struct field Secret.data of type []uint8"
            try:
                base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError):
                return f"illegal base64 data at input byte {_first_bad_b64(v)}"
    if rt.group_resource == ("", "configmaps"):
        for k, v in (obj.get("data") or {}).items():
            if not isinstance(v, str):
                return (
                    "json: cannot unmarshal "
                    + _go_type(v)
                    + " into Go struct field ConfigMap.data of type string"
                )
    return None


def _go_type(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    return "string"


def _first_bad_b64(v: str) -> int:
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    for i, ch in enumerate(v):
        if ch not in alphabet:
            return i
    return len(v) - (len(v) % 4) if len(v) % 4 else 0
