# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""Render the ServingRuntime and InferenceService of a validated spec.

Rendering happens in Python so that KServe's Go template ``{{.Name}}`` in the runtime
arguments is never seen by Jinja.  The dicts returned here are exactly what the deploy
role applies.
"""

from __future__ import annotations

import copy
import math
import posixpath

from ansible_collections.specpilot.core.plugins.module_utils.service.plan import LEGACY_MODES
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import MOUNT_ROOT

__all__ = [
    "LABEL_MANAGED_BY",
    "LABEL_SERVICE",
    "ANN_DIGEST",
    "ANN_METHOD",
    "ANN_VLLM",
    "ANN_DEPLOYMENT_MODE",
    "ANN_PROGRESS_DEADLINE",
    "PORT",
    "SERVED_MODEL_NAME_ARG",
    "ENTRYPOINT",
    "mount_paths",
    "engine_args",
    "served_model",
    "in_pod",
    "startup_budget",
    "servingruntime",
    "inferenceservice",
    "deep_merge",
]

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_SERVICE = "specpilot.io/service"
ANN_DIGEST = "specpilot.io/spec-digest"
ANN_METHOD = "specpilot.io/speculative-method"
ANN_VLLM = "specpilot.io/vllm-version"
ANN_DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
ANN_PROGRESS_DEADLINE = "serving.knative.dev/progress-deadline"
PORT = 8080
# KServe substitutes {{.Name}} with the InferenceService name: keep it literal.
SERVED_MODEL_NAME_ARG = "--served-model-name={{.Name}}"
# vLLM's documented server entry point, `vllm serve <model> [options]` (vllm/scripts.py since v0.5.0,
# vllm/entrypoints/cli/serve.py ServeSubcommand later): the module path `python -m
# vllm.entrypoints.openai.api_server` is deprecated and "may be removed in a future release"
# (vllm/entrypoints/openai/api_server.py, __main__, 0.32.0). The model is its positional argument and
# must come first: `vllm serve --model X` fails where model_tag is required (0.7.2: "the following
# arguments are required: model_tag", vllm-project/vllm#13150) and is moved to the front with a warning
# that --model "will be removed" later; and with --served-model-name among the args, an option before
# the model is refused ("`model` should be provided as the first positional argument when using `vllm
# serve`", vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args, 0.32.0). KServe appends the
# InferenceService's args to the runtime's (MergeRuntimeContainers), so the runtime specpilot creates
# has no args: the InferenceService's start with the model, then --port and --served-model-name (KServe
# replaces {{.Name}} in the merged container, ReplacePlaceholders). With a runtime you bring, whose args
# come first, the model is --model=X (the module path's flag; vllm serve moves it to the front).
ENTRYPOINT = ["vllm", "serve"]
STARTUP_PERIOD_SECONDS = 10


def _is_oci(uri):
    return isinstance(uri, str) and uri.split("://", 1)[0] in (
        "oci",
        "oci+modelcar",
        "oci+native",
        "oci+fetch",
    )


def mount_paths(spec, draft_needed):
    """Where the target (and draft) appear inside the kserve-container."""
    delivery = spec["delivery"]
    target, draft = spec["target"], spec.get("draft") or {}
    has_draft = bool(spec.get("draft")) and draft_needed
    if delivery == "storage_uri":
        return {"root": MOUNT_ROOT, "target": MOUNT_ROOT, "draft": None}
    if delivery == "storage_uris":
        oci_entries = [a for a in ([target] + ([draft] if has_draft else [])) if _is_oci(a.get("uri"))]
        separate = len(oci_entries) > 1

        def default(artifact):
            if separate and _is_oci(artifact.get("uri")):
                return "/mnt/%s/model" % artifact["subdir"]
            return posixpath.join(MOUNT_ROOT, artifact["subdir"])

        return {
            "root": MOUNT_ROOT,
            "target": target.get("mount_path") or default(target),
            "draft": (draft.get("mount_path") or default(draft)) if has_draft else None,
        }
    # modelcar: /models/<subdir> in the image; pvc: <pvc>[/<path>]/<subdir>.  Both at /mnt/models.
    return {
        "root": MOUNT_ROOT,
        "target": posixpath.join(MOUNT_ROOT, target["subdir"]),
        "draft": posixpath.join(MOUNT_ROOT, draft["subdir"]) if has_draft else None,
    }


def flag_name(arg):
    """The flag of one ``--flag=value`` argument as vLLM's parser reads it (``--a_b`` is ``--a-b``)."""
    name = str(arg).split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name


def extra_arg(extra, flag):
    """The value of ``flag`` among ``--flag=value`` arguments (the last one wins; "" for a bare flag), or
    None when none sets it."""
    value = None
    for arg in extra or ():
        if flag_name(arg) == flag:
            value = str(arg).partition("=")[2]
    return value


