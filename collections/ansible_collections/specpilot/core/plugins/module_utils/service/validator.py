# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""validate(): the whole preflight of one service spec, and its plan.

Order: the service schema, versions and the vLLM profile, delivery and paths, the model
facts (typed in the spec, else read from each artifact's source: model_facts.py), the
speculative config, draft/target compatibility, the GPU memory budget, rendering, the
user's overrides, then KServe's rules on the final manifests.  Every problem found on
the way is reported; later phases are skipped only when an earlier error makes them
meaningless (e.g. no valid vllm_version).
"""

from __future__ import annotations

import copy
import os
import traceback

from ansible_collections.specpilot.core.plugins.module_utils.service import cluster_probe
from ansible_collections.specpilot.core.plugins.module_utils.service import compat
from ansible_collections.specpilot.core.plugins.module_utils.service import gpu_budget
from ansible_collections.specpilot.core.plugins.module_utils.service import kserve_rules
from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.service import model_facts
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service import preflight_rules
from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.service import spec_override
from ansible_collections.specpilot.core.plugins.module_utils.service import spec_sanity
from ansible_collections.specpilot.core.plugins.module_utils.service import speculative
from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.common import write_if_changed
from ansible_collections.specpilot.core.plugins.module_utils.report.findings import Findings, path_join
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import (
    MOUNT_ROOT,
    SERVICE_SCHEMA,
    VAR_PREFIX,
    normalise,
    plain,
    spec_digest,
    variable_typos,
)
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import (
    VersionError,
    format_version,
    parse_version,
)

from ansible_collections.specpilot.core.plugins.module_utils.service.validate_delivery import (
    PENDING_DIGEST,
    _delivery,
    _draft_artifact,
    _mounts,
    _staging,
)
from ansible_collections.specpilot.core.plugins.module_utils.service.validate_images import (
    _check_runtime_image,
    _check_runtime_security,
)
from ansible_collections.specpilot.core.plugins.module_utils.service.validate_report import format_report
from ansible_collections.specpilot.core.plugins.module_utils.service.validate_schema import (
    HAS_JSONSCHEMA,
    _schema_errors,
    load_schemas,
)

__all__ = ["validate", "format_report", "load_schemas", "NEWEST_KSERVE", "PENDING_DIGEST", "HAS_JSONSCHEMA"]

NEWEST_KSERVE = (0, 20, 0)

# Flags specpilot renders itself; extra_args may not set them.
_RESERVED = {
    "--model": "target / delivery",
    "--port": "the runtime (8080)",
    "--served-model-name": "the runtime ({{.Name}})",
    "--tensor-parallel-size": "vllm_args.tensor_parallel_size",
    "-tp": "vllm_args.tensor_parallel_size",
    "--pipeline-parallel-size": "vllm_args.pipeline_parallel_size",
    "-pp": "vllm_args.pipeline_parallel_size",
    "--gpu-memory-utilization": "vllm_args.gpu_memory_utilization",
    "--max-model-len": "vllm_args.max_model_len",
    "--host": "the runtime",
}
for _flag in speculative.RENDERED_FLAGS:
    _RESERVED[_flag] = "specpilot_speculative"
# The V0-era speculative flags (<= 0.8.2).
_V0_SPEC_FLAGS = frozenset(vp.V0_FLAGS.values())


def _check_extra_args(spec, version, findings):
    extra = spec["vllm_args"].get("extra_args") or []
    requested_async = bool(spec["vllm_args"].get("async_scheduling"))
    for i, arg in enumerate(extra):
        path = path_join("vllm_args.extra_args", i)
        name = render.flag_name(arg)
        if " " in arg.split("=", 1)[0] or (" " in arg and "=" not in arg):
            findings.error(
                path,
                "extra_args item %r holds more than one argument" % arg,
                "one list item per argument, written --flag=value",
                "arg-with-space",
            )
        if name in _V0_SPEC_FLAGS and version >= (0, 8, 3):
            # The separate speculative flags of the V0 era went with 0.8.3 (EngineArgs.add_cli_args
            # in vllm/engine/arg_utils.py@v0.8.3 has only --speculative-config): argparse stops the
            # server with "api_server.py: error: unrecognized arguments: --speculative-model ...".
            findings.error(
                path,
                "vLLM %s's argument parser refuses %s: the separate speculative flags were removed in "
                "0.8.3 ('error: unrecognized arguments')" % (format_version(version), name),
                "remove it and set specpilot_speculative; specpilot renders --speculative-config",
                "v0-flag-refused",
            )
        elif name in _RESERVED or name.startswith("--speculative-config."):
            findings.error(
                path,
                "extra_args must not set %s: specpilot renders it from %s"
                % (name, _RESERVED.get(name, "specpilot_speculative")),
                "remove it and use %s" % _RESERVED.get(name, "specpilot_speculative"),
                "reserved-arg",
            )
        if name == "--async-scheduling":
            requested_async = True
    if requested_async and version < (0, 10, 0):
        findings.error(
            "vllm_args.async_scheduling",
            "--async-scheduling does not exist in vLLM %s" % format_version(version),
            "remove it",
            "async-scheduling-flag",
        )
    return requested_async


def _where_factory(kind, overrides, storage_roles):
    """Map a manifest path to the spec field (or override) it came from."""

    def in_overrides(mpath):
        node = overrides
        for part in mpath.replace("[", ".[").split("."):
            if not part:
                continue
            if part.startswith("["):
                return isinstance(node, list)
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    def where(mpath):
        if overrides and in_overrides(mpath):
            return "overrides.%s.%s" % (kind, mpath)
        if kind == "inferenceservice":
            if mpath.startswith("spec.predictor.storageUris["):
                idx = int(mpath[len("spec.predictor.storageUris[") :].split("]", 1)[0])
                role = storage_roles[idx] if idx < len(storage_roles) else "delivery"
                rest = mpath.split("]", 1)[1]
                field = {".uri": "uri", ".mountPath": "mount_path"}.get(rest)
                return "%s.%s" % (role, field) if field else role
            mapping = {
                "spec.predictor.storageUris": "delivery",
                "spec.predictor.model.storageUri": "delivery",
                "spec.predictor.minReplicas": "min_replicas",
                "metadata.annotations": "deployment_mode",
            }
            for prefix, field in mapping.items():
                if mpath == prefix:
                    return field
            if mpath.startswith("metadata.annotations."):
                return "annotations." + mpath[len("metadata.annotations.") :]
        return "%s.%s" % (kind, mpath)

    return where


def _resolve_speculative(spec, x, mounts, findings):
    """The config that will be rendered: nulls dropped, model filled in from the draft's path."""
    raw = spec.get("speculative")
    if raw is None:
        return None
    if raw == {}:
        findings.error(
            "speculative",
            "specpilot_speculative is an empty dict (vLLM %s)" % spec["vllm_version"],
            "set method and num_speculative_tokens, or null to turn speculative decoding off",
            "speculative-empty",
        )
        return None
    cfg = {k: v for k, v in raw.items() if v is not None}
    method = cfg.get("method")
    info = x["methods"].get(method) if isinstance(method, str) else None
    draft_path = mounts.get("draft")
    model = cfg.get("model")
    if info and info["model"] != "none" and draft_path:
        if model is None:
            cfg["model"] = draft_path
        elif model != draft_path:
            findings.error(
                "speculative.model",
                "speculative.model=%r but the draft is delivered at %s (vLLM %s)"
                % (model, draft_path, spec["vllm_version"]),
                "remove speculative.model: specpilot fills in the draft's path",
                "model-path-mismatch",
            )
    elif info and info["model"] == "required" and isinstance(model, str) and not draft_path:
        if model.startswith("/"):
            if not model.startswith(MOUNT_ROOT + "/") and model != MOUNT_ROOT:
                findings.warning(
                    "speculative.model",
                    "speculative.model=%r is not delivered by specpilot (no "
                    "specpilot_draft); it must exist in the runtime image" % model,
                    "describe the draft in specpilot_draft so it is delivered with the target",
                    "draft-not-delivered",
                )
        else:
            findings.warning(
                "speculative.model",
                "speculative.model=%r: vLLM downloads it at startup (network "
                "access and possibly HF_TOKEN needed; cold start grows)" % model,
                "describe the draft in specpilot_draft to stage or mount it",
                "draft-not-delivered",
            )
    ordered = {}
    for key in ("method", "model", "num_speculative_tokens"):
        if key in cfg:
            ordered[key] = cfg[key]
    for key, value in cfg.items():
        ordered.setdefault(key, value)
    return ordered


def validate(spec, options=None):
    """Validate one assembled spec.  Returns {ok, errors, warnings, notes, plan, spec}.

    It never raises: a spec that makes a check fail in a way no finding foresaw (a bug) gets one
    error, ``validator-internal``, that says where, instead of a traceback."""
    try:
        return _validate(spec, options)
    except Exception as exc:  # pylint: disable=broad-except  # the promise above
        return _internal_error(exc, options)


def _internal_error(exc, options):
    where = traceback.extract_tb(exc.__traceback__)[-1]
    findings = Findings()
    findings.error(
        "",
        "the validator could not check this spec (%s in %s, line %d): a bug of specpilot's, not of the spec"
        % (type(exc).__name__, os.path.basename(where.filename), where.lineno),
        "report it with the spec; meanwhile look for a value of an unexpected type",
        "validator-internal",
    )
    return _finish(_empty_result(findings), dict(options or {}))


def _service_name(raw, options):
    """The service's name for the report's header, even when the spec fails its schema (issue 39: the
    header said ``specpilot validate: ?``): the spec's name, else the default name (the host's)."""
    name = raw.get("name") if isinstance(raw, dict) else None
    return name if isinstance(name, str) and name else options.get("default_name")


def _empty_result(findings, service=None):
    """The result before any plan: not ok, the findings' lists."""
    return {
        "service": service,
        "ok": False,
        "errors": findings.errors,
        "warnings": findings.warnings,
        "notes": findings.notes,
        "plan": None,
        "spec": None,
        "speculative_overrides": spec_override.empty_record(),
    }


def _validate(spec, options):
    options = dict(options or {})
    raw = plain(spec)
    acknowledged = raw.get("acknowledged_warnings") if isinstance(raw, dict) else None
    findings = Findings(acknowledged if isinstance(acknowledged, list) else ())
    result = _empty_result(findings, _service_name(raw, options))
    if not isinstance(raw, dict):
        findings.error(
            "", "the spec must be a mapping of keys to values", "see schemas/service.schema.json", "spec-type"
        )
        return _finish(result, options)
    for key, value in raw.items():
        if key not in ("speculative", "overrides") and isinstance(value, dict):
            raw[key] = _drop_nulls(value)
    if options.get("kserve_version"):
        raw["kserve_version"] = str(options["kserve_version"])
    cluster_probe.default_version(raw)  # vllm_version auto, the default with runtime.image
    schema, index, loader = SERVICE_SCHEMA, None, None
    if options.get("schema_dir"):
        schema, index, loader = load_schemas(options["schema_dir"])
    spec_sanity.check(raw, findings)
    _schema_errors(raw, schema, findings)
    schema_ok = not findings.errors
    _variable_typos(options.get("variable_names") or (), options.get("known_variables") or (), findings)
    # auto: the release read from the image (cluster_probe.py); a declared one the image contradicts is an error
    result["vllm_version"] = cluster_probe.resolve_version(raw, options.get("probed"), findings)

    vllm_version, profile, info, kserve_version = _versions(raw, index, loader, findings)
    # The run's specpilot_override_* variables change the speculative section before any check,
    # so that every role validating this spec sees the same effective spec and plan.
    result["speculative_overrides"] = spec_override.apply(
        raw,
        options.get("override_method"),
        options.get("override_num_speculative_tokens"),
        profile,
        findings,
        format_version(vllm_version) if vllm_version is not None else None,
    )

    if not schema_ok:
        _check_speculative_alone(raw, vllm_version, profile, findings)
        return _finish(result, options)

    spec = normalise(raw)
    result["spec"] = spec
    if profile is None or kserve_version is None:
        return _finish(result, options)
    x = profile["x-specpilot"]
    version_label = format_version(vllm_version)

    minfo, draft_artifact = _draft_artifact(spec, x, findings)
    if not _default_delivery(spec, draft_artifact, findings):
        return _finish(result, options)
    delivery, mounts, resolve_mounts = _deliver(spec, draft_artifact, options, findings)
    async_requested = _check_extra_args(spec, vllm_version, findings)

    # model facts: typed in the spec, completed from each artifact's source (model_facts.py)
    target, draft, facts_report = model_facts.resolve(spec, draft_artifact, options, findings)
    result["model_facts"] = facts_report
    cfg = _resolve_speculative(spec, x, resolve_mounts, findings)
    tp = render.tensor_parallel_size(spec)
    if cfg:
        ctx = _spec_ctx(spec, vllm_version, profile, target, draft, async_requested)
        speculative.check(cfg, ctx, findings)
        preflight_rules.check(cfg, ctx, spec, findings)  # issue 38: purpose, workload, LoRA
        _check_workload_temperature(spec, findings)
        if draft_artifact or minfo["model"] == "optional":
            compat.check_compatibility(
                cfg,
                target,
                draft if draft_artifact else {},
                x,
                version_label,
                findings,
                origins=facts_report["origins"],
            )
    _check_runtime_image(spec, findings, options.get("image_pins"))
    _check_runtime_security(spec["runtime"], findings)
    budget = gpu_budget.check_budget(
        spec, target, draft if draft_artifact else {}, (cfg or {}).get("draft_tensor_parallel_size"), findings
    )
    startup = render.startup_budget(spec, draft_artifact)
    deadline = _progress_deadline(spec, startup, findings)
    _lifecycle_checks(spec, bool(cfg) and draft_artifact, delivery, startup, findings)

    plan = _plan(
        spec,
        x=x,
        info=info,
        kserve_version=kserve_version,
        delivery=delivery,
        mounts=mounts,
        cfg=cfg,
        spec_args=speculative.render_args(cfg, profile) if cfg else [],
        tp=tp,
        startup=startup,
        deadline=deadline,
        budget=budget,
        draft_artifact=draft_artifact,
    )
    runtime, isvc = _manifests(spec, plan, mounts, delivery, startup, kserve_version, findings)
    plan["spec_digest"] = _deployment_digest(runtime, isvc, plan["staging"], plan.get("llminferenceservice"))
    for manifest in (runtime, isvc, plan.get("llminferenceservice")):
        if manifest is not None:
            manifest.setdefault("metadata", {}).setdefault("annotations", {})[render.ANN_DIGEST] = plan[
                "spec_digest"
            ]
    plan["servingruntime"] = runtime
    plan["inferenceservice"] = isvc
    result["plan"] = service_plan.build(plan).as_dict()
    return _finish(result, options)


def _default_delivery(spec, draft_artifact, findings):
    """The spec's delivery, storage_uri when it names none and has no draft to carry (False: an error says
    why).  An LLMInferenceService's first (llmisvc.prepare: its delivery, its parallelism as vllm_args for
    the checks that follow)."""
    if llmisvc.is_llm(spec):
        llmisvc.prepare(spec, findings)
    if "delivery" not in spec:
        if spec.get("draft") and draft_artifact:
            findings.error(
                "delivery",
                "a draft artifact needs a delivery that carries two artifacts",
                "set specpilot_delivery: storage_uris (KServe >= 0.16), modelcar or pvc",
                "delivery-required",
            )
            return False
        spec["delivery"] = "storage_uri"
    return True


def _deliver(spec, draft_artifact, options, findings):
    """(the plan's delivery, the mount paths, the paths the speculative config is resolved against): an
    LLMInferenceService's (llmisvc.py: spec.model.uri and the draft's volume), else an InferenceService's."""
    if llmisvc.is_llm(spec):
        mounts = llmisvc.mounts(spec, draft_artifact)
        return llmisvc.delivery(spec, draft_artifact, findings), mounts, mounts
    mounts, resolve_mounts = _mounts(spec, draft_artifact)
    return _delivery(spec, draft_artifact, options, findings), mounts, resolve_mounts


def _check_speculative_alone(raw, vllm_version, profile, findings):
    """The structure is wrong: still check the speculative config on its own (unless the schema
    already found it wrong: its checks expect the types the schema promises)."""
    broken = any(e["path"].split(".")[0].split("[")[0] == "speculative" for e in findings.errors)
    if profile is not None and isinstance(raw.get("speculative"), dict) and raw["speculative"] and not broken:
        cfg = {k: v for k, v in raw["speculative"].items() if v is not None}
        if raw.get("draft") and "model" not in cfg:
            cfg["model"] = "%s/draft" % MOUNT_ROOT  # stands for the draft, whose path is not resolved
        speculative.check(cfg, _spec_ctx(raw, vllm_version, profile, {}, {}, None), findings)


def _plan(
    spec,
    x,
    info,
    kserve_version,
    delivery,
    mounts,
    cfg,
    spec_args,
    tp,
    startup,
    deadline,
    budget,
    draft_artifact,
):
    """The plan the roles act on (without the manifests, which _manifests renders from it)."""
    if llmisvc.is_llm(spec):  # the args beyond KServe's template's, as vLLM gets them
        args, baseline = llmisvc.engine_args(spec, spec_args), llmisvc.engine_args(spec, [])
    else:
        args, baseline = render.engine_args(spec, mounts, spec_args), render.engine_args(spec, mounts, [])
    return {
        "name": spec["name"],
        "namespace": spec["namespace"],
        "kserve_version": format_version(kserve_version),
        "deployment_mode": spec["deployment_mode"],
        "vllm_version": spec["vllm_version"],
        "profile": {
            "id": x["profile"],
            "basis": info["basis"],
            "examined": info["examined"],
            "era": x["era"],
            "render": x["render"],
            "unknown_keys": x["unknown_keys"],
        },
        "delivery": delivery,
        "mount_paths": mounts,
        "speculative": bool(cfg),
        "speculative_method": (cfg or {}).get("method"),
        "speculative_config": cfg or None,
        "speculative_args": spec_args,
        "args": args,
        "args_without_speculative": baseline,
        "tensor_parallel_size": tp,
        # an LLMInferenceService has no ServingRuntime: KServe's LLMInferenceServiceConfig templates run vLLM
        "runtime": {
            "name": spec["runtime"]["name"],
            "kind": spec["runtime"]["kind"],
            "create": spec["runtime"]["create"],
            "image": spec["runtime"].get("image") or None,
        }
        if not llmisvc.is_llm(spec)
        else {"name": None, "kind": None, "create": False},
        "startup_timeout_seconds": startup,
        "progress_deadline_seconds": deadline,
        "rollout_strategy": render.rollout_strategy(spec) if spec["deployment_mode"] == "Standard" else None,
        "gpu_budget": budget,
        "spec_digest": "",  # filled in below, from the rendered objects
        "labels": {render.LABEL_MANAGED_BY: "specpilot", render.LABEL_SERVICE: spec["name"]},
        "staging": _staging(spec, delivery, draft_artifact),
    }


def _versions(raw, index, loader, findings):
    """The vLLM release and its profile, and the KServe release: (vllm_version, profile, info,
    kserve_version), None where unknown (with the error that says why)."""
    vllm_version = profile = info = None
    try:
        if isinstance(raw.get("vllm_version"), str) and raw["vllm_version"] != "auto":  # auto: unresolved
            vllm_version = parse_version(raw["vllm_version"])[:3]
    except VersionError as exc:
        findings.error("vllm_version", str(exc), 'write it like "0.19.1"', "version")
    if vllm_version is not None:
        try:
            profile, info = vp.profile_for(vllm_version, index=index, loader=loader)
        except ValueError as exc:
            findings.error(
                "vllm_version",
                str(exc),
                "use a runtime image with vLLM >= %s" % vp.oldest_label(),
                "vllm-too-old",
            )
    if profile is not None:
        _profile_notes(vllm_version, info, profile, findings)
    kserve_version = None
    if isinstance(raw.get("kserve_version"), str):
        try:
            kserve_version = parse_version(raw["kserve_version"])[:3]
        except VersionError as exc:
            findings.error("kserve_version", str(exc), 'write it like "0.20"', "version")
    elif "kserve_version" not in raw:
        findings.warning(
            "kserve_version",
            "kserve_version is not set; checking against KServe %s" % format_version(NEWEST_KSERVE),
            "set specpilot_kserve_version (deploy detects it from the cluster)",
            "kserve-version-assumed",
        )
        kserve_version = NEWEST_KSERVE
    return vllm_version, profile, info, kserve_version


WORKLOAD_TEMPERATURE_WARN = 0.7


def _check_workload_temperature(spec, findings):
    """The decision framework: acceptance falls as the sampling temperature rises; above about 0.7
    speculative decoding rarely pays off. Only a warning: the benchmark's temperature sweep measures it."""
    t = (spec.get("workload") or {}).get("temperature")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and t > WORKLOAD_TEMPERATURE_WARN:
        findings.warning(
            "workload.temperature",
            "production temperature %g with speculative decoding on: acceptance falls as the temperature "
            "rises, and above %g drafts are rarely accepted often enough to pay for themselves"
            % (t, WORKLOAD_TEMPERATURE_WARN),
            "measure acceptance at this temperature (playbooks/benchmark.yml sweeps it) before turning it on "
            "for this service",
            "workload-temperature",
        )


def _lifecycle_checks(spec, with_draft, delivery, startup, findings):
    """Scale to zero, cold starts with a draft, and an existing runtime whose probes specpilot does not manage."""
    if spec["min_replicas"] == 0 and spec["deployment_mode"] == "Standard":
        findings.error(
            "min_replicas",
            "min_replicas 0 (scale to zero) is not supported in Standard mode",
            "use 1, or Knative mode",
            "scale-to-zero-standard",
        )
    if with_draft:
        findings.note(
            "startup_timeout_seconds",
            "a draft makes cold starts longer (draft load, its compilation, "
            "profiling): the startupProbe allows %d s" % startup,
            "raise startup_timeout_seconds for large models",
            "cold-start",
        )
    if not spec["runtime"]["create"]:
        findings.note(
            "runtime",
            "using the existing %s %r: its probes and command are not managed by specpilot%s"
            % (
                spec["runtime"]["kind"],
                spec["runtime"]["name"],
                "; the Modelcar startup guard cannot be added" if delivery["type"] == "modelcar" else "",
            ),
            "make sure its startupProbe allows %d s" % startup,
            "existing-runtime",
        )


def _llm_manifest(spec, plan, kserve_version, findings):
    """The LLMInferenceService (llmisvc.py), with overrides.llminferenceservice merged in, checked against
    the KServe release's fields (kserve_rules.check_llminferenceservice)."""
    obj = llmisvc.manifest(spec, plan, kserve_version)
    patch = (spec.get("overrides") or {}).get("llminferenceservice")
    if patch:
        obj = render.deep_merge(obj, patch)
    base = _where_factory("llminferenceservice", patch, [])

    def where(mpath):  # the KServe release decides the API version: the choice of resource is the field
        return "resource" if mpath == "apiVersion" else base(mpath)

    kserve_rules.check_llminferenceservice(obj, {"kserve_version": kserve_version}, findings, where)
    return obj


def _manifests(spec, plan, mounts, delivery, startup, kserve_version, findings):
    """The ServingRuntime (None when specpilot does not create it) and the InferenceService, with the
    spec's overrides merged in, checked against the KServe release's rules."""
    if llmisvc.is_llm(spec):
        plan.update(
            kind=llmisvc.KIND, api_version=llmisvc.api_version(kserve_version), workload=llmisvc.workload(spec["name"])
        )
        plan["llminferenceservice"] = _llm_manifest(spec, plan, kserve_version, findings)
        return None, None
    digest = ""  # the caller annotates both objects with the digest of what they became
    runtime = render.servingruntime(spec, mounts, delivery["type"] == "modelcar", startup, digest)
    isvc = render.inferenceservice(spec, plan, kserve_version)
    overrides = spec.get("overrides") or {}
    storage_roles = ["target", "draft"]
    _check_overrides(overrides, findings)
    if overrides.get("inferenceservice"):
        isvc = render.deep_merge(isvc, overrides["inferenceservice"])
    if overrides.get("servingruntime"):
        if runtime is None:
            findings.error(
                "overrides.servingruntime",
                "overrides.servingruntime is set but specpilot does not create "
                "the runtime (runtime.create is false)",
                "remove it",
                "override-no-runtime",
            )
        else:
            runtime = render.deep_merge(runtime, overrides["servingruntime"])
    kctx = {"kserve_version": kserve_version, "deployment_mode": spec["deployment_mode"]}
    kserve_rules.check_inferenceservice(
        isvc,
        kctx,
        findings,
        _where_factory("inferenceservice", overrides.get("inferenceservice"), storage_roles),
    )
    if runtime is not None:
        kserve_rules.check_servingruntime(
            runtime, findings, _where_factory("servingruntime", overrides.get("servingruntime"), [])
        )
    return runtime, isvc


def _deployment_digest(runtime, isvc, staging, llm=None):
    """sha256 of what deploy applies: both objects (without the digest annotation) and the
    artifact sources.  Smoke/benchmark settings, model facts and acknowledged warnings are
    not in it: KServe copies InferenceService annotations onto the pods, so the annotation
    must change only when the deployment does."""

    def strip(manifest):
        if manifest is None:
            return None
        manifest = copy.deepcopy(manifest)
        manifest.get("metadata", {}).get("annotations", {}).pop(render.ANN_DIGEST, None)
        return manifest

    return spec_digest(
        {"servingruntime": strip(runtime), "inferenceservice": strip(isvc), "staging": staging}
        if llm is None
        else {"llminferenceservice": strip(llm), "staging": staging}
    )


def _variable_typos(names, known, findings):
    """A misspelt specpilot_* variable would be ignored, and the run would go on with the default
    (issue 39: specpilot_workoad was a warning): an error with the name it is close to. A name close to
    none is a warning (a variable of the user's own, or a typo too far from any name)."""
    for variable, suggestion in variable_typos(names, known):
        if suggestion:
            findings.error(
                variable[len(VAR_PREFIX) :],
                "the variable %s is not one specpilot reads: it would be ignored" % variable,
                "did you mean %s?" % suggestion,
                "unknown-variable",
            )
        else:
            findings.warning(
                variable[len(VAR_PREFIX) :],
                "the variable %s is not one specpilot reads and is ignored" % variable,
                "check its spelling against the roles' README.md (the variables each role reads)",
                "unknown-variable",
            )


def _drop_nulls(value):
    """An empty YAML value (key: ~) inside a section means 'not set'."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def _int_arg(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _spec_ctx(spec, version, profile, target, draft, async_requested):
    va = spec.get("vllm_args") if isinstance(spec.get("vllm_args"), dict) else {}
    extra = va.get("extra_args") or []
    pp = _int_arg(va.get("pipeline_parallel_size")) or 1
    tp = va.get("tensor_parallel_size")
    count = spec["gpu"].get("count") if isinstance(spec.get("gpu"), dict) else None
    if tp is None and isinstance(count, int):
        tp = max(1, count // pp)
    return {
        "version": version,
        "version_label": format_version(version),
        "profile": profile,
        "target_tp": _int_arg(tp) or 1,
        "target_pp": pp,
        "async_requested": async_requested,
        "extra_args": extra,
        "target": target,
        "draft": draft,
    }


def _profile_notes(version, info, profile, findings):
    label = format_version(version)
    if info["beyond_newest"]:
        findings.warning(
            "vllm_version",
            "vLLM %s is newer than the newest profile (%s): keys and methods added "
            "since are unknown to specpilot" % (label, info["basis"]),
            "check the release notes of vLLM %s; update specpilot's profiles" % label,
            "vllm-newer-than-profiles",
        )
    elif not info["examined"] and info.get("next_differs"):
        findings.warning(
            "vllm_version",
            "vLLM %s was not examined; it is checked against profile %s (examined release %s), and "
            "the next examined release (%s) differs: what only one of the two refuses is a warning, "
            "not an error (it may have changed in %s itself)"
            % (label, profile["x-specpilot"].get("profile"), info["basis"], info["next"], label),
            "prefer an examined release (%s or %s)" % (info["basis"], info["next"]),
            "vllm-unexamined",
        )
    elif not info["examined"]:
        findings.note(
            "vllm_version",
            "vLLM %s is checked against profile %s (examined release %s; the next examined release "
            "has the same surface)" % (label, profile["x-specpilot"].get("profile"), info["basis"]),
            "nothing to do",
            "vllm-profile-basis",
        )


def _progress_deadline(spec, startup, findings):
    value = spec.get("progress_deadline_seconds")
    if spec["deployment_mode"] != "Knative":
        if value is not None:
            findings.error(
                "progress_deadline_seconds",
                "progress_deadline_seconds (serving.knative.dev/"
                "progress-deadline) is ignored by KServe in Standard mode",
                "remove it; in Standard mode the startupProbe (startup_timeout_seconds) and the deploy "
                "role's wait bound the rollout",
                "progress-deadline-standard",
            )
        return None
    if value is None:
        return startup + 600
    if value < startup:
        findings.warning(
            "progress_deadline_seconds",
            "progress_deadline_seconds=%d is shorter than the startup "
            "budget (%d s): Knative can give up on a revision that is still loading" % (value, startup),
            "raise it above %d" % startup,
            "progress-deadline-short",
        )
    return value


_FORBIDDEN_OVERRIDES = {
    "inferenceservice": {
        ("apiVersion",): "the API version is fixed",
        ("kind",): "the kind is fixed",
        ("metadata", "name"): "use specpilot_name",
        ("metadata", "namespace"): "use specpilot_namespace",
        (
            "spec",
            "predictor",
            "model",
            "args",
        ): "use specpilot_vllm_args.extra_args (and specpilot_speculative)",
        ("spec", "predictor", "model", "runtime"): "use specpilot_runtime.name",
    },
    "servingruntime": {
        ("apiVersion",): "the API version is fixed",
        ("kind",): "use specpilot_runtime.kind",
        ("metadata", "name"): "use specpilot_runtime.name",
        ("metadata", "namespace"): "use specpilot_namespace",
    },
}


def _check_overrides(overrides, findings):
    for kind, forbidden in _FORBIDDEN_OVERRIDES.items():
        patch = overrides.get(kind) or {}
        for keys, hint in forbidden.items():
            node = patch
            for key in keys:
                node = node.get(key) if isinstance(node, dict) else None
            if node is not None:
                findings.error(
                    "overrides.%s.%s" % (kind, ".".join(keys)),
                    "overrides may not change %s of the %s" % (".".join(keys), kind),
                    hint,
                    "override-forbidden",
                )


def _finish(result, options):
    spec_override.annotate(result.get("speculative_overrides"), (result["errors"], result["warnings"]))
    strict = bool(options.get("strict"))
    result["ok"] = not result["errors"] and not (strict and result["warnings"])
    result["report"] = format_report(result, options.get("var_prefix") or VAR_PREFIX, strict)
    return result


def copy_result(result):
    return copy.deepcopy(result)


# Options of specpilot.core.spec_validate (shared by the module and its action plugin).
ARGUMENT_SPEC = {
    "spec": {"type": "dict"},
    "spec_patch": {"type": "dict"},
    "default_name": {"type": "str"},
    "strict": {"type": "bool", "default": False},
    "kserve_version": {"type": "str"},
    "schema_dir": {"type": "path"},
    "fail_on_error": {"type": "bool", "default": True},
    "allow_missing_digest": {"type": "bool", "default": False},
    "read_local_files": {"type": "bool", "default": True},
    "var_prefix": {"type": "str", "default": VAR_PREFIX},
    "variable_names": {"type": "list", "elements": "str", "default": []},
    # every specpilot_* name the project's roles and playbooks use (the action plugin reads them there)
    "known_variables": {"type": "list", "elements": "str", "default": []},
    "render_dir": {"type": "path"},
    "display_warnings": {"type": "bool", "default": True},
    # auto: read config.json and the tokenizer at each artifact's source; off: no network reads (unset:
    # $SPECPILOT_MODEL_FACTS, else auto).  The action plugin passes the variable specpilot_model_facts.
    # raw: YAML reads an unquoted off as false; model_facts.mode_of checks the value and names the variable
    "model_facts": {"type": "raw"},
    # digest: every image the spec names must carry @sha256:<digest> (a warning, image-tag-only); tag (the
    # default): a tag other than latest is enough.  The action plugin passes the variable specpilot_image_pins.
    "image_pins": {"type": "str", "choices": ["tag", "digest"], "default": "tag"},
    # raw: the values come from extra variables and survey answers; spec_override checks them and
    # names the variable in its errors.
    "override_method": {"type": "raw"},
    "override_num_speculative_tokens": {"type": "raw", "no_log": False},  # a count, not a credential
    # what specpilot.core.cluster_probe read in the cluster (its result's "probed"): the image's vLLM
    # release and the model facts of the service's PVC
    "probed": {"type": "dict"},
}


def run_options(params):
    """validate() options from the module parameters."""
    return {
        key: params.get(key)
        for key in (
            "strict",
            "kserve_version",
            "schema_dir",
            "allow_missing_digest",
            "read_local_files",
            "var_prefix",
            "variable_names",
            "known_variables",
            "override_method",
            "override_num_speculative_tokens",
            "model_facts",
            "probed",
            "image_pins",
            "default_name",
        )
    }


def module_result(params, check_mode=False):
    """Everything the module returns, and whether it fails."""
    spec = params["spec"]
    if params.get("spec_patch") and isinstance(spec, dict):
        spec = render.deep_merge(spec, params["spec_patch"])
    result = validate(spec, run_options(params))
    out = {
        "changed": False,
        "ok": result["ok"],
        "errors": result["errors"],
        # Ansible turns a top-level "warnings" result key into display strings, so the
        # structured lists live here.
        "findings": {"errors": result["errors"], "warnings": result["warnings"], "notes": result["notes"]},
        "plan": result["plan"],
        "spec": result["spec"],
        "report": result["report"],
        "speculative_overrides": result["speculative_overrides"],
        "model_facts": result.get("model_facts"),
        "vllm_version": result.get("vllm_version"),
    }
    failed = bool(params.get("fail_on_error")) and not result["ok"]
    if failed:
        # the report says it all; the structured lists are there with fail_on_error=false
        return {"changed": False, "ok": False, "msg": result["report"]}, True
    if params.get("display_warnings") and result["warnings"]:
        out["warnings"] = [result["report"]]
    if result["speculative_overrides"]["applied"]:
        # always shown: every role of the run works with the overridden spec, not the inventory's
        out.setdefault("warnings", []).append(
            "%s: %s"
            % (
                (result["spec"] or {}).get("name") or "service",
                spec_override.describe(result["speculative_overrides"]),
            )
        )
    if params.get("render_dir") and result["ok"]:
        out["changed"], out["rendered_files"], diffs = write_render_dir(
            result["plan"], params["render_dir"], check_mode
        )
        if diffs:
            out["diff"] = diffs  # what --diff shows, in check mode too
    return out, failed


def _yaml_text(data):
    import yaml  # PyYAML, in requirements.txt

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper, value):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return "---\n" + yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)


def write_render_dir(plan, render_dir, check_mode=False):
    """Write <render_dir>/<name>/{inferenceservice,servingruntime,plan}.yaml (llminferenceservice.yaml for one).

    Returns (changed, files, diffs): files whose content is unchanged are left alone; nothing is
    written in check mode; ``diffs`` holds one Ansible diff (before/after) per file that changes
    or would change.
    """
    out = os.path.join(render_dir, plan["name"])
    documents = [
        ("inferenceservice.yaml", plan["inferenceservice"]),
        ("servingruntime.yaml", plan["servingruntime"]),
        ("llminferenceservice.yaml", plan.get("llminferenceservice")),
        ("plan.yaml", plan),
    ]
    files, diffs = [], []
    for name, data in documents:
        if data is None:
            continue
        path = os.path.join(out, name)
        files.append(path)
        text = _yaml_text(data)
        try:
            with open(path) as handle:
                before = handle.read()
        except (IOError, OSError):
            before = None
        if before == text:
            continue
        diffs.append(
            {
                "before_header": path if before is not None else "%s (absent)" % path,
                "after_header": path,
                "before": before or "",
                "after": text,
            }
        )
        if not check_mode:
            if not os.path.isdir(out):
                os.makedirs(out)
            write_if_changed(path, text.encode("utf-8"))
    return bool(diffs), files, diffs
