#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_wait
short_description: Wait until the new rollout of an InferenceService is ready, with progress output
version_added: 0.1.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Polls the InferenceService, its Deployment and its predictor pods until the rollout of the plan is complete,
    has failed for good, or the timeout passes; prints a progress line whenever the picture changes (and at least
    every I(progress_interval) seconds).
  - Never trusts a stale C(Ready). Standard mode - the Deployment C(<name>-predictor) has
    C(observedGeneration == generation), its pod template's C(kserve-container) ends with the plan's C(args)
    (and carries the plan's C(specpilot.io/spec-digest) annotation when KServe copies annotations there),
    C(replicas == updatedReplicas == availableReplicas), and the InferenceService is C(Ready). Knative mode -
    C(latestReadyRevision == latestCreatedRevision), that revision is new when a rollout was expected
    (I(baseline)) and takes 100% of the traffic, and the InferenceService is C(Ready).
  - Stops early when the rollout cannot succeed - a new pod's C(kserve-container) keeps crashing or is OOMKilled
    (I(fail_fast_restarts)), its image cannot be pulled (I(image_grace)), its init container (modelcar-init)
    fails, it stays unschedulable longer than I(pending_grace) (e.g. insufficient C(nvidia.com/gpu)), or KServe
    declares the spec invalid.
  - Does not fail by itself (unless I(fail_on_error)) - it returns C(done), the last C(status) and the objects,
    and the deploy role assembles the diagnosis.
options:
  plan:
    description:
      - The validated plan (C(specpilot.core.spec_validate)'s C(plan)); C(name), C(namespace), C(spec_digest),
        C(args), C(deployment_mode) and C(startup_timeout_seconds) are used.
    type: dict
    required: true
  baseline:
    description:
      - What was live before the apply - C({latest_created_revision, deployment_generation, rollout_expected}) - so
        that the old revision cannot pass for the new one.
    type: dict
    default: {}
  timeout:
    description: Seconds to wait; C(0) means the plan's C(startup_timeout_seconds) + 300.
    type: int
    default: 0
  delay:
    description:
      - The longest pause between two polls, in seconds. The first pauses are shorter (0.5, 1, 2, 4, ... seconds,
        doubling up to this), so a rollout done in seconds is seen when it is done.
    type: float
    default: 5.0
  fail_fast_restarts:
    description: A new pod whose C(kserve-container) restarted this often after exiting non-zero fails the rollout.
    type: int
    default: 2
  pending_grace:
    description: Seconds a new pod may stay unschedulable (a cluster autoscaler may add a GPU node meanwhile).
    type: int
    default: 300
  image_grace:
    description: Seconds a new pod may wait in C(ErrImagePull)/C(ImagePullBackOff).
    type: int
    default: 300
  progress_interval:
    description: Print a progress line at least this often (seconds), even when nothing changed.
    type: int
    default: 30
  fail_on_error:
    description: Fail the task when the rollout is not done (the message is the last status).
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - specpilot.core.held_lock
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_read
notes:
  - A lost lock stops the wait with C(cause=lock).
  - Read-only; never reports C(changed). In check mode it returns at once with C(skipped).
seealso:
  - module: specpilot.core.deploy_state
attributes:
  check_mode:
    support: partial
    details: In check mode it returns at once, C(skipped) (nothing to wait for when nothing was changed).
  diff_mode:
    support: none
  platform:
    platforms: posix
  action_group:
    support: full
    membership:
      - specpilot.core.k8s
"""

EXAMPLES = r"""
- name: Wait for the new engine
  specpilot.core.rollout_wait:
    plan: "{{ plan }}"
    baseline: "{{ decision.baseline | combine({'rollout_expected': decision.rollout_expected}) }}"
  register: rollout

- name: Show why it is not ready
  ansible.builtin.debug:
    msg: "{{ rollout.status.message }}"
  when: not rollout.done
"""

RETURN = r"""
done:
  description: The rollout is complete.
  returned: always
  type: bool
timed_out:
  description: The timeout passed before the rollout completed or failed.
  returned: always
  type: bool
elapsed:
  description: Seconds waited.
  returned: always
  type: float
timeout:
  description: The timeout used (seconds).
  returned: always
  type: int
polls:
  description: Number of polls.
  returned: always
  type: int
status:
  description: The last evaluation - C({done, failed, cause, phase, message, progress, waiting_for, activity, checks,
    pods}); C(activity) says what the new pods do (starting, the engine loading, container restarts).
    C(cause) is one of C(crashloop), C(oomkilled), C(image), C(init), C(unschedulable), C(invalid-spec), C(api).
  returned: always
  type: dict
inferenceservice:
  description: The InferenceService as last read.
  returned: always
  type: dict
deployment:
  description: The Deployment as last read (Standard mode).
  returned: always
  type: dict
pods:
  description: The predictor pods as last read.
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import ROLLOUT_WAIT, action_only


def main():
    action_only("rollout_wait", ROLLOUT_WAIT)


if __name__ == "__main__":
    main()
