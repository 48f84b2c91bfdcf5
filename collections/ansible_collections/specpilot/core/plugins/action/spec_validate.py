# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""Action plugin of specpilot.core.spec_validate: run the validation on the controller.

Validation reads nothing from the managed host and changes nothing, so it runs in the
controller process (no module transfer, no remote Python): fifty services validate in
one play without fifty interpreter start-ups.  The documented module in
plugins/modules/spec_validate.py shares the argument spec and the code path.

The run-time overrides specpilot_override_method / specpilot_override_num_speculative_tokens
are read from the task variables here (unless the task passes override_* itself), whether the
spec is assembled from the variables or passed in: every role that validates the spec of a
host then sees the same effective spec.  So is specpilot_model_facts (auto/off: whether the model
facts are read at the artifacts' sources, module_utils/model_facts.py).
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail

from ansible_collections.specpilot.core.plugins.module_utils import validator
from ansible_collections.specpilot.core.plugins.module_utils.spec import (
    CONTROL_VARS,
    OVERRIDE_VARS,
    SPEC_KEYS,
    VAR_PREFIX,
    assemble_from_vars,
)
from ansible_collections.specpilot.core.plugins.plugin_utils.action import ControllerAction

# auto (default) or off: whether validation reads config.json and the tokenizer at each artifact's source
MODEL_FACTS_VAR = "specpilot_model_facts"


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = validator.ARGUMENT_SPEC

    def act(self, params, task_vars, result):
        if not validator.HAS_JSONSCHEMA:
            raise AnsibleActionFail(
                "specpilot.core.spec_validate needs the Python package jsonschema on the controller"
            )
        if params.get("spec") is None:
            params["spec"], params["variable_names"] = self._spec_from_task_vars(task_vars or {}, params)
        if params.get("model_facts") is None and (task_vars or {}).get(MODEL_FACTS_VAR) is not None:
            params["model_facts"] = self._templar.template(task_vars[MODEL_FACTS_VAR])
        for key, variable in OVERRIDE_VARS.items():
            option = "override_" + key
            if params.get(option) is None and (task_vars or {}).get(variable) is not None:
                params[option] = self._templar.template(task_vars[variable])
        out, failed = validator.module_result(params, check_mode=bool(self._task.check_mode))
        result.update(out)
        if failed:
            result["failed"] = True
        return result

    def _spec_from_task_vars(self, task_vars, params):
        """The host's specpilot_<key> variables (templated), as a spec (spec.assemble_from_vars), and all
        specpilot_* names. Only the spec keys are templated: other specpilot_* variables may refer to
        what the run has not set yet."""
        names = sorted(name for name in task_vars if name.startswith(VAR_PREFIX) and name not in CONTROL_VARS)
        keys = set(SPEC_KEYS)
        variables = {
            name: self._templar.template(task_vars[name]) if name[len(VAR_PREFIX) :] in keys else None
            for name in names
        }
        spec, _unknown = assemble_from_vars(
            variables, params.get("default_name") or task_vars.get("inventory_hostname")
        )
        return spec, names
