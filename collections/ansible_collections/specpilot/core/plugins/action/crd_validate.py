# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.crd_validate: strict validation against the cluster's CRDs."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_kserve
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import (
    ReadError,
    task_reader,
)

PLURALS = {
    "InferenceService": "inferenceservices",
    "ServingRuntime": "servingruntimes",
    "ClusterServingRuntime": "clusterservingruntimes",
}


def crd_name(manifest):
    kind = manifest.get("kind") or ""
    group = (manifest.get("apiVersion") or "").rpartition("/")[0]
    return "%s.%s" % (PLURALS.get(kind, kind.lower() + "s"), group)


class ActionModule(Action):
    ARGUMENT_SPEC = deploy_args.CRD_VALIDATE

    def act(self, params, task_vars, result):
        manifests = [m for m in params["manifests"] if m]
        crds = {}
        if params.get("crds") is not None:
            crds = {(c.get("metadata") or {}).get("name"): c for c in params["crds"]}
        else:
            reader = task_reader(self._loader, self._templar, task_vars or {}, params)
            try:
                for name in sorted({crd_name(m) for m in manifests}):
                    crds[name] = reader.get("CustomResourceDefinition", "apiextensions.k8s.io/v1", name=name)
            except ReadError as exc:
                raise AnsibleActionFail("cannot read the CRDs to validate against: %s" % exc) from exc
        errors, checked = [], []
        for manifest in manifests:
            ref = "%s/%s" % (manifest.get("kind"), (manifest.get("metadata") or {}).get("name"))
            crd = crds.get(crd_name(manifest))
            if crd is None:
                errors.append(
                    {"object": ref, "path": "", "message": "the cluster has no CRD %s" % crd_name(manifest)}
                )
                continue
            version = (manifest.get("apiVersion") or "").rpartition("/")[2]
            schema = deploy_kserve.crd_version_schema(crd, version)
            if schema is None:
                errors.append(
                    {
                        "object": ref,
                        "path": "apiVersion",
                        "message": "CRD %s does not serve version %s" % (crd_name(manifest), version),
                    }
                )
                continue
            checked.append(ref)
            for error in deploy_kserve.strict_errors(schema, manifest):
                errors.append(dict(error, object=ref))
        result.update(changed=False, ok=not errors, errors=errors, checked=checked)
        if errors and params["fail_on_error"]:
            result["failed"] = True
            result["msg"] = (
                "the manifests do not validate against the cluster's own CRD schema (strict):\n"
                + "\n".join(
                    "  %s %s: %s" % (e["object"], e["path"] or "(root)", e["message"]) for e in errors
                )
            )
        return result
