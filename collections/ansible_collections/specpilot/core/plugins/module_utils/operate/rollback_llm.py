# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Rollback of an LLMInferenceService (issue 35): what ``rollback.decide`` and ``rollback.verify`` answer for
one, with the same keys as for an InferenceService.

* ``off``: the decode workload's ``main`` container without the speculative flags (read through the live view,
  ``service/live.py`` ``LLMInferenceServiceView``: the args as the template's eval hands them to vLLM, written
  back quoted, ``service/llmisvc.py`` ``container_args``); the live revision becomes the record (deploy's
  ``record_for``), as for an InferenceService.  The draft's volume stays (it costs nothing running).
* ``restore``: the recorded revision's whole spec (deploy's ``revision_snapshot`` of an LLMInferenceService),
  labels and annotations; the record stays, so a second restore changes nothing.

The prefill workload never has speculative decoding (``llmisvc.place_speculative``): it is left as it is.  Pure
standard library.
"""

from __future__ import annotations

import copy
import hashlib
import json

from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_rollout, deploy_state
from ansible_collections.specpilot.core.plugins.module_utils.service import live as live_view
from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service.spec_flags import (
    speculative_args,
    strip_speculative,
)

__all__ = ["is_llm", "decide", "verify"]

ANN_ROLLBACK = "specpilot.io/rollback"
_SYSTEM_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def is_llm(obj):
    return isinstance(obj, dict) and obj.get("kind") == llmisvc.KIND


def _digest(data):
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _manifest(obj):
    md = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": llmisvc.KIND,
        "metadata": {
            "name": md.get("name"),
            "namespace": md.get("namespace"),
            "labels": dict(md.get("labels") or {}),
            "annotations": {k: v for k, v in (md.get("annotations") or {}).items() if k not in _SYSTEM_ANNOTATIONS},
        },
        "spec": copy.deepcopy(obj.get("spec") or {}),
    }


def _with_decode_args(spec, words):
    out = copy.deepcopy(spec)
    for container in (out.get("template") or {}).get("containers") or []:
        if container.get("name") == llmisvc.CONTAINER:
            container["args"] = llmisvc.container_args(words)
    return out


def _off(manifest, obj, before, live_done, now):
    spec = obj.get("spec") or {}
    new_spec = _with_decode_args(spec, strip_speculative(before))
    changed = new_spec != spec
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    digest = annotations.get(deploy_state.ANN_DIGEST) if not changed else _digest({"rollback": "off", "spec": new_spec})
    entry = None
    if changed:
        rec = deploy_state.record_for(digest, obj, None, live_done, now)
        if rec["annotation"]:
            manifest["metadata"]["annotations"][deploy_state.ANN_PREVIOUS] = rec["annotation"]
        entry = rec["entry"]
        manifest["metadata"]["annotations"][deploy_state.ANN_DIGEST] = digest
        manifest["metadata"]["annotations"][ANN_ROLLBACK] = "off"
    manifest["spec"] = new_spec
    return new_spec, changed, digest, entry


def _restore(out, manifest, obj, record, record_raw, live_done, now):
    md = obj.get("metadata") or {}
    if not record or record.get("kind") != llmisvc.KIND or not isinstance(record.get("spec"), dict):
        out.update(
            needs_apply=False,
            error="no revision of this LLMInferenceService recorded on %s/%s (annotation %s): nothing to restore"
            % (md.get("namespace"), md.get("name"), deploy_state.ANN_PREVIOUS),
        )
        return None
    new_spec = copy.deepcopy(record["spec"])
    manifest["metadata"]["labels"] = dict(record.get("labels") or {})
    manifest["metadata"]["annotations"] = dict(record.get("annotations") or {})
    manifest["metadata"]["annotations"][deploy_state.ANN_PREVIOUS] = record_raw
    manifest["spec"] = new_spec
    annotations = md.get("annotations") or {}
    changed = new_spec != (obj.get("spec") or {}) or any(
        annotations.get(k) != v for k, v in manifest["metadata"]["annotations"].items()
    )
    entry = deploy_state.revision_snapshot(obj, None, live_done, now) if changed else None
    return new_spec, changed, record.get("digest") or _digest(new_spec), entry


def _wait_plan(view, plan, args, digest):
    typed = service_plan.from_dict(plan)
    if typed is None or (typed.name, typed.namespace) != (view.name, view.namespace):
        wait = service_plan.WaitPlan(
            name=view.name,
            namespace=view.namespace,
            spec_digest=digest,
            args=(),
            deployment_mode="Standard",
            startup_timeout_seconds=service_plan.DEFAULT_STARTUP_TIMEOUT,
            kind=llmisvc.KIND,
            api_version=view.obj.get("apiVersion") or "",
        )
    else:
        wait = typed.wait
    return wait.for_args(args, digest).as_dict()


def _record(annotations):
    raw = annotations.get(deploy_state.ANN_PREVIOUS)
    try:
        return (json.loads(raw) if raw else None), raw
    except ValueError:
        return None, raw


def decide(live, mode, now, opts):
    """``rollback.decide`` for a live LLMInferenceService (``live["inferenceservice"]``)."""
    obj = live["inferenceservice"]
    view = live_view.view(obj)
    status = deploy_rollout.rollout_status(
        deploy_rollout.expected_from_isvc(obj), obj, live.get("deployment"), live.get("pods") or [], now=now
    )
    before = view.args
    record, record_raw = _record(view.annotations)
    out = {
        "present": True,
        "kind": llmisvc.KIND,
        "mode": mode,
        "error": None,
        "name": view.name,
        "namespace": view.namespace,
        "live_digest": view.spec_digest,
        "live_ready": bool(status["done"]),
        "live_rollout": status["message"],
        "before_args": before,
        "speculative_before": speculative_args(before),
        "record_digest": (record or {}).get("digest"),
        "reclaim": None,
        "runtime": None,
        "history": None,
        "gmu": None,
    }
    expected = opts.get("expect_digest")
    if expected and out["live_digest"] != expected:
        out.update(
            needs_apply=False,
            error="the live LLMInferenceService changed since it was judged (spec digest %s, judged %s): nothing was "
            "written; the next run judges the config that runs now" % ((out["live_digest"] or "none")[:12], expected[:12]),
        )
        return out
    manifest = _manifest(obj)
    if mode == "restore":
        branch = _restore(out, manifest, obj, record, record_raw, bool(status["done"]), now)
        if branch is None:
            return out
    else:
        branch = _off(manifest, obj, before, bool(status["done"]), now)
    new_spec, changed, digest, entry = branch
    after = live_view.view(dict(obj, spec=new_spec)).args
    if entry is not None:
        data = deploy_state.history_data(live.get("history"), entry, digest, opts["history_limit"])
        if data:
            out["history"] = {"name": deploy_state.history_name(view.name), "data": data}
    deployment = live.get("deployment") or {}
    out.update(
        needs_apply=bool(changed),
        manifest=manifest,
        predictor=new_spec,  # the LLMInferenceService's spec holds its workloads
        after_args=after,
        speculative_after=speculative_args(after),
        removed_args=[a for a in before if a not in after],
        added_args=[a for a in after if a not in before],
        digest=digest,
        wait_plan=_wait_plan(view, opts.get("plan"), after, digest),
        baseline={
            "latest_created_revision": None,
            "deployment_generation": (deployment.get("metadata") or {}).get("generation"),
            "rollout_expected": bool(changed),
        },
        ready=bool(status["done"]) and not changed,
    )
    return out


def verify(live, decision):
    """``rollback.verify`` for an LLMInferenceService: the stored spec is the decided one; with ``off``, no
    speculative flag in the stored decode args, the decode Deployment's template or its running pods."""
    obj = (live or {}).get("inferenceservice") or {}
    problems, checks = [], {}
    checks["stored_predictor_exact"] = (obj.get("spec") or {}) == decision.get("predictor")
    if not checks["stored_predictor_exact"]:
        problems.append("the stored spec differs from the one applied")
    if decision.get("mode") == "off":
        stored = live_view.view(obj).args if obj else []
        checks["stored_args_off"] = not speculative_args(stored)
        if not checks["stored_args_off"]:
            problems.append("the stored LLMInferenceService still has %s" % speculative_args(stored))
        container = deploy_rollout.template_container(live.get("deployment"), llmisvc.CONTAINER)
        if container is not None:
            flags = speculative_args(llmisvc.engine_words(container.get("args")))
            checks["template_args_off"] = not flags
            if flags:
                problems.append("the decode Deployment's pod template still has %s" % flags)
        pod_flags = []
        for pod in live.get("pods") or []:
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            for c in (pod.get("spec") or {}).get("containers") or []:
                if c.get("name") == llmisvc.CONTAINER:
                    pod_flags.extend(speculative_args(llmisvc.engine_words(c.get("args"))))
        checks["pod_args_off"] = not pod_flags
        if pod_flags:
            problems.append("a decode pod still runs with %s" % pod_flags)
    return {"ok": not problems, "problems": problems, "checks": checks}
