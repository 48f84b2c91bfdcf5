# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""One readable block that says why a rollout did not become ready, and what to do.

Input: what the deploy role gathered after the wait failed or timed out: the rollout status
(:mod:`deploy_rollout`), the InferenceService, its Deployment, the predictor pods, recent
Events, the tail of the ``kserve-container`` log (current and previous run) and the facts
``specpilot.core.vllm_log_facts`` parsed from it; ``events_error`` and each log's ``error`` when
that read failed or timed out (named in the text as "could not read X: reason").  Output: ``{summary,
cause, hints, text, engine_errors, scheduling, unread}``.  The hints map what Kubernetes and vLLM said to the words an
on-call engineer needs (insufficient ``nvidia.com/gpu``, selector/taint mismatch, OOMKilled,
CrashLoopBackOff exit codes, and the engine errors the log parser recognises).  Pure
standard library.
"""

from __future__ import annotations

import json
import re

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import status_code
from ansible_collections.specpilot.core.plugins.module_utils.deploy.deploy_rollout import (
    CONTAINER,
    expected_from_plan,
    pod_summary,
)
from ansible_collections.specpilot.core.plugins.module_utils.common import k8s_meta

__all__ = ["ENGINE_HINTS", "scheduling_hints", "engine_hints", "diagnose"]

# log parser codes (specpilot.core.vllm_log_facts log_errors[].code) -> hint
ENGINE_HINTS = {
    "UNKNOWN_SPEC_KEY": (
        "vLLM in the runtime image does not accept the speculative key '{key}'. The image runs vLLM {image_vllm} "
        "and the spec was validated for vLLM {spec_vllm}: set specpilot_vllm_version to the image's release (or "
        "pin the image to {spec_vllm}) and run validate.yml again; for tensor_parallel_size use "
        "draft_tensor_parallel_size."
    ),
    "CONFIG_VALIDATION_ERROR": (
        "vLLM rejected the speculative config ({message}). Check the value against the profile of vLLM "
        "{image_vllm} (schemas/speculative/) and run validate.yml with specpilot_vllm_version matching the image."
    ),
    "UNSUPPORTED_METHOD": (
        "This vLLM ({image_vllm}) does not support the speculative method in the spec. Use a method it supports, "
        "or a runtime image with a vLLM that has it, and set specpilot_vllm_version accordingly."
    ),
    "DRAFT_MODEL_UNSUPPORTED": (
        "method draft_model is not implemented in vLLM 0.10 to 0.14 (V1 engine). Use eagle/eagle3/ngram/suffix, "
        "or a runtime image with vLLM >= 0.15 (the validator rejects this when specpilot_vllm_version matches the "
        "image)."
    ),
    "MISSING_PACKAGE": (
        "The runtime image lacks the Python package '{package}'. method suffix needs arctic-inference "
        "(pip install arctic-inference in the image); otherwise use method ngram."
    ),
    "CUDA_OOM": (
        "The GPU ran out of memory while the engine started. vLLM V1 keeps the weights (the draft's too), the "
        "activations and the KV cache inside --gpu-memory-utilization (v1/worker/gpu_worker.py "
        "determine_available_memory); what ran out is the memory outside it (CUDA context, captured CUDA "
        "graphs) or the GPU itself: lower specpilot_vllm_args.gpu_memory_utilization by 0.02 to 0.05 (it is "
        "{gmu}) or set enforce_eager, and if the weights alone do not fit, use a smaller draft or give the "
        "service more GPUs."
    ),
    "CLI_ARGUMENT_ERROR": (
        "vLLM's argument parser rejected an argument ({message}). Check specpilot_vllm_args.extra_args against "
        "vLLM {image_vllm}; the validator knows the flags of the release set in specpilot_vllm_version."
    ),
    "ASYNC_SCHEDULING_CONFLICT": (
        "Async scheduling cannot be combined with this speculative method in vLLM {image_vllm}: remove "
        "async_scheduling / --async-scheduling from specpilot_vllm_args."
    ),
}
_GENERIC_ENGINE = (
    "The engine failed to start: {message}. See the log above; check the model paths, and that "
    "specpilot_vllm_version is the image's vLLM {image_vllm}."
)
_SECONDARY = ("ENGINE_START_FAILED", "ENGINE_DEAD")


def _cond(obj, kind):
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def scheduling_hints(message, plan=None):
    """Hints for a FailedScheduling message (``0/3 nodes are available: ...``)."""
    plan = plan or {}
    gpu = plan.get("gpu") or {}
    text = message or ""
    hints = []
    m = re.search(r"Insufficient ([\w./-]+)", text)
    if m:
        resource = m.group(1)
        if "gpu" in resource:
            hints.append(
                "No node has %s free %s. Free GPUs (kubectl describe nodes), lower specpilot_gpu.count, or add "
                "GPU capacity; a one-replica service needs the rollout strategy maxSurge 0 (specpilot_rollout auto "
                "or recreate) so that its new pod does not wait for a second GPU."
                % (gpu.get("count") or "the requested", resource)
            )
        else:
            hints.append(
                "No node has enough free %s for the pod: lower specpilot_resources or free capacity."
                % resource
            )
    if "didn't match Pod's node affinity/selector" in text or "node affinity" in text:
        hints.append(
            "No node matches the pod's nodeSelector/affinity (specpilot_gpu.node_selector%s). Compare with the "
            "node labels (kubectl get nodes --show-labels)."
            % (" = %s" % gpu.get("node_selector") if gpu.get("node_selector") else "")
        )
    m = re.search(r"untolerated taint \{?([^}]*)\}?", text)
    if m:
        hints.append(
            "The nodes have a taint the pod does not tolerate (%s): add it to specpilot_gpu.tolerations."
            % m.group(1).strip()
        )
    if "unbound immediate PersistentVolumeClaims" in text or "persistentvolumeclaim" in text.lower():
        hints.append("The model PVC is missing or not bound: check specpilot_pvc.name (kubectl get pvc).")
    return hints


def _gpu_memory_utilization(plan):
    gmu = "not set"
    for arg in plan.get("args") or []:
        if arg.startswith("--gpu-memory-utilization="):
            gmu = arg.split("=", 1)[1]
    return gmu


def _hint_code(error):
    """The error's code, with pydantic's words for a key this vLLM does not have read as UNKNOWN_SPEC_KEY."""
    code = error.get("code")
    text = error.get("message") or ""
    if (
        code == "CONFIG_VALIDATION_ERROR"
        and error.get("key")
        and ("unexpected_keyword_argument" in text or "extra_forbidden" in text)
    ):
        return "UNKNOWN_SPEC_KEY"
    return code


def engine_hints(errors, plan=None, image_vllm=None):
    """Hints for the errors ``vllm_log_facts`` recognised (``log_errors``)."""
    plan = plan or {}
    values = {
        "spec_vllm": plan.get("vllm_version") or "?",
        "image_vllm": image_vllm or "(release not in the log)",
        "gmu": _gpu_memory_utilization(plan),
    }
    hints = []
    primary = [e for e in errors or [] if e.get("code") not in _SECONDARY] or list(errors or [])
    seen = set()
    for error in primary:
        code = _hint_code(error)
        if code in seen:
            continue
        seen.add(code)
        template = ENGINE_HINTS.get(code, _GENERIC_ENGINE)
        hints.append(
            template.format(
                key=error.get("key") or "?",
                package=error.get("package") or "?",
                message=(error.get("message") or code or "").strip().rstrip("."),
                **values,
            )
        )
    return hints


def _event_line(event):
    when = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )
    obj = event.get("involvedObject") or {}
    count = event.get("count")
    return "%s %s %s %s/%s: %s%s" % (
        when[11:19] if len(when) >= 19 else when,
        event.get("type") or "",
        event.get("reason") or "",
        (obj.get("kind") or "").lower(),
        obj.get("name") or "",
        (event.get("message") or "").strip(),
        " (x%d)" % count if isinstance(count, int) and count > 1 else "",
    )


def _event_key(event):
    return (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def _relevant_events(events, name, pod_names):
    keep = []
    prefixes = (name + "-predictor", name)
    for event in events or []:
        obj = event.get("involvedObject") or {}
        oname = obj.get("name") or ""
        if oname in pod_names or oname.startswith(prefixes):
            keep.append(event)
    return sorted(keep, key=_event_key)


def _tail(text, lines):
    rows = [r for r in (text or "").splitlines() if r.strip()]
    return rows[-lines:] if lines else rows


def _pod_hints(new, cause):
    """Hints from the new pods (OOMKilled, image pulls, init containers); the cause they point at."""
    hints = []
    for p in new:
        if p["last_reason"] == "OOMKilled" or (p["terminated"] or {}).get("reason") == "OOMKilled":
            cause = cause or "oomkilled"
            hints.append(
                "%s was OOMKilled: it hit its memory limit (specpilot_resources.limits.memory). Loading a draft next "
                "to the target needs more host memory: raise the limit." % CONTAINER
            )
        if p["waiting_reason"] in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            hints.append(
                "The image cannot be pulled (%s): check specpilot_runtime.image, the modelcar digest and "
                "imagePullSecrets." % (p["waiting_message"] or p["waiting_reason"])
            )
        if p["init_failure"]:
            hints.append(
                "Init container %s failed (%s): for a modelcar the image must hold a non-empty /models "
                "(run stage.yml again)."
                % (
                    p["init_failure"]["container"],
                    p["init_failure"]["message"] or p["init_failure"]["reason"],
                )
            )
    return cause, hints


def _scheduling_hints(d):
    """FailedScheduling reasons (pods and events), the last one explained."""
    plan, pods, events = d["plan"], d["pods"], d["events"]
    hints, scheduling = [], []
    for p in pods:
        if p["unschedulable"]:
            scheduling.append(p["unschedulable"])
    for event in events:
        if event.get("reason") == "FailedScheduling" and event.get("message") not in scheduling:
            scheduling.append(event.get("message"))
    for message in scheduling[-1:]:
        hints.extend(scheduling_hints(message, plan))
    return hints, scheduling


def _version_differs(image_vllm, spec_vllm):
    """Whether the release the engine log names is not the spec's release line (major.minor)."""
    return bool(
        image_vllm and spec_vllm and not str(image_vllm).startswith(".".join(str(spec_vllm).split(".")[:2]))
    )


