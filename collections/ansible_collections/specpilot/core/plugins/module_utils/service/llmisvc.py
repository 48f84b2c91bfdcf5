# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""A service served by KServe's LLMInferenceService (serving.kserve.io, v1alpha1 on 0.16, v1alpha2 from 0.17).

The spec chooses it with ``resource: LLMInferenceService``; its own settings are the ``llm`` section
(model name, replicas, parallelism, prefill, baseRefs, router).  What validation shares with an
InferenceService (the version profiles, the speculative config, compatibility, the GPU budget) reads the
same spec: :func:`prepare` maps ``llm.parallelism.tensor``/``pipeline`` onto ``vllm_args`` so that those
checks apply unchanged (the draft's tensor-parallel size, 1 or the target's, is then
``preflight_rules.check_draft_tp``'s, after vLLM's ``SpeculativeConfig._verify_and_get_draft_tp``,
vllm/config/speculative.py).

How KServe runs it (kserve v0.20.0):

* every workload's engine is the container named ``main`` of the merged pod template
  (config/llmisvcconfig/config-llm-template.yaml, config-llm-decode-template.yaml,
  config-llm-prefill-template.yaml; pkg/controller/v1alpha2/llmisvc/workload_single_node.go
  ``expectedSingleNodeMainDeployment``, ``expectedPrefillMainDeployment``: ``c.Name == "main"``);
