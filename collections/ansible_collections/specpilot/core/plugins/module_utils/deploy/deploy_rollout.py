# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Has the new rollout of an InferenceService finished, is it still going, or has it failed?

KServe's ``Ready`` condition alone cannot answer this: right after an update it still describes
the old pods, and ``status.observedGeneration`` is copied from the Deployment (Standard) or the
Knative Service, so it cannot be compared with the InferenceService's own generation.  The
checks here look at the objects that roll out:

Standard mode (Deployment ``<name>-predictor``):
  ``metadata.generation == status.observedGeneration``; the pod template's ``kserve-container``
  carries the expected arguments (the plan's ``args`` at the end of the list, after the
  runtime's) and, when KServe copied it there, the expected ``specpilot.io/spec-digest``
  annotation; ``status.replicas == updatedReplicas == availableReplicas >= 1``; then the
  InferenceService ``Ready=True``.
Knative mode (``status.components.predictor``):
  ``latestReadyRevision == latestCreatedRevision``, that revision takes 100% of the traffic,
  it is a new revision when one was expected (``latestCreatedRevision`` changed since before
  the apply), and ``Ready=True``.

A rollout has failed for good when a new pod's ``kserve-container`` keeps crashing (restarts at
or above ``fail_fast_restarts``), is OOMKilled that often, its image cannot be pulled or its
init container (modelcar-init) keeps failing, when a new pod stays unschedulable longer than
``pending_grace`` seconds, or when KServe declares the spec invalid.

An LLMInferenceService (``expected["kind"]``) rolls out as Standard mode does, with KServe's names
(kserve v0.20.0 pkg/controller/v1alpha2/llmisvc/workload_single_node.go): the decode workload's Deployment
``<name>-kserve`` (``mainDeploymentName``), its container ``main`` with the plan's args as stored (quoted for the
template's eval, service/llmisvc.py), its pods labelled ``app.kubernetes.io/name=<name>``,
``app.kubernetes.io/component=llminferenceservice-workload`` (``singleNodeLabels``); with ``spec.prefill`` the
prefill Deployment ``<name>-kserve-prefill`` too; then ``Ready=True`` (the living set of WorkloadsReady and
RouterReady, pkg/apis/serving/v1alpha2/llm_inference_service_lifecycle.go) and ``status.url``.  Pure standard
library.
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.common import k8s_meta, parse_time

__all__ = [
    "CONTAINER",
    "DEFAULT_OPTIONS",
    "expected_from_plan",
    "expected_from_isvc",
    "pod_summary",
    "pods_activity",
    "rollout_status",
    "template_container",
]

CONTAINER = "kserve-container"
ANN_DIGEST = "specpilot.io/spec-digest"
DEFAULT_OPTIONS = {
    "fail_fast_restarts": 2,
    "pending_grace": 300,
    "spec_grace": 15,
    "image_grace": 300,
}
_INVALID_REASONS = (
    "InvalidPredictorSpec",
    "RuntimeNotRecognized",
    "NoSupportingRuntime",
    "RuntimeDisabled",
    "InvalidSpec",
)
_IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def _conditions(obj):
    return {
        c.get("type"): c
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }


def _llm_expected(name, namespace, args, digest, prefill):
    return {
        "kind": llmisvc.KIND,
        "name": name,
        "namespace": namespace,
        "mode": "Standard",
        "container": llmisvc.CONTAINER,
        "args": list(args or []),
        "digest": digest,
        "prefill": bool(prefill),
    }


def expected_from_plan(plan):
    """What the new rollout must show, from a validated plan."""
    if plan.get("kind") == llmisvc.KIND:
        serving = plan.get("serving") or plan.get("llminferenceservice") or {}
        return _llm_expected(
            plan["name"],
            plan["namespace"],
            llmisvc.container_args(plan.get("args")),
            plan.get("spec_digest"),
            (serving.get("spec") or {}).get("prefill") is not None,
        )
    return {
        "name": plan["name"],
        "namespace": plan["namespace"],
        "mode": service_plan.normalise_mode(plan.get("deployment_mode")),
        "args": render.in_pod(plan.get("args"), plan["name"], plan["namespace"]),
        "digest": plan.get("spec_digest"),
    }


