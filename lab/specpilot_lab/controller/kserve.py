"""What KServe (v0.20, Standard mode) does with an InferenceService, as pure functions.

- :func:`validate_webhook`: the validating webhook's storage rules, with KServe's messages;
- :func:`select_runtime`: ServingRuntime / ClusterServingRuntime by name, or by model format
  with ``autoSelect`` (namespace runtimes first, then cluster ones; higher priority first);
- :func:`merge_container`: the runtime's ``kserve-container`` with the InferenceService's
  ``model`` container strategic-merged onto it, ``args`` appended, ``command`` replaced;
- :func:`replace_placeholders`: ``{{.Name}}``, ``{{.Namespace}}``, ``{{.Labels.k}}``,
  ``{{.Annotations.k}}`` in the merged container;
- :func:`resolve_storage`: ``storageUri`` / ``storageUris`` to mounts (a single ``pvc://`` honours
  its sub-path; ``storageUris`` PVC entries mount the whole claim, as KServe 0.20 does;
  ``oci://`` becomes a modelcar);
- :func:`pod_template`: the predictor pod template KServe renders (labels, volumes, modelcar
  sidecar, ``shareProcessNamespace``).

- :func:`predictor_variants`: the stable predictor and each ``spec.canary[]`` entry as the
  Deployment KServe 0.20 renders for it (``{isvc}[-{name}]-predictor``), with its traffic weight;
  :func:`validate_canary` the webhook's canary rules.
- Knative (Serverless) mode: :func:`revision_name`, :func:`traffic_targets` (canaryTrafficPercent),
  :func:`route_traffic` and :func:`propagate_rollout` (status.components.predictor's revisions).

Sources: kserve/kserve v0.20.0, ``pkg/apis/serving/v1beta1/inference_service_validation.go``,
``pkg/controller/v1beta1/inferenceservice/components/predictor.go``,
``pkg/controller/v1beta1/inferenceservice/utils/utils.go`` and
``pkg/webhook/admission/pod/storage_initializer_injector.go``.
"""

from __future__ import annotations

import copy
import posixpath
import re
from dataclasses import dataclass

GROUP = "serving.kserve.io"
ISVC_VERSION = "v1beta1"
RUNTIME_VERSION = "v1alpha1"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
COMPONENT_LABEL = "component"
CONTAINER = "kserve-container"
DEFAULT_MOUNT = "/mnt/models"
READONLY_ANNOTATION = "storage.kserve.io/readonly"
WEBHOOK = "inferenceservice.kserve-webhook-server.validator"

INVALID_STORAGE_URI_CONFIG = "Setting both StorageURI and StorageURIs is not supported."

# keys of predictor.model that are not corev1.Container fields
_MODEL_ONLY_KEYS = {"modelFormat", "runtime", "storageUri", "runtimeVersion", "protocolVersion", "storage"}
# keys of predictor that are not PodSpec fields
_PREDICTOR_NON_POD = {
    "model",
    "storageUris",
    "storageContainerName",
    "workerSpec",
    "name",
    "minReplicas",
    "maxReplicas",
    "scaleTarget",
    "scaleMetric",
    "scaleMetricType",
    "autoScaling",
    "containerConcurrency",
    "timeout",
    "canaryTrafficPercent",
    "logger",
    "batcher",
    "labels",
    "annotations",
    "deploymentStrategy",
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
}


