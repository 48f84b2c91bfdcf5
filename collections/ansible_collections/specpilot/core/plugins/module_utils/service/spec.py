# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The service spec: its JSON Schema, assembly from ``specpilot_*`` variables, defaults.

A service is described by inventory variables ``specpilot_<key>``.  The validator works on
the *assembled* spec: a dict whose keys are the ``<key>`` parts.  ``SERVICE_SCHEMA`` below
is the contract (exported to ``schemas/service.schema.json``; the descriptions are the
reference documentation of every field).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json

from ansible_collections.specpilot.core.plugins.module_utils.service.plan import normalise_mode

__all__ = [
    "SERVICE_SCHEMA",
    "SPEC_KEYS",
    "VAR_PREFIX",
    "CONTROL_VARS",
    "OVERRIDE_VARS",
    "MOUNT_ROOT",
    "assemble_from_vars",
    "variable_typos",
    "plain",
    "normalise",
    "spec_digest",
    "SLO_DEFAULTS",
]

VAR_PREFIX = "specpilot_"
MOUNT_ROOT = "/mnt/models"

# Run-time overrides of the spec's speculative section (operational, not spec content): every
# role that validates the spec (validate, deploy, smoke, benchmark ...) applies them through
# specpilot.core.spec_validate, so all of them see the same effective spec.  Speculative key ->
# variable.  See module_utils/service/spec_override.py.
OVERRIDE_VARS = {
    "method": "specpilot_override_method",
    "num_speculative_tokens": "specpilot_override_num_speculative_tokens",
}

# Variables that steer the playbooks and are not part of any service spec (specpilot_model_facts: whether
# validation reads the model facts at the artifacts' sources, module_utils/service/model_facts.py).
CONTROL_VARS = (
    "specpilot_spec_file",
    "specpilot_render_dir",
    "specpilot_strict",
    "specpilot_model_facts",
    "specpilot_image_pins",
) + tuple(OVERRIDE_VARS.values())

_DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Kubernetes label and annotation keys: an optional DNS-subdomain prefix and "/", then a name of at
# most 63 characters; label values: at most 63, the same characters (k8s.io/apimachinery
# pkg/util/validation/validation.go: IsQualifiedName, IsValidLabelValue).  The total size of the
# annotations (at most 256 KiB, pkg/api/validation/objectmeta.go ValidateAnnotations) is checked by
# validator.py.
_QUALIFIED_NAME = (
    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_KEY = {"pattern": _QUALIFIED_NAME, "maxLength": 317}
_LABEL_VALUE = {"type": "string", "maxLength": 63, "pattern": "^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"}
# Bounds of every number a user types: beyond them a value is a typo, and some (a timeout of 10**12)
# would make a wait, and the lock it holds, unbounded.
DAY = 86400
_VERSION = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)*([.+-]?[0-9A-Za-z.+-]*)?$"
_VERSION_OR_AUTO = "^(auto|%s)$" % _VERSION[1:-1]
# The runtime container's default securityContext: what Kubernetes' restricted Pod Security profile asks
# that a root image can meet. vLLM's docker/Dockerfile (stage vllm-openai) sets no USER, so the upstream
# image runs as root (its docs mount /root/.cache/huggingface): runAsNonRoot would stop it at the kubelet
# ("container has runAsNonRoot and image will run as root"). The runtime writes only under /tmp (HF_HOME,
# VLLM_CONFIG_ROOT, see render.servingruntime) and /dev/shm, and needs no capability on a single node.
RUNTIME_SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$"


# What the keep-or-rollback verdict of a service allows when its spec's workload.slo leaves a field
# out (the descriptions of workload.slo below quote them; slo_policy() fills them in).  Regressions
# are fractions of the baseline: 0.10 = at most 10% worse.
SLO_DEFAULTS = {
    "bound_by": "tpot",
    "policy": "slo",
    "ttft_max_regression": 0.10,
    "tpot_max_regression": 0.0,
    "e2e_max_regression": 0.10,
    "throughput_max_regression": 0.0,
}
_SLO_METRICS = ("tpot", "ttft", "e2e", "throughput")
_MAX_REGRESSION = 10


def _s(description, **schema):
    schema["description"] = description
    return schema


