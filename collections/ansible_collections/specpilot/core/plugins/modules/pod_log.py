#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: pod_log

short_description: Read a pod's log, as kubernetes.core.k8s_log does, from the controller's worker process

version_added: 0.2.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Returns the log of a container of a pod (RV(log), RV(log_lines)), as M(kubernetes.core.k8s_log) returns it.
  - Runs on the controller as an action plugin, with the kubernetes client ansible-playbook has already loaded,
    instead of a new Python process that loads it again (about a second of CPU a read). The cluster is found as
    kubernetes.core finds it - its connection options (O(kubeconfig), O(context), O(host), O(api_key),
    O(validate_certs), O(ca_cert), then O(auth)), else C(KUBECONFIG) and the C(K8S_AUTH_*) variables - and it
    belongs to the action group C(specpilot.core.k8s).
  - Fails, saying why, when the log cannot be read (the API refuses C(get) on C(pods/log), the container has not
    started, there is no such pod).
  - Read-only; never reports C(changed). Supports check mode.

options:
  name:
    description: Name of the pod.
    type: str
    required: true
  namespace:
    description: Namespace of the pod.
    type: str
    required: true
  container:
    description: Container whose log is read (default - the pod's only container).
    type: str
  previous:
    description: The log of the container's previous instance (the one that exited before the last restart).
    type: bool
    default: false
  since_seconds:
    description: Only the lines of the last this many seconds.
    type: int
  tail_lines:
    description: Only the last this many lines.
    type: int
  request_timeout:
    description: Seconds to wait for the API server's answer.
    type: int
    default: 30
  vllm_facts:
    description:
      - Parse the log as M(specpilot.core.vllm_log_facts) parses it, where it is read, and return its facts (RV(facts))
        and its last line (RV(last_line)) instead of its text (no RV(log), no RV(log_lines)).
      - A play over many services keeps only the facts of each service's engine log, not the log.
    type: dict
    suboptions:
      since:
        description: As M(specpilot.core.vllm_log_facts)'s - only the lines after the last occurrence of this line.
        type: str
      max_windows:
        description: As M(specpilot.core.vllm_log_facts)'s - the speculative metrics windows kept in RV(facts).
        type: int
        default: 1000
      max_issues:
        description: As M(specpilot.core.vllm_log_facts)'s - the warnings and errors kept of each kind.
        type: int
        default: 100
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_auth.more

seealso:
  - module: kubernetes.core.k8s_log
attributes:
  check_mode:
    support: full
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
- name: The engine's log
  specpilot.core.pod_log:
    namespace: llm
    name: "{{ predictor_pod }}"
    container: kserve-container
  register: engine_log

- name: The facts of the engine's log (start-up, warnings, errors), without keeping its text
  specpilot.core.pod_log:
    namespace: llm
    name: "{{ predictor_pod }}"
    container: kserve-container
    vllm_facts:
      max_windows: 1
  register: engine_log
"""

RETURN = r"""
log:
  description: The log.
  type: str
  returned: success, without O(vllm_facts)
log_lines:
  description: RV(log), split at each newline (as kubernetes.core.k8s_log splits it).
  type: list
  elements: str
  returned: success, without O(vllm_facts)
facts:
  description: The facts of the log, as M(specpilot.core.vllm_log_facts) returns them.
  type: dict
  returned: success, with O(vllm_facts)
last_line:
  description: The last line of the log that is not empty (empty when there is none).
  type: str
  returned: success, with O(vllm_facts)
"""

from ansible_collections.specpilot.core.plugins.module_utils.fact_tasks import POD_LOG_ARGS
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import action_only


def main():
    action_only("pod_log", POD_LOG_ARGS)


if __name__ == "__main__":
    main()
