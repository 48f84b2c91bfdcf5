"""KServe's LLMInferenceService controller, as far as a client can tell (KServe v0.20.0,
``pkg/controller/v1alpha2/llmisvc``): what the lab needs to decide, without a client.

- the merged spec (``config_merge.go`` ``combineBaseRefsConfig``): the well-known
  LLMInferenceServiceConfigs the spec asks for, then ``spec.baseRefs`` in order, then the spec
  itself, each merged over the one before as a strategic merge patch (``mergeSpecs``:
  ``strategicpatch.StrategicMergePatch`` with the LLMInferenceServiceSpec's patch strategies:
  containers, env, volumes and volumeMounts by name, everything else replaced), then Go template
  variables substituted (``ReplaceVariables``);
- the workloads (``workload_single_node.go`` ``expectedSingleNodeMainDeployment``,
  ``expectedPrefillMainDeployment``): Deployments ``{name}-kserve`` (role ``both``, or ``decode``
  with ``spec.prefill``) and ``{name}-kserve-prefill``, their pod template the merged
  ``template`` / ``prefill.template`` as it is (the container ``main`` with its args unchanged),
  the model attached (``workload_storage.go`` ``attachPVCModelArtifact``);
- the workload Service ``{name}-kserve-workload-svc`` (``workload.go`` ``reconcileWorkloadService``);
- the status: conditions as knative's living condition set keeps them
  (``llm_inference_service_lifecycle.go``), ``url`` and ``addresses`` (``router.go``
  ``updateRoutingStatus``), ``appliedConfigs``.

The lab's own well-known configs (``WELL_KNOWN``) stand in for KServe's
``config/llmisvcconfig/*.yaml``: the same names and shape (``config-llm-template`` runs ``vllm
serve /mnt/models`` through ``/bin/bash -c`` with ``${VLLM_ADDITIONAL_ARGS}`` and the container's
args), the RoCE, TLS and KV-transfer parts left out (the lab has none of them).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Callable

from ..apiserver.patch import pod_spec_type_info_table, strategic_merge_patch, table_type_info

GROUP = "serving.kserve.io"
VERSION = "v1alpha2"
KIND = "LLMInferenceService"
CONTAINER = "main"
SYSTEM_NAMESPACE = "kserve"  # constants.KServeNamespace: where the well-known configs live
MODEL_MOUNT = "/mnt/models"  # constants.DefaultModelLocalMountPath
PVC_VOLUME = "kserve-pvc-source"  # constants.PvcSourceMountName

# pkg/constants/constants.go
PART_OF = "app.kubernetes.io/part-of"
APP_NAME = "app.kubernetes.io/name"
K8S_COMPONENT = "app.kubernetes.io/component"
KSERVE_COMPONENT = "kserve.io/component"
ROLE = "llm-d.ai/role"
PART_OF_VALUE = "llminferenceservice"
COMPONENT_WORKLOAD = "llminferenceservice-workload"
COMPONENT_PREFILL = "llminferenceservice-workload-prefill"
MODEL_ROUTING_ANNOTATION = "serving.kserve.io/model-based-routing-enabled"

# config_merge.go: configPrefix ("kserve-") + the suffixes
TEMPLATE = "kserve-config-llm-template"
DECODE_TEMPLATE = "kserve-config-llm-decode-template"
PREFILL_TEMPLATE = "kserve-config-llm-prefill-template"
WORKER_DP = "kserve-config-llm-worker-data-parallel"
DECODE_WORKER_DP = "kserve-config-llm-decode-worker-data-parallel"
PREFILL_WORKER_DP = "kserve-config-llm-prefill-worker-data-parallel"
SCHEDULER = "kserve-config-llm-scheduler"
ROUTER_ROUTE = "kserve-config-llm-router-route"


class ConfigNotFound(Exception):
    """config_merge.go configNotFoundError: the PresetsCombined condition's ConfigNotFound."""

    def __init__(self, name: str, namespaces: list[str]):
        self.name = name
        super().__init__(f'LLMInferenceServiceConfig "{name}" not found in namespaces [{" ".join(namespaces)}]')


