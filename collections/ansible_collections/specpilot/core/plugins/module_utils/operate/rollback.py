# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""What a rollback of one service must write, decided from the LIVE InferenceService.

* :func:`strip_speculative`: the engine args without ``--speculative-config`` (both the
  ``--flag=value`` and the ``--flag value`` forms) or the V0 speculative flags; every other
  argument is kept as it is, in its order;
* :func:`decide`: for mode ``off`` (speculative decoding removed, ``--gpu-memory-utilization``
  put back to its pre-speculative value when a recorded revision without speculative decoding
  shows it) or ``restore`` (the predictor recorded by the deploy role in
  ``specpilot.io/previous-revision``, exactly), the manifest to server-side apply, the revision
  record to write with it (the deploy role's format: :mod:`deploy_state`), and what to wait for.
  Draft reclaim (``off``, opt-in): option A drops the draft's ``storageUris`` entry, option B
  (Modelcar, ``oci://``) names the image and the draft's ``/models/<subdir>`` for
  ``modelcar_reclaim`` and, given its result, repoints ``storageUri`` to the image without the
  draft layer in the same apply; option C (PVC) names the sub-directory to delete.

Pure standard library (plus the deploy module_utils it reuses).
"""

from __future__ import annotations

import copy
import hashlib
import json
import posixpath

from ansible_collections.specpilot.core.plugins.module_utils.staging import data_safety, modelcar_reclaim
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_rollout, deploy_state
from ansible_collections.specpilot.core.plugins.module_utils.operate import rollback_llm
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service import live as live_view
from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.service.live import predictor_args
from ansible_collections.specpilot.core.plugins.module_utils.service.vllm_profiles import V0_FLAGS
from ansible_collections.specpilot.core.plugins.module_utils.service.spec_flags import (
    speculative_args,
    strip_speculative,
)

__all__ = [
    "speculative_args",
    "strip_speculative",
    "manifest_from_live",
    "predictor_args",
    "draft_path",
    "target_path",
    "modelcar_reclaim_plan",
    "decide",
    "verify",
    "reclaim_summary",
    "decision_summary",
]

GMU_FLAG = "--gpu-memory-utilization"
MOUNT_ROOT = "/mnt/models"
# The PVC reclaim Job (roles/specpilot_rollback/tasks/reclaim.yml): the claim at RECLAIM_MOUNT, the
# draft's sub-path in $DRAFT_SUBPATH, the served sub-paths in $SPECPILOT_PROTECTED (one a line).
RECLAIM_MOUNT = "/data"


def reclaim_script(mount):
    """The reclaim Job's sh script: data_safety's guard after resolving symlinks, then ``rm -rf`` of
    the draft only, and one ``SPECPILOT-RESULT`` JSON line."""
    return (
        "set -eu; "
        + data_safety.shell_guard("DRAFT_SUBPATH", mount, "SPECPILOT_PROTECTED")
        + 'if [ -e "$SPECPILOT_REAL" ]; then rm -rf -- "$SPECPILOT_REAL"; r=deleted; else r=absent; fi; '
        + 'echo "SPECPILOT-RESULT {\\"path\\": \\"$DRAFT_SUBPATH\\", \\"result\\": \\"$r\\"}"'
    )


RECLAIM_SCRIPT = reclaim_script(RECLAIM_MOUNT)
# KServe's containers that run the Modelcar image (sidecar; init container since 0.14)
MODELCAR_CONTAINERS = ("modelcar", "modelcar-init")
ANN_ROLLBACK = "specpilot.io/rollback"
_SYSTEM_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def _gmu(args):
    for arg in args or []:
        if isinstance(arg, str) and arg.startswith(GMU_FLAG + "="):
            return arg.split("=", 1)[1]
    return None


def _set_gmu(args, value):
    out = [a for a in args if not (isinstance(a, str) and a.startswith(GMU_FLAG + "="))]
    if value is None:
        return out
    index = next((i for i, a in enumerate(args) if isinstance(a, str) and a.startswith(GMU_FLAG + "=")), None)
    if index is None:
        # after the model (vllm serve's positional argument, or --model=X)
        index = (
            1 if out and (str(out[0]).startswith("--model") or not str(out[0]).startswith("-")) else len(out)
        )
    out.insert(index, "%s=%s" % (GMU_FLAG, value))
    return out


def _model(predictor):
    return (predictor or {}).get("model") or {}


def _with_args(predictor, args):
    out = copy.deepcopy(predictor or {})
    if out.get("model") is not None:
        out["model"]["args"] = list(args)
    elif out.get("containers"):
        out["containers"][0]["args"] = list(args)
    return out


def draft_path(args):
    """The draft model path named in the speculative args (``model`` of the config or
    ``--speculative-model``), or None (n-gram, suffix, MTP)."""
    for arg in args or []:
        if not isinstance(arg, str):
            continue
        flag, _sep, value = arg.partition("=")
        if flag in ("--speculative-config", "--speculative_config"):
            try:
                cfg = json.loads(value)
            except ValueError:
                continue
            if isinstance(cfg, dict) and isinstance(cfg.get("model"), str) and cfg["model"].startswith("/"):
                return cfg["model"]
        if flag == V0_FLAGS["model"] and value.startswith("/"):
            return value
    return None


def target_path(args):
    """The model path of the engine args (``vllm serve``'s positional argument, ``--model=X`` or
    ``--model X``: render.served_model), or None."""
    return _served_paths(args).get("model")


def _mount_subdir(path, root=MOUNT_ROOT):
    """``draft`` of ``/mnt/models/draft[/...]``: the /models/<subdir> of a Modelcar image; None
    when the path is not below the mount root."""
    if not path:
        return None
    norm = posixpath.normpath(path)
    root = root.rstrip("/")
    if not norm.startswith(root + "/"):
        return None
    return norm[len(root) + 1 :].split("/", 1)[0] or None


def _storage_field(predictor):
    """("model" | "predictor", storageUri) of a predictor, or (None, None)."""
    if _model(predictor).get("storageUri"):
        return "model", _model(predictor)["storageUri"]
    if (predictor or {}).get("storageUri"):
        return "predictor", predictor["storageUri"]
    return None, None


def _set_storage(predictor, field, uri):
    out = copy.deepcopy(predictor)
    if field == "model":
        out["model"]["storageUri"] = uri
    else:
        out["storageUri"] = uri
    return out


def modelcar_reclaim_plan(predictor, draft, target, spec_image=None):
    """Option B: what ``specpilot.core.modelcar_reclaim`` needs for the predictor's Modelcar
    (``oci://`` storageUri), or None when it has none."""
    field, uri = _storage_field(predictor)
    if not uri or not uri.startswith("oci://"):
        return None
    out = {
        "field": "spec.predictor.model.storageUri" if field == "model" else "spec.predictor.storageUri",
        "storage_uri": uri,
        "repository": None,
        "tag": None,
        "digest": None,
        "image": None,
        "draft_subdir": _mount_subdir(draft),
        "target_subdir": _mount_subdir(target),
        "new_storage_uri": None,
        "new_digest": None,
        "result": None,
        "error": None,
    }
    try:
        repo, tag, digest = modelcar_reclaim.parse_image(uri)
    except modelcar_reclaim.ReclaimError as exc:
        out["error"] = str(exc)
        return out
    if not tag and spec_image:
        try:
            s_repo, s_tag, _s_digest = modelcar_reclaim.parse_image(spec_image)
        except modelcar_reclaim.ReclaimError:
            s_repo, s_tag = None, None
        if s_repo == repo:
            tag = s_tag
    out.update(repository=repo, tag=tag, digest=digest)
    out["image"] = "%s%s%s" % (repo, (":" + tag) if tag else "", ("@" + digest) if digest else "")
    return out


_RESULT_KEYS = (
    "changed",
    "reclaimed",
    "pushed",
    "digest",
    "tag",
    "image",
    "storage_uri",
    "identified_by",
    "dropped_layer",
    "bytes_uploaded",
    "bytes_reclaimed",
    "registry_had_digest",
    "already_without_draft",
    "msg",
)


def _apply_modelcar_result(plan, result):
    """The module's result on the plan; the new storageUri when it reclaimed the draft from this image."""
    if not plan or not isinstance(result, dict) or not result:
        return None
    source = result.get("source") or {}
    if plan.get("digest") and source.get("digest") and source["digest"] != plan["digest"]:
        plan["error"] = "modelcar_reclaim ran on %s, not on the service's image %s" % (
            source["digest"],
            plan["digest"],
        )
        return None
    plan["result"] = {k: result.get(k) for k in _RESULT_KEYS if k in result}
    plan["digest"] = plan.get("digest") or source.get("digest")
    if result.get("reclaimed") and result.get("storage_uri"):
        plan["new_storage_uri"] = result["storage_uri"]
        plan["new_digest"] = result.get("digest")
        return result["storage_uri"]
    return None


def manifest_from_live(isvc):
    """The apply manifest of a live InferenceService: name, namespace, labels, annotations, spec."""
    md = isvc.get("metadata") or {}
    return {
        "apiVersion": isvc.get("apiVersion") or "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": md.get("name"),
            "namespace": md.get("namespace"),
            "labels": dict(md.get("labels") or {}),
            "annotations": {
                k: v for k, v in (md.get("annotations") or {}).items() if k not in _SYSTEM_ANNOTATIONS
            },
        },
        "spec": copy.deepcopy(isvc.get("spec") or {}),
    }


def _digest(data):
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _baseline_gmu(revisions):
    """--gpu-memory-utilization of the newest recorded revision that ran without speculative decoding:
    (found, value) - value None when that revision did not set it."""
    for rev in reversed(revisions):
        args = predictor_args(rev.get("predictor"))
        if args and not speculative_args(args):
            return True, _gmu(args)
    return False, None


def _storage_drop(predictor, path):
    """Option A: the predictor without the storageUris entry that mounts the draft at ``path``."""
    uris = list(predictor.get("storageUris") or [])
    if not path or not uris:
        return predictor, None
    keep, dropped = [], None
    for entry in uris:
        mount = (entry or {}).get("mountPath") or ""
        if dropped is None and mount and (path == mount or path.startswith(mount.rstrip("/") + "/")):
            dropped = entry
            continue
        keep.append(entry)
    if dropped is None or not keep:
        return predictor, None
    out = copy.deepcopy(predictor)
    out["storageUris"] = keep
    return out, dropped


def _served_paths(args):
    """``{what: path}`` of the model files an engine's args serve: the ``model`` (render.served_model)
    and the first ``--tokenizer`` (``--tokenizer=X`` or ``--tokenizer X``)."""
    out = {}
    model = render.served_model(args)
    if model:
        out["model"] = model
    items = list(args or [])
    for i, arg in enumerate(items):
        if not isinstance(arg, str):
            continue
        if arg.startswith("--tokenizer="):
            out.setdefault("--tokenizer", arg.split("=", 1)[1])
        elif arg == "--tokenizer" and i + 1 < len(items):
            out.setdefault("--tokenizer", str(items[i + 1]))
    return out


def _claim_subpath(base, path, root=MOUNT_ROOT):
    """The sub-path on the claim of ``path`` as the pod sees it (the claim's ``base`` mounted at
    ``root``), or None when the path is not on the mount ("" is the claim's root)."""
    rel = data_safety.relative(path, root)
    if rel is None:
        return None
    return data_safety.relative(posixpath.join(base, rel) if rel else base or "", "/")


def _pvc_uri(predictor):
    """(claim, base) of a predictor's ``storageUri: pvc://claim/base``, or (None, None)."""
    uri = _model(predictor).get("storageUri") or predictor.get("storageUri") or ""
    if not isinstance(uri, str) or not uri.startswith("pvc://"):
        return None, None
    claim, _sep, base = uri[len("pvc://") :].partition("/")
    return claim or None, base


def pvc_served(isvc, mount_root=MOUNT_ROOT):
    """(claim, ``{what: sub-path on the claim}``) of what a live InferenceService serves from its PVC:
    its engine's ``--model``, ``--tokenizer`` and draft, or the whole ``storageUri`` directory when
    the args name none on the mount; (None, {}) when it serves no PVC."""
    predictor = ((isvc or {}).get("spec") or {}).get("predictor") or {}
    claim, base = _pvc_uri(predictor)
    if not claim:
        return None, {}
    args = predictor_args(predictor)
    paths = dict(_served_paths(args), draft=draft_path(args))
    served = {
        "the live engine's %s %s" % (what, path): _claim_subpath(base, path, mount_root)
        for what, path in paths.items()
        if path
    }
    served = {what: sub for what, sub in served.items() if sub is not None}
    return claim, served or {
        "the live storageUri pvc://%s/%s" % (claim, base): data_safety.relative(base, "/")
    }


def _pvc_target(predictor, path, served, mount_root=MOUNT_ROOT):
    """Option C: ``{claim, subpath, protected, mount, script}`` of the draft directory on the PVC,
    with ``refused`` when deleting it would lose what the service serves (``served``: ``{what:
    path}`` of the live and the planned engine; data_safety.delete_refusal), or None when the draft
    is not on the service's PVC."""
    claim, base = _pvc_uri(predictor)
    if not claim or not path:
        return None
    sub = _claim_subpath(base, path, mount_root)
    if not claim or sub is None:
        return None
    protected = {}
    for what, kept in served.items():
        kept_sub = _claim_subpath(base, kept, mount_root)
        if kept_sub is not None:
            protected["%s %s" % (what, kept)] = kept_sub
    out = {
        "claim": claim,
        "subpath": sub,
        "protected": sorted(set(protected.values())),
        "mount": RECLAIM_MOUNT,
        "script": RECLAIM_SCRIPT,
    }
    why = data_safety.delete_refusal(sub, protected) if sub else "is the whole volume"
    if why:
        out["refused"] = (
            "refusing to delete the draft %s (claim %s, sub-path %r): it %s. Nothing was deleted; "
            "remove the files by hand once nothing serves them." % (path, claim, sub, why)
        )
    return out


def _off_args(out, before_args, revisions, record, opts):
    """The args without speculative decoding, with gpu_memory_utilization as asked (``auto``: the
    value of the recorded revision that ran without it); ``out["gmu"]`` says what happened."""
    new_args = strip_speculative(before_args)
    gmu_before = _gmu(before_args)
    gmu_note = None
    if out["speculative_before"]:
        wanted = opts["gpu_memory_utilization"]
        if wanted not in ("auto", "keep", ""):
            new_args = _set_gmu(new_args, str(wanted))
            gmu_note = "set to %s" % wanted
        elif wanted == "auto":
            found, value = _baseline_gmu(revisions + ([record] if record else []))
            if found and value != gmu_before:
                new_args = _set_gmu(new_args, value)
                gmu_note = "restored to %s (recorded revision without speculative decoding)" % (
                    value if value is not None else "the vLLM default"
                )
    out["gmu"] = {"before": gmu_before, "after": _gmu(new_args), "note": gmu_note}
    return new_args


def _reclaim_draft(predictor, new_predictor, before_args, revisions, record, opts):
    """With reclaim_draft: the draft's storageUri entry dropped and the Modelcar image repointed.
    Returns (new predictor, the reclaim plan or None)."""
    reclaim = None
    if opts["reclaim_draft"]:
        path = draft_path(before_args)
        for rev in reversed(revisions + ([record] if record else [])):
            path = path or draft_path(predictor_args(rev.get("predictor")))
        new_predictor, dropped = _storage_drop(new_predictor, path)
        served = {
            "%s %s" % (which, flag): p
            for which, args in (
                ("the live engine's", before_args),
                ("the new engine's", predictor_args(new_predictor)),
            )
            for flag, p in _served_paths(args).items()
        }
        plan = modelcar_reclaim_plan(predictor, path, target_path(before_args), opts.get("modelcar_image"))
        new_uri = _apply_modelcar_result(plan, opts.get("modelcar_reclaimed"))
        if new_uri and new_uri != _storage_field(new_predictor)[1]:
            new_predictor = _set_storage(new_predictor, _storage_field(new_predictor)[0], new_uri)
        reclaim = {
            "draft_path": path,
            "storage_uri_dropped": dropped,
            "pvc": _pvc_target(predictor, path, served),
            "modelcar": plan,
        }
    return new_predictor, reclaim


def _restore_branch(out, manifest, isvc, predictor, record, record_raw, live_status, now):
    """mode=restore: the recorded predictor, labels and annotations (the record stays, so a second
    restore changes nothing).  Returns (new predictor, changed, digest, history entry), or None when
    nothing was recorded (``out`` then holds the error)."""
    md = isvc.get("metadata") or {}
    annotations = md.get("annotations") or {}
    if not record or not isinstance(record.get("predictor"), dict):
        out.update(
            needs_apply=False,
            error="no revision recorded on %s/%s (annotation %s): nothing to restore"
            % (md.get("namespace"), md.get("name"), deploy_state.ANN_PREVIOUS),
        )
        return None
    new_predictor = copy.deepcopy(record["predictor"])
    manifest["metadata"]["labels"] = dict(record.get("labels") or {})
    manifest["metadata"]["annotations"] = dict(record.get("annotations") or {})
    # the record stays: a second restore finds the predictor restored and does nothing
    manifest["metadata"]["annotations"][deploy_state.ANN_PREVIOUS] = record_raw
    manifest["spec"]["predictor"] = new_predictor
    digest = record.get("digest") or _digest(new_predictor)
    changed = new_predictor != predictor or any(
        annotations.get(k) != v for k, v in manifest["metadata"]["annotations"].items()
    )
    entry = deploy_state.revision_snapshot(isvc, None, bool(live_status["done"]), now) if changed else None
    if record.get("runtime"):
        out["runtime"] = deploy_state.runtime_manifest(record["runtime"])
    out["gmu"] = None
    return new_predictor, changed, digest, entry


def _off_branch(out, manifest, isvc, predictor, before_args, record, revisions, live_status, opts, now):
    """mode=off: the predictor without the speculative args (and the draft, with reclaim_draft), a new
    revision record.  Returns (new predictor, changed, digest, history entry)."""
    annotations = (isvc.get("metadata") or {}).get("annotations") or {}
    new_args = _off_args(out, before_args, revisions, record, opts)
    new_predictor = _with_args(predictor, new_args)
    new_predictor, reclaim = _reclaim_draft(predictor, new_predictor, before_args, revisions, record, opts)
    out["reclaim"] = reclaim
    manifest["spec"]["predictor"] = new_predictor
    changed = new_predictor != predictor
    digest = (
        annotations.get(deploy_state.ANN_DIGEST)
        if not changed
        else _digest({"rollback": "off", "predictor": new_predictor})
    )
    entry = None
    if changed:
        rec = deploy_state.record_for(digest, isvc, None, bool(live_status["done"]), now)
        if rec["annotation"]:
            manifest["metadata"]["annotations"][deploy_state.ANN_PREVIOUS] = rec["annotation"]
        entry = rec["entry"]
        manifest["metadata"]["annotations"][deploy_state.ANN_DIGEST] = digest
        manifest["metadata"]["annotations"][ANN_ROLLBACK] = "off"
    return new_predictor, changed, digest, entry


def _wait_plan(isvc, plan, args, digest):
    """What rollout_wait waits for: the validated plan's wait (its startup timeout, its normalised
    mode) with the rollback's args; without a plan of this object (a service deployed by hand, or
    specpilot_rollback_name naming another) the live object's mode and the default startup budget."""
    typed = service_plan.from_dict(plan)
    view = live_view.view(isvc)
    if typed is None or (typed.name, typed.namespace) != (view.name, view.namespace):
        typed = service_plan.WaitPlan(
            name=view.name,
            namespace=view.namespace,
            spec_digest=digest,
            args=(),
            deployment_mode=view.deployment_mode,
            startup_timeout_seconds=service_plan.DEFAULT_STARTUP_TIMEOUT,
        )
    else:
        typed = typed.wait
    return typed.for_args(args, digest).as_dict()


def decide(live, mode="off", now=None, options=None):
    """Everything the rollback role needs before it writes anything.

    ``live``: what ``specpilot.core.deploy_state`` read.  ``options``: ``gpu_memory_utilization``
    (``auto``: from the history, ``keep``, or a value), ``reclaim_draft`` (bool), ``history_limit``,
    ``modelcar_image`` (the spec's ``registry/repo:tag``: names the default tag of the image without
    the draft when the storageUri has a digest only), ``modelcar_reclaimed`` (the result of
    ``specpilot.core.modelcar_reclaim`` on the service's image: its ``storage_uri`` replaces the
    storageUri in the same apply), ``expect_digest`` (decide only while the live spec digest is this
    one: ``error`` otherwise, and nothing to write), ``plan`` (the validated plan of the service:
    its wait plan, with the spec's startup timeout, is what the rollout is waited for with).
    """
    opts = {
        "gpu_memory_utilization": "auto",
        "reclaim_draft": False,
        "history_limit": deploy_state.HISTORY_LIMIT,
    }
    opts.update({k: v for k, v in (options or {}).items() if v is not None})
    isvc = (live or {}).get("inferenceservice")
    if not isvc:
        return {
            "present": False,
            "needs_apply": False,
            "mode": mode,
            "error": None,
            "message": "InferenceService not found",
        }
    if rollback_llm.is_llm(isvc):  # an LLMInferenceService: its decode workload's args, its recorded spec
        return rollback_llm.decide(live, mode, now, opts)
    md = isvc.get("metadata") or {}
    annotations = md.get("annotations") or {}
    deployment, pods = live.get("deployment"), live.get("pods") or []
    live_status = deploy_rollout.rollout_status(
        deploy_rollout.expected_from_isvc(isvc), isvc, deployment, pods, now=now
    )
    predictor = (isvc.get("spec") or {}).get("predictor") or {}
    before_args = predictor_args(predictor)
    record_raw = annotations.get(deploy_state.ANN_PREVIOUS)
    try:
        record = json.loads(record_raw) if record_raw else None
    except ValueError:
        record = None
    revisions = deploy_state.history_revisions(live.get("history"))
    out = {
        "present": True,
        "mode": mode,
        "error": None,
        "name": md.get("name"),
        "namespace": md.get("namespace"),
        "live_digest": annotations.get(deploy_state.ANN_DIGEST),
        "live_ready": bool(live_status["done"]),
        "live_rollout": live_status["message"],
        "before_args": before_args,
        "speculative_before": speculative_args(before_args),
        "record_digest": (record or {}).get("digest"),
        "reclaim": None,
        "runtime": None,
        "history": None,
    }
    expected = opts.get("expect_digest")
    if expected and out["live_digest"] != expected:
        out.update(
            needs_apply=False,
            error="the live InferenceService changed since it was judged (spec digest %s, judged %s): "
            "nothing was written; the next run judges the config that runs now"
            % ((out["live_digest"] or "none")[:12], expected[:12]),
        )
        return out
    manifest = manifest_from_live(isvc)
    if mode == "restore":
        branch = _restore_branch(out, manifest, isvc, predictor, record, record_raw, live_status, now)
        if branch is None:
            return out
    else:
        branch = _off_branch(
            out, manifest, isvc, predictor, before_args, record, revisions, live_status, opts, now
        )
    new_predictor, changed, digest, entry = branch
    after_args = predictor_args(new_predictor)
    if entry is not None:
        data = deploy_state.history_data(live.get("history"), entry, digest, opts["history_limit"])
        if data:
            out["history"] = {"name": deploy_state.history_name(md.get("name")), "data": data}
    out.update(
        needs_apply=bool(changed),
        manifest=manifest,
        predictor=new_predictor,
        after_args=after_args,
        speculative_after=speculative_args(after_args),
        removed_args=[a for a in before_args if a not in after_args],
        added_args=[a for a in after_args if a not in before_args],
        digest=digest,
        # what rollout_wait needs (the same wait as deploy)
        wait_plan=_wait_plan(isvc, opts.get("plan"), after_args, digest or _digest(new_predictor)),
        baseline={
            "latest_created_revision": (
                ((isvc.get("status") or {}).get("components") or {}).get("predictor") or {}
            ).get("latestCreatedRevision"),
            "deployment_generation": ((deployment or {}).get("metadata") or {}).get("generation"),
            "rollout_expected": bool(changed),
        },
        ready=bool(live_status["done"]) and not changed,
    )
    return out


def verify(live, decision):
    """After the rollout: stored spec, Deployment template and pods carry no speculative flags, and
    the stored predictor is the decided one.  ``{ok, problems, checks}``."""
    isvc = (live or {}).get("inferenceservice") or {}
    if rollback_llm.is_llm(isvc):
        return rollback_llm.verify(live, decision)
    predictor = (isvc.get("spec") or {}).get("predictor") or {}
    problems, checks = [], {}
    want_off = decision.get("mode") == "off"
    stored = predictor_args(predictor)
    checks["stored_predictor_exact"] = predictor == decision.get("predictor")
    if not checks["stored_predictor_exact"]:
        problems.append("the stored predictor differs from the one applied")
    modelcar = (decision.get("reclaim") or {}).get("modelcar") or {}
    if modelcar.get("new_storage_uri"):
        field, uri = _storage_field(predictor)
        checks["storage_uri_repointed"] = uri == modelcar["new_storage_uri"]
        if not checks["storage_uri_repointed"]:
            problems.append("the stored storageUri is %s, not %s" % (uri, modelcar["new_storage_uri"]))
        image = modelcar["new_storage_uri"][len("oci://") :]
        spec = ((((live.get("deployment") or {}).get("spec") or {}).get("template") or {}).get("spec")) or {}
        runners = [
            c
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
            if c.get("name") in MODELCAR_CONTAINERS
        ]
        if runners:
            checks["modelcar_image_repointed"] = all(c.get("image") == image for c in runners)
            if not checks["modelcar_image_repointed"]:
                problems.append(
                    "the Deployment's modelcar container runs %s, not %s"
                    % (", ".join(sorted({str(c.get("image")) for c in runners})), image)
                )
    if want_off:
        checks["stored_args_off"] = not speculative_args(stored)
        if not checks["stored_args_off"]:
            problems.append("the stored InferenceService still has %s" % speculative_args(stored))
        container = deploy_rollout.template_container(live.get("deployment"))
        if container is not None:
            checks["template_args_off"] = not speculative_args(container.get("args"))
            if not checks["template_args_off"]:
                problems.append(
                    "the Deployment pod template still has %s" % speculative_args(container.get("args"))
                )
        pod_flags = []
        for pod in live.get("pods") or []:
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            for c in (pod.get("spec") or {}).get("containers") or []:
                if c.get("name") == deploy_rollout.CONTAINER:
                    pod_flags.extend(speculative_args(c.get("args")))
        checks["pod_args_off"] = not pod_flags
        if pod_flags:
            problems.append("a predictor pod still runs with %s" % pod_flags)
    return {"ok": not problems, "problems": problems, "checks": checks}


def _modelcar_summary(mc):
    result = mc.get("result") or {}
    if not mc.get("new_digest"):
        return "Modelcar image: %s" % (result.get("msg") or "no draft layer to drop")
    layer = (result.get("dropped_layer") or {}).get("digest", "?")
    return (
        "Modelcar image %s -> %s (%s, draft layer %s no longer referenced; the old image stays in the registry)"
        % (
            mc.get("digest") or "?",
            mc["new_digest"],
            result.get("image") or "",
            layer,
        )
    )


def _pvc_summary(pvc, delete):
    if "refused" in pvc:
        return pvc["refused"]
    fate = (
        " will be deleted"
        if delete
        else " left untouched (set specpilot_rollback_confirm_reclaim: true to delete it)"
    )
    return "PVC %s sub-directory %s%s" % (pvc.get("claim"), pvc.get("subpath"), fate)


def reclaim_summary(reclaim, delete):
    """One line on the draft reclaim of an ``off`` rollback (the decision's ``reclaim``, with the
    Modelcar result applied): the draft, then the storageUris entry dropped (option A), the Modelcar
    image without the draft layer (B), or the PVC sub-directory (C; ``delete``: the Job runs)."""
    reclaim = reclaim or {}
    head = "draft %s; " % (reclaim.get("draft_path") or "(none found)")
    if reclaim.get("storage_uri_dropped"):
        return head + "storageUris entry %s dropped" % reclaim["storage_uri_dropped"].get("uri", "?")
    if reclaim.get("pvc"):
        return head + _pvc_summary(reclaim["pvc"], delete)
    if reclaim.get("modelcar"):
        return head + _modelcar_summary(reclaim["modelcar"])
    return head + "nothing to reclaim"


def decision_summary(decision, mode):
    """One line on what a rollback decision writes: the arguments it removes and adds and the
    storageUri it repoints to (option B), or why there is nothing to change."""
    if not decision.get("needs_apply"):
        why = "already off" if mode == "off" else "the recorded revision runs"
        return "nothing to change (%s)" % why
    text = "removes " + " ".join(decision.get("removed_args") or [])
    if decision.get("added_args"):
        text += " adds " + " ".join(decision["added_args"])
    new_uri = ((decision.get("reclaim") or {}).get("modelcar") or {}).get("new_storage_uri")
    if new_uri:
        text += " repoints storageUri to " + new_uri
    return text