def expected_from_isvc(isvc):
    """What the rollout of a live InferenceService's (or LLMInferenceService's) own spec looks like."""
    md = k8s_meta(isvc)
    if (isvc or {}).get("kind") == llmisvc.KIND:
        spec = isvc.get("spec") or {}
        main = _named((spec.get("template") or {}).get("containers"), llmisvc.CONTAINER) or {}
        return _llm_expected(
            md.get("name"),
            md.get("namespace"),
            main.get("args"),
            (md.get("annotations") or {}).get(ANN_DIGEST),
            spec.get("prefill") is not None,
        )
    model = ((isvc.get("spec") or {}).get("predictor") or {}).get("model") or {}
    mode = (md.get("annotations") or {}).get("serving.kserve.io/deploymentMode") or "Standard"
    return {
        "name": md.get("name"),
        "namespace": md.get("namespace"),
        "mode": service_plan.normalise_mode(mode),
        "args": render.in_pod(model.get("args"), md.get("name"), md.get("namespace")),
        "digest": (md.get("annotations") or {}).get(ANN_DIGEST),
    }


def template_container(deployment, name=CONTAINER):
    containers = ((((deployment or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    ) or []
    for container in containers:
        if container.get("name") == name:
            return container
    return containers[0] if containers else None


def _args_match(args, expected):
    args = list(args or [])
    expected = list(expected or [])
    if not expected:
        return True
    return len(args) >= len(expected) and args[len(args) - len(expected) :] == expected


def _digest_ok(annotations, expected):
    have = (annotations or {}).get(ANN_DIGEST)
    return have is None or expected is None or have == expected


def _state_text(state):
    if not state:
        return "unknown"
    if "running" in state:
        return "running"
    if "waiting" in state:
        w = state["waiting"] or {}
        return "waiting (%s)" % (w.get("reason") or "?")
    if "terminated" in state:
        t = state["terminated"] or {}
        return "terminated (%s, exit %s)" % (t.get("reason") or "?", t.get("exitCode"))
    return "unknown"


def _named(items, name):
    """The last entry of ``items`` called ``name`` (a pod's containers or their statuses), or None."""
    found = None
    for item in items or []:
        if item.get("name") == name:
            found = item
    return found


def _is_new(main, md, expected):
    """Whether the pod has the expected (new) revision's args and digest; None when nothing is expected."""
    if expected is None:
        return None
    return bool(
        main is not None
        and _args_match(main.get("args"), expected.get("args"))
        and _digest_ok(md.get("annotations"), expected.get("digest"))
    )


def _unschedulable(conds):
    """The scheduler's message when the pod cannot be scheduled, else None."""
    scheduled = conds.get("PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        return scheduled.get("message") or scheduled.get("reason") or "Unschedulable"
    return None


_INIT_FAILED = ("Init:Error", "Init:CrashLoopBackOff")


def _init_container_failure(c):
    """One init container's failure (exited non-zero, or waiting in an Init error), else None."""
    term = ((c.get("state") or {}).get("terminated")) or ((c.get("lastState") or {}).get("terminated"))
    waiting = (c.get("state") or {}).get("waiting") or {}
    if not ((term and term.get("exitCode") not in (0, None)) or waiting.get("reason") in _INIT_FAILED):
        return None
    term = term or {}
    return {
        "container": c.get("name"),
        "exit_code": term.get("exitCode"),
        "reason": term.get("reason") or waiting.get("reason"),
        "message": term.get("message") or waiting.get("message"),
        "restarts": c.get("restartCount", 0),
    }


def _init_failure(status, state):
    """The last failed init container of the pod, or the main container waiting in Init:Error, else None."""
    failure = None
    for c in status.get("initContainerStatuses") or []:
        failure = _init_container_failure(c) or failure
    if state.get("waiting", {}).get("reason") == "Init:Error" and failure is None:
        failure = {
            "container": "init",
            "exit_code": None,
            "reason": "Init:Error",
            "message": state["waiting"].get("message"),
            "restarts": 0,
        }
    return failure


def _age(now, created):
    return (now - created) if (now is not None and created is not None) else None


def pod_summary(pod, expected=None, now=None):
    """A short view of one predictor pod: phase, scheduling, kserve-container state, restarts,
    last termination, and whether it belongs to the expected (new) revision."""
    md = k8s_meta(pod)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    engine = (expected or {}).get("container") or CONTAINER
    cstatus = _named(status.get("containerStatuses"), engine) or {}
    conds = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    last = (cstatus.get("lastState") or {}).get("terminated") or {}
    state = cstatus.get("state") or {}
    waiting = state.get("waiting") or {}
    return {
        "name": md.get("name"),
        "new": _is_new(_named(spec.get("containers"), engine), md, expected),
        "phase": status.get("phase") or "Pending",
        "terminating": bool(md.get("deletionTimestamp")),
        "ready": bool((conds.get("Ready") or {}).get("status") == "True"),
        "unschedulable": _unschedulable(conds),
        "age": _age(now, parse_time(md.get("creationTimestamp"))),
        "state": _state_text(state),
        "waiting_reason": waiting.get("reason"),
        "waiting_message": waiting.get("message"),
        "terminated": state.get("terminated"),
        "restarts": int(cstatus.get("restartCount") or 0),
        "last_exit_code": last.get("exitCode"),
        "last_reason": last.get("reason"),
        "last_message": last.get("message"),
        "init_failure": _init_failure(status, state),
        "node": spec.get("nodeName"),
        "running_for": _running_for(state, now),
    }


def _crash_failure(p, threshold):
    """(cause, message) when the pod's main container keeps exiting, at ``threshold`` restarts, else None."""
    terminated = p["terminated"] or {}
    oom = p["last_reason"] == "OOMKilled" or terminated.get("reason") == "OOMKilled"
    crashed = (
        p["waiting_reason"] == "CrashLoopBackOff"
        or p["last_exit_code"] not in (None, 0)
        or terminated.get("exitCode") not in (None, 0)
    )
    if not crashed or p["restarts"] < threshold:
        return None
    code = p["last_exit_code"] if p["last_exit_code"] is not None else terminated.get("exitCode")
    return "oomkilled" if oom else "crashloop", "pod %s: %s keeps exiting (exit code %s%s, %d restarts)" % (
        p["name"],
        CONTAINER,
        code,
        ", OOMKilled" if oom else "",
        p["restarts"],
    )


def _pod_failure(p, options, threshold):
    """(cause, message) when one pod of the new revision cannot start any more, else None."""
    crash = _crash_failure(p, threshold)
    if crash:
        return crash
    init = p["init_failure"]
    if init and (init["restarts"] or 0) + 1 >= threshold:
        return "init", "pod %s: init container %s failed (%s)" % (
            p["name"],
            init["container"],
            init["message"] or init["reason"],
        )
    reason = p["waiting_reason"]
    if reason in _IMAGE_REASONS and (
        reason == "InvalidImageName" or (p["age"] or 0) >= float(options["image_grace"])
    ):
        return "image", "pod %s: image cannot be pulled (%s: %s)" % (
            p["name"],
            reason,
            p["waiting_message"] or "",
        )
    if p["unschedulable"] and (p["age"] or 0) >= float(options["pending_grace"]):
        return "unschedulable", "pod %s cannot be scheduled for %ds: %s" % (
            p["name"],
            int(p["age"]),
            p["unschedulable"],
        )
    return None


def _rejected(model, ready):
    """Whether KServe marked the spec invalid (the model status, or the Ready condition's reason)."""
    return model.get("transitionStatus") == "InvalidSpec" or (
        ready.get("status") == "False" and ready.get("reason") in _INVALID_REASONS
    )


def _rejection_settled(info, options, now, started):
    """Whether a rejection is of this rollout (not older than it) and the spec grace has passed."""
    when = parse_time(info.get("time"))
    fresh = started is None or when is None or when >= started - 5
    return fresh and (started is None or now is None or now - started >= float(options["spec_grace"]))


def _invalid_spec(pods, options, isvc, now, started):
    """(cause, message) when KServe rejects the InferenceService (no new pod, past the grace), else None."""
    model = ((isvc or {}).get("status") or {}).get("modelStatus") or {}
    ready = _conditions(isvc).get("Ready") or {}
    if not _rejected(model, ready) or any(p["new"] for p in pods):
        return None
    info = model.get("lastFailureInfo") or {}
    if not _rejection_settled(info, options, now, started):
        return None
    return "invalid-spec", "KServe rejects the InferenceService: %s" % (
        info.get("message") or ready.get("message") or ready.get("reason")
    )


def _running_for(state, now):
    """Seconds the container has been running (its ``state.running.startedAt``), or None."""
    since = parse_time(((state or {}).get("running") or {}).get("startedAt"))
    return int(now - since) if (now is not None and since is not None) else None


def _restarts_text(p):
    if not p["restarts"]:
        return ""
    last = ", last exit %s%s" % (p["last_exit_code"], " OOMKilled" if p["last_reason"] == "OOMKilled" else "")
    return ", %d container restart%s%s" % (
        p["restarts"],
        "" if p["restarts"] == 1 else "s",
        last if p["last_exit_code"] is not None else "",
    )


def _pod_doing(p):
    """What one pod is doing, in words: scheduling, starting, the engine loading, restarting, ready."""
    if p["unschedulable"]:
        doing = "Pending, not scheduled: %s" % p["unschedulable"]
    elif p["ready"]:
        doing = "ready, serving"
    elif p["phase"] == "Running" and p["state"] == "running":
        since = " (container up %ds)" % p["running_for"] if p["running_for"] is not None else ""
        doing = "Running, the engine is loading: not ready yet%s" % since
    elif p["waiting_reason"] in ("CrashLoopBackOff", "Error"):
        doing = "%s restarting (%s)" % (CONTAINER, p["waiting_reason"])
    elif p["phase"] == "Pending":
        doing = "Pending, starting (%s)" % (p["waiting_reason"] or "containers not started yet")
    else:
        doing = "%s, %s %s" % (p["phase"], CONTAINER, p["state"])
    return "pod %s%s: %s%s" % (p["name"], " (new)" if p["new"] else "", doing, _restarts_text(p))


def pods_activity(summaries):
    """What the rollout's pods are doing: the new revision's pods when they are known (else every
    pod not terminating), one clause each; None when there are none."""
    live = [p for p in summaries if not p["terminating"]]
    shown = [p for p in live if p["new"]] or [p for p in live if p["new"] is None]
    return "; ".join(_pod_doing(p) for p in shown) or None


def _failure(pods, expected, options, isvc, now, started):
    """(cause, message) when the rollout cannot succeed any more, else (None, None)."""
    threshold = int(options["fail_fast_restarts"])
    for p in pods:
        if p["new"] and not p["terminating"]:
            found = _pod_failure(p, options, threshold)
            if found:
                return found
    return _invalid_spec(pods, options, isvc, now, started) or (None, None)


def _knative_waiting(checks, created, ready_rev, traffic):
    """The first thing the new Knative revision still waits for, or None."""
    if not checks["revision_created"]:
        return "no revision created yet"
    if not checks["revision_new"]:
        return "KServe has not created a new revision yet (latest %s)" % created
    if not checks["revision_ready"]:
        return "revision %s not ready (latest ready %s)" % (created, ready_rev or "none")
    if not checks["traffic_100"]:
        return "revision %s has %d%% of the traffic" % (ready_rev, traffic)
    return None


def _knative_checks(isvc, baseline, checks, waiting):
    """Knative mode: a new revision, ready, with all the traffic.  Fills ``checks`` and ``waiting``;
    returns the progress headline."""
    comp = (((isvc or {}).get("status") or {}).get("components") or {}).get("predictor") or {}
    created = comp.get("latestCreatedRevision")
    ready_rev = comp.get("latestReadyRevision")
    traffic = sum(
        int(t.get("percent") or 0)
        for t in comp.get("traffic") or []
        if ready_rev and (t.get("revisionName") == ready_rev)
    )
    checks["revision_created"] = bool(created)
    checks["revision_new"] = (not baseline.get("rollout_expected")) or (
        bool(created) and created != baseline.get("latest_created_revision")
    )
    checks["revision_ready"] = bool(created) and created == ready_rev
    checks["traffic_100"] = traffic == 100
    reason = _knative_waiting(checks, created, ready_rev, traffic)
    if reason:
        waiting.append(reason)
    return "revision %s (ready %s), traffic %d%%" % (created or "-", ready_rev or "-", traffic)


def predictor_deployment_name(name, isvc=None):
    """The Deployment (and Service) of InferenceService ``name``'s predictor: ``{name}-predictor``, or
    ``{name}-{predictor.name}-predictor`` for a named predictor (KServe 0.20: a promoted canary keeps
    the canary's name, so that its Deployment becomes the stable one without a restart).
    constants.PredictorServiceName, pkg/constants/constants.go@v0.20.0."""
    pname = (((isvc or {}).get("spec") or {}).get("predictor") or {}).get("name")
    return "%s-%s-predictor" % (name, pname) if pname else "%s-predictor" % name


def llm_deployment_names(name, prefill=False):
    """The decode workload's Deployment (and the prefill one's): mainDeploymentName, prefillDeploymentName."""
    decode = llmisvc.workload(name)["deployment"]
    return [decode] + (["%s-prefill" % decode] if prefill else [])


def read_llm_workload(reader, name, namespace, api_version):
    """(LLMInferenceService, its decode Deployment, its decode pods), as :func:`read_workload`; the
    prefill Deployment, when the object has spec.prefill, as the decode Deployment's ``prefill``."""
    obj = reader.get(llmisvc.KIND, api_version, name=name, namespace=namespace)
    prefill = ((obj or {}).get("spec") or {}).get("prefill") is not None
    names = llm_deployment_names(name, prefill)
    deployment = reader.get("Deployment", "apps/v1", name=names[0], namespace=namespace)
    if deployment is not None and prefill:
        deployment = dict(deployment, prefill=reader.get("Deployment", "apps/v1", name=names[1], namespace=namespace))
    pods = reader.get("Pod", "v1", namespace=namespace, label_selector=",".join(llmisvc.workload(name)["pod_labels"]))
    return obj, deployment, pods


def read_workload(reader, name, namespace, deployment_mode="Standard", kind=None, api_version=None):
    """(InferenceService, its predictor's Deployment in Standard mode or None, its pods), read with
    ``reader.get(kind, api_version, name=, namespace=, label_selector=)``; each None (the pods [])
    when absent.  ``kind`` LLMInferenceService: :func:`read_llm_workload`."""
    if kind == llmisvc.KIND:
        return read_llm_workload(reader, name, namespace, api_version)
    isvc = reader.get("InferenceService", "serving.kserve.io/v1beta1", name=name, namespace=namespace)
    deployment = None
    if (deployment_mode or "Standard") == "Standard":
        deployment = reader.get(
            "Deployment", "apps/v1", name=predictor_deployment_name(name, isvc), namespace=namespace
        )
    pods = reader.get(
        "Pod", "v1", namespace=namespace, label_selector="serving.kserve.io/inferenceservice=%s" % name
    )
    return isvc, deployment, pods


def _generation_advanced(baseline, tmpl_meta, generation):
    """Whether a rollout that must change the Deployment did: without the digest annotation on the
    template (a KServe that does not copy the InferenceService's annotations), a new rollout must at
    least have bumped the generation."""
    base_gen = baseline.get("deployment_generation")
    return (
        not baseline.get("rollout_expected")
        or base_gen is None
        or (tmpl_meta.get("annotations") or {}).get(ANN_DIGEST) is not None
        or (generation is not None and generation > base_gen)
    )


def _standard_waiting(checks, expected, dmd, figures):
    """The first thing the predictor's Deployment still waits for, or None."""
    generation, observed, replicas, updated, available = figures
    if not checks["deployment_present"]:
        return "the predictor's Deployment of %s not created yet" % expected.get("name")
    if not (checks["template_args"] and checks["template_digest"] and checks["generation_advanced"]):
        return "Deployment %s still has the previous pod template" % dmd.get("name")
    if not checks["generation_observed"]:
        return "Deployment generation %s not observed by its controller yet (status shows %s)" % (
            generation,
            "none" if observed is None else observed,
        )
    if not checks["replicas_updated"]:
        return "%d/%d replicas updated" % (updated, replicas)
    if not checks["replicas_available"]:
        return "%d/%d replicas available" % (available, replicas)
    return None


def _dash(value):
    return value if value is not None else "-"


def _standard_checks(expected, deployment, baseline, checks, waiting):
    """Standard mode: the predictor's Deployment has the plan's pod template (args, digest), a
    newer generation observed, every replica updated and available.  Fills ``checks`` and
    ``waiting``; returns the progress headline."""
    dmd = k8s_meta(deployment)
    dstatus = (deployment or {}).get("status") or {}
    container = template_container(deployment, expected.get("container") or CONTAINER)
    tmpl_meta = (((deployment or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}
    generation = dmd.get("generation")
    observed = dstatus.get("observedGeneration")
    replicas = int(dstatus.get("replicas") or 0)
    updated = int(dstatus.get("updatedReplicas") or 0)
    available = int(dstatus.get("availableReplicas") or 0)
    checks["deployment_present"] = deployment is not None
    checks["template_args"] = container is not None and _args_match(
        container.get("args"), expected.get("args")
    )
    checks["template_digest"] = deployment is not None and _digest_ok(
        tmpl_meta.get("annotations"), expected.get("digest")
    )
    checks["generation_observed"] = generation is not None and observed is not None and observed >= generation
    checks["generation_advanced"] = _generation_advanced(baseline, tmpl_meta, generation)
    checks["replicas_updated"] = replicas >= 1 and updated == replicas
    checks["replicas_available"] = replicas >= 1 and available == replicas
    reason = _standard_waiting(checks, expected, dmd, (generation, observed, replicas, updated, available))
    if reason:
        waiting.append(reason)
    return "Deployment gen %s observed %s, updated %d/%d, available %d/%d" % (
        _dash(generation),
        _dash(observed),
        updated,
        replicas,
        available,
        replicas,
    )


def _pods_text(summaries):
    return (
        "; ".join(
            "pod %s%s: %s%s%s"
            % (
                p["name"],
                " (new)" if p["new"] else "",
                p["phase"],
                ", " + ("ready" if p["ready"] else CONTAINER + " " + p["state"]),
                ", %d restarts" % p["restarts"] if p["restarts"] else "",
            )
            for p in summaries
            if not p["terminating"]
        )
        or "no pods"
    )


def _llm_checks(expected, isvc, deployment, checks, waiting):
    """An LLMInferenceService beyond its decode Deployment: the prefill Deployment available (its own
    controller's generation observed), then status.url."""
    if expected.get("kind") != llmisvc.KIND:
        return
    if expected.get("prefill"):
        prefill = (deployment or {}).get("prefill")
        pstatus = (prefill or {}).get("status") or {}
        replicas = int(pstatus.get("replicas") or 0)
        checks["prefill_available"] = bool(
            prefill
            and (pstatus.get("observedGeneration") or 0) >= (k8s_meta(prefill).get("generation") or 0)
            and replicas >= 1
            and int(pstatus.get("updatedReplicas") or 0) == replicas
            and int(pstatus.get("availableReplicas") or 0) == replicas
        )
        if not checks["prefill_available"] and not waiting:
            waiting.append("the prefill Deployment %s-kserve-prefill not available yet" % expected.get("name"))
    checks["url"] = bool(((isvc or {}).get("status") or {}).get("url"))
    if checks.get("isvc_ready") and not checks["url"] and not waiting:
        waiting.append("LLMInferenceService has no status.url yet")


def _isvc_waiting(checks, ready, waiting, kind="InferenceService"):
    """Add what the InferenceService itself still waits for (first when it is missing)."""
    if not checks["isvc_present"]:
        waiting.insert(0, "%s not found" % kind)
    elif not waiting and not checks["isvc_ready"]:
        reason = " (%s)" % ready.get("reason") if ready.get("reason") else ""
        waiting.append("%s Ready=%s%s" % (kind, ready.get("status") or "Unknown", reason))


def _phase(done, cause, why, summaries, checks, waiting, headline, ready_text):
    """(phase, message) of the rollout: ready, failed, pending (nothing new yet) or progressing."""
    if done:
        return "ready", "rolled out: %s; %s" % (headline, ready_text)
    if cause:
        return "failed", why
    new_pods = [p for p in summaries if p["new"] and not p["terminating"]]
    phase = "pending" if not new_pods and not checks.get("revision_created", True) else "progressing"
    activity = pods_activity(summaries)
    if activity and new_pods:
        # What the user is waiting for, first: the pods (the engine loading, restarts), then the
        # object that has not caught up (a Deployment reports its generation late).
        return phase, "waiting: %s (%s)" % (activity, waiting[0])
    return phase, "waiting: %s" % waiting[0]


def rollout_status(
    expected, isvc, deployment=None, pods=None, baseline=None, now=None, started=None, options=None
):
    """Where the rollout of ``expected`` stands.

    ``expected``: :func:`expected_from_plan` / :func:`expected_from_isvc`.  ``baseline``:
    ``{latest_created_revision, rollout_expected}`` read before the apply (Knative).  ``started``:
    when the wait began (epoch), for the grace periods.  Returns ``{done, failed, cause, phase,
    message, waiting_for, checks, pods}``.
    """
    opts = dict(DEFAULT_OPTIONS)
    opts.update({k: v for k, v in (options or {}).items() if v is not None})
    baseline = baseline or {}
    summaries = [pod_summary(p, expected, now) for p in pods or []]
    checks = {}
    waiting = []
    mode = expected.get("mode") or "Standard"
    ready = _conditions(isvc).get("Ready") or {}
    checks["isvc_present"] = isvc is not None
    checks["isvc_ready"] = ready.get("status") == "True"
    if mode == "Knative":
        headline = _knative_checks(isvc, baseline, checks, waiting)
    else:
        headline = _standard_checks(expected, deployment, baseline, checks, waiting)
    kind = expected.get("kind") or "InferenceService"
    _isvc_waiting(checks, ready, waiting, kind)
    _llm_checks(expected, isvc, deployment, checks, waiting)
    done = not waiting
    cause, why = (None, None)
    if not done:
        cause, why = _failure(summaries, expected, opts, isvc, now, started)
    pod_text = _pods_text(summaries)
    ready_text = "Ready=%s" % (ready.get("status") or "Unknown")
    phase, message = _phase(done, cause, why, summaries, checks, waiting, headline, ready_text)
    return {
        "done": done,
        "failed": cause is not None,
        "cause": cause,
        "phase": phase,
        "message": message,
        "progress": "%s | %s | %s %s" % (headline, pod_text, kind, ready_text),
        "waiting_for": waiting,
        "activity": pods_activity(summaries) if not done else None,
        "checks": checks,
        "pods": summaries,
    }