def pipeline_parallel_size(spec):
    return spec["vllm_args"].get("pipeline_parallel_size") or 1


def tensor_parallel_size(spec):
    """vllm_args.tensor_parallel_size, else the GPUs of a replica over the pipeline stages."""
    tp = spec["vllm_args"].get("tensor_parallel_size")
    if tp is None:
        tp = max(1, spec["gpu"]["count"] // pipeline_parallel_size(spec))
    return tp


def engine_args(spec, mounts, speculative_args):
    """The InferenceService model args (appended by KServe after the runtime's)."""
    va = spec["vllm_args"]
    if spec["runtime"].get(
        "create"
    ):  # vllm serve <model> first, then what a runtime would carry (ENTRYPOINT)
        args = [mounts["target"], "--port=%d" % PORT, SERVED_MODEL_NAME_ARG]
    else:
        args = ["--model=%s" % mounts["target"]]
    tp = tensor_parallel_size(spec)
    if tp > 1:
        args.append("--tensor-parallel-size=%d" % tp)
    if pipeline_parallel_size(spec) > 1:
        args.append("--pipeline-parallel-size=%d" % pipeline_parallel_size(spec))
    if va.get("gpu_memory_utilization") is not None:
        args.append("--gpu-memory-utilization=%s" % _arg_number(va["gpu_memory_utilization"]))
    if va.get("max_model_len") is not None:
        args.append("--max-model-len=%d" % va["max_model_len"])
    if va.get("dtype"):
        args.append("--dtype=%s" % va["dtype"])
    if va.get("max_num_seqs") is not None:
        args.append("--max-num-seqs=%d" % va["max_num_seqs"])
    if va.get("kv_cache_dtype"):
        args.append("--kv-cache-dtype=%s" % va["kv_cache_dtype"])
    if va.get("enforce_eager"):
        args.append("--enforce-eager")
    if va.get("async_scheduling"):
        args.append("--async-scheduling")
    args.extend(speculative_args)
    args.extend(va.get("extra_args") or [])
    return args


def in_pod(args, name, namespace):
    """``args`` as the predictor pod has them: KServe fills the Go template placeholders of the merged
    container from the InferenceService's metadata (ReplacePlaceholders, pkg/controller/v1beta1/
    inferenceservice/utils/utils.go); specpilot renders {{.Name}} (SERVED_MODEL_NAME_ARG)."""
    return [
        str(a).replace("{{.Name}}", name or "").replace("{{.Namespace}}", namespace or "") for a in args or []
    ]


def served_model(args):
    """The model an engine's args serve: ``--model=X`` / ``--model X`` (with a runtime you bring, and
    what specpilot rendered before it used ``vllm serve``), else the leading positional argument
    (``vllm serve``'s model, first of the args specpilot renders); None when neither is there."""
    items = [a for a in args or [] if isinstance(a, str)]
    for i, arg in enumerate(items):
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
        if arg == "--model" and i + 1 < len(items):
            return items[i + 1]
    if items and not items[0].startswith("-"):
        return items[0]
    return None


def _arg_number(value):
    text = repr(float(value)) if isinstance(value, float) else str(value)
    return text


def startup_budget(spec, draft_artifact):
    if spec.get("startup_timeout_seconds"):
        return spec["startup_timeout_seconds"]
    return 1800 if draft_artifact else 900


def _labels(spec):
    return {LABEL_MANAGED_BY: "specpilot", LABEL_SERVICE: spec["name"]}


def servingruntime(spec, mounts, guard, startup_seconds, digest):
    """The ServingRuntime (or ClusterServingRuntime) specpilot creates, or None."""
    runtime = spec["runtime"]
    if not runtime.get("create"):
        return None
    if guard:
        wait = "until [ -e %s/config.json ]; do sleep 1; done; " % mounts["target"]
        command = ["/bin/sh", "-c", wait + "exec " + " ".join(ENTRYPOINT) + ' "$@"', "--"]
    else:
        command = list(ENTRYPOINT)
    http_get = {"path": "/health", "port": PORT, "scheme": "HTTP"}
    container = {
        "name": "kserve-container",
        "image": runtime.get("image") or "",
        "command": command,
        "args": [],  # all in the InferenceService's, the model first (ENTRYPOINT)
        "env": [
            {"name": "HF_HOME", "value": "/tmp/hf_home"},
            {"name": "VLLM_CONFIG_ROOT", "value": "/tmp/vllm"},
        ],
        "ports": [{"containerPort": PORT, "name": "http", "protocol": "TCP"}],
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
        "startupProbe": {
            "httpGet": http_get,
            "periodSeconds": STARTUP_PERIOD_SECONDS,
            "timeoutSeconds": 5,
            "failureThreshold": int(math.ceil(startup_seconds / float(STARTUP_PERIOD_SECONDS))),
        },
        "readinessProbe": {
            "httpGet": dict(http_get),
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": dict(http_get),
            "periodSeconds": 30,
            "timeoutSeconds": 10,
            "failureThreshold": 5,
        },
    }
    if runtime.get("image_pull_policy"):
        container["imagePullPolicy"] = runtime["image_pull_policy"]
    if runtime.get("security_context"):
        container["securityContext"] = copy.deepcopy(runtime["security_context"])
    metadata = {"name": runtime["name"], "labels": _labels(spec), "annotations": {ANN_DIGEST: digest}}
    if runtime["kind"] == "ServingRuntime":
        metadata["namespace"] = spec["namespace"]
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": runtime["kind"],
        "metadata": metadata,
        "spec": {
            "annotations": {"prometheus.kserve.io/port": str(PORT), "prometheus.kserve.io/path": "/metrics"},
            "multiModel": False,
            "supportedModelFormats": [{"name": "vLLM", "autoSelect": False}],
            "containers": [container],
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": runtime["shm_size"]}}],
        },
    }


