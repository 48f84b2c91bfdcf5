#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_state
short_description: Read the live objects of one specpilot service in one step
version_added: 0.1.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Reads what the deploy role compares its plan with, in the Ansible worker process - the namespace, the
    InferenceService, the (Cluster)ServingRuntime specpilot manages for it, the deploy lock (Lease
    C(specpilot-deploy-<name>)), the revision history (ConfigMap C(<name>-specpilot-history)) and, when the
    InferenceService exists, its predictor's Deployment (Standard mode) and its predictor pods (label
    C(serving.kserve.io/inferenceservice=<name>)).
  - The predictor's Deployment is C(<name>-predictor), or C(<name>-<predictor.name>-predictor) when the
    predictor has a name (KServe 0.20, a promoted canary).
  - Absent objects are returned as null (pods as an empty list). Nothing is read in a namespace that does not
    exist.
  - A no-op re-run of deploy decides from this one read that nothing needs to be written, so it costs a few
    HTTP requests per service instead of a module run per object.
  - "Three ways to call it: one service (I(name), I(namespace)); every service of a play at once (I(services), with
    C(run_once): one API client, a few threads, C(states) keyed C(namespace/name)); or the decision alone from
    objects read before (I(live): nothing is read, and the worker never imports the kubernetes client)."
  - With I(plan) (the validated plan of C(specpilot.core.spec_validate)) it also compares the plan with the objects,
    like the filter C(specpilot.core.deploy_decision), and says why the service cannot be deployed now (C(problem)).
options:
  name:
    description: InferenceService name (required unless I(services) is given).
    type: str
  namespace:
    description: Its namespace (required unless I(services) is given).
    type: str
  services:
    description:
      - Read many services in one step - a list of C({name, namespace, runtime, deployment_mode}); the other options
        apply to each. Returns C(states).
    type: list
    elements: dict
  live:
    description:
      - The objects of one service as read before (an entry of C(states)); nothing is read. An entry that holds
        C(error) fails the task with it.
    type: dict
  rollback:
    description:
      - The rollback role's decision on what was read (module_utils/operate/rollback.py C(decide)), in the result's
        C(rollback_decision) - C(mode) (off or restore) and C(options) (those of the filter
        C(specpilot.core.rollback_decision)). Made in this process, as C(plan)'s decision is.
    type: dict
  plan:
    description: The validated plan; with it the result holds C(decision) and C(problem).
    type: dict
  field_manager:
    description: The server-side apply field manager the decision checks ownership for.
    type: str
    default: specpilot
  history_limit:
    description: Revisions the history ConfigMap keeps (for the history entry of the decision).
    type: int
    default: 10
  lock_holder:
    description: The identity of this deploy; a lease it holds is not a problem.
    type: str
    default: ""
  create_namespace:
    description: A missing namespace is not a problem (the caller creates it).
    type: bool
    default: false
  fail_on_problem:
    description: Fail when the service cannot be deployed now (C(msg) says why).
    type: bool
    default: false
  result_fact:
    description: Also set this fact to the decision's C(result) (merged with I(result_extra)).
    type: str
  result_extra:
    description: Keys merged into the fact named by I(result_fact).
    type: dict
    default: {}
  deployment_mode:
    description:
      - KServe deployment mode; the Deployment is read in Standard mode only.
      - The legacy names are read as the validated plan reads them - C(RawDeployment) is C(Standard), C(Serverless) is
        C(Knative).
    type: str
    default: Standard
    choices: [Standard, Knative, RawDeployment, Serverless]
  kind:
    description:
      - The serving resource (the validated plan's C(kind)). For C(LLMInferenceService) its object (under the key
        C(inferenceservice) of the answer), its decode Deployment C(<name>-kserve) and its pods are read.
    type: str
    default: InferenceService
    choices: [InferenceService, LLMInferenceService]
  api_version:
    description:
      - The apiVersion of an C(LLMInferenceService) (the plan's C(api_version)).
    type: str
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
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_read
notes:
  - Read-only; never reports C(changed). Supports check mode.
seealso:
  - module: specpilot.core.rollout_wait
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

- name: Read every service of the play at once
  specpilot.core.deploy_state:
    services: "{{ ansible_play_batch | map('extract', hostvars, 'service_ref') | list }}"
  register: all_live
  run_once: true

- name: Decide per service from that read, and fail a service that cannot be deployed now
  specpilot.core.deploy_state:
    live: "{{ all_live.states[plan.namespace ~ '/' ~ plan.name] }}"
    plan: "{{ plan }}"
    fail_on_problem: true
  register: this
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
  description: The predictor's Deployment (Standard mode), or null.
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
  description: API requests made (retries included; 0 with I(live)).
  returned: always
  type: int
states:
  description: With I(services) - C({namespace/name - the keys above, or C({error})}) per service.
  returned: with services
  type: dict
decision:
  description: With I(plan) - what C(specpilot.core.deploy_decision) returns (C(needs_apply), C(ready), the objects to
    apply with the revision record, the history entry, the rollout baseline, C(result)).
  returned: with plan
  type: dict
problem:
  description: With I(plan) - why the service cannot be deployed now (namespace or existing runtime missing, lock held
    by another deploy), or an empty string.
  returned: with plan
  type: str
"""

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import DEPLOY_STATE, action_only


def main():
    action_only("deploy_state", DEPLOY_STATE)


if __name__ == "__main__":
    main()
