# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Reading a batch/v1 Job while it runs: its state, why its pod is stuck, which log lines are
new, and the result or error line a specpilot program prints last."""

from __future__ import absolute_import, division, print_function

import json

__metaclass__ = type

RESULT_PREFIX = "SPECPILOT-RESULT "
ERROR_PREFIX = "SPECPILOT-ERROR "
# waiting reasons that never fix themselves without a change by the user
FATAL_WAITING = (
    "InvalidImageName",
    "CreateContainerConfigError",
    "ErrImageNeverPull",
    "CreateContainerError",
    "RunContainerError",
    "StartError",
)
PULL_WAITING = ("ErrImagePull", "ImagePullBackOff", "RegistryUnavailable")


def job_state(job):
    """("missing"|"running"|"complete"|"failed", reason, message) of a Job object."""
    if not job:
        return "missing", None, None
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return "complete", cond.get("reason"), cond.get("message")
        if cond.get("type") == "Failed":
            return "failed", cond.get("reason"), cond.get("message")
    return "running", None, None


def newest_pod(pods):
    pods = [p for p in pods or [] if not (p.get("metadata") or {}).get("deletionTimestamp")] or list(
        pods or []
    )
    if not pods:
        return None
    return sorted(
        pods,
        key=lambda p: (
            (p.get("metadata") or {}).get("creationTimestamp") or "",
            (p.get("metadata") or {}).get("name") or "",
        ),
    )[-1]


def pod_summary(pod):
    """{phase, waiting_reason, waiting_message, started, exit_code, terminated_reason, unschedulable}."""
    out = {
        "phase": None,
        "waiting_reason": None,
        "waiting_message": None,
        "started": False,
        "exit_code": None,
        "terminated_reason": None,
        "unschedulable": None,
        "name": None,
    }
    if not pod:
        return out
    out["name"] = (pod.get("metadata") or {}).get("name")
    status = pod.get("status") or {}
    out["phase"] = status.get("phase")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            out["unschedulable"] = cond.get("message") or cond.get("reason") or "unschedulable"
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason") not in (
            None,
            "ContainerCreating",
            "PodInitializing",
        ):
            out["waiting_reason"] = state["waiting"].get("reason")
            out["waiting_message"] = state["waiting"].get("message")
        if "running" in state:
            out["started"] = True
        if "terminated" in state:
            out["started"] = True
            out["exit_code"] = state["terminated"].get("exitCode")
            out["terminated_reason"] = state["terminated"].get("reason")
    return out


def new_lines(previous, current):
    """The lines of ``current`` (a log tail) after what ``previous`` (the last tail) ended with."""
    if not previous:
        return list(current)
    for end in range(len(current), 0, -1):
        # previous' last lines (up to 5, the same line may repeat) end at current[end - 1]
        m = min(end, len(previous), 5)
        if current[end - m : end] == previous[-m:]:
            return list(current[end:])
    return list(current)


def parse_log(text):
    """{lines, progress (last progress line), result (dict), error (dict)} of a program log."""
    lines = (text or "").splitlines()
    out = {"lines": lines, "progress": None, "result": None, "error": None}
    for line in lines:
        body = line.split("specpilot-stage: ", 1)[-1]
        if body.startswith("progress "):
            out["progress"] = line
        if line.startswith(RESULT_PREFIX):
            try:
                out["result"] = json.loads(line[len(RESULT_PREFIX) :])
            except ValueError:
                pass
        elif line.startswith(ERROR_PREFIX):
            try:
                out["error"] = json.loads(line[len(ERROR_PREFIX) :])
            except ValueError:
                out["error"] = {"message": line[len(ERROR_PREFIX) :]}
    return out


def displayable(lines, pattern_prefix="specpilot-stage: "):
    """Which new lines to show while waiting: every program line except progress lines, then the
    last progress line."""
    shown = []
    progress = None
    for line in lines:
        if line.startswith((RESULT_PREFIX, ERROR_PREFIX)):
            continue
        if pattern_prefix and not line.startswith(pattern_prefix):
            continue
        if line[len(pattern_prefix) :].startswith("progress "):
            progress = line
            continue
        shown.append(line)
    if progress:
        shown.append(progress)
    return shown


def stuck_reason(summary, now, started, waits, params):
    """(why, timed_out) when the Job's pod will not get anywhere by waiting longer, else None.

    A pod that cannot start never will without the user (FATAL_WAITING); an image that cannot be
    pulled for ``pull_timeout`` seconds, or a pod that cannot be scheduled for ``pending_timeout``,
    is stuck too; past ``timeout`` the wait ends (the Job keeps running). ``waits`` keeps, between
    polls, since when (``now`` values) the pod has been pulling and pending; it is updated here."""
    reason, message = summary["waiting_reason"], summary["waiting_message"] or ""
    if reason in FATAL_WAITING:
        return "%s: %s" % (reason, message), False
    waits["pulling"] = (waits.get("pulling") or now) if reason in PULL_WAITING else None
    waits["pending"] = (waits.get("pending") or now) if summary["unschedulable"] else None
    if waits["pulling"] is not None and now - waits["pulling"] > params["pull_timeout"]:
        return "the image cannot be pulled (%s): %s" % (reason, message), False
    if waits["pending"] is not None and now - waits["pending"] > params["pending_timeout"]:
        return "the pod cannot be scheduled: %s" % summary["unschedulable"], False
    if now - started > params["timeout"]:
        return (
            "still running after %ds; it keeps running - run the play again to wait for it (it is found by name)"
            % params["timeout"],
            True,
        )
    return None


def failure_message(name, namespace, reason, message, error, tail, pod=None):
    parts = ["Job %s/%s failed" % (namespace, name)]
    if reason:
        parts[0] += " (%s%s)" % (reason, (": " + message) if message else "")
    if pod and pod.get("exit_code") is not None:
        parts.append(
            "container exit code %s%s"
            % (pod["exit_code"], " (%s)" % pod["terminated_reason"] if pod.get("terminated_reason") else "")
        )
    if error:
        parts.append("error: %s" % error.get("message"))
        if error.get("path"):
            parts.append(
                "file: %s%s" % (error["path"], (" (%s)" % error["role"]) if error.get("role") else "")
            )
    if tail:
        parts.append("log tail:\n" + "\n".join("  " + line for line in tail))
    else:
        parts.append("no log available (the pod may have been deleted)")
    return "\n".join(parts)