class SpecError(Exception):
    """The InferenceService cannot be reconciled.

    reason: KServe's FailureInfo reason (RuntimeNotRecognized, NoSupportingRuntime, ...);
    transition: modelStatus.transitionStatus; webhook: True when a real cluster's admission
    webhook would have refused the request."""

    def __init__(
        self,
        message: str,
        reason: str = "InvalidPredictorSpec",
        transition: str = "InvalidSpec",
        webhook: bool = False,
        status_message: str | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.transition = transition
        self.webhook = webhook
        self.status_message = status_message or message


# ---------------------------------------------------------------- webhook
def find_common_parent_path(paths: list[str]) -> str:
    """KServe's FindCommonParentPath: the longest common directory prefix of the parent
    directories of paths ("/" when there is none)."""
    if not paths:
        return "/"
    split = [[p for p in posixpath.dirname(posixpath.normpath(x)).split("/") if p] for x in paths]
    common: list[str] = []
    for parts in zip(*split):
        if all(p == parts[0] for p in parts):
            common.append(parts[0])
        else:
            break
    return "/" + "/".join(common)


def _validate_storage_uri_spec(entry: dict) -> str | None:
    uri = entry.get("uri") or ""
    mount = entry.get("mountPath", DEFAULT_MOUNT)
    if uri == "":
        return "storage URI cannot be empty"
    if mount == "/":
        return "storage path cannot be empty"
    if not str(mount).startswith("/"):
        return f"storage path must be absolute: {mount}"
    if ".." in str(mount):
        return f"storage path cannot contain '..' for security reasons: {mount}"
    return None


def _go_list(items: list[str]) -> str:
    return "[" + " ".join(items) + "]"


def validate_storage_uris(entries: list[dict]) -> str | None:
    """validateMultipleStorageURIsSpec: the first error message, or None."""
    paths, pvc_paths = [], []
    for e in entries:
        err = _validate_storage_uri_spec(e)
        if err:
            return err
        mount = e.get("mountPath", DEFAULT_MOUNT)
        (pvc_paths if str(e.get("uri", "")).startswith("pvc://") else paths).append(mount)
    if len(paths) <= 1:  # KServe returns early here: PVC uniqueness is only checked after it
        return None
    if len(pvc_paths) > 1 and len(set(pvc_paths)) != len(pvc_paths):
        return "PVC storage paths must be unique"
    if find_common_parent_path(paths) == "/":
        return (
            "storage paths must have a common parent directory. "
            f"Current paths: {_go_list(paths)} have no common parent beyond root"
        )
    return None


def validate_webhook(isvc: dict) -> None:
    """Raise SpecError(webhook=True) for what KServe's validating webhook rejects."""
    pred = (isvc.get("spec") or {}).get("predictor") or {}
    model = pred.get("model")
    if isinstance(model, dict) and model.get("name"):
        _reject("the 'name' field is not allowed in standard predictor")
    storage_uri = model.get("storageUri") if isinstance(model, dict) else None
    storage_uris = pred.get("storageUris")
    if storage_uri is not None and storage_uris is not None:
        _reject(INVALID_STORAGE_URI_CONFIG)
    err = validate_storage_uris(storage_uris or [])
    if err:
        _reject(err)


def _reject(msg: str) -> None:
    raise SpecError(
        msg,
        reason="InvalidPredictorSpec",
        transition="InvalidSpec",
        webhook=True,
        status_message=f'admission webhook "{WEBHOOK}" denied the request: {msg}',
    )


# ---------------------------------------------------------------- canary (KServe 0.20, PR #5672)
def predictor_service_name(isvc_name: str, predictor_name: str | None = None) -> str:
    """constants.PredictorServiceName (pkg/constants/constants.go@v0.20.0): the Deployment and
    Service of a predictor, ``{isvc}-{name}-predictor`` when it has a name."""
    return f"{isvc_name}-{predictor_name}-predictor" if predictor_name else f"{isvc_name}-predictor"


def validate_canary(isvc: dict) -> None:
    """validateCanarySpecs (inference_service_validation.go@v0.20.0, L183-264): the webhook's
    canary rules, with its messages."""
    spec = isvc.get("spec") or {}
    canaries = spec.get("canary") or []
    if not canaries:
        return
    mode = ((isvc.get("metadata") or {}).get("annotations") or {}).get("serving.kserve.io/deploymentMode")
    if mode not in ("Standard", "RawDeployment"):  # the lab runs Standard mode only
        _reject("canary is only supported in Standard deployment mode")
    stable = spec.get("predictor") or {}
    if not stable.get("model"):
        _reject(
            "canary requires a stable predictor with a model (multi-model serving is not supported with canary)"
        )
    names: set[str] = set()
    total = 0
    for i, c in enumerate(canaries):
        pred = c.get("predictor") or {}
        name = pred.get("name") or ""
        if not name:
            _reject(f"canary[{i}] predictor.name is required")
        if name in names:
            _reject(f'canary predictor.name "{name}" is duplicated')
        names.add(name)
        if name == stable.get("name"):
            _reject(f'canary predictor.name "{name}" conflicts with stable predictor name')
        for field in ("workerSpec", "maxReplicas", "scaleTarget", "scaleMetric", "autoScaling"):
            if pred.get(field):
                why = (
                    "multi-node is not yet supported for canary"
                    if field == "workerSpec"
                    else "canary uses fixed replicas"
                )
                _reject(f'canary "{name}" must not set {field} ({why})')
        total += int(c.get("trafficPercent") or 0)
    if total > 100:
        _reject(f"sum of canary trafficPercent values ({total}) must be <= 100")


def merge_override(base, over):
    """mergo.Merge(&dst, src, mergo.WithOverride) on JSON: objects merge key by key, a non-empty
    value of ``over`` replaces the base's (lists whole), empty values ("", 0, false, [], {}) do not."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for k, v in over.items():
            out[k] = merge_override(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    if over in (None, "", 0, False, [], {}):
        return copy.deepcopy(base)
    return copy.deepcopy(over)


@dataclass
class Variant:
    """One predictor Deployment of an InferenceService: the stable one (canary None) or a canary."""

    deployment: str
    isvc: dict  # the InferenceService as that Deployment's reconcile sees it (its predictor)
    canary: str | None = None
    traffic_percent: int = 0


def predictor_variants(isvc: dict) -> list[Variant]:
    """The stable predictor, then each canary as reconcileCanaryDeployments renders it
    (components/predictor.go@v0.20.0): buildCanaryPredictor merges the canary's predictor over a
    copy of the stable one (mergo WithOverride) and drops the autoscaling fields; the canary's
    Deployment is built from a copy of the InferenceService carrying that predictor."""
    md = isvc["metadata"]
    stable = (isvc.get("spec") or {}).get("predictor") or {}
    out = [Variant(predictor_service_name(md["name"], stable.get("name")), isvc)]
    for c in (isvc.get("spec") or {}).get("canary") or []:
        pred = merge_override(stable, c.get("predictor") or {})
        for field in ("maxReplicas", "scaleTarget", "scaleMetric", "autoScaling"):
            pred.pop(field, None)
        view = copy.deepcopy(isvc)
        view["spec"]["predictor"] = pred
        view["spec"].pop("canary", None)
        out.append(
            Variant(
                predictor_service_name(md["name"], pred.get("name")),
                view,
                pred.get("name"),
                int(c.get("trafficPercent") or 0),
            )
        )
    return out


# ---------------------------------------------------------------- Knative (Serverless) mode
# KServe renders a Serverless predictor as a Knative Service {isvc}-predictor; every change of its
# template is a new Revision {isvc}-predictor-{generation:05d} (its own Deployment
# {revision}-deployment); the Route splits the traffic over revisions. The lab keeps no
# serving.knative.dev objects (nothing in specpilot reads them): the revisions are their Deployments.
SERVERLESS_MODES = ("Serverless", "Knative")
TAG_ROUTING_ANNOTATION = "serving.kserve.io/enable-tag-routing"
KN_REVISION_LABEL = "serving.knative.dev/revision"
KN_CONFIGURATION_LABEL = "serving.knative.dev/configuration"
KN_SERVICE_LABEL = "serving.knative.dev/service"
KN_GENERATION_LABEL = "serving.knative.dev/configurationGeneration"


def is_serverless(isvc: dict) -> bool:
    """deploymentMode Serverless (or its post-0.16 name Knative)."""
    mode = ((isvc.get("metadata") or {}).get("annotations") or {}).get("serving.kserve.io/deploymentMode")
    return mode in SERVERLESS_MODES


def revision_name(isvc_name: str, generation: int) -> str:
    """Knative names a Configuration's revisions {configuration}-{generation, 5 digits}
    (knative.dev/serving pkg/reconciler/configuration/resources/revision.go, kmeta.ChildName);
    KServe's configuration is the predictor's Knative Service, constants.PredictorServiceName."""
    return f"{predictor_service_name(isvc_name)}-{generation:05d}"


def revision_labels(isvc_name: str, revision: str, generation: int) -> dict:
    """What Knative adds to a revision's pod template (the user's labels kept): the revision,
    its configuration and service, and ``app`` (the revision's name when not set)."""
    ksvc = predictor_service_name(isvc_name)
    return {
        KN_REVISION_LABEL: revision,
        KN_CONFIGURATION_LABEL: ksvc,
        KN_SERVICE_LABEL: ksvc,
        KN_GENERATION_LABEL: str(generation),
        "app": revision,
    }


def traffic_targets(canary_percent, latest_rolledout: str, tag_routing: bool) -> list[dict]:
    """The Knative Service's spec.traffic as KServe writes it (createKnativeService,
    pkg/controller/v1beta1/inferenceservice/reconcilers/knative/ksvc_reconciler.go): with
    canaryTrafficPercent and a rolled-out revision, the latest revision takes that share
    (tag ``latest`` with the enable-tag-routing annotation) and, below 100, the last revision rolled out
    with 100% the rest (tag ``prev``, always); otherwise the latest revision takes 100% (blue-green)."""
    latest = {"latestRevision": True, "percent": 100}
    if tag_routing:
        latest["tag"] = "latest"
    if canary_percent is None or not latest_rolledout:
        return [latest]
    latest["percent"] = int(canary_percent)
    out = [latest]
    if int(canary_percent) < 100:
        out.append(
            {
                "revisionName": latest_rolledout,
                "latestRevision": False,
                "percent": 100 - int(canary_percent),
                "tag": "prev",
            }
        )
    return out


def route_traffic(targets: list[dict], latest_ready: str | None) -> list[dict]:
    """The Route's status.traffic: each target with the revision it resolves to (a latestRevision
    target: the latest *ready* revision, so a new revision takes no traffic before it is ready); none
    before any revision is ready (knative.dev/serving pkg/reconciler/route/traffic/traffic.go)."""
    if not latest_ready:
        return []
    out = []
    for t in targets:
        entry = dict(t)
        if t.get("latestRevision"):
            entry["revisionName"] = latest_ready
        out.append(entry)
    return out


def propagate_rollout(component: dict, latest_created: str, latest_ready: str, traffic: list[dict]) -> dict:
    """status.components.predictor's revisions as PropagateStatus keeps them
    (pkg/apis/serving/v1beta1/inference_service_status.go): the latest ready revision becomes the
    latest rolled out (the one before it the previous) once its latestRevision target has 100%; a
    revision rolled out and then sent back below 100% while the same revision takes all the traffic
    (canaryTrafficPercent 0 after 100) hands latestRolledoutRevision back to the previous one."""
    out = dict(component or {})
    out["latestCreatedRevision"] = latest_created
    by_revision: dict[str, int] = {}
    for t in traffic:
        by_revision[t.get("revisionName")] = by_revision.get(t.get("revisionName"), 0) + int(
            t.get("percent") or 0
        )
    for t in traffic:
        if t.get("revisionName") != latest_ready or not t.get("latestRevision"):
            continue
        if out.get("latestRolledoutRevision") != latest_ready:
            if int(t.get("percent") or 0) == 100:
                out["previousRolledoutRevision"] = out.get("latestRolledoutRevision") or ""
                out["latestRolledoutRevision"] = latest_ready
        elif latest_ready == latest_created and int(t.get("percent") or 0) < 100:
            if by_revision.get(t.get("revisionName")) == 100 and out.get("previousRolledoutRevision"):
                out["latestRolledoutRevision"] = out["previousRolledoutRevision"]
    out["latestReadyRevision"] = latest_ready or ""
    out["traffic"] = traffic
    return out


# ---------------------------------------------------------------- runtimes
def _supports(runtime: dict, model_format: dict, require_auto: bool) -> bool:
    spec = runtime.get("spec") or {}
    if spec.get("disabled"):
        return False
    if require_auto and spec.get("multiModel"):
        return False
    want_name = str(model_format.get("name") or "").lower()
    want_version = model_format.get("version")
    for f in spec.get("supportedModelFormats") or []:
        if str(f.get("name") or "").lower() != want_name:
            continue
        if require_auto and not f.get("autoSelect"):
            continue
        if (
            want_version
            and f.get("version")
            and str(f["version"]).split(".")[0] != str(want_version).split(".")[0]
        ):
            continue
        return True
    return False


def _priority(runtime: dict, model_format: dict) -> int:
    want = str(model_format.get("name") or "").lower()
    for f in (runtime.get("spec") or {}).get("supportedModelFormats") or []:
        if str(f.get("name") or "").lower() == want:
            return int(f.get("priority") or 0)
    return 0


def select_runtime(isvc: dict, ns_runtimes: list[dict], cluster_runtimes: list[dict]) -> tuple[str, dict]:
    """("ServingRuntime" | "ClusterServingRuntime", runtime object) for the predictor."""
    model = ((isvc.get("spec") or {}).get("predictor") or {}).get("model")
    if not isinstance(model, dict):
        raise SpecError(
            "the lab supports spec.predictor.model only (framework predictors need their images)",
            reason="InvalidPredictorSpec",
        )
    fmt = model.get("modelFormat") or {}
    name = model.get("runtime")
    if name:
        found = [("ServingRuntime", r) for r in ns_runtimes if r["metadata"]["name"] == name]
        found += [("ClusterServingRuntime", r) for r in cluster_runtimes if r["metadata"]["name"] == name]
        if not found:
            raise SpecError(
                f"No ServingRuntimes or ClusterServingRuntimes with the name: {name}",
                reason="RuntimeNotRecognized",
                status_message=f"Waiting for runtime to become available: no ServingRuntime or "
                f"ClusterServingRuntime named {name!r}",
            )
        kind, rt = found[0]
        if (rt.get("spec") or {}).get("disabled"):
            raise SpecError(
                f"specified runtime {name} is disabled",
                reason="RuntimeDisabled",
                status_message="Specified runtime is disabled",
            )
        if fmt and not _supports(rt, fmt, require_auto=False):
            raise SpecError(
                f"specified runtime {name} does not support specified framework/version",
                reason="NoSupportingRuntime",
                status_message="Specified runtime does not support specified framework/version",
            )
        return kind, rt
    candidates = []
    for order, (kind, items) in enumerate(
        (("ServingRuntime", ns_runtimes), ("ClusterServingRuntime", cluster_runtimes))
    ):
        for rt in items:
            if _supports(rt, fmt, require_auto=True):
                candidates.append((order, -_priority(rt, fmt), rt["metadata"]["name"], kind, rt))
    if not candidates:
        fmt_go = (
            "{" + f"{fmt.get('name', '')} {'<nil>' if fmt.get('version') is None else fmt['version']}" + "}"
        )
        raise SpecError(
            f"no runtime found to support predictor with model type: {fmt_go}",
            reason="NoSupportingRuntime",
            status_message="No runtime found to support specified framework/version",
        )
    candidates.sort(key=lambda c: c[:3])
    return candidates[0][3], candidates[0][4]


# ---------------------------------------------------------------- merge
_MERGE_KEYS = {
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "envFrom": None,
    "volumeDevices": "devicePath",
}


def _merge_list(base: list, over: list, key: str | None) -> list:
    if key is None:
        return copy.deepcopy(over)
    out = [copy.deepcopy(x) for x in base]
    index = {x.get(key): i for i, x in enumerate(out) if isinstance(x, dict)}
    for item in over:
        if isinstance(item, dict) and item.get(key) in index:
            merged = dict(out[index[item[key]]])
            merged.update(copy.deepcopy(item))
            if "value" in item and "valueFrom" not in item:
                merged.pop("valueFrom", None)
            out[index[item[key]]] = merged
        else:
            out.append(copy.deepcopy(item))
    return out


def _merge_resources(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base or {})
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **copy.deepcopy(v)}
        else:
            out[k] = copy.deepcopy(v)
    return out