def _hints(d):
    """(cause, hints, engine hints, scheduling messages) of a rollout that did not become ready."""
    context, plan, name, namespace, pods, status = (
        d[k] for k in ("context", "plan", "name", "namespace", "pods", "status")
    )
    image_vllm, errors, ready = d["image_vllm"], d["errors"], d["ready"]
    hints, scheduling = _scheduling_hints(d)
    new = [p for p in pods if p["new"] and not p["terminating"]] or [p for p in pods if not p["terminating"]]
    cause, pod_hints = _pod_hints(new, status.get("cause"))
    hints.extend(pod_hints)
    engine = engine_hints(errors, plan, image_vllm)
    hints.extend(engine)
    if _version_differs(image_vllm, plan.get("vllm_version")):
        hints.append(
            "The engine log says vLLM %s, the spec says specpilot_vllm_version %s: make them agree."
            % (image_vllm, plan["vllm_version"])
        )
    if cause == "invalid-spec" or ready.get("reason") in ("RuntimeNotRecognized", "NoSupportingRuntime"):
        hints.append(
            "KServe did not accept the InferenceService (%s): %s"
            % (ready.get("reason") or "InvalidSpec", ready.get("message") or "")
        )
    cause = cause or ("timeout" if context.get("timed_out") else "engine-error" if errors else None)
    if context.get("timed_out") and not hints:
        hints.append(
            "The rollout did not finish within %ss. A cold start with a draft can take several minutes: raise "
            "specpilot_startup_timeout_seconds (startupProbe) and specpilot_deploy_wait_timeout, and check the "
            "engine log above for progress." % context.get("timeout")
        )
    if not hints:
        hints.append(
            "See the events and the log above; kubectl -n %s describe pod -l "
            "serving.kserve.io/inferenceservice=%s" % (namespace, name)
        )
    return cause, hints, engine, scheduling


