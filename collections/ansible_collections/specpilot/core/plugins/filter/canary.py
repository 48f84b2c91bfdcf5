# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the canary role: what a run does with the live service, how long its lock lasts, where
each arm's pods answer, whether the cluster can split traffic at all, and Knative mode's split, waits and
abort.  The logic lives in
module_utils/operate/canary.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.specpilot.core.plugins.module_utils.operate import canary, canary_change
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


def canary_kind_problem(kind):
    """plan.kind | canary_kind_problem -> why a service of this kind cannot have a canary, or ''."""
    return canary.kind_problem(str(kind or ""))


def canary_todo(isvc, plan, record=None, retry=False, resume_name=None, runtime=None):
    """live InferenceService | canary_todo(plan, record, retry, resume_name, runtime) -> resume, interrupted,
    promoted, recorded or run."""
    if not isinstance(isvc, dict) or not isinstance(plan, dict):
        raise AnsibleFilterError("canary_todo expects the live InferenceService and the validated plan")
    return canary.todo(
        isvc, plan, record if isinstance(record, dict) else {}, bool(retry), resume_name or None,
        runtime if isinstance(runtime, dict) else None,
    )


def canary_images(isvc, plan, runtime=None):
    """live InferenceService | canary_images(plan, runtime) -> {stable, canary, changed, pinned, on_canary,
    stable_vllm, canary_vllm, text, problem}: the runtime image and vLLM release of both arms, and why the change cannot be promoted ('')."""
    if not isinstance(isvc, dict) or not isinstance(plan, dict):
        raise AnsibleFilterError("canary_images expects the live InferenceService and the validated plan")
    return canary_change.image_arms(isvc, plan, runtime if isinstance(runtime, dict) else None)


def canary_promotion(plan, images):
    """plan | canary_promotion(images) -> {runtime, unpin}: what a promotion writes after the predictor so that the
    service is what deploy.yml of the spec makes (deploy's ServingRuntime with the spec's image; the merge patch that
    removes the predictor's model.image), each none when there is nothing to write."""
    if not isinstance(plan, dict) or not isinstance(images, dict):
        raise AnsibleFilterError("canary_promotion expects the validated plan and canary_images' result")
    return canary_change.promotion_writes(plan, images)


def canary_sampling(isvc, plan):
    """live InferenceService | canary_sampling(plan) -> {stable, canary, change, problem}: the sampling flags of
    both arms, whether the live service speculates (a change) and why the arms would not sample alike ('')."""
    if not isinstance(isvc, dict) or not isinstance(plan, dict):
        raise AnsibleFilterError("canary_sampling expects the live InferenceService and the validated plan")
    return canary_change.sampling(isvc, plan)


def canary_lock_seconds(ready_timeout, requested=0):
    """specpilot_canary_ready_timeout | canary_lock_seconds(specpilot_canary_lock_seconds) -> seconds."""
    try:
        return canary.lock_seconds(ready_timeout, requested or 0)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("canary_lock_seconds: %s" % exc)


def canary_ready_seconds(requested, plan):
    """specpilot_canary_ready_timeout | canary_ready_seconds(plan) -> seconds (0: the plan's startup timeout + 300)."""
    try:
        return canary.ready_seconds(requested, plan if isinstance(plan, dict) else {})
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("canary_ready_seconds: %s" % exc)


def canary_summary(outcome, last_step=None):
    """outcome | canary_summary(last step) -> one sentence on where the traffic is."""
    return canary.outcome_summary(str(outcome), last_step if isinstance(last_step, dict) else {})


def _isvc(value, name):
    if not isinstance(value, dict):
        raise AnsibleFilterError(
            "%s expects an InferenceService (a mapping), got %s" % (name, type(value).__name__)
        )
    return value


def canary_left(isvc):
    """live InferenceService | canary_left -> {name, percent} of the canary a run left on it, or None."""
    return canary.left_canary(_isvc(isvc, "canary_left"))


def canary_arm_selectors(deployment_mode, baseline, canary_arm):
    """deployment_mode | canary_arm_selectors(baseline, canary) -> {baseline, canary} label selectors of the
    arms' pods (Standard: the predictor Deployments; Knative: the revisions)."""
    return canary.arm_selectors(str(deployment_mode), baseline, canary_arm)


def canary_knative_split(isvc):
    """InferenceService | canary_knative_split -> the Knative traffic split (revisions, shares, Ready)."""
    return canary.knative_split(_isvc(isvc, "canary_knative_split"))


def canary_knative_step_problem(isvc, percent, stable_revision=None):
    """InferenceService | canary_knative_step_problem(percent, stable revision) -> '' once the step's split is
    in place, else what is missing."""
    return canary.knative_step_problem(
        _isvc(isvc, "canary_knative_step_problem"), int(percent), stable_revision
    )


def canary_knative_restored_problem(isvc, before_revision, new_revision=True):
    """InferenceService | canary_knative_restored_problem(newest revision before the abort's write, whether it makes
    one) -> '' once the restored spec's revision is the newest and ready, else what is missing."""
    return canary.knative_restored_problem(
        _isvc(isvc, "canary_knative_restored_problem"), before_revision, boolean(new_revision, strict=False)
    )


def canary_stable(isvc):
    """live InferenceService | canary_stable -> {labels, annotations, predictor}: what a Knative abort restores."""
    return canary.stable_of(_isvc(isvc, "canary_stable"))


def canary_knative_abort_patch(isvc, stable):
    """live InferenceService | canary_knative_abort_patch(stable) -> the abort's merge patch (canaryTrafficPercent
    0, the stable metadata and predictor)."""
    if not isinstance(stable, dict) or not isinstance(stable.get("predictor"), dict):
        raise AnsibleFilterError(
            "canary_knative_abort_patch: the stable spec on record is missing or not {labels, annotations, "
            "predictor}: %r" % (stable,)
        )
    return canary.knative_abort_patch(_isvc(isvc, "canary_knative_abort_patch"), stable)


class FilterModule(object):
    """specpilot canary filters."""

    def filters(self):
        return {
            "canary_arm_pods": canary_arm_pods,
            "canary_arm_selectors": canary_arm_selectors,
            "canary_images": canary_images,
            "canary_kind_problem": canary_kind_problem,
            "canary_knative_abort_patch": canary_knative_abort_patch,
            "canary_knative_restored_problem": canary_knative_restored_problem,
            "canary_knative_split": canary_knative_split,
            "canary_knative_step_problem": canary_knative_step_problem,
            "canary_left": canary_left,
            "canary_promotion": canary_promotion,
            "canary_sampling": canary_sampling,
            "canary_stable": canary_stable,
            "canary_lock_seconds": canary_lock_seconds,
            "canary_ready_seconds": canary_ready_seconds,
            "canary_summary": canary_summary,
            "canary_support_problem": canary_support_problem,
            "canary_todo": canary_todo,
        }
