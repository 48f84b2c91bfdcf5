#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see galaxy.yml)

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_state
short_description: Read the live objects of one specpilot service in one step
version_added: 0.1.0
author:
  - specpilot maintainers
description:
  - Reads what the deploy role compares its plan with, in the Ansible worker process - the namespace, the
    InferenceService, the (Cluster)ServingRuntime specpilot manages for it, the deploy lock (Lease
    C(specpilot-deploy-<name>)), the revision history (ConfigMap C(<name>-specpilot-history)) and, when the
    InferenceService exists, its Deployment C(<name>-predictor) (Standard mode) and its predictor pods (label
    C(serving.kserve.io/inferenceservice=<name>)).
  - Absent objects are returned as null (pods as an empty list). Nothing is read in a namespace that does not
    exist.
  - A no-op re-run of deploy decides from this one read that nothing needs to be written, so it costs a few
    HTTP requests per service instead of a module run per object.
options:
  name:
    description: InferenceService name.
    type: str
    required: true
  namespace:
    description: Its namespace.
    type: str
    required: true
  deployment_mode:
    description: KServe deployment mode; the Deployment is read in Standard mode only.
    type: str
    default: Standard
    choices: [Standard, Knative]
  runtime:
    description:
      - The runtime to read, C({kind, name}) (the validated plan's C(runtime)); C(kind) is C(ServingRuntime)
        (in I(namespace)) or C(ClusterServingRuntime). Omit to skip.
    type: dict
  lease:
    description: Read the deploy lock.
    type: bool
    default: true
  history:
    description: Read the revision history ConfigMap.
    type: bool
    default: true
  workload:
    description: Read the Deployment and the pods.
    type: bool
    default: true
extends_documentation_fragment:
  - specpilot.core.k8s_read
notes:
  - Read-only; never reports C(changed). Supports check mode.
seealso:
  - module: specpilot.core.rollout_wait
  - module: kubernetes.core.k8s_info
"""

EXAMPLES = r"""
- name: Read what runs now
  specpilot.core.deploy_state:
    name: "{{ plan.name }}"
    namespace: "{{ plan.namespace }}"
    runtime: "{{ plan.runtime }}"
    deployment_mode: "{{ plan.deployment_mode }}"
  register: live

- name: Decide what to change
  ansible.builtin.set_fact:
    decision: "{{ plan | specpilot.core.deploy_decision(live) }}"
"""

RETURN = r"""
namespace_exists:
  description: The namespace exists.
  returned: always
  type: bool
inferenceservice:
  description: The InferenceService, or null.
  returned: always
  type: dict
servingruntime:
  description: The runtime named in I(runtime), or null.
  returned: always
  type: dict
deployment:
  description: The Deployment C(<name>-predictor) (Standard mode), or null.
  returned: always
  type: dict
pods:
  description: The predictor pods.
  returned: always
  type: list
  elements: dict
lease:
  description: The deploy lock Lease, or null.
  returned: always
  type: dict
history:
  description: The revision history ConfigMap, or null.
  returned: always
  type: dict
requests:
  description: API requests made (retries included).
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specpilot.core.plugins.module_utils import deploy_args


def main():
    module = AnsibleModule(argument_spec=deploy_args.DEPLOY_STATE, supports_check_mode=True)
    module.fail_json(msg="specpilot.core.deploy_state runs as an action plugin on the controller")


if __name__ == "__main__":
    main()