def merge_container(runtime_container: dict, model: dict) -> dict:
    """KServe's MergeRuntimeContainers: strategic merge of the model container onto the
    runtime container, except that args are concatenated (runtime first)."""
    over = {k: v for k, v in (model or {}).items() if k not in _MODEL_ONLY_KEYS}
    out = copy.deepcopy(runtime_container)
    for key, value in over.items():
        if key == "args":
            continue
        if key in _MERGE_KEYS and isinstance(value, list):
            out[key] = _merge_list(out.get(key) or [], value, _MERGE_KEYS[key])
        elif key == "resources" and isinstance(value, dict):
            out[key] = _merge_resources(out.get(key) or {}, value)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **copy.deepcopy(value)}
        else:
            out[key] = copy.deepcopy(value)
    args = list(runtime_container.get("args") or []) + list(over.get("args") or [])
    if args:
        out["args"] = args
    out["name"] = CONTAINER
    return out


_PLACEHOLDER = re.compile(r"\{\{\s*\.(Name|Namespace|Labels\.([\w./-]+)|Annotations\.([\w./-]+))\s*\}\}")


def _substitute(text: str, meta: dict) -> str:
    def sub(m: re.Match) -> str:
        if m.group(1) == "Name":
            return str(meta.get("name", ""))
        if m.group(1) == "Namespace":
            return str(meta.get("namespace", ""))
        if m.group(2):
            return str((meta.get("labels") or {}).get(m.group(2), "<no value>"))
        return str((meta.get("annotations") or {}).get(m.group(3), "<no value>"))

    return _PLACEHOLDER.sub(sub, text)