class CombineError(Exception):
    """A merge or template failure: PresetsCombined False, reason CombineBaseError."""


# ---------------------------------------------------------------- names
def child_name(parent: str, suffix: str) -> str:
    """knative.dev/pkg/kmeta ChildName: parent+suffix, or, past 63 characters, the parent cut and
    its md5 appended so the name stays unique and at most 63 long."""
    longest = 63
    if len(parent) + len(suffix) <= longest:
        return parent + suffix
    digest = hashlib.md5(parent.encode()).hexdigest()
    head = longest - len(digest) - len(suffix)
    if head <= 0:  # a suffix too long to keep: hash the whole name (ChildName's second branch)
        return hashlib.md5((parent + suffix).encode()).hexdigest()[:longest]
    return parent[:head] + digest + suffix


def main_deployment_name(name: str) -> str:
    return child_name(name, "-kserve")  # workload_single_node.go mainDeploymentName


def prefill_deployment_name(name: str) -> str:
    return child_name(name, "-kserve-prefill")  # workload_single_node.go prefillDeploymentName


def workload_service_name(name: str) -> str:
    return child_name(name, "-kserve-workload-svc")  # workload.go workloadServiceName


def workload_selector(name: str) -> dict:
    """workload.go GetWorkloadLabelSelector: the workload Service selects decode and prefill pods."""
    return {PART_OF: PART_OF_VALUE, APP_NAME: name, KSERVE_COMPONENT: "workload"}


def owner_of(labels: dict) -> str | None:
    """The LLMInferenceService a workload pod or Deployment belongs to (its labels), else None."""
    if labels.get(PART_OF) == PART_OF_VALUE and labels.get(KSERVE_COMPONENT) == "workload":
        return labels.get(APP_NAME)
    return None


# ---------------------------------------------------------------- the merge
def _spec_type_info():
    pod = pod_spec_type_info_table()
    workload = {"template": pod, "worker": pod}
    return table_type_info(dict(workload, prefill=dict(workload)))


_SPEC_INFO = None


def merge_specs(base: dict, override: dict) -> dict:
    """config_merge.go mergeSpecs: the override (its defaults set, empty values dropped as
    CreateTwoWayMergePatch from the zero spec leaves them out) merged over base as a strategic merge patch."""
    global _SPEC_INFO
    if _SPEC_INFO is None:
        _SPEC_INFO = _spec_type_info()
    return strategic_merge_patch(base, _drop_empty(set_spec_defaults(override)), _SPEC_INFO)