_HEADLINES = {
    "crashloop": "the engine keeps crashing",
    "oomkilled": "the container is OOMKilled",
    "unschedulable": "the pod cannot be scheduled",
    "image": "the image cannot be pulled",
    "init": "an init container fails",
    "invalid-spec": "KServe rejects the InferenceService",
    "timeout": "the rollout timed out",
    "engine-error": "the engine failed to start",
}


def _suffix(fmt, value):
    """``fmt % value`` when there is a value, else ""."""
    return fmt % value if value else ""


def _status_lines(d):
    """The rollout's message, the time waited, the InferenceService's Ready and modelStatus."""
    context, status, ready, model_status = d["context"], d["status"], d["ready"], d["model_status"]
    lines = []
    if status.get("message"):
        lines.append("  rollout: %s" % status["message"])
    if context.get("elapsed") is not None:
        lines.append("  waited: %ss of %ss" % (int(context["elapsed"]), context.get("timeout")))
    lines.append(
        "  InferenceService: Ready=%s%s%s"
        % (
            ready.get("status") or "Unknown",
            _suffix(" (%s)", ready.get("reason")),
            _suffix(": %s", ready.get("message")),
        )
    )
    if model_status.get("lastFailureInfo"):
        info = model_status["lastFailureInfo"]
        lines.append(
            "  modelStatus: %s, %s: %s"
            % (model_status.get("transitionStatus"), info.get("reason"), info.get("message"))
        )
    return lines


