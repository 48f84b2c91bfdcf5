# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see galaxy.yml)
"""Action plugin of specpilot.core.deploy_state: read a service's live objects on the controller."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specpilot.core.plugins.module_utils import deploy_args, deploy_state
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import (
    K8sReader,
    ReadError,
    auth_options,
)

ISVC = ("InferenceService", "serving.kserve.io/v1beta1")
RUNTIME_API = "serving.kserve.io/v1alpha1"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, params = self.validate_argument_spec(argument_spec=deploy_args.DEPLOY_STATE)
        reader = K8sReader(
            self._loader, self._templar, task_vars or {}, auth_options(params), attempts=params["retries"]
        )
        try:
            result.update(read_state(reader, params))
        except ReadError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        result["changed"] = False
        result["requests"] = reader.requests
        return result


def read_state(reader, params):
    name, ns = params["name"], params["namespace"]
    out = {
        "namespace_exists": reader.get("Namespace", "v1", name=ns) is not None,
        "inferenceservice": None,
        "servingruntime": None,
        "deployment": None,
        "pods": [],
        "lease": None,
        "history": None,
    }
    if not out["namespace_exists"]:
        return out
    out["inferenceservice"] = reader.get(ISVC[0], ISVC[1], name=name, namespace=ns)
    runtime = params.get("runtime") or {}
    if runtime.get("name"):
        kind = runtime.get("kind") or "ServingRuntime"
        out["servingruntime"] = reader.get(
            kind, RUNTIME_API, name=runtime["name"], namespace=ns if kind == "ServingRuntime" else None
        )
    if params["lease"]:
        out["lease"] = reader.get(
            "Lease", "coordination.k8s.io/v1", name=deploy_state.lease_name(name), namespace=ns
        )
    if params["history"]:
        out["history"] = reader.get("ConfigMap", "v1", name=deploy_state.history_name(name), namespace=ns)
    if params["workload"] and out["inferenceservice"] is not None:
        if params["deployment_mode"] == "Standard":
            out["deployment"] = reader.get("Deployment", "apps/v1", name="%s-predictor" % name, namespace=ns)
        out["pods"] = reader.get(
            "Pod", "v1", namespace=ns, label_selector="serving.kserve.io/inferenceservice=%s" % name
        )
    return out