def deployment_mode_value(mode, kserve_version):
    """The annotation value: the post-0.16 names, or the legacy ones for older KServe."""
    if kserve_version is not None and kserve_version < (0, 16, 0):
        return {name: legacy for legacy, name in LEGACY_MODES.items()}[mode]
    return mode


def _resources_with_gpus(spec):
    """The spec's resources with the GPUs in both limits and requests."""
    gpu = spec["gpu"]
    resources = copy.deepcopy(spec.get("resources") or {})
    if gpu["count"] > 0:
        for section in ("limits", "requests"):
            resources.setdefault(section, {})[gpu["resource_name"]] = str(gpu["count"])
    return resources


def _gpu_placement(gpu):
    """The predictor's nodeSelector, tolerations and affinity for the GPU nodes, where given."""
    out = {}
    if gpu.get("node_selector"):
        out["nodeSelector"] = dict(gpu["node_selector"])
    for key in ("tolerations", "affinity"):
        if gpu.get(key):
            out[key] = copy.deepcopy(gpu[key])
    return out


def inferenceservice(spec, plan, kserve_version):
    """The InferenceService as deploy applies it (before overrides)."""
    mode = spec["deployment_mode"]
    annotations = {
        ANN_DEPLOYMENT_MODE: deployment_mode_value(mode, kserve_version),
        ANN_DIGEST: plan["spec_digest"],
        ANN_VLLM: spec["vllm_version"],
        ANN_METHOD: (plan["speculative_config"] or {}).get("method") or "off",
    }
    if mode == "Knative":
        annotations[ANN_PROGRESS_DEADLINE] = "%ds" % plan["progress_deadline_seconds"]
    annotations.update(spec.get("annotations") or {})
    labels = dict(spec.get("labels") or {})
    labels.update(_labels(spec))
    gpu = spec["gpu"]
    resources = _resources_with_gpus(spec)
    model = {
        "modelFormat": {"name": "vLLM"},
        "runtime": spec["runtime"]["name"],
        "args": list(plan["args"]),
    }
    delivery = plan["delivery"]
    if delivery.get("storage_uri"):
        model["storageUri"] = delivery["storage_uri"]
    if spec.get("env"):
        model["env"] = copy.deepcopy(spec["env"])
    if resources:
        model["resources"] = resources
    predictor = {"minReplicas": spec["min_replicas"]}
    if spec.get("max_replicas") is not None:
        predictor["maxReplicas"] = spec["max_replicas"]
    if mode == "Standard":
        strategy = plan["rollout_strategy"]
        if strategy is not None:
            predictor["deploymentStrategy"] = strategy
    predictor.update(_gpu_placement(gpu))
    if spec.get("service_account_name"):
        predictor["serviceAccountName"] = spec["service_account_name"]
    if delivery.get("storage_uris"):
        predictor["storageUris"] = copy.deepcopy(delivery["storage_uris"])
    predictor["model"] = model
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": spec["name"],
            "namespace": spec["namespace"],
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"predictor": predictor},
    }


def rollout_strategy(spec):
    """deploymentStrategy for Standard mode, or None for KServe's default."""
    choice = spec.get("rollout", "auto")
    if choice == "recreate":
        return {"type": "Recreate"}
    if choice == "surge":
        return None
    single = (spec.get("max_replicas") or spec["min_replicas"] or 1) <= 1
    if spec["gpu"]["count"] > 0 and single:
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    return None


def deep_merge(base, patch):
    """Dicts merge recursively, everything else (lists included) replaces."""
    out = copy.deepcopy(base)
    for key, value in (patch or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