def _drop_empty(value):
    """Null values dropped (json.Marshal's omitempty on nil pointers); empty objects stay, as a
    non-nil pointer to an empty struct (``router: {route: {}}``) marshals to ``{}``."""
    if isinstance(value, dict):
        return {k: _drop_empty(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_empty(v) for v in value]
    return value


def set_spec_defaults(spec: dict) -> dict:
    """llm_inference_service_defaults.go LLMInferenceServiceSpec.SetDefaults: pod templates get a
    containers list (so that a merge keeps the base's containers)."""
    spec = copy.deepcopy(spec or {})
    for holder in (spec, spec.get("prefill") or {}):
        for key in ("template", "worker"):
            if isinstance(holder.get(key), dict):
                holder[key].setdefault("containers", [])
    return spec


def well_known_refs(spec: dict) -> list[str]:
    """config_merge.go combineBaseRefsConfig: the well-known configs a (baseRefs-resolved) spec
    asks for, in order: router scheduler and route, then prefill and decode, or the single template."""
    refs = []
    router = spec.get("router") or {}
    if isinstance(router.get("scheduler"), dict) and not (router["scheduler"].get("pool") or {}).get("ref"):
        refs.append(SCHEDULER)
    if isinstance(router.get("route"), dict) and not ((router["route"].get("http") or {}).get("refs")):
        refs.append(ROUTER_ROUTE)
    worker, prefill = spec.get("worker"), spec.get("prefill")
    if prefill is not None:
        refs.append(PREFILL_TEMPLATE if prefill.get("worker") is None else PREFILL_WORKER_DP)
        refs.append(DECODE_TEMPLATE if worker is None else DECODE_WORKER_DP)
    else:
        refs.append(TEMPLATE if worker is None else WORKER_DP)
    return refs


def combine(llmsvc: dict, get_config: Callable[[str, str], dict | None]) -> tuple[dict, list[dict]]:
    """(the merged spec, status.appliedConfigs). get_config(namespace, name) -> the config or None;
    a config is looked up in the service's namespace, then in KServe's (config_merge.go getConfig)."""
    ns = llmsvc["metadata"]["namespace"]
    spec = llmsvc.get("spec") or {}

    def config(name: str) -> dict:
        for where in (ns, SYSTEM_NAMESPACE):
            cfg = get_config(where, name)
            if cfg is not None:
                return cfg
        raise ConfigNotFound(name, [ns, SYSTEM_NAMESPACE])

    user_refs = [r.get("name", "") for r in spec.get("baseRefs") or []]
    resolved = copy.deepcopy(spec)
    for name in user_refs:
        resolved = merge_specs(resolved, config(name).get("spec") or {})
    presets = well_known_refs(resolved)
    merged, applied = {}, []
    for i, name in enumerate(presets + user_refs):
        cfg = config(name)
        merged = merge_specs(merged, cfg.get("spec") or {}) if merged else set_spec_defaults(cfg.get("spec") or {})
        applied.append(
            {
                "name": name,
                "namespace": cfg["metadata"]["namespace"],
                "source": "Preset" if i < len(presets) else "UserRef",
            }
        )
    merged = merge_specs(merged, spec)
    model_name = (resolved.get("model") or {}).get("name") or llmsvc["metadata"]["name"]
    view = copy.deepcopy(llmsvc)
    view.setdefault("spec", {}).setdefault("model", {})["name"] = model_name
    merged = replace_variables(merged, view)
    merged.setdefault("model", {})["name"] = model_name
    return merged, applied


# ---------------------------------------------------------------- Go templates
_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
_GLOBAL = {"SystemNamespace": SYSTEM_NAMESPACE, "EnableTLS": False, "IngressGatewayName": "", "IngressGatewayNamespace": ""}


def replace_variables(spec: dict, llmsvc: dict) -> dict:
    """config_merge.go ReplaceVariables: the merged spec as JSON, run as a Go text/template over
    the LLMInferenceService (``.ObjectMeta``, ``.Spec``, ``.GlobalConfig``). The lab evaluates what
    KServe's templates use: field paths, ``if``/``else``/``end`` with ``and``/``not``, ``ChildName``."""
    text = json.dumps(spec)
    if "{{" not in text:
        return spec
    try:
        out = _render(text, llmsvc)
        return json.loads(out)
    except (ValueError, KeyError) as exc:
        raise CombineError(f"failed to merge config: template: config: {exc}") from None


def _render(text: str, data: dict) -> str:
    out: list[str] = []
    stack: list[bool] = []  # emitting, per open if
    pos = 0
    for m in _ACTION.finditer(text):
        chunk = text[pos : m.start()]
        if m.group(1):
            chunk = chunk.rstrip()
        if all(stack):
            out.append(chunk)
        pos = m.end()
        body = m.group(2)
        if m.group(3):
            rest = text[pos:]
            pos += len(rest) - len(rest.lstrip())
        words = body.split(None, 1)
        if words and words[0] == "if":
            stack.append(all(stack) and _truthy(_eval(words[1], data)))
        elif body == "else":
            if not stack:
                raise ValueError("unexpected {{else}}")
            stack[-1] = not stack[-1] and all(stack[:-1])
        elif body == "end":
            if not stack:
                raise ValueError("unexpected {{end}}")
            stack.pop()
        elif all(stack):
            out.append(_json_text(_eval(body, data)))
    if stack:
        raise ValueError("unexpected EOF")
    out.append(text[pos:])
    return "".join(out)


def _json_text(value) -> str:
    """What the template prints, as it lands inside a JSON string."""
    text = "<nil>" if value is None else ("true" if value is True else "false" if value is False else str(value))
    return json.dumps(text)[1:-1]


def _truthy(value) -> bool:
    return value not in (None, False, 0, "", [], {})


def _eval(expr: str, data: dict):
    words = re.findall(r"`[^`]*`|\"[^\"]*\"|\S+", expr)
    if not words:
        raise ValueError("empty command")
    head = words[0]
    if head == "and":  # short-circuits, as Go's does since 1.18
        value = True
        for w in words[1:]:
            value = _operand(w, data)
            if not _truthy(value):
                return value
        return value
    args = [_operand(w, data) for w in words[1:]]
    if head == "not":
        return not _truthy(args[0])
    if head == "ChildName":
        return child_name(str(args[0]), str(args[1]))
    if len(words) == 1:
        return _operand(head, data)
    raise ValueError(f'function "{head}" not defined')


def _operand(word: str, data: dict):
    if word[0] in "`\"":
        return word[1:-1]
    if re.fullmatch(r"-?\d+", word):
        return int(word)
    if not word.startswith("."):
        raise ValueError(f'function "{word}" not defined')
    node: object = {"ObjectMeta": data.get("metadata") or {}, "Spec": data.get("spec") or {}, "GlobalConfig": _GLOBAL}
    parts = [p for p in word.split(".") if p]
    for i, part in enumerate(parts):
        if node is None:
            raise ValueError(f"nil pointer evaluating {'.'.join(parts[:i])}.{part}")
        key = part if i == 0 or parts[0] == "GlobalConfig" else part[0].lower() + part[1:]
        node = node.get(key) if isinstance(node, dict) else None
    return node


# ---------------------------------------------------------------- the workloads
def parse_pvc_uri(uri: str) -> tuple[str, str]:
    rest = uri[len("pvc://") :]
    claim, _, sub = rest.partition("/")
    return claim, sub.strip("/")


def attach_model(pod_spec: dict, uri: str) -> None:
    """workload_storage.go attachPVCModelArtifact (utils.AddModelMount): a pvc:// model mounted
    read-only at /mnt/models in the main container, the URI's path as subPath. Other schemes go
    through the storage initializer on a cluster; the lab has no network (the pod fails to start)."""
    if not uri.startswith("pvc://"):
        return
    claim, sub = parse_pvc_uri(uri)
    volumes = pod_spec.setdefault("volumes", [])
    if not any(v.get("name") == PVC_VOLUME for v in volumes):
        volumes.append({"name": PVC_VOLUME, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
    for c in pod_spec.get("containers") or []:
        if c.get("name") == CONTAINER:
            mount = {"name": PVC_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True}
            if sub:
                mount["subPath"] = sub
            mounts = [m for m in c.get("volumeMounts") or [] if m.get("mountPath") != MODEL_MOUNT]
            c["volumeMounts"] = mounts + [mount]


def _propagate(src: dict | None, dst: dict, skip: tuple = ()) -> None:
    for k, v in (src or {}).items():
        if k not in skip:
            dst[k] = v


def workload(llmsvc: dict, merged: dict, prefill: bool) -> dict | None:
    """The expected Deployment of the main (decode) or prefill workload, None when there is none
    (a multi-node ``worker`` runs as a LeaderWorkerSet, which the lab does not emulate)."""
    md = llmsvc["metadata"]
    name = md["name"]
    part = (merged.get("prefill") or None) if prefill else merged
    if part is None or part.get("worker") is not None:
        return None
    if prefill:
        labels = {K8S_COMPONENT: COMPONENT_PREFILL, APP_NAME: name, PART_OF: PART_OF_VALUE}
        labels.update({KSERVE_COMPONENT: "workload", ROLE: "prefill"})
        dname = prefill_deployment_name(name)
    else:
        labels = {K8S_COMPONENT: COMPONENT_WORKLOAD, APP_NAME: name, PART_OF: PART_OF_VALUE}
        labels.update({KSERVE_COMPONENT: "workload", ROLE: "decode" if merged.get("prefill") is not None else "both"})
        dname = main_deployment_name(name)
    tmeta = {"labels": dict(labels)}
    annotations = {k: v for k, v in (md.get("annotations") or {}).items() if k.startswith("prometheus.io")}
    if annotations and not prefill:
        tmeta["annotations"] = annotations
    _propagate(part.get("labels"), tmeta["labels"])
    _propagate(part.get("annotations"), tmeta.setdefault("annotations", {}), (MODEL_ROUTING_ANNOTATION,))
    if not tmeta["annotations"]:
        tmeta.pop("annotations")
    pod_spec = copy.deepcopy(part.get("template") or {"containers": []})
    attach_model(pod_spec, (merged.get("model") or {}).get("uri", ""))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": dname, "namespace": md["namespace"], "labels": dict(labels)},
        "spec": {
            "replicas": part.get("replicas", 1) if part.get("replicas") is not None else 1,
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": tmeta, "spec": pod_spec},
        },
    }


def workload_service(llmsvc: dict, merged: dict) -> dict:
    """workload.go reconcileWorkloadService (TLS off: port http 8000)."""
    md = llmsvc["metadata"]
    labels = {K8S_COMPONENT: COMPONENT_WORKLOAD, APP_NAME: md["name"], PART_OF: PART_OF_VALUE}
    _propagate(merged.get("labels"), labels)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": workload_service_name(md["name"]), "namespace": md["namespace"], "labels": labels},
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "appProtocol": "http", "port": 8000, "targetPort": 8000}],
            "selector": workload_selector(md["name"]),
            "type": "ClusterIP",
        },
    }