def _deployment_lines(deployment):
    if not deployment:
        return []
    dst = deployment.get("status") or {}
    prog = _cond(deployment, "Progressing") or {}
    return [
        "  Deployment %s: generation %s, observed %s, replicas %s, updated %s, available %s%s"
        % (
            k8s_meta(deployment).get("name"),
            k8s_meta(deployment).get("generation"),
            dst.get("observedGeneration"),
            dst.get("replicas", 0),
            dst.get("updatedReplicas", 0),
            dst.get("availableReplicas", 0),
            "; Progressing=%s %s" % (prog.get("status"), prog.get("reason") or "") if prog else "",
        )
    ]


_REVISION_MARK = {True: " (new)", False: " (previous)", None: ""}


def _pod_line(p):
    detail = "%s" % p["phase"]
    if p["unschedulable"]:
        detail += ", unschedulable: %s" % p["unschedulable"]
    else:
        detail += ", %s %s" % (CONTAINER, p["state"])
        if p["waiting_message"]:
            detail += ": %s" % p["waiting_message"][:300]
    if p["restarts"]:
        detail += ", restarts %d" % p["restarts"]
    if p["last_exit_code"] is not None:
        detail += ", last exit code %s (%s)" % (p["last_exit_code"], p["last_reason"] or "?")
    return "  Pod %s%s: %s" % (p["name"], _REVISION_MARK.get(p["new"], ""), detail)


def _event_lines(events):
    if not events:
        return []
    return ["  Events (last %d):" % min(len(events), 10)] + ["    " + _event_line(e) for e in events[-10:]]


def _log_lines(context, tail_lines):
    """The tail of the crashed run's log when there is one, else of the current run's."""
    lines = []
    logs = [log for log in context.get("logs") or [] if _tail(log.get("text"), 1)]
    previous = [log for log in logs if log.get("previous")]
    for log in previous[:1] or logs[:1]:
        rows = _tail(log.get("text"), tail_lines)
        lines.append("  %s log of pod %s (%s, last %d lines):" % (_which_log(log) + (len(rows),)))
        lines.extend("    | " + row[:400] for row in rows)
    return lines


def _engine_error_lines(errors, image_vllm):
    if not errors:
        return []
    lines = ["  Engine errors%s:" % _suffix(" (vLLM %s)", image_vllm)]
    for error in errors[:6]:
        lines.append(
            "    %s%s: %s"
            % (error.get("code"), _suffix(" [%s]", error.get("key")), (error.get("message") or "")[:300])
        )
    return lines


def _unread_lines(unread):
    if not unread:
        return []
    return ["  Not in this diagnosis (a read failed or timed out; what is above is what could be read):"] + [
        "    - " + line for line in unread
    ]


