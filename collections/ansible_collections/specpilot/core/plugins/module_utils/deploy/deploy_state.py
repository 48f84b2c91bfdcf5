# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""What deploy decides from the validated plan and the live objects.

* :func:`sync_status`: is a live object already what server-side apply would make of the
  desired one?  (every desired field equal, lists equal element by element, and the object
  applied by specpilot's field manager before);
* :func:`revision_snapshot`, :func:`record_for`: the revision record written with the change
  (annotation ``specpilot.io/previous-revision`` on the InferenceService, in the same apply);
* :func:`history_data`: the bounded revision history (ConfigMap ``<name>-specpilot-history``);
* :func:`lease_status`, :func:`lease_spec`: the per-service lock (a coordination.k8s.io Lease
  with a holder and an expiry), from module_utils/k8s/service_lock.py;
* :func:`decide`: all of it for one service, as the role uses it.

Pure standard library.  Times are epoch seconds (``now``) so that tests can pin them.
"""

from __future__ import annotations

import copy
import json

from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_rollout
from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.common import (
    k8s_meta,
    key_paths,
    micro_time,
    parse_time,
)

# the lock's Lease helpers live with the lock; re-exported here, where the deploy decision uses them
from ansible_collections.specpilot.core.plugins.module_utils.k8s.service_lock import (  # noqa: F401
    held_message,
    lease_name,
    lease_spec,
    lease_status,
)

__all__ = [
    "ANN_DIGEST",
    "ANN_PREVIOUS",
    "ANN_LOCK_HOLDER",
    "HISTORY_KEY",
    "HISTORY_LIMIT",
    "RECORD_VERSION",
    "managed_by",
    "subset_diff",
    "sync_status",
    "revision_snapshot",
    "runtime_manifest",
    "record_for",
    "history_name",
    "history_data",
    "history_revisions",
    "lease_name",
    "lease_status",
    "lease_spec",
    "micro_time",
    "parse_time",
    "desired_objects",
    "decide",
    "problem",
]

ANN_DIGEST = "specpilot.io/spec-digest"
ANN_PREVIOUS = "specpilot.io/previous-revision"
ANN_LOCK_HOLDER = "specpilot.io/deploy-holder"
HISTORY_KEY = "revisions.json"
HISTORY_LIMIT = 10
RECORD_VERSION = 1
_SKIP_ANNOTATIONS = (ANN_PREVIOUS, "kubectl.kubernetes.io/last-applied-configuration")


def _compact(data):
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _annotations(obj):
    return k8s_meta(obj).get("annotations") or {}


# ---------------------------------------------------------------- sync
def managed_by(obj, field_manager):
    """True when ``field_manager`` applied the object (server-side apply) at some point."""
    for entry in k8s_meta(obj).get("managedFields") or []:
        if entry.get("manager") == field_manager and entry.get("operation") == "Apply":
            return True
    return False


def subset_diff(desired, live, path=""):
    """Paths where ``live`` does not hold what ``desired`` says.  Dicts: every desired key must be
    there with a matching value (extra live keys are fine: defaults, other managers); lists:
    same length, items matched in order the same way; anything else: equal."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return [path or "."]
        return key_paths(desired, live, path, subset_diff)
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return [path or "."]
        out = []
        for index, want in enumerate(desired):
            out.extend(subset_diff(want, live[index], "%s[%d]" % (path, index)))
        return out
    if isinstance(desired, bool) or isinstance(live, bool):
        return [] if desired is live else [path or "."]
    return [] if desired == live else [path or "."]


def sync_status(desired, live, field_manager):
    """``{in_sync, reasons}`` for one object: whether applying ``desired`` would change nothing."""
    if desired is None:
        return {"in_sync": True, "reasons": []}
    if live is None:
        return {"in_sync": False, "reasons": ["absent"]}
    reasons = []
    for key, value in desired.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata":
            for sub in ("labels", "annotations"):
                reasons.extend(
                    subset_diff(value.get(sub) or {}, k8s_meta(live).get(sub) or {}, "metadata." + sub)
                )
            continue
        reasons.extend(subset_diff(value, live.get(key), key))
    if not managed_by(live, field_manager):
        reasons.append("not applied by field manager %s" % field_manager)
    return {"in_sync": not reasons, "reasons": reasons}


# ---------------------------------------------------------------- revision record
def _runtime_snapshot(runtime):
    if not runtime:
        return None
    md = k8s_meta(runtime)
    out = {
        "apiVersion": runtime.get("apiVersion"),
        "kind": runtime.get("kind"),
        "name": md.get("name"),
        "labels": md.get("labels") or {},
        "annotations": {k: v for k, v in (md.get("annotations") or {}).items() if k not in _SKIP_ANNOTATIONS},
        "spec": copy.deepcopy(runtime.get("spec") or {}),
    }
    if md.get("namespace"):
        out["namespace"] = md["namespace"]
    return out


def runtime_manifest(snapshot):
    """The manifest that re-applies a runtime snapshot (:func:`revision_snapshot`'s ``runtime``)."""
    metadata = {
        "name": snapshot["name"],
        "labels": dict(snapshot.get("labels") or {}),
        "annotations": dict(snapshot.get("annotations") or {}),
    }
    if snapshot.get("namespace"):
        metadata["namespace"] = snapshot["namespace"]
    return {
        "apiVersion": snapshot.get("apiVersion") or "serving.kserve.io/v1alpha1",
        "kind": snapshot["kind"],
        "metadata": metadata,
        "spec": copy.deepcopy(snapshot.get("spec") or {}),
    }


def revision_snapshot(isvc, runtime=None, ready=None, now=None):
    """The revision a live InferenceService (and the runtime specpilot manages for it) is at:
    ``{v, digest, recorded_at, ready, labels, annotations, predictor, runtime}``.  ``predictor``
    is the whole stored ``spec.predictor``; rollback re-applies it (and ``runtime``) as they were.
    An LLMInferenceService's record holds its whole ``spec`` instead (its workloads), and ``kind``.
    """
    md = k8s_meta(isvc)
    out = {
        "v": RECORD_VERSION,
        "digest": _annotations(isvc).get(ANN_DIGEST),
        "recorded_at": micro_time(now) if now is not None else None,
        "ready": ready,
        "labels": md.get("labels") or {},
        "annotations": {k: v for k, v in (md.get("annotations") or {}).items() if k not in _SKIP_ANNOTATIONS},
    }
    if (isvc or {}).get("kind") == llmisvc.KIND:
        out.update(kind=llmisvc.KIND, spec=copy.deepcopy(isvc.get("spec") or {}), runtime=None)
        return out
    out["predictor"] = copy.deepcopy(((isvc or {}).get("spec") or {}).get("predictor") or {})
    out["runtime"] = _runtime_snapshot(runtime)
    return out


def record_for(plan_digest, live_isvc, live_runtime=None, live_ready=None, now=None):
    """The revision record to write with this deploy.

    Returns ``{annotation, entry, reason, previous_digest}``: ``annotation`` the value of
    ``specpilot.io/previous-revision`` on the applied InferenceService (None: none), ``entry``
    the history entry to append (None: nothing new).

    * no live InferenceService: first deploy, nothing to record;
    * the live one already carries this plan's digest: keep its record as it is (a re-run must
      not rewrite it);
    * the live revision completed its rollout: it becomes the record;
    * the live revision never became ready (its deploy failed) and an older record exists:
      keep the older record (the last revision that worked), log the failed one in the history.
    """
    if not live_isvc:
        return {"annotation": None, "entry": None, "reason": "first deploy", "previous_digest": None}
    annotations = _annotations(live_isvc)
    live_digest = annotations.get(ANN_DIGEST)
    existing = annotations.get(ANN_PREVIOUS)
    if live_digest and live_digest == plan_digest:
        return {
            "annotation": existing,
            "entry": None,
            "reason": "unchanged: the service already runs this plan",
            "previous_digest": _record_digest(existing),
        }
    snapshot = revision_snapshot(live_isvc, live_runtime, bool(live_ready), now)
    if not live_ready and existing:
        return {
            "annotation": existing,
            "entry": snapshot,
            "reason": "the live revision %s never became ready: the record keeps the last one that did (%s)"
            % (live_digest or "(unmanaged)", _record_digest(existing) or "?"),
            "previous_digest": _record_digest(existing),
        }
    return {
        "annotation": _compact(snapshot),
        "entry": snapshot,
        "reason": "recorded the live revision %s" % (live_digest or "(not deployed by specpilot)"),
        "previous_digest": live_digest,
    }


def _record_digest(annotation):
    try:
        return (json.loads(annotation) or {}).get("digest") if annotation else None
    except ValueError:
        return None


def history_name(name):
    return "%s-specpilot-history" % name


def history_revisions(configmap):
    """The revisions stored in a history ConfigMap (oldest first), [] when none or unreadable."""
    raw = ((configmap or {}).get("data") or {}).get(HISTORY_KEY)
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def history_data(configmap, entry, new_digest, limit=HISTORY_LIMIT):
    """The ConfigMap ``data`` with ``entry`` appended (at most ``limit`` kept, oldest dropped),
    or None when there is nothing to write (no entry, or the newest stored entry is the same
    revision: a retried deploy must not log it twice)."""
    if entry is None:
        return None
    revisions = history_revisions(configmap)
    if revisions:
        last = revisions[-1]
        if last.get("digest") == entry.get("digest") and last.get("predictor") == entry.get("predictor"):
            return None
    item = dict(entry, replaced_by=new_digest)
    revisions.append(item)
    revisions = revisions[-max(1, int(limit)) :]
    return {HISTORY_KEY: _compact(revisions)}


# ---------------------------------------------------------------- the decision
def desired_objects(plan, record_annotation):
    """The ServingRuntime (or None) and the InferenceService as deploy applies them: the plan's
    manifests, with the revision record on the InferenceService (written in the same apply)."""
    isvc = copy.deepcopy(plan.get("serving") or plan["inferenceservice"])  # the plan's kind's object
    if record_annotation:
        isvc.setdefault("metadata", {}).setdefault("annotations", {})[ANN_PREVIOUS] = record_annotation
    runtime = copy.deepcopy(plan.get("servingruntime")) if plan.get("servingruntime") else None
    return runtime, isvc


def _live_rollout(live_isvc, deployment, pods, now):
    """Where the live InferenceService's own rollout stands (None without one)."""
    if not live_isvc:
        return None
    return deploy_rollout.rollout_status(
        deploy_rollout.expected_from_isvc(live_isvc), live_isvc, deployment, pods, now=now
    )


def _predictor_changed(isvc, live_isvc):
    """Whether the desired predictor differs from the live one (or there is none)."""
    if not live_isvc:
        return True
    if isvc.get("kind") == llmisvc.KIND:  # its workloads are its spec
        return subset_diff(isvc.get("spec"), live_isvc.get("spec")) != []
    return (
        subset_diff((isvc.get("spec") or {}).get("predictor"), (live_isvc.get("spec") or {}).get("predictor"))
        != []
    )


def _rollout_expected(in_sync, predictor_changed, runtime_sync, live_isvc, plan):
    """Whether the apply rolls the pods: a changed predictor or runtime, or a new spec digest."""
    return (not in_sync) and (
        predictor_changed
        or runtime_sync["in_sync"] is False
        or _annotations(live_isvc).get(ANN_DIGEST) != plan["spec_digest"]
    )


def _baseline(components, deployment):
    """What a rollout is measured against: the latest Knative revision, the Deployment's generation."""
    return {
        "latest_created_revision": components.get("latestCreatedRevision"),
        "deployment_generation": k8s_meta(deployment).get("generation") if deployment else None,
    }


def _result(plan, record, in_sync, plan_rollout, live_isvc):
    """The deploy's result as it stands before anything is written (what a check-mode run reports)."""
    return {
        "name": plan["name"],
        "namespace": plan["namespace"],
        "spec_digest": plan["spec_digest"],
        "previous_digest": record["previous_digest"],
        "applied": not in_sync,
        "in_sync_before": in_sync,
        "record": record["reason"],
        "rollout": {
            "done": bool(in_sync and plan_rollout["done"]),
            "elapsed": 0,
            "message": plan_rollout["message"],
        },
        "url": ((live_isvc or {}).get("status") or {}).get("url"),
        "failure": None,
    }


def decide(plan, live, field_manager="specpilot", now=None, history_limit=HISTORY_LIMIT):
    """Everything the deploy role needs to know before it writes anything.

    ``live`` is what ``specpilot.core.deploy_state`` read: ``{inferenceservice, servingruntime,
    deployment, pods, lease, history}`` (each None when absent).
    """
    live = live or {}
    live_isvc = live.get("inferenceservice")
    live_runtime = live.get("servingruntime") if (plan.get("runtime") or {}).get("create") else None
    deployment = live.get("deployment")
    pods = live.get("pods") or []
    live_rollout = _live_rollout(live_isvc, deployment, pods, now)
    plan_rollout = deploy_rollout.rollout_status(
        deploy_rollout.expected_from_plan(plan), live_isvc, deployment, pods, now=now
    )
    record = record_for(
        plan["spec_digest"], live_isvc, live_runtime, bool(live_rollout and live_rollout["done"]), now
    )
    runtime, isvc = desired_objects(plan, record["annotation"])
    runtime_sync = sync_status(runtime, live.get("servingruntime"), field_manager)
    isvc_sync = sync_status(isvc, live_isvc, field_manager)
    history = history_data(live.get("history"), record["entry"], plan["spec_digest"], history_limit)
    in_sync = runtime_sync["in_sync"] and isvc_sync["in_sync"]
    predictor_changed = _predictor_changed(isvc, live_isvc)
    components = (((live_isvc or {}).get("status") or {}).get("components") or {}).get("predictor") or {}
    result = _result(plan, record, in_sync, plan_rollout, live_isvc)
    return {
        "result": result,
        "name": plan["name"],
        "namespace": plan["namespace"],
        "plan_digest": plan["spec_digest"],
        "live_digest": _annotations(live_isvc).get(ANN_DIGEST) if live_isvc else None,
        "first_deploy": not live_isvc,
        "in_sync": in_sync,
        "needs_apply": not in_sync,
        "rollout_expected": _rollout_expected(in_sync, predictor_changed, runtime_sync, live_isvc, plan),
        "ready": bool(in_sync and plan_rollout["done"]),
        "servingruntime": runtime,
        "inferenceservice": isvc,
        "runtime_sync": runtime_sync,
        "isvc_sync": isvc_sync,
        "record": {k: v for k, v in record.items() if k != "entry"},
        "history": {"name": history_name(plan["name"]), "data": history} if history else None,
        "live_rollout": _brief(live_rollout),
        "plan_rollout": _brief(plan_rollout),
        "baseline": _baseline(components, deployment),
        "previous_runtime": _runtime_snapshot(live.get("servingruntime")) if live_runtime else None,
    }


def problem(plan, live, holder="", now=None, create_namespace=False):
    """Why the service cannot be deployed now ("" when it can): the namespace is missing (and is
    not to be created), the existing runtime named in the spec is missing, or another deploy
    holds the lock."""
    live = live or {}
    if not live.get("namespace_exists", True):
        if not create_namespace:
            return (
                "namespace %s does not exist; create it, or set specpilot_deploy_create_namespace: true"
                % (plan["namespace"])
            )
        return ""
    runtime = plan.get("runtime") or {}
    if runtime.get("name") and not runtime.get("create", True) and live.get("servingruntime") is None:
        return (
            "the %s %s named in specpilot_runtime does not exist (runtime.create is false, so specpilot "
            "does not create it)" % (runtime.get("kind"), runtime.get("name"))
        )
    lease = live.get("lease")
    if lease is not None:
        status = lease_status(lease, holder, now if now is not None else 0)
        if not status["free"]:
            return held_message(status, plan["namespace"], k8s_meta(lease).get("name"), running="deploy")
    return ""


def _brief(status):
    if status is None:
        return None
    return {k: status.get(k) for k in ("done", "failed", "cause", "phase", "message")}
