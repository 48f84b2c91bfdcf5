#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: k8s_job

short_description: Run a Kubernetes Job - create it, wait for it with progress, read its log, delete it

version_added: 0.2.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Runs the Job of O(definitions) (with the objects it mounts, such as its ConfigMap) from start to end, the
    one way the collection runs a Job (the PVC staging Job, the PVC reclaim Job, the benchmark's load and
    C(vllm bench) Jobs, and the cluster probe of M(specpilot.core.cluster_probe)).
  - An earlier Job of the same name is removed first, or waited for (O(replace)); the objects are written with
    C(kubernetes.core.k8s) (C(state=present)), again while that fails with a transient error (O(retries)); the
    Job is waited for as M(specpilot.core.k8s_job_wait) waits (new log lines shown, an early failure when the
    pod cannot start, the service's O(lock) renewed); with O(log) its pod's whole log is returned; then the
    objects are deleted (O(delete)).
  - Runs on the controller as an action plugin, in the worker process, with kubernetes.core's connection options.
  - Reports C(changed) when it created or deleted the Job. In check mode nothing is written; C(changed) says whether a Job would be created.

options:
  definitions:
    description:
      - The Job (exactly one object of kind C(Job), with C(metadata.name) and C(metadata.namespace)) and the
        objects it needs, such as the ConfigMap it mounts.
    type: list
    elements: dict
    required: true
  replace:
    description:
      - What happens to an earlier Job of the same name.
      - C(finished) - removed (and waited for until gone) when it has ended, waited for when it still runs.
      - C(always) - removed first in any case.
      - C(never) - waited for as it is; a Job is created only when there is none.
    type: str
    choices: [finished, always, never]
    default: finished
  delete:
    description:
      - When the objects of O(definitions) are deleted after the wait (the Job's pods with it).
      - C(success) keeps them when the Job failed, for C(kubectl logs).
    type: str
    choices: [always, success, never]
    default: always
  owned:
    description: The other objects of O(definitions) name the Job as their owner, so they are garbage-collected with it.
    type: bool
    default: false
  log:
    description: Return the pod's whole log as RV(log).
    type: bool
    default: false
  retries:
    description: Attempts of each write while it fails with a transient error (429, 5xx, no answer).
    type: int
    default: 5
  container:
    description: Container whose log is read (default - the pod's only container).
    type: str
  timeout:
    description:
      - Seconds to wait before failing with RV(timed_out). The Job keeps running; waiting again attaches to it.
    type: int
    default: 3600
  poll_interval:
    description: Seconds between polls (each poll reads the Job, its pods and, once started, the pod's log).
    type: float
    default: 5.0
  pending_timeout:
    description: Seconds an unschedulable pod is tolerated (cluster autoscalers need some).
    type: int
    default: 900
  pull_timeout:
    description: Seconds an image pull may keep failing.
    type: int
    default: 300
  log_tail_lines:
    description: Log lines returned in RV(log_tail) and shown on failure.
    type: int
    default: 40
  show_progress:
    description: Print new log lines while waiting.
    type: bool
    default: true
  line_prefix:
    description: Only log lines with this prefix are printed while waiting (empty - every line).
    type: str
    default: "specpilot-stage: "
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - specpilot.core.held_lock
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_auth.more

seealso:
  - module: specpilot.core.k8s_job_wait
  - module: kubernetes.core.k8s
attributes:
  check_mode:
    support: full
    details: Nothing is written; C(changed) says whether a Job would be created.
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
- name: Run the reclaim Job and wait for it
  specpilot.core.k8s_job:
    definitions:
      - apiVersion: batch/v1
        kind: Job
        metadata:
          name: chat-reclaim-draft
          namespace: ml
        spec:
          backoffLimit: 0
          template:
            spec:
              restartPolicy: Never
              containers:
                - name: reclaim
                  image: busybox:1.36
                  command: [/bin/sh, -c, "rm -rf /data/draft"]
    replace: never
    delete: never
    timeout: 600
  register: reclaim
"""

RETURN = r"""
created:
  description: Whether this task created the Job (false when an earlier one was waited for).
  type: bool
  returned: unless in check mode
deleted:
  description: Whether the objects were deleted after the wait.
  type: bool
  returned: unless in check mode
job_name:
  description: The Job's name.
  type: str
  returned: always
log:
  description: The pod's whole log, with O(log).
  type: str
  returned: with O(log), when the Job's pod started
lock:
  description: The lock after the wait (C(holder), C(resource_version), C(renewals)), with O(lock).
  returned: when O(lock) is given
  type: dict
succeeded:
  description: Whether the Job completed.
  type: bool
  returned: when the Job finished
result:
  description: The parsed C(SPECPILOT-RESULT) line, or null when the log has none.
  type: dict
  returned: when the Job finished
error:
  description: The parsed C(SPECPILOT-ERROR) line (C(message), C(path), C(role), C(permanent)), or null.
  type: dict
  returned: when the Job finished
progress:
  description: The last progress line seen.
  type: str
  returned: when the Job finished
log_tail:
  description: The last O(log_tail_lines) lines of the pod's log.
  type: list
  elements: str
  returned: when the Job finished
job:
  description: The Job object as last read.
  type: dict
  returned: when the Job finished
pod:
  description: Summary of the newest pod (C(name), C(phase), C(exit_code), C(waiting_reason), ...).
  type: dict
  returned: always
reason:
  description: The Job's failure reason.
  type: str
  returned: when the Job failed
timed_out:
  description: Whether O(timeout) passed.
  type: bool
  returned: on failure
elapsed:
  description: Seconds waited.
  type: float
  returned: always
"""

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import K8S_JOB, action_only


def main():
    action_only("k8s_job", K8S_JOB)


if __name__ == "__main__":
    main()