def _diagnosis_lines(d, cause, hints, engine):
    """The block printed for the on-call engineer: (summary, lines)."""
    headline = _HEADLINES.get(cause, "the rollout did not become ready")
    lines = ["specpilot deploy: %s (namespace %s) is not ready: %s" % (d["name"], d["namespace"], headline)]
    lines += _status_lines(d)
    lines += _deployment_lines(d["deployment"])
    if not d["pods"]:
        lines.append("  Pods: none")
    lines += [_pod_line(p) for p in d["pods"]]
    lines += _event_lines(d["events"])
    lines += _log_lines(d["context"], d["tail_lines"])
    lines += _engine_error_lines(d["errors"], d["image_vllm"])
    lines += _unread_lines(d["unread"])
    lines.append("  What to do:")
    lines += ["    - " + hint for hint in hints]
    summary = "%s: %s" % (headline, (engine[0] if engine else hints[0]) if hints else headline)
    return summary, lines


# the message of the API server's Status in a kubernetes client error (after its HTTP headers)
_STATUS_MESSAGE = re.compile(r'"message"\s*:\s*("(?:[^"\\]|\\.)*")')


def _reason(error):
    """A failed task's message, without Ansible's "Task failed: " prefix; for an API error, its HTTP status
    and the Status message (what RBAC refused, say), not the client's dump of the response headers."""
    text = str(error)
    text = text[len("Task failed: ") :] if text.startswith("Task failed: ") else text
    # a body shown as Python bytes (b'{...}') has its JSON escapes doubled: \\" for \"
    match = _STATUS_MESSAGE.search(text.replace('\\\\"', '\\"'))
    try:
        message = json.loads(match.group(1)) if match else None
    except ValueError:
        message = None
    if message:
        code = status_code({"msg": text})
        return ("%s %s" % (code, message) if code else message)[:400]
    return text[:300]


def _which_log(log):
    """(container, pod, which run) of a log entry of the diagnosis."""
    return (
        log.get("container") or CONTAINER,
        log.get("pod"),
        "previous run" if log.get("previous") else "current run",
    )


def _unread(context, namespace):
    """ "could not read X: reason" for each read of the diagnosis that failed or timed out (the role's
    ``events_error`` and the ``error`` of each log entry): the diagnosis says what it lacks, and why."""
    out = []
    if context.get("events_error"):
        out.append(
            "could not read the Events of namespace %s: %s" % (namespace, _reason(context["events_error"]))
        )
    for log in context.get("logs") or []:
        if log.get("error"):
            out.append(
                "could not read the %s log of pod %s (%s): %s" % (_which_log(log) + (_reason(log["error"]),))
            )
    return out


def _pods_seen(plan, context):
    """(the revision the plan expects, the pods summarised against it)."""
    expected = expected_from_plan(plan) if plan.get("name") else None
    return expected, [pod_summary(p, expected, context.get("now")) for p in context.get("pods") or []]


def _diagnosis_input(context):
    """What the diagnosis reads, from the role's context: the service, its pods seen against the plan,
    the relevant events, the engine's errors (not those after a shutdown), what could not be read."""
    plan = context.get("plan") or {}
    name = plan.get("name") or context.get("name") or "?"
    namespace = plan.get("namespace") or context.get("namespace") or "?"
    isvc = context.get("isvc")
    expected, pods = _pods_seen(plan, context)
    log_facts = context.get("log_facts") or {}
    return dict(
        context=context,
        plan=plan,
        name=name,
        namespace=namespace,
        status=context.get("status") or {},
        isvc=isvc,
        deployment=context.get("deployment"),
        expected=expected,
        pods=pods,
        log_facts=log_facts,
        tail_lines=int(context.get("tail_lines") or 20),
        events=_relevant_events(context.get("events"), name, {p["name"] for p in pods}),
        image_vllm=log_facts.get("vllm_version"),
        errors=[e for e in log_facts.get("log_errors") or [] if not e.get("after_shutdown")],
        ready=_cond(isvc, "Ready") or {},
        model_status=((isvc or {}).get("status") or {}).get("modelStatus") or {},
        unread=_unread(context, namespace),
    )


def diagnose(context):
    """The diagnosis of one failed rollout; see the module docstring for ``context``."""
    d = _diagnosis_input(context)
    errors = d["errors"]
    cause, hints, engine, scheduling = _hints(d)
    summary, lines = _diagnosis_lines(d, cause, hints, engine)
    return {
        "summary": summary[:400],
        "cause": cause or "not-ready",
        "hints": hints,
        "text": "\n".join(lines),
        "engine_errors": errors,
        "scheduling": scheduling,
        "unread": d["unread"],
    }
