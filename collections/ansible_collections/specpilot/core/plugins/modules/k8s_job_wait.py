#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: k8s_job_wait

short_description: Wait for a Kubernetes Job, print its progress, return its result line

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Polls a batch/v1 Job and its newest pod until the Job is C(Complete) or C(Failed), printing new
    lines of the pod's log as they arrive (every program line, and the latest C(progress) line of each
    poll), so that a long staging copy shows bytes done / total while the play waits.
  - On success returns the parsed C(SPECPILOT-RESULT {json}) line of the log as RV(result).
  - On failure fails with the Job's reason (C(BackoffLimitExceeded), C(DeadlineExceeded), ...), the
    container's exit code, the program's C(SPECPILOT-ERROR) message and the file it names, and the log tail.
  - Fails early, with the reason, when the pod cannot start (C(CreateContainerConfigError) such as a missing
    Secret, C(InvalidImageName)), cannot pull its image for O(pull_timeout) seconds, or stays unschedulable for
    O(pending_timeout) seconds.
  - Runs on the controller as an action plugin, in the worker process; it reads the Job and its pods through
    the C(kubernetes.core.k8s) lookup and the pod's log with the client of kubernetes.core's C(get_api_client),
    with its connection options (O(kubeconfig), O(context), O(host), O(api_key), O(validate_certs), O(ca_cert),
    then O(auth)), so the cluster is found as kubernetes.core finds it (C(KUBECONFIG) and the C(K8S_AUTH_*)
    variables when none is set).
  - Never reports C(changed). In check mode it is skipped.

options:
  name:
    description: Name of the Job.
    type: str
    required: true
  namespace:
    description: Namespace of the Job.
    type: str
    required: true
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

notes:
  - "Progress lines appear in the play's output as C([host] specpilot-stage: progress ...) while the task runs."

seealso:
  - module: specpilot.core.stage_pvc_plan
  - module: kubernetes.core.k8s_info
  - module: kubernetes.core.k8s_log
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
- name: Wait for the staging Job
  specpilot.core.k8s_job_wait:
    name: "{{ stage_plan.job_name }}"
    namespace: ml
    timeout: 7200
  register: stage_job
"""

RETURN = r"""
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

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import K8S_JOB_WAIT, action_only


def main():
    action_only("k8s_job_wait", K8S_JOB_WAIT)


if __name__ == "__main__":
    main()
