#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: k8s_read

short_description: Read Kubernetes objects, as kubernetes.core.k8s_info does, from the controller's worker process

version_added: 0.2.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Returns the object named O(name), or the objects that match O(label_selectors), as RV(resources) - the
    list M(kubernetes.core.k8s_info) returns.
  - Runs on the controller as an action plugin, through the C(kubernetes.core.k8s) lookup in the worker process,
    instead of a new Python process that loads the kubernetes client again (about half a second of CPU a read);
    each request is bounded by O(request_timeout) and transient errors (429, 5xx, no answer) are retried
    (O(retries)). The cluster is found as kubernetes.core finds it (its connection options, else C(KUBECONFIG)
    and the C(K8S_AUTH_*) variables); it belongs to the action group C(specpilot.core.k8s).
  - Read-only; never reports C(changed). Supports check mode.

options:
  api_version:
    description: API group and version of the kind (C(v1) for the core group).
    type: str
    default: v1
  kind:
    description: The kind (C(Pod), C(InferenceService), ...).
    type: str
    required: true
  name:
    description: Name of the object (none - every object that matches O(label_selectors)).
    type: str
  namespace:
    description: Namespace of the objects (none - a cluster-scoped kind, or every namespace).
    type: str
  label_selectors:
    description: Label selectors (C(key=value), C(key!=value), ...), all of which must match.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_read

seealso:
  - module: kubernetes.core.k8s_info
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
- name: The predictor pods of an InferenceService
  specpilot.core.k8s_read:
    kind: Pod
    namespace: llm
    label_selectors:
      - serving.kserve.io/inferenceservice=chat
      - component=predictor
  register: pods
"""

RETURN = r"""
resources:
  description: The objects read (empty - none found).
  type: list
  elements: dict
  returned: success
"""

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import K8S_READ, action_only


def main():
    action_only("k8s_read", K8S_READ)


if __name__ == "__main__":
    main()