def replace_placeholders(obj, meta: dict):
    """Go-template placeholders from the InferenceService's metadata in every string."""
    if isinstance(obj, str):
        return _substitute(obj, meta)
    if isinstance(obj, list):
        return [replace_placeholders(x, meta) for x in obj]
    if isinstance(obj, dict):
        return {k: replace_placeholders(v, meta) for k, v in obj.items()}
    return obj


def merge_pod_spec(runtime_spec: dict, predictor: dict) -> dict:
    """Pod-level fields: the runtime's (volumes, nodeSelector, tolerations, affinity, ...)
    with the predictor's inline PodSpec merged over them."""
    out: dict = {}
    for key in (
        "volumes",
        "nodeSelector",
        "tolerations",
        "affinity",
        "imagePullSecrets",
        "hostIPC",
        "schedulerName",
    ):
        if key in runtime_spec:
            out[key] = copy.deepcopy(runtime_spec[key])
    for key, value in predictor.items():
        if key in _PREDICTOR_NON_POD or key in ("containers",):
            continue
        if key == "volumes" and isinstance(value, list):
            out["volumes"] = _merge_list(out.get("volumes") or [], value, "name")
        elif key == "nodeSelector" and isinstance(value, dict):
            out["nodeSelector"] = {**(out.get("nodeSelector") or {}), **value}
        else:
            out[key] = copy.deepcopy(value)
    return out


