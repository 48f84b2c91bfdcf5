#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: crd_validate
short_description: Validate manifests strictly against the cluster's own CRD schemas
version_added: 0.1.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Fetches the CustomResourceDefinition of each manifest's kind from the cluster (or takes I(crds)), picks the
    schema of the manifest's API version, and validates the manifest against it the way
    C(kubectl --validate=strict) does - types, required fields, enums, patterns, bounds, and unknown fields
    (C(additionalProperties) closed wherever the schema declares properties and does not preserve unknown fields).
  - Unknown fields matter because an API server prunes them silently - a C(spec.predictor.storageUris) on a KServe
    older than 0.16 would vanish and the pod would start without its draft. Use it before the apply; the deploy
    role also runs a server-side dry run and compares what comes back.
options:
  manifests:
    description: The manifests (InferenceService, ServingRuntime, ClusterServingRuntime, or any custom resource).
    type: list
    elements: dict
    required: true
  crds:
    description: CRD objects to validate against instead of reading them from the cluster.
    type: list
    elements: dict
  fail_on_error:
    description: Fail when a manifest does not validate (the message lists every problem).
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
requirements:
  - jsonschema on the controller
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
- name: The rendered objects must validate against the cluster's CRDs
  specpilot.core.crd_validate:
    manifests:
      - "{{ plan.inferenceservice }}"
      - "{{ plan.servingruntime }}"
"""

RETURN = r"""
ok:
  description: Every manifest validated.
  returned: always
  type: bool
errors:
  description: The problems, C({object, path, message}).
  returned: always
  type: list
  elements: dict
  sample:
    - object: InferenceService/chat
      path: spec.predictor.model
      message: "Additional properties are not allowed ('storageUris' was unexpected)"
checked:
  description: The objects that were validated (C(Kind/name)).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_kserve


def _crd_name(manifest):
    plurals = {
        "InferenceService": "inferenceservices",
        "ServingRuntime": "servingruntimes",
        "ClusterServingRuntime": "clusterservingruntimes",
    }
    kind = manifest.get("kind") or ""
    return "%s.%s" % (
        plurals.get(kind, kind.lower() + "s"),
        (manifest.get("apiVersion") or "").rpartition("/")[0],
    )


def main():
    module = AnsibleModule(argument_spec=deploy_args.CRD_VALIDATE, supports_check_mode=True)
    p = module.params
    if p["crds"] is None:
        module.fail_json(msg="without crds, crd_validate runs as an action plugin on the controller")
    crds = {(c.get("metadata") or {}).get("name"): c for c in p["crds"]}
    errors, checked = [], []
    for manifest in [m for m in p["manifests"] if m]:
        ref = "%s/%s" % (manifest.get("kind"), (manifest.get("metadata") or {}).get("name"))
        schema = deploy_kserve.crd_version_schema(
            crds.get(_crd_name(manifest)), (manifest.get("apiVersion") or "").rpartition("/")[2]
        )
        if schema is None:
            errors.append(
                {"object": ref, "path": "", "message": "no CRD schema for %s" % _crd_name(manifest)}
            )
            continue
        checked.append(ref)
        errors.extend(dict(e, object=ref) for e in deploy_kserve.strict_errors(schema, manifest))
    if errors and p["fail_on_error"]:
        module.fail_json(
            msg="the manifests do not validate against the CRD schema (strict)",
            ok=False,
            errors=errors,
            checked=checked,
        )
    module.exit_json(changed=False, ok=not errors, errors=errors, checked=checked)


if __name__ == "__main__":
    main()