def _artifact(role):
    """Schema of specpilot_target / specpilot_draft."""
    other = "target" if role == "draft" else "draft"
    return _s(
        "The %s model: where it comes from, where it lands in the pod, and optional facts about it that "
        "the compatibility and GPU-memory checks use (given here, or read from config.json and the "
        "tokenizer files under local_path)." % role,
        type="object",
        additionalProperties=False,
        properties={
            "uri": _s(
                "Source of the %s.  delivery storage_uri/storage_uris: a KServe storage URI (hf://, s3://, "
                "gs://, "
                "https://, pvc://, oci://).  delivery pvc/modelcar: the source the staging role copies from "
                "(hf://org/repo[@revision], s3://, https://, pvc://); omit it when the artifact is already "
                "staged." % role,
                type="string",
                minLength=1,
            ),
            "subdir": _s(
                "Directory name of the %s under the model root: /mnt/models/<subdir> in the pod, "
                "<pvc>/<subdir> "
                "on the PVC, /models/<subdir> in the Modelcar image.  Default: %s." % (role, role),
                type="string",
                pattern="^[A-Za-z0-9._-]+$",
                minLength=1,
            ),
            "mount_path": _s(
                "Only for delivery storage_uris: mountPath of this entry (absolute, not '/', no '..').  "
                "Default: "
                "/mnt/models/<subdir> (and /mnt/<subdir>/model when two oci:// entries need distinct "
                "parents).",
                type="string",
                minLength=1,
            ),
            "revision": _s(
                "Revision (branch, tag or commit) of an hf:// source, used by staging.", type="string"
            ),
            "include": _s(
                "Staging: glob patterns of files to copy (default: everything).",
                type="array",
                items={"type": "string"},
            ),
            "exclude": _s("Staging: glob patterns of files to skip.", type="array", items={"type": "string"}),
            "secret_name": _s(
                "Staging: name of the Secret holding the source credentials (HF_TOKEN, AWS_* ...).",
                type="string",
                pattern=_DNS_LABEL,
            ),
            "local_path": _s(
                "Path on the Ansible controller holding this model's config.json and tokenizer files "
                "(weights "
                "optional).  The validator reads the facts below from there when they are not given.",
                type="string",
                minLength=1,
            ),
            "params_b": _s(
                "Parameter count in billions (e.g. 8.03).  Used by the GPU-memory and draft-ratio checks.",
                type="number",
                exclusiveMinimum=0,
            ),
            "dtype": _s(
                "Weight dtype: bfloat16, float16, float32, fp8, int8, int4.",
                type="string",
                enum=["bfloat16", "float16", "float32", "fp8", "int8", "int4", "auto"],
            ),
            "quantization": _s(
                "Weight quantization (awq, gptq, fp8, nvfp4, bitsandbytes, ...); sets the bytes per "
                "parameter when given.",
                type="string",
            ),
            "architecture": _s(
                "HF architecture (config.json architectures[0]), e.g. LlamaForCausalLM or "
                "Eagle3LlamaForCausalLM.",
                type="string",
            ),
            "model_type": _s("HF model_type (config.json), e.g. llama, qwen3, deepseek_v3.", type="string"),
            "hidden_size": _s(
                "Hidden size (config.json).  An EAGLE head must match its target's.",
                type="integer",
                minimum=1,
            ),
            "vocab_size": _s("Vocabulary size (config.json vocab_size).", type="integer", minimum=1),
            "num_hidden_layers": _s(
                "Number of transformer layers (KV-cache estimate).", type="integer", minimum=1
            ),
            "num_attention_heads": _s("Attention heads (KV-cache estimate).", type="integer", minimum=1),
            "num_key_value_heads": _s("Key/value heads (KV-cache estimate).", type="integer", minimum=1),
            "head_dim": _s(
                "Head dimension (KV-cache estimate; default hidden_size / num_attention_heads).",
                type="integer",
                minimum=1,
            ),
            "num_nextn_predict_layers": _s(
                "MTP layers in the checkpoint (config.json num_nextn_predict_layers).",
                type="integer",
                minimum=0,
            ),
            "tokenizer": _s(
                "Identity of the tokenizer (any string: the tokenizer repository, or a sha256 of "
                "tokenizer.json). "
                "Draft and %s must name the same tokenizer." % other,
                type="string",
            ),
        },
    )


def _regression(metric, meaning):
    return _s(
        "Fraction by which the speculative side's %s may be worse than the baseline's and the verdict "
        "still keeps speculative decoding (0.10 = 10%% worse; 0 = not worse beyond the measurement "
        "noise).  0..%d.  Default %g." % (meaning, _MAX_REGRESSION, SLO_DEFAULTS[metric + "_max_regression"]),
        type="number",
        minimum=0,
        maximum=_MAX_REGRESSION,
    )