# ---------------------------------------------------------------- storage
@dataclass
class Mount:
    """One model source as the predictor container sees it."""

    kind: str  # "pvc" | "oci" | scheme of anything else (s3, hf, ...)
    uri: str
    mount_path: str
    claim: str = ""
    sub_path: str = ""
    read_only: bool = True
    image: str = ""  # oci: the image reference (oci:// stripped)
    index: int = 0


def parse_pvc_uri(uri: str) -> tuple[str, str]:
    """pvc://claim[/sub/path] -> (claim, sub/path)."""
    rest = uri[len("pvc://") :]
    claim, _, sub = rest.partition("/")
    return claim, sub.strip("/")


def resolve_storage(isvc: dict) -> list[Mount]:
    spec = (isvc.get("spec") or {}).get("predictor") or {}
    model = spec.get("model") or {}
    ro = ((isvc.get("metadata") or {}).get("annotations") or {}).get(READONLY_ANNOTATION, "true") != "false"
    mounts: list[Mount] = []
    uri = model.get("storageUri")
    if uri:
        mounts.append(_mount(uri, DEFAULT_MOUNT, ro, honour_sub_path=True, index=0))
    for i, entry in enumerate(spec.get("storageUris") or []):
        mounts.append(
            _mount(
                entry.get("uri", ""),
                entry.get("mountPath", DEFAULT_MOUNT),
                ro,
                honour_sub_path=False,
                index=i,
            )
        )
    oci = [m for m in mounts if m.kind == "oci"]
    for n, m in enumerate(oci):
        m.index = n
    return mounts


