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
"""

RETURN = r"""
log:
  description: The log.
  type: str
  returned: success
log_lines:
  description: RV(log), split at each newline (as kubernetes.core.k8s_log splits it).
  type: list
  elements: str
  returned: success
"""

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import POD_LOG, action_only


def main():
    action_only("pod_log", POD_LOG)


if __name__ == "__main__":
    main()