def _workload():
    """Schema of specpilot_workload: the conditions the service meets in production."""
    p99 = {
        "ttft": "time to first token",
        "tpot": "time per output token",
        "e2e": "end-to-end request latency",
    }
    return _s(
        "The conditions the service meets in production, which the benchmark measures at and judges by: "
        "the sampling temperature, the load (qps or concurrency) and the service-level objectives.  "
        "Not the benchmark's prompt set (specpilot_benchmark_workload).  Absent: the benchmark role's "
        "own settings and its default verdict.",
        type="object",
        additionalProperties=False,
        properties={
            "temperature": _s(
                "Sampling temperature of production requests (0..2; 0 = greedy).  Acceptance of "
                "drafted tokens, and so the speedup, falls as it rises: the benchmark should measure "
                "at this temperature.",
                type="number",
                minimum=0,
                maximum=2,
            ),
            "qps": _s(
                "Request rate served in production (requests per second, > 0).  The benchmark's "
                "target level (specpilot_benchmark_target_qps).  Optional; may be given with "
                "concurrency.",
                type="number",
                exclusiveMinimum=0,
            ),
            "concurrency": _s(
                "Requests in flight in production (>= 1), for closed-loop clients.  The benchmark's "
                "target concurrency (specpilot_benchmark_target_concurrency).  Optional.",
                type="integer",
                minimum=1,
            ),
            "structured_output": _s(
                "Whether clients send structured-output (guided decoding) requests: response_format "
                "json_schema or json_object, guided_json / structured_outputs, strict tool calls.  "
                "Validation refuses speculative decoding on the vLLM releases where the two break "
                "together (V0 engine, V1 before 0.9.0).  Default false.",
                type="boolean",
            ),
            "slo": _s(
                "What the keep-or-rollback verdict judges by (the benchmark role passes it on as "
                "specpilot_benchmark_slo).  Absent fields take their defaults.",
                type="object",
                additionalProperties=False,
                properties={
                    "bound_by": _s(
                        "The metric the service is bound by, which speculative decoding must improve: "
                        "tpot (time per output token: streaming, interactive), ttft (time to first "
                        "token), e2e (end-to-end request latency) or throughput (output tokens per "
                        "second: batch).  Default %s." % SLO_DEFAULTS["bound_by"],
                        type="string",
                        enum=list(_SLO_METRICS),
                    ),
                    "policy": _s(
                        "slo: keep speculative decoding when the bound_by metric improves and every "
                        "other metric stays within its *_max_regression and p99_ms; strict: keep it "
                        "only when TTFT, TPOT and throughput all improve (the rule before "
                        "workload.slo).  Default %s." % SLO_DEFAULTS["policy"],
                        type="string",
                        enum=["slo", "strict"],
                    ),
                    "ttft_max_regression": _regression("ttft", "time to first token"),
                    "tpot_max_regression": _regression("tpot", "time per output token"),
                    "e2e_max_regression": _regression("e2e", "end-to-end request latency"),
                    "throughput_max_regression": _regression("throughput", "output throughput"),
                    "p99_ms": _s(
                        "Absolute p99 limits in milliseconds at the target level: the speculative "
                        "side must stay under each one given.  Optional; none by default.",
                        type="object",
                        additionalProperties=False,
                        properties={
                            key: _s("p99 %s limit in ms (> 0)." % meaning, type="number", exclusiveMinimum=0)
                            for key, meaning in p99.items()
                        },
                    ),
                },
            ),
        },
    )


_LLM_PARALLELISM = _s(
    "spec.parallelism of an LLMInferenceService: tensor and pipeline sizes (the GPU budget and the draft's "
    "tensor-parallel size read them, as vllm_args.tensor_parallel_size), data and data_local (data "
    "parallelism), expert (expert parallelism).  gpu.count is tensor x pipeline x data_local.",
    type="object",
    additionalProperties=False,
    properties={
        "tensor": _s(
            "spec.parallelism.tensor: the tensor-parallel size (vLLM's --tensor-parallel-size).",
            type="integer",
            minimum=1,
            maximum=1024,
        ),
        "pipeline": _s(
            "spec.parallelism.pipeline: the pipeline-parallel size (vLLM's --pipeline-parallel-size).",
            type="integer",
            minimum=1,
            maximum=1024,
        ),
        "data": _s(
            "spec.parallelism.data: the data-parallel size across all nodes (vLLM's --data-parallel-size).",
            type="integer",
            minimum=1,
            maximum=4096,
        ),
        "data_local": _s(
            "spec.parallelism.dataLocal: the data-parallel ranks on one node (vLLM's --data-parallel-size-local).",
            type="integer",
            minimum=1,
            maximum=1024,
        ),
        "expert": _s(
            "spec.parallelism.expert: expert parallelism for MoE models (vLLM's --enable-expert-parallel).",
            type="boolean",
        ),
    },
)