# ---------------------------------------------------------------- the status
def condition(type_: str, ok: bool, reason: str = "", message: str = "", severity: str = "Info") -> dict:
    c = {"type": type_, "status": "True" if ok else "False", "severity": severity}
    if not ok:
        c.update(reason=reason, message=message)
    return c


def readiness(conds: list[dict]) -> list[dict]:
    """knative's living condition set (llm_inference_service_lifecycle.go): WorkloadsReady from
    the workload conditions (DetermineWorkloadReadiness), RouterReady from the router's
    (DetermineRouterReadiness), Ready from both; those three carry no severity, the others Info;
    sorted by type as knative keeps them."""
    by_type = {c["type"]: c for c in conds}

    def summary(kind: str, subs: tuple) -> dict:
        bad = next((by_type[t] for t in subs if t in by_type and by_type[t]["status"] == "False"), None)
        if bad:
            return condition(kind, False, bad.get("reason", ""), bad.get("message", ""), "")
        return condition(kind, True, severity="")

    work = summary("WorkloadsReady", ("MainWorkloadReady", "WorkerWorkloadReady", "PrefillWorkloadReady"))
    router = summary("RouterReady", ("GatewaysReady", "HTTPRoutesReady", "InferencePoolReady", "SchedulerWorkloadReady"))
    top = next((c for c in (work, router) if c["status"] == "False"), None)
    ready = condition("Ready", False, top["reason"], top["message"], "") if top else condition("Ready", True, severity="")
    by_type.update({c["type"]: c for c in (work, router, ready)})
    for c in by_type.values():
        if c.get("severity") == "":
            c.pop("severity")
    return [by_type[k] for k in sorted(by_type)]


def deployment_condition(type_: str, deploy: dict | None) -> dict:
    """workload_single_node.go propagateDeploymentStatus: Progressing False wins, then Available."""
    conds = ((deploy or {}).get("status") or {}).get("conditions") or []
    result = condition(type_, False, "Progressing", "")
    for c in conds:
        if c.get("type") == "Progressing" and c.get("status") == "False":
            result = condition(type_, False, c.get("reason", ""), c.get("message", ""))
        if c.get("type") == "Available":
            ok = c.get("status") == "True"
            return condition(type_, ok, c.get("reason", ""), c.get("message", ""))
    return result


def router_conditions(merged: dict) -> list[dict]:
    """What the lab's router reports: the HTTPRoute and Gateway ready when the spec asks for a
    route, the scheduler ready when it asks for one (the lab runs neither: its address at
    status.url proxies to the decode workload)."""
    router = merged.get("router") or {}
    out = []
    if router.get("route") is not None:
        out += [condition("HTTPRoutesReady", True), condition("GatewaysReady", True)]
    if router.get("scheduler") is not None:
        out += [condition("InferencePoolReady", True), condition("SchedulerWorkloadReady", True)]
    return out