* its command is ``/bin/bash -c 'eval "exec vllm serve /mnt/models --served-model-name
  {{ .Spec.Model.Name }} ... --port 8000 [--tensor-parallel-size N] ${VLLM_ADDITIONAL_ARGS} $@"' --``: the
  container's args are the ``$@`` of an ``eval``, so the shell parses them a second time.  KServe quotes
  its own JSON flag for that eval (config_merge.go, the template function ``kvTransferConfig``: "Plain \"
  would be eaten by the shell and vLLM would get invalid JSON"); :func:`container_args` quotes every arg
  specpilot renders (``shlex.quote``), and the live view parses them back (``live.LLMInferenceServiceView``);
* the model comes from ``spec.model.uri`` at /mnt/models (workload_storage.go ``attachModelArtifacts``: oci,
  pvc, hf, s3; ``attachPVCModelArtifact`` mounts a ``pvc://claim/path`` with that subPath); nothing else is
  fetched, so the draft (or EAGLE head) reaches the pod as a second volume of ``spec.template``: a PVC
  mounted read-only at /mnt/draft (``draft.mount_path`` to change it);
* ``spec.template`` is the decode workload and ``spec.prefill.template`` the prefill one
  (``expectedPrefillMainDeployment`` copies ``Spec.Prefill.Template``); Ready is the living condition set
  of WorkloadsReady and RouterReady (pkg/apis/serving/v1alpha2/llm_inference_service_lifecycle.go).

Speculative decoding goes to the decode workload only: the prefill pods compute the prompt's KV cache and
hand it to decode, they produce no tokens to draft for.  :func:`place_speculative` is the one function that
puts it in the object; KServe's proposed ``spec.speculator`` field (applied to the decode pods) would replace
it.  Pure standard library.
"""

from __future__ import annotations

import copy
import posixpath
import shlex

from ansible_collections.specpilot.core.plugins.module_utils.report.findings import path_join
from ansible_collections.specpilot.core.plugins.module_utils.service import kserve_rules
from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import MOUNT_ROOT

__all__ = [
    "KIND",
    "PORT",
    "workload",
    "CONTAINER",
    "DRAFT_ROOT",
    "DRAFT_VOLUME",
    "MODEL_SCHEMES",
    "is_llm",
    "prepare",
    "delivery",
    "mounts",
    "engine_args",
    "container_args",
    "engine_words",
    "place_speculative",
    "manifest",
]

KIND = "LLMInferenceService"
GROUP = "serving.kserve.io"
CONTAINER = "main"
DRAFT_ROOT = "/mnt/draft"
DRAFT_VOLUME = "specpilot-draft"
# what attachModelArtifacts fetches into /mnt/models (workload_storage.go, kserve v0.20.0)
MODEL_SCHEMES = ("hf", "pvc", "oci", "s3")
DELIVERIES = ("storage_uri", "pvc")
_PARALLELISM = (("tensor", "tensor"), ("pipeline", "pipeline"), ("data", "data"), ("data_local", "dataLocal"))


# the port KServe's template serves vLLM on (config-llm-template.yaml: vllm serve ... --port 8000)
PORT = 8000


def workload(name):
    """Where the decode workload's engine runs, for the roles that look inside it (smoke, benchmark, guard):
    its container, its port, its pods' labels (workload_single_node.go singleNodeLabels, the component of the
    decode workload; the prefill pods are ``llminferenceservice-workload-prefill``)."""
    return {
        "container": CONTAINER,
        "port": PORT,
        "pod_labels": ["app.kubernetes.io/name=%s" % name, "app.kubernetes.io/component=llminferenceservice-workload"],
        "deployment": "%s-kserve" % name,
    }


def is_llm(spec):
    return isinstance(spec, dict) and spec.get("resource") == KIND


def _llm(spec):
    return spec.get("llm") or {}


def prepare(spec, findings):
    """Before the shared checks: the delivery (storage_uri by default, pvc), and ``llm.parallelism``'s
    tensor and pipeline sizes as ``vllm_args`` (what the GPU budget, compatibility and the draft TP check
    read).  A vllm_args size that disagrees, or an engine flag KServe renders itself, is an error."""
    spec.setdefault("delivery", "storage_uri")
    if spec["delivery"] not in DELIVERIES:
        findings.error(
            "delivery",
            "delivery %s is not available with resource %s: its pod gets the model from spec.model.uri only"
            % (spec["delivery"], KIND),
            "use delivery storage_uri (target.uri is spec.model.uri; a draft on a PVC is mounted as a second "
            "volume) or pvc (both staged on specpilot_pvc)",
            "llmisvc-delivery",
        )
    va = spec["vllm_args"]
    par = _llm(spec).get("parallelism") or {}
    for key, flag in (("tensor", "tensor_parallel_size"), ("pipeline", "pipeline_parallel_size")):
        given = va.get(flag)
        if par.get(key) is not None and given is not None and given != par[key]:
            findings.error(
                path_join("vllm_args", flag),
                "vllm_args.%s=%s disagrees with llm.parallelism.%s=%s" % (flag, given, key, par[key]),
                "set it once, in llm.parallelism.%s (KServe renders the flag from spec.parallelism)" % key,
                "llmisvc-parallelism",
            )
        elif given is None and par.get(key) is not None:
            va[flag] = par[key]
    # a size given as vllm_args (or the GPUs of a pod, render.tensor_parallel_size) reaches vLLM through
    # spec.parallelism: KServe's template renders --tensor-parallel-size from it, the args do not
    par = spec.setdefault("llm", {}).setdefault("parallelism", dict(par))
    tp = render.tensor_parallel_size(spec)
    if par.get("tensor") is None and tp > 1:
        par["tensor"] = tp
    if par.get("pipeline") is None and (va.get("pipeline_parallel_size") or 1) > 1:
        par["pipeline"] = va["pipeline_parallel_size"]
    if spec.get("deployment_mode") != "Standard":
        findings.error(
            "deployment_mode",
            "deployment_mode %s: KServe runs an LLMInferenceService's workloads as Deployments, not Knative"
            % spec.get("deployment_mode"),
            "remove specpilot_deployment_mode (or set Standard)",
            "llmisvc-mode",
        )
    _check_gpus(spec, findings)


def _check_gpus(spec, findings):
    """One pod of the decode workload holds tensor x pipeline x data-local GPUs (vLLM's world size)."""
    par = _llm(spec).get("parallelism") or {}
    count = spec["gpu"]["count"]
    need = (par.get("tensor") or 1) * (par.get("pipeline") or 1) * (par.get("data_local") or 1)
    if count and par and need != count:
        findings.error(
            "gpu.count",
            "gpu.count=%d, but llm.parallelism asks for %d GPUs per pod (tensor x pipeline x data_local)"
            % (count, need),
            "set specpilot_gpu.count: %d, or change llm.parallelism" % need,
            "llmisvc-gpu-count",
        )


def _check_model_uri(spec, findings):
    uri = spec["target"].get("uri")
    if spec["delivery"] == "pvc":
        return
    if not uri:
        findings.error(
            "target.uri",
            "target.uri is required: it is the LLMInferenceService's spec.model.uri",
            "give hf://org/repo, pvc://claim/path or oci://registry/repo:tag",
            "uri-required",
        )
    elif kserve_rules.uri_scheme(uri) not in MODEL_SCHEMES:
        findings.error(
            "target.uri",
            "target.uri %r: KServe's LLMInferenceService fetches %s only" % (uri, ", ".join(s + "://" for s in MODEL_SCHEMES)),
            "use one of those, or stage the model with delivery pvc",
            "llmisvc-model-scheme",
        )


def _draft_volume(spec, draft_artifact, findings):
    """The PVC volume that carries the draft: {claim, sub_path}, or None (no draft, or an error said why)."""
    draft = spec.get("draft") or {}
    if not (draft_artifact and draft):
        return None
    if spec["delivery"] == "pvc":
        pvc = spec.get("pvc") or {}
        sub = posixpath.join((pvc.get("path") or "").strip("/"), draft["subdir"]).strip("/")
        return {"claim": pvc.get("name"), "sub_path": sub}
    uri = draft.get("uri")
    if kserve_rules.uri_scheme(uri) != "pvc":
        findings.error(
            "draft.uri",
            "draft.uri %r: an LLMInferenceService fetches one model (spec.model.uri); the draft must already "
            "be on a PersistentVolumeClaim, mounted as a second volume" % (uri,),
            "stage it on a PVC and give draft.uri: pvc://<claim>/<path>, or use delivery pvc",
            "llmisvc-draft-source",
        )
        return None
    claim = uri.split("://", 1)[1].split("/", 1)[0]
    return {"claim": claim, "sub_path": kserve_rules.pvc_sub_path(uri)}


def delivery(spec, draft_artifact, findings):
    """The plan's delivery dict for an LLMInferenceService (same keys as an InferenceService's), plus the
    draft's volume."""
    _check_model_uri(spec, findings)
    if spec["target"].get("mount_path"):
        findings.error(
            "target.mount_path",
            "the target of an LLMInferenceService is always at %s (KServe's template runs vllm serve %s)"
            % (MOUNT_ROOT, MOUNT_ROOT),
            "remove target.mount_path",
            "mount-path-unused",
        )
    out = {"type": spec["delivery"], "storage_uri": spec["target"].get("uri"), "storage_uris": None, "staging": None}
    if spec["delivery"] == "pvc":
        pvc = spec.get("pvc")
        if not pvc:
            findings.error("pvc", "delivery pvc needs specpilot_pvc (name)", "set specpilot_pvc.name", "pvc-missing")
            return out
        sub = posixpath.join((pvc.get("path") or "").strip("/"), spec["target"]["subdir"]).strip("/")
        out.update(storage_uri="pvc://%s/%s" % (pvc["name"], sub), pvc=pvc["name"])
        out["staging"] = "pvc" if (spec["target"].get("uri") or (spec.get("draft") or {}).get("uri")) else None
    out["draft_volume"] = _draft_volume(spec, draft_artifact, findings)
    return out


def mounts(spec, draft_artifact):
    """Where the target and the draft are inside the ``main`` container."""
    draft = spec.get("draft") or {}
    has_draft = bool(draft) and draft_artifact
    return {
        "root": MOUNT_ROOT,
        "target": MOUNT_ROOT,
        "draft": (draft.get("mount_path") or DRAFT_ROOT) if has_draft else None,
    }


def engine_args(spec, speculative_args):
    """The engine's args beyond what KServe's template gives ``vllm serve`` (the model, its served name, the
    port, the tensor-parallel size): one list item per word vLLM gets, unquoted."""
    va = spec["vllm_args"]
    args = []
    if va.get("gpu_memory_utilization") is not None:
        args.append("--gpu-memory-utilization=%s" % render._arg_number(va["gpu_memory_utilization"]))
    for key, flag, fmt in (
        ("max_model_len", "--max-model-len", "%d"),
        ("dtype", "--dtype", "%s"),
        ("max_num_seqs", "--max-num-seqs", "%d"),
        ("kv_cache_dtype", "--kv-cache-dtype", "%s"),
    ):
        if va.get(key) not in (None, ""):
            args.append(("%s=" + fmt) % (flag, va[key]))
    if (va.get("pipeline_parallel_size") or 1) > 1:
        args.append("--pipeline-parallel-size=%d" % va["pipeline_parallel_size"])
    if va.get("enforce_eager"):
        args.append("--enforce-eager")
    if va.get("async_scheduling"):
        args.append("--async-scheduling")
    # the speculative args last: the decode workload's are the prefill's plus them (place_speculative)
    args.extend(va.get("extra_args") or [])
    args.extend(speculative_args)
    return args


def container_args(words):
    """The ``main`` container's args for these engine words: each quoted for the template's ``eval``."""
    return [shlex.quote(str(w)) for w in words or ()]


def engine_words(args):
    """What vLLM gets from stored container args (the ``eval``'s parse); unparsable ones stay as they are."""
    try:
        return shlex.split(" ".join(str(a) for a in args or ()))
    except ValueError:
        return [str(a) for a in args or ()]


def _main(template):
    containers = template.setdefault("containers", [])
    for container in containers:
        if container.get("name") == CONTAINER:
            return container
    containers.insert(0, {"name": CONTAINER})
    return containers[0]


def place_speculative(obj, speculative_args, draft_volume=None, draft_mount=None):
    """Speculative decoding in an LLMInferenceService: the args (and the draft's volume) in the decode
    workload's ``main`` container, ``spec.template``; never in ``spec.prefill`` (the prefill pods only fill the
    KV cache).  The one place to change for KServe's proposed ``spec.speculator``.  ``obj`` is changed and
    returned."""
    template = obj["spec"].setdefault("template", {})
    main = _main(template)
    main["args"] = list(main.get("args") or []) + container_args(speculative_args)
    if draft_volume and draft_mount:
        main.setdefault("volumeMounts", []).append(
            dict({"name": DRAFT_VOLUME, "mountPath": draft_mount, "readOnly": True},
                 **({"subPath": draft_volume["sub_path"]} if draft_volume.get("sub_path") else {}))
        )
        template.setdefault("volumes", []).append(
            {"name": DRAFT_VOLUME, "persistentVolumeClaim": {"claimName": draft_volume["claim"], "readOnly": True}}
        )
    return obj


def _parallelism(par):
    out = {crd: par[key] for key, crd in _PARALLELISM if par.get(key) is not None}
    if par.get("expert") is not None:
        out["expert"] = bool(par["expert"])
    return out


def _workload_template(spec, args):
    main = {"name": CONTAINER, "args": container_args(args)}
    if spec["runtime"].get("image"):
        main["image"] = spec["runtime"]["image"]
    resources = render._resources_with_gpus(spec)
    if resources:
        main["resources"] = resources
    if spec.get("env"):
        main["env"] = copy.deepcopy(spec["env"])
    # merged over the template's (config-llm-template.yaml: runAsNonRoot, no privilege escalation, no
    # capabilities, RuntimeDefault seccomp); an image that runs as root needs runAsNonRoot: false here
    if spec["runtime"].get("security_context"):
        main["securityContext"] = copy.deepcopy(spec["runtime"]["security_context"])
    template = {"containers": [main]}
    template.update(render._gpu_placement(spec["gpu"]))
    if spec.get("service_account_name"):
        template["serviceAccountName"] = spec["service_account_name"]
    return template


def api_version(kserve_version):
    return "%s/%s" % (GROUP, kserve_rules.llmisvc_version(kserve_version) or "v1alpha2")


def manifest(spec, plan, kserve_version):
    """The LLMInferenceService deploy applies: ``plan['args_without_speculative']`` in every workload, then
    :func:`place_speculative` with ``plan['speculative_args']`` in the decode one."""
    llm = _llm(spec)
    annotations = {
        render.ANN_DIGEST: plan["spec_digest"],
        render.ANN_VLLM: spec["vllm_version"],
        render.ANN_METHOD: (plan["speculative_config"] or {}).get("method") or "off",
    }
    annotations.update(spec.get("annotations") or {})
    labels = dict(spec.get("labels") or {})
    labels.update(plan["labels"])
    body = {"model": {"uri": plan["delivery"].get("storage_uri") or "", "name": llm.get("model_name") or spec["name"]}}
    body["replicas"] = llm["replicas"] if llm.get("replicas") is not None else spec["min_replicas"]
    if _parallelism(llm.get("parallelism") or {}):
        body["parallelism"] = _parallelism(llm["parallelism"])
    if llm.get("base_refs"):
        body["baseRefs"] = [{"name": n} for n in llm["base_refs"]]
    if llm.get("router") is not None:
        body["router"] = copy.deepcopy(llm["router"])
    body["template"] = _workload_template(spec, plan["args_without_speculative"])
    prefill = llm.get("prefill")
    if prefill is not None:
        body["prefill"] = {"replicas": prefill.get("replicas", 1), "template": _workload_template(spec, plan["args_without_speculative"])}
        if _parallelism(prefill.get("parallelism") or {}):
            body["prefill"]["parallelism"] = _parallelism(prefill["parallelism"])
    obj = {
        "apiVersion": api_version(kserve_version),
        "kind": KIND,
        "metadata": {"name": spec["name"], "namespace": spec["namespace"], "labels": labels, "annotations": annotations},
        "spec": body,
    }
    return place_speculative(
        obj, plan["speculative_args"], plan["delivery"].get("draft_volume"), plan["mount_paths"].get("draft")
    )