SERVICE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://specpilot.invalid/schemas/service.schema.json",
    "title": "specpilot service spec",
    "description": (
        "One vLLM InferenceService with (optionally) speculative decoding.  In an inventory every key is the "
        "variable specpilot_<key> of a host in the group specpilot_services; group_vars hold cluster "
        "defaults. "
        "Generated from specpilot.core module_utils/service/spec.py; do not edit."
    ),
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "namespace", "vllm_version", "target"],
    "properties": {
        "name": _s(
            "InferenceService name: a DNS-1123 label of at most 53 characters (KServe appends '-predictor'). "
            "Default: the inventory host name.",
            type="string",
            pattern=_DNS_LABEL,
            maxLength=53,
        ),
        "namespace": _s(
            "Namespace of the InferenceService (and of the ServingRuntime specpilot creates).",
            type="string",
            pattern=_DNS_LABEL,
            maxLength=63,
        ),
        "kserve_version": _s(
            'KServe release of the cluster, e.g. "0.20" (quote it: YAML reads 0.20 as 0.2).  '
            "Gates storageUris and OCI features.  The deploy role detects it from the cluster; "
            "when it is unknown the validator assumes the newest release it knows and warns.",
            type="string",
            pattern=_VERSION,
        ),
        "deployment_mode": _s(
            "KServe deployment mode: Standard (plain Deployment; the legacy name RawDeployment is accepted) "
            "or "
            "Knative (legacy Serverless).  Always written as the serving.kserve.io/deploymentMode "
            "annotation.",
            type="string",
            enum=["Standard", "Knative", "RawDeployment", "Serverless"],
        ),
        "resource": _s(
            "The KServe resource that serves it: InferenceService (the default; with a ServingRuntime) or "
            "LLMInferenceService (KServe >= 0.16: v1alpha1 on 0.16, v1alpha2 from 0.17; its settings in llm; "
            "target.uri is its spec.model.uri, a draft comes from a PVC as a second volume; speculative "
            "decoding goes to the decode workload's vLLM args only).",
            type="string",
            enum=["InferenceService", "LLMInferenceService"],
        ),
        "llm": _s(
            "Settings of resource LLMInferenceService (ignored otherwise).",
            type="object",
            additionalProperties=False,
            properties={
                "model_name": _s(
                    "spec.model.name: the name vLLM serves (--served-model-name).  Default: the service name.",
                    type="string",
                    minLength=1,
                ),
                "replicas": _s(
                    "spec.replicas of the decode workload.  Default: min_replicas.", type="integer", minimum=0
                ),
                "parallelism": _LLM_PARALLELISM,
                "prefill": _s(
                    "spec.prefill: a separate prefill workload (prefill/decode disaggregation).  It gets the "
                    "engine args without speculative decoding.",
                    type="object",
                    additionalProperties=False,
                    properties={
                        "replicas": _s("Prefill replicas (default 1).", type="integer", minimum=0),
                        "parallelism": _LLM_PARALLELISM,
                    },
                ),
                "base_refs": _s(
                    "spec.baseRefs: LLMInferenceServiceConfig names merged under the spec (the well-known "
                    "kserve-config-llm-* templates are merged by KServe on its own).",
                    type="array",
                    items={"type": "string", "pattern": _DNS_LABEL},
                ),
                "router": _s(
                    "spec.router as KServe takes it (route, gateway, scheduler), e.g. {route: {}, gateway: {}, "
                    "scheduler: {}}; omitted when not given.",
                    type="object",
                ),
            },
        ),
        "vllm_version": _s(
            'vLLM release inside the runtime image, e.g. "0.19.1", or "auto" (the default when '
            "runtime.image is given): read from the image by the deploy's probe Job "
            "(specpilot.core.cluster_probe), which also refuses a declared release the image does not hold.  "
            "Without a cluster, auto takes the last probe of the image cached on the controller, else "
            "vllm_version_fallback.  Selects the speculative-config profile and how the arguments are "
            "rendered (V0 flags up to 0.8.1, --speculative-config from 0.8.2).",
            type="string",
            pattern=_VERSION_OR_AUTO,
        ),
        "vllm_version_fallback": _s(
            'The release to assume for vllm_version "auto" where the image cannot be probed (validate-only '
            "and render-only runs with no cached probe of the image).  Deploy never uses it: the image's "
            "release wins.",
            type="string",
            pattern=_VERSION,
        ),
        "runtime": _s(
            "The KServe serving runtime.  With create: true (default) specpilot renders a ServingRuntime "
            "running "
            "vLLM's OpenAI server; with create: false it references an existing (Cluster)ServingRuntime by "
            "name.",
            type="object",
            additionalProperties=False,
            properties={
                "name": _s(
                    "Runtime name.  Default: <name>-vllm.", type="string", pattern=_DNS_LABEL, maxLength=63
                ),
                "kind": _s(
                    "ServingRuntime (namespaced) or ClusterServingRuntime.",
                    type="string",
                    enum=["ServingRuntime", "ClusterServingRuntime"],
                ),
                "create": _s(
                    "Render (and let deploy apply) the runtime, which runs `vllm serve`; false = use an "
                    "existing one, which must run `vllm serve` too (the InferenceService's args start with "
                    "the model path, its positional argument).",
                    type="boolean",
                ),
                "image": _s(
                    "vLLM OpenAI server image, pinned by tag or digest (required when create is true).",
                    type="string",
                    minLength=1,
                ),
                "image_pull_policy": _s(
                    "imagePullPolicy of the runtime container.",
                    type="string",
                    enum=["Always", "IfNotPresent", "Never"],
                ),
                "shm_size": _s(
                    "Size limit of the /dev/shm memory volume (default 2Gi).",
                    type="string",
                    pattern=_QUANTITY,
                ),
                "security_context": _s(
                    "securityContext of the runtime container (a Kubernetes SecurityContext, replacing the "
                    "default; {} for none).  Default: no privilege escalation, every capability dropped, "
                    "the RuntimeDefault seccomp profile - the strongest context the upstream "
                    "vllm/vllm-openai image starts under, since it runs as root (add runAsNonRoot with a "
                    "runAsUser only for an image built to run as that user).",
                    type="object",
                ),
            },
        ),
        "target": _artifact("target"),
        "draft": _s(
            "The draft artifact (EAGLE/EAGLE-3 head, draft model, Medusa, ...); omit for ngram, suffix and "
            "MTP, which need none.",
            anyOf=[_artifact("draft"), {"type": "null"}],
        ),
        "delivery": _s(
            "How the artifacts reach the pod: storage_uri (one artifact, spec.predictor.model.storageUri), "
            "storage_uris (option A: spec.predictor.storageUris, KServe >= 0.16), modelcar (option B: one "
            "OCI "
            "image holding /models/<target> and /models/<draft>), pvc (option C: both staged on a PVC "
            "mounted "
            "at /mnt/models).  Default: storage_uri without a draft artifact.",
            type="string",
            enum=["storage_uri", "storage_uris", "modelcar", "pvc"],
        ),
        "pvc": _s(
            "Settings of delivery pvc (option C).",
            type="object",
            additionalProperties=False,
            required=["name"],
            properties={
                "name": _s("PersistentVolumeClaim name.", type="string", pattern=_DNS_LABEL, maxLength=63),
                "path": _s(
                    "Directory on the PVC that holds the <subdir> directories (default: the PVC root).",
                    type="string",
                    pattern="^[A-Za-z0-9._/-]*$",
                ),
                "create": _s(
                    "Staging creates the PVC when missing (never shrinks or deletes one).", type="boolean"
                ),
                "size": _s(
                    "Staging: requested size when creating it, e.g. 200Gi.", type="string", pattern=_QUANTITY
                ),
                "storage_class": _s("Staging: storageClassName when creating it.", type="string"),
                "access_modes": _s(
                    "Staging: accessModes when creating it.",
                    type="array",
                    items={
                        "type": "string",
                        "enum": ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"],
                    },
                ),
            },
        ),
        "modelcar": _s(
            "Settings of delivery modelcar (option B).",
            type="object",
            additionalProperties=False,
            required=["image"],
            properties={
                "image": _s(
                    "Image reference without digest, registry/repo:tag (the tag is pinned by "
                    "the digest at deploy).",
                    type="string",
                    minLength=1,
                ),
                "image_digest": _s(
                    "sha256:<64 hex> of the pushed image, as printed by the staging "
                    "role.  The InferenceService references the image by this digest.",
                    type="string",
                    pattern="^sha256:[0-9a-f]{64}$",
                ),
                "base_image": _s("Staging: base image with sh, ln and sleep (e.g. busybox).", type="string"),
                "tls_verify": _s("Staging: verify the registry's TLS certificate.", type="boolean"),
            },
        ),
        "speculative": _s(
            "The dict rendered as --speculative-config (JSON keys of the vLLM release: method, "
            "num_speculative_tokens, method keys ...).  model is filled in from the draft's path when "
            "omitted. "
            "Absent or null: speculative decoding off.  Checked against schemas/speculative/ for "
            "vllm_version.",
            type=["object", "null"],
        ),
        "vllm_args": _s(
            "Engine arguments specpilot renders besides the speculative config.",
            type="object",
            additionalProperties=False,
            properties={
                "gpu_memory_utilization": _s(
                    "--gpu-memory-utilization (vLLM default 0.9).  On the V1 engine the draft's weights "
                    "and KV cache sit inside this budget: a draft needs a higher value, not a lower one.",
                    type="number",
                    exclusiveMinimum=0,
                    maximum=1,
                ),
                "max_model_len": _s("--max-model-len.", type="integer", minimum=1),
                "tensor_parallel_size": _s(
                    "--tensor-parallel-size (default: gpu.count / pipeline_parallel_size).",
                    type="integer",
                    minimum=1,
                    maximum=1024,
                ),
                "pipeline_parallel_size": _s(
                    "--pipeline-parallel-size (default 1): pipeline stages of one replica; the replica "
                    "uses tensor_parallel_size x pipeline_parallel_size GPUs.  With speculative decoding "
                    "many vLLM releases refuse it at start-up (checked per release).",
                    type="integer",
                    minimum=1,
                    maximum=1024,
                ),
                "dtype": _s(
                    "--dtype.",
                    type="string",
                    enum=["auto", "half", "float16", "bfloat16", "float", "float32"],
                ),
                "max_num_seqs": _s("--max-num-seqs.", type="integer", minimum=1),
                "enforce_eager": _s("--enforce-eager (no CUDA graphs / torch.compile).", type="boolean"),
                "async_scheduling": _s(
                    "--async-scheduling (true) or --no-async-scheduling (false).", type="boolean"
                ),
                "kv_cache_dtype": _s("--kv-cache-dtype.", type="string"),
                "extra_args": _s(
                    "Further engine arguments, one list item per argument ('--flag=value').  Flags "
                    "specpilot renders itself (--model, --port, --served-model-name, "
                    "--speculative-config, the V0 speculative flags, ...) are rejected here.",
                    type="array",
                    items={"type": "string", "pattern": "^-"},
                ),
            },
        ),
        "gpu": _s(
            "Accelerators of one replica.",
            type="object",
            additionalProperties=False,
            properties={
                "count": _s(
                    "GPUs per replica (0: CPU-only, e.g. the lab).", type="integer", minimum=0, maximum=1024
                ),
                "memory_gib": _s(
                    "Memory of one GPU in GiB as vLLM counts it: the total of torch.cuda.mem_get_info() "
                    "in the runtime image, less than the card's sales size and nvidia-smi's total (an H200: "
                    "139.8, where nvidia-smi shows 143771 MiB).  Enables the GPU memory budget check.",
                    type="number",
                    exclusiveMinimum=0,
                ),
                "resource_name": _s("Extended resource name (default nvidia.com/gpu).", type="string"),
                "product": _s("GPU product, informational (e.g. NVIDIA-H100-80GB-HBM3).", type="string"),
                "node_selector": _s(
                    "nodeSelector of the predictor pod.",
                    type="object",
                    additionalProperties={"type": "string"},
                ),
                "tolerations": _s(
                    "tolerations of the predictor pod.", type="array", items={"type": "object"}
                ),
                "affinity": _s("affinity of the predictor pod.", type="object"),
            },
        ),
        "resources": _s(
            "CPU/memory of the kserve-container (the GPU count comes from gpu.count).",
            type="object",
            additionalProperties=False,
            properties={
                "requests": _s(
                    "Requests (cpu, memory, ...).",
                    type="object",
                    additionalProperties={"type": ["string", "integer"]},
                ),
                "limits": _s(
                    "Limits (cpu, memory, ...).",
                    type="object",
                    additionalProperties={"type": ["string", "integer"]},
                ),
            },
        ),
        "env": _s(
            "Environment of the kserve-container (set on the InferenceService).",
            type="array",
            items={
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "description": "Variable name."},
                    "value": {"type": "string", "description": "Variable value."},
                    "valueFrom": {
                        "type": "object",
                        "description": "Kubernetes valueFrom (secretKeyRef, ...).",
                    },
                },
                "additionalProperties": False,
            },
        ),
        "min_replicas": _s(
            "spec.predictor.minReplicas (default 1; 0 only in Knative).",
            type="integer",
            minimum=0,
            maximum=10000,
        ),
        "max_replicas": _s(
            "spec.predictor.maxReplicas (default: min_replicas; not below it).",
            type="integer",
            minimum=1,
            maximum=10000,
        ),
        "rollout": _s(
            "Rollout strategy in Standard mode.  auto (default): with GPUs and one replica, RollingUpdate "
            "with "
            "maxSurge 0 / maxUnavailable 1 so the new pod never waits for a second GPU; recreate; surge "
            "(KServe's default 25%/25%).",
            type="string",
            enum=["auto", "recreate", "surge"],
        ),
        "startup_timeout_seconds": _s(
            "How long the engine may take to become ready (startupProbe budget).  Default 900, or 1800 with "
            "a "
            "draft artifact (loading and compiling a draft makes cold starts several minutes longer).",
            type="integer",
            minimum=60,
            maximum=DAY,
        ),
        "progress_deadline_seconds": _s(
            "Knative only: serving.knative.dev/progress-deadline.  Default startup_timeout_seconds + 600. "
            "KServe ignores it in Standard mode, where it is an error.",
            type="integer",
            minimum=60,
            maximum=DAY,
        ),
        "service_account_name": _s(
            "serviceAccountName of the predictor (storage credentials).", type="string", pattern=_DNS_LABEL
        ),
        "labels": _s(
            "Extra labels on the InferenceService (Kubernetes label syntax).",
            type="object",
            propertyNames=_KEY,
            additionalProperties=_LABEL_VALUE,
        ),
        "annotations": _s(
            "Extra annotations on the InferenceService (Kubernetes key syntax; 256 KiB in all).",
            type="object",
            propertyNames=_KEY,
            additionalProperties={"type": "string"},
        ),
        "overrides": _s(
            "Last-resort patches deep-merged into the rendered manifests (dicts merge, lists replace).  The "
            "merged manifests go through the same KServe checks (e.g. storageUris under model is rejected).",
            type="object",
            additionalProperties=False,
            properties={
                "inferenceservice": _s("Merged into the InferenceService.", type="object"),
                "servingruntime": _s("Merged into the ServingRuntime.", type="object"),
                "llminferenceservice": _s(
                    "Merged into the LLMInferenceService (resource LLMInferenceService); checked against the "
                    "fields the cluster's KServe release has.",
                    type="object",
                ),
            },
        ),
        "acknowledged_warnings": _s(
            "Warning codes this service accepts (e.g. async-scheduling-disabled): they are reported as notes "
            "and do not fail strict mode.",
            type="array",
            items={"type": "string"},
        ),
        "purpose": _s(
            "What the deployment is for: service (default) or benchmark.  Only a benchmark may use "
            "synthetic rejection sampling (speculative.rejection_sample_method: synthetic, "
            "synthetic_acceptance_*), which accepts drafts at made-up rates and so answers with text the "
            "model did not choose.",
            type="string",
            enum=["service", "benchmark"],
        ),
        "workload": _workload(),
        "smoke": _s(
            "Smoke test settings (used by the smoke role).",
            type="object",
            additionalProperties=False,
            properties={
                "enabled": _s("Run the smoke test after deploy.", type="boolean"),
                "prompts": _s("Probe prompts.", type="array", items={"type": "string"}),
                "max_tokens": _s("max_tokens of each probe request.", type="integer", minimum=1),
                "temperature": _s(
                    "Sampling temperature of the probes (0 for repeatable acceptance).",
                    type="number",
                    minimum=0,
                ),
                "request_params": _s("Extra request parameters sent with each probe.", type="object"),
                "min_acceptance_rate": _s(
                    "Fail below this draft acceptance rate (0..1).", type="number", minimum=0, maximum=1
                ),
                "min_mean_acceptance_length": _s(
                    "Fail below this mean acceptance length (>= 1).", type="number", minimum=1
                ),
                "timeout_seconds": _s(
                    "Time budget of the smoke test.", type="integer", minimum=1, maximum=DAY
                ),
            },
        ),
        "benchmark": _s(
            "Benchmark settings (used by the benchmark role).",
            type="object",
            additionalProperties=False,
            properties={
                "enabled": _s("Run the baseline vs speculative benchmark.", type="boolean"),
                "prompts": _s("Fixed prompt list.", type="array", items={"type": "string"}),
                "num_prompts": _s("Requests per run.", type="integer", minimum=1),
                "concurrency": _s(
                    "Concurrency levels to measure.", type="array", items={"type": "integer", "minimum": 1}
                ),
                "max_tokens": _s("max_tokens per request.", type="integer", minimum=1),
                "temperature": _s("Sampling temperature.", type="number", minimum=0),
                "request_params": _s("Extra request parameters.", type="object"),
                "seed": _s("Request seed.", type="integer"),
                "min_speedup": _s(
                    "Keep speculative decoding only above this speedup.", type="number", exclusiveMinimum=0
                ),
            },
        ),
    },
}

