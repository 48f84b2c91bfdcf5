#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: pod_exec

short_description: Run a command that reads in a pod's container and return what it printed

version_added: 0.2.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Runs O(command) in a container of a running pod over the pods/exec API, as C(kubectl exec) and
    M(kubernetes.core.k8s_exec) do, and returns its exit code and output.
  - Meant for commands that only read (the smoke role looks inside the predictor pod with it), so it never
    reports C(changed) and runs in check mode too.
  - Runs on the controller as an action plugin, with the kubernetes client ansible-playbook has already
    loaded, instead of a new Python process that loads it again. The cluster is found as kubernetes.core finds
    it - its connection options (O(kubeconfig), O(context), O(host), O(api_key), O(validate_certs), O(ca_cert),
    then O(auth)), else C(KUBECONFIG) and the C(K8S_AUTH_*) variables - and it belongs to the action group
    C(specpilot.core.k8s), so one C(module_defaults) entry sets them.
  - Fails when the API refuses the exec (its message names the status, for example C(403 Forbidden) where the
    Role lacks C(create) on C(pods/exec)), when the command exits non-zero (RV(rc) says how) or when no exit
    status comes within O(timeout) seconds.

options:
  namespace:
    description: Namespace of the pod.
    type: str
    required: true
  pod:
    description: Name of the pod.
    type: str
    required: true
  container:
    description: Container to run the command in (default - the pod's first container, as the API server picks it).
    type: str
  command:
    description:
      - The program and its arguments, as a list, or as one string split as a shell splits words (no shell runs
        it - give C(sh -c '...') for one).
    type: raw
    required: true
  timeout:
    description: Seconds to wait for the command to end.
    type: int
    default: 120
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_auth.more

seealso:
  - module: kubernetes.core.k8s_exec
attributes:
  check_mode:
    support: full
    details: The command runs in check mode too (it must only read); the module never reports C(changed).
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
- name: The vLLM release in the predictor pod
  specpilot.core.pod_exec:
    namespace: ml
    pod: "{{ predictor_pod }}"
    container: kserve-container
    command: [python3, -c, "import vllm; print(vllm.__version__)"]
  register: release
  failed_when: false
"""

RETURN = r"""
rc:
  description: The command's exit code (null when no exit status came within O(timeout)).
  type: int
  returned: when the command ran
stdout:
  description: What the command printed on its standard output.
  type: str
  returned: when the command ran
stderr:
  description: What the command printed on its standard error.
  type: str
  returned: when the command ran
stdout_lines:
  description: RV(stdout), line by line.
  type: list
  elements: str
  returned: when the command ran
stderr_lines:
  description: RV(stderr), line by line.
  type: list
  elements: str
  returned: when the command ran
"""

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import POD_EXEC, action_only


def main():
    action_only("pod_exec", POD_EXEC)


if __name__ == "__main__":
    main()