def _mount(uri: str, mount_path: str, ro: bool, honour_sub_path: bool, index: int) -> Mount:
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme == "pvc":
        claim, sub = parse_pvc_uri(uri)
        # storageUris entries mount the whole claim: KServe 0.20 discards the path part
        return Mount(
            "pvc",
            uri,
            mount_path,
            claim=claim,
            sub_path=sub if honour_sub_path else "",
            read_only=ro,
            index=index,
        )
    if scheme in ("oci", "oci+modelcar"):
        return Mount("oci", uri, mount_path, image=uri.split("://", 1)[1], index=index)
    return Mount(scheme or "file", uri, mount_path, index=index)


def _suffix(i: int) -> str:
    return "" if i == 0 else f"-{i}"


def pod_template(isvc: dict, runtime_kind: str, runtime: dict, container: dict, mounts: list[Mount]) -> dict:
    """The predictor pod template (metadata + spec) as KServe renders it in Standard mode."""
    meta = isvc["metadata"]
    name = meta["name"]
    pred = (isvc.get("spec") or {}).get("predictor") or {}
    deployment = predictor_service_name(name, pred.get("name"))
    rspec = runtime.get("spec") or {}
    pod_spec = merge_pod_spec(rspec, pred)
    container = copy.deepcopy(container)
    volumes = pod_spec.setdefault("volumes", [])
    vmounts = container.setdefault("volumeMounts", [])
    init_containers: list[dict] = []
    sidecars: list[dict] = []
    pvc_seen: dict[str, str] = {}
    for m in mounts:
        if m.kind == "pvc":
            vol = pvc_seen.get(m.claim)
            if vol is None:
                vol = "kserve-pvc-source" if not pvc_seen else f"kserve-pvc-source-{len(pvc_seen)}"
                pvc_seen[m.claim] = vol
                volumes.append(
                    {"name": vol, "persistentVolumeClaim": {"claimName": m.claim, "readOnly": m.read_only}}
                )
            vm = {"name": vol, "mountPath": m.mount_path, "readOnly": m.read_only}
            if m.sub_path:
                vm["subPath"] = m.sub_path
            vmounts.append(vm)
        elif m.kind == "oci":
            sfx = _suffix(m.index)
            vol = f"kserve-provision-location{sfx}"
            parent = posixpath.dirname(m.mount_path.rstrip("/")) or "/"
            volumes.append({"name": vol, "emptyDir": {}})
            vmounts.append({"name": vol, "mountPath": parent, "readOnly": False})
            link = f"ln -sf /proc/$$$$/root/models {m.mount_path}"
            if m.mount_path != DEFAULT_MOUNT:
                link = f"mkdir -p {parent} && {link}"
            sidecars.append(
                {
                    "name": f"modelcar{sfx}",
                    "image": m.image,
                    "args": ["sh", "-c", f"{link} && sleep infinity"],
                    "resources": {
                        "limits": {"cpu": "10m", "memory": "15Mi"},
                        "requests": {"cpu": "10m", "memory": "15Mi"},
                    },
                    "volumeMounts": [{"name": vol, "mountPath": parent, "readOnly": False}],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }
            )
            init_containers.append(
                {
                    "name": f"modelcar-init{sfx}",
                    "image": m.image,
                    "args": [
                        "sh",
                        "-c",
                        "echo 'Pre-fetching modelcar " + m.image + ": ' && [ -d /models ] && "
                        "[ \"$$(ls -A /models)\" ] && echo 'OK ... Prefetched and valid (/models exists)' || "
                        "(echo 'NOK ... Prefetched but modelcar is invalid (/models does not exist or is empty)' "
                        "&& exit 1)",
                    ],
                    "resources": {
                        "limits": {"cpu": "10m", "memory": "15Mi"},
                        "requests": {"cpu": "10m", "memory": "15Mi"},
                    },
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }
            )
            pod_spec["shareProcessNamespace"] = True
            env = container.setdefault("env", [])
            if not any(e.get("name") == "MODEL_INIT_MODE" for e in env):
                env.append({"name": "MODEL_INIT_MODE", "value": "async"})
        else:
            # s3/gs/hf/https...: KServe's storage-initializer would download into an emptyDir
            volumes.append({"name": "kserve-provision-location", "emptyDir": {}})
            vmounts.append({"name": "kserve-provision-location", "mountPath": m.mount_path, "readOnly": True})
            init_containers.append(
                {
                    "name": "storage-initializer",
                    "image": "kserve/storage-initializer:v0.20.0",
                    "args": [m.uri, m.mount_path],
                    "volumeMounts": [{"name": "kserve-provision-location", "mountPath": m.mount_path}],
                }
            )
    if not volumes:
        pod_spec.pop("volumes")
    if not vmounts:
        container.pop("volumeMounts")
    # the runtime's other containers (without the one merged into kserve-container)
    other = [c for c in rspec.get("containers") or [] if c.get("name") != CONTAINER]
    if not _has_kserve(rspec):
        other = other[1:]
    pod_spec["containers"] = [container] + sidecars + copy.deepcopy(other)
    if init_containers:
        pod_spec["initContainers"] = init_containers + list(pod_spec.get("initContainers") or [])
    labels = {}
    labels.update((rspec.get("labels") or {}))
    labels.update(meta.get("labels") or {})
    labels.update(pred.get("labels") or {})
    labels.update(
        {
            ISVC_LABEL: name,
            COMPONENT_LABEL: "predictor",
            "app": f"isvc.{deployment}",  # constants.GetRawServiceLabel: "isvc." + the Deployment's name
            (
                "serving.kserve.io/servingruntime"
                if runtime_kind == "ServingRuntime"
                else "serving.kserve.io/clusterservingruntime"
            ): runtime["metadata"]["name"],
        }
    )
    annotations = {}
    annotations.update(rspec.get("annotations") or {})
    annotations.update(
        {
            k: v
            for k, v in (meta.get("annotations") or {}).items()
            if not k.startswith("kubectl.kubernetes.io/last-applied")
        }
    )
    annotations.update(pred.get("annotations") or {})
    annotations["kubectl.kubernetes.io/default-container"] = CONTAINER
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec}


def _has_kserve(rspec: dict) -> bool:
    return any(c.get("name") == CONTAINER for c in rspec.get("containers") or [])


def runtime_container(runtime: dict) -> dict:
    containers = (runtime.get("spec") or {}).get("containers") or []
    if not containers:
        raise SpecError(
            "no container configuration found in selected serving runtime",
            status_message="No container configuration found in selected serving runtime",
        )
    for c in containers:
        if c.get("name") == CONTAINER:
            return c
    return containers[0]


def gpu_request(container: dict, resource: str = "nvidia.com/gpu") -> int:
    res = container.get("resources") or {}
    vals = [(res.get("limits") or {}).get(resource), (res.get("requests") or {}).get(resource)]
    try:
        return max(int(str(v)) for v in vals if v is not None)
    except ValueError:
        return 0
