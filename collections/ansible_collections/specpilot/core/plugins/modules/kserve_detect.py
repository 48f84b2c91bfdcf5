#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: kserve_detect
short_description: Tell which KServe release a cluster runs from the schema of its CRDs
version_added: 0.1.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Reads the CustomResourceDefinitions C(inferenceservices.serving.kserve.io) and, when installed,
    C(llminferenceservices.serving.kserve.io), and dates the KServe release from fields each release added to
    their schemas - C(spec.predictor.storageUris) (0.16), C(spec.predictor.hostnameOverride) (0.17), the
    LLMInferenceService gateway C(sectionName) (0.18) and LoRA C(maxAdapters) (0.19), C(spec.canary) /
    C(spec.predictor.name) (0.20), and older ones back to 0.14.
  - The result is a range - the newest release whose fields are present, up to the first newer release whose
    fields are all absent. Without the LLMInferenceService CRD, 0.17 to 0.19 cannot be told apart.
  - Returns the release the validation gates should use - I(given) when set; otherwise I(declared) (the spec's
    C(kserve_version)) when it lies in the detected range; otherwise the range's lower bound, with a C(note).
  - Runs on the controller (action plugin). The CRDs are read through the C(kubernetes.core.k8s) lookup, with
    the connection options and C(K8S_AUTH_*) environment variables of kubernetes.core; transient API errors
    are retried. With I(crds) nothing is read from a cluster.
options:
  crds:
    description:
      - CRD objects to date instead of reading them from the cluster (offline use, tests).
    type: list
    elements: dict
  declared:
    description:
      - The KServe release the service spec declares (C(specpilot_kserve_version)). When it does not match the
        detected range, the C(note) is also returned as a warning.
    type: str
  given:
    description:
      - A release to use without detection (C(specpilot_deploy_kserve_version)); nothing is read.
    type: str
  fail_on_error:
    description:
      - Fail when the CRDs cannot be read or KServe is not installed. With C(false) the result carries
        C(error) and falls back to I(declared).
    type: bool
    default: true
notes:
  - Read-only; never reports C(changed). Supports check mode.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_read
seealso:
  - module: specpilot.core.spec_validate
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
- name: Which KServe does the cluster run?
  specpilot.core.kserve_detect:
    declared: "{{ specpilot_kserve_version | default(omit) }}"
  register: kserve
  run_once: true

- name: Validate against it
  specpilot.core.spec_validate:
    kserve_version: "{{ kserve.version }}"

- name: Offline, from CRD files
  specpilot.core.kserve_detect:
    crds:
      - "{{ lookup('ansible.builtin.file', 'serving.kserve.io_inferenceservices.yaml') | from_yaml }}"
"""

RETURN = r"""
version:
  description: The release the validation gates should use (C(0.20.0)); null when unknown.
  returned: always
  type: str
  sample: 0.20.0
source:
  description: Where C(version) comes from - C(given), C(declared) (in the detected range, or nothing detected) or C(detected).
  returned: always
  type: str
note:
  description: Why the declared release was not used, or that nothing could be detected; null otherwise.
  returned: always
  type: str
detection:
  description: The evidence; null when nothing was detected.
  returned: always
  type: dict
  contains:
    min:
      description: Lower bound (the newest release whose marker fields are present).
      type: str
      sample: 0.17.0
    max:
      description: Exclusive upper bound (the first newer release whose markers are absent); null when open.
      type: str
      sample: 0.20.0
    exact:
      description: The range holds a single minor release.
      type: bool
    range:
      description: The range in words.
      type: str
      sample: KServe 0.17 to 0.19
    markers:
      description: Each marker looked at - C({release, crd, path, what, present}).
      type: list
      elements: dict
    crds:
      description: Which KServe CRDs were found.
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_kserve


def main():
    module = AnsibleModule(argument_spec=deploy_args.KSERVE_DETECT, supports_check_mode=True)
    p = module.params
    if p["given"]:
        module.exit_json(
            changed=False, detection=None, **deploy_kserve.effective_version(None, p["declared"], p["given"])
        )
    if p["crds"] is None:
        module.fail_json(msg="without crds, kserve_detect runs as an action plugin on the controller")
    try:
        detection = deploy_kserve.detect({(c.get("metadata") or {}).get("name"): c for c in p["crds"]})
    except deploy_kserve.DetectError as exc:
        if p["fail_on_error"]:
            module.fail_json(msg=str(exc))
        module.exit_json(
            changed=False, detection=None, error=str(exc), version=None, source=None, note=str(exc)
        )
    module.exit_json(
        changed=False, detection=detection, **deploy_kserve.effective_version(detection, p["declared"])
    )


if __name__ == "__main__":
    main()