SPEC_KEYS = tuple(SERVICE_SCHEMA["properties"])


def plain(value):
    """Deep copy into plain dict/list/str/int/float/bool/None (drops Ansible's tagged types)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def assemble_from_vars(variables, default_name=None):
    """Build the spec from a mapping of variable names to values.

    Returns (spec, unknown) where unknown lists ``specpilot_*`` names that look like a
    misspelt spec key, each as (name, suggestion).
    """
    spec = {}
    unknown = []
    keys = set(SPEC_KEYS)
    for var_name in sorted(variables):
        if not var_name.startswith(VAR_PREFIX) or var_name in CONTROL_VARS:
            continue
        key = var_name[len(VAR_PREFIX) :]
        if key in keys:
            value = variables[var_name]
            spec[key] = plain(value)
            continue
        close = difflib.get_close_matches(key, SPEC_KEYS, n=1, cutoff=0.85)
        if close:
            unknown.append((var_name, VAR_PREFIX + close[0]))
    if "name" not in spec and default_name:
        spec["name"] = str(default_name)
    return spec, unknown


def variable_typos(names, known=()):
    """The ``specpilot_*`` names in ``names`` that no playbook reads: ``[(name, suggestion or None)]``,
    sorted. ``known``: the names the project's roles and playbooks use (the action plugin reads them
    there); the spec keys and the control variables are always known. The suggestion is the closest
    known name (difflib, on the part after the prefix). Without ``known`` (the module run alone) only
    the names close to a spec key are reported."""
    spec_names = [VAR_PREFIX + key for key in SPEC_KEYS]
    every = set(spec_names) | set(CONTROL_VARS) | {n for n in known or () if n.startswith(VAR_PREFIX)}
    candidates = sorted(every) if known else spec_names
    tails = [name[len(VAR_PREFIX) :] for name in candidates]
    out = []
    for name in sorted(set(names)):
        if not name.startswith(VAR_PREFIX) or name in every:
            continue
        close = difflib.get_close_matches(name[len(VAR_PREFIX) :], tails, n=1, cutoff=0.8)
        if close or known:
            out.append((name, VAR_PREFIX + close[0] if close else None))
    return out


def normalise(spec):
    """Defaults applied to a spec that passed the schema.  Returns a new dict."""
    spec = copy.deepcopy(spec)
    spec.setdefault("deployment_mode", "Standard")
    spec.setdefault("resource", "InferenceService")
    spec["deployment_mode"] = normalise_mode(spec["deployment_mode"])
    runtime = spec.setdefault("runtime", {})
    runtime.setdefault("create", True)
    runtime.setdefault("kind", "ServingRuntime")
    runtime.setdefault("name", "%s-vllm" % spec["name"])
    runtime.setdefault("shm_size", "2Gi")
    runtime.setdefault("security_context", copy.deepcopy(RUNTIME_SECURITY_CONTEXT))
    spec["target"].setdefault("subdir", "target")
    if spec.get("draft"):
        spec["draft"].setdefault("subdir", "draft")
    else:
        spec["draft"] = None
    gpu = spec.setdefault("gpu", {})
    gpu.setdefault("count", 1)
    gpu.setdefault("resource_name", "nvidia.com/gpu")
    args = spec.setdefault("vllm_args", {})
    args.setdefault("extra_args", [])
    spec.setdefault("rollout", "auto")
    spec.setdefault("min_replicas", 1)
    spec.setdefault("acknowledged_warnings", [])
    spec.setdefault("env", [])
    spec.setdefault("labels", {})
    spec.setdefault("annotations", {})
    spec.setdefault("overrides", {})
    if spec.get("speculative") == {}:
        spec["speculative"] = {}
    return spec


def spec_digest(spec):
    """sha256 of the canonical JSON of ``spec`` (any JSON-like value)."""
    canon = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()
