# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
"""Filters of the canary role: what a run does with the live service, how long its lock lasts, where
each arm's pods answer, and whether the cluster can split traffic at all.  The logic lives in
module_utils/operate/canary.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.operate import canary
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import parse_version


def canary_arm_pods(pods, port=8080):
    """k8s_info resources | canary_arm_pods(port) -> [{pod, url}] of the ready pods' /metrics."""
    if not isinstance(pods, (list, tuple)):
        raise AnsibleFilterError(
            "canary_arm_pods expects the resources of k8s_info, got %s" % type(pods).__name__
        )
    return canary.arm_pods(list(pods), port)


def canary_support_problem(kserve_version, deployment_mode):
    """kserve_detect's version | canary_support_problem(deployment_mode) -> why no canary here, or ''."""
    try:
        version = parse_version(str(kserve_version))[:3] if kserve_version else None
    except ValueError as exc:
        raise AnsibleFilterError("canary_support_problem: %s" % exc)
    return canary.support_problem(version, deployment_mode)


def canary_todo(isvc, plan, record=None, retry=False, resume_name=None):
    """live InferenceService | canary_todo(plan, record, retry, resume_name) -> resume, interrupted, promoted,
    recorded or run."""
    if not isinstance(isvc, dict) or not isinstance(plan, dict):
        raise AnsibleFilterError("canary_todo expects the live InferenceService and the validated plan")
    return canary.todo(
        isvc, plan, record if isinstance(record, dict) else {}, bool(retry), resume_name or None
    )


def canary_lock_seconds(ready_timeout, requested=0):
    """specpilot_canary_ready_timeout | canary_lock_seconds(specpilot_canary_lock_seconds) -> seconds."""
    try:
        return canary.lock_seconds(ready_timeout, requested or 0)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("canary_lock_seconds: %s" % exc)


def canary_summary(outcome, last_step=None):
    """outcome | canary_summary(last step) -> one sentence on where the traffic is."""
    return canary.outcome_summary(str(outcome), last_step if isinstance(last_step, dict) else {})


class FilterModule(object):
    """specpilot canary filters."""

    def filters(self):
        return {
            "canary_arm_pods": canary_arm_pods,
            "canary_lock_seconds": canary_lock_seconds,
            "canary_summary": canary_summary,
            "canary_support_problem": canary_support_problem,
            "canary_todo": canary_todo,
        }
