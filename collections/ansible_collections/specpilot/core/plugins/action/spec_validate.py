# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.spec_validate: run the validation on the controller.

Validation reads nothing from the managed host and changes nothing, so it runs in the
controller process (no module transfer, no remote Python): fifty services validate in
one play without fifty interpreter start-ups.  The documented module in
plugins/modules/spec_validate.py shares the argument spec and the code path.

The run-time overrides specpilot_override_method / specpilot_override_num_speculative_tokens
are read from the task variables here (unless the task passes override_* itself), whether the
spec is assembled from the variables or passed in: every role that validates the spec of a
host then sees the same effective spec.  So is specpilot_model_facts (auto/off: whether the model
facts are read at the artifacts' sources, module_utils/service/model_facts.py).
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail

from ansible_collections.specpilot.core.plugins.module_utils.service import validator, vllm_profiles
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import OVERRIDE_VARS
from ansible_collections.specpilot.core.plugins.plugin_utils.action import (
    Action,
    known_variable_names,
    spec_from_task_vars,
)

# The preload callback imports this plugin in ansible-playbook's own process, before it forks a worker
# for each host: the vLLM release profiles built here (about 20 ms) are inherited by every worker
# instead of being built again in each one (issue 41, py-spy on validate.yml over 50 services).
vllm_profiles.all_profiles()

# auto (default) or off: whether validation reads config.json and the tokenizer at each artifact's source
MODEL_FACTS_VAR = "specpilot_model_facts"
# tag (default) or digest: how images must be pinned (digest: production inventories)
IMAGE_PINS_VAR = "specpilot_image_pins"


class ActionModule(Action):
    ARGUMENT_SPEC = validator.ARGUMENT_SPEC

    def act(self, params, task_vars, result):
        if not validator.HAS_JSONSCHEMA:
            raise AnsibleActionFail(
                "specpilot.core.spec_validate needs the Python package jsonschema on the controller"
            )
        if params.get("spec") is None:
            params["spec"], params["variable_names"] = spec_from_task_vars(
                self._templar, task_vars or {}, params.get("default_name")
            )
            self._names(params, task_vars or {})
        if params.get("model_facts") is None and (task_vars or {}).get(MODEL_FACTS_VAR) is not None:
            params["model_facts"] = self._templar.template(task_vars[MODEL_FACTS_VAR])
        if (task_vars or {}).get(IMAGE_PINS_VAR) is not None and "image_pins" not in self._task.args:
            params["image_pins"] = self._templar.template(task_vars[IMAGE_PINS_VAR])
            if params["image_pins"] not in ("tag", "digest"):
                raise AnsibleActionFail(
                    "%s: %r is neither tag nor digest (digest: every image pinned as repo:tag@sha256:<digest>, "
                    "for production inventories)" % (IMAGE_PINS_VAR, params["image_pins"])
                )
        for key, variable in OVERRIDE_VARS.items():
            option = "override_" + key
            if params.get(option) is None and (task_vars or {}).get(variable) is not None:
                params[option] = self._templar.template(task_vars[variable])
        out, failed = validator.module_result(params, check_mode=bool(self._task.check_mode))
        result.update(out)
        if failed:
            result["failed"] = True
        return result

    def _names(self, params, task_vars):
        """Every specpilot_* name the project's roles and playbooks use (the typo check), and the host's name
        for the report's header when the spec does not name the service."""
        if not params.get("known_variables"):
            role = getattr(self._task, "_role", None)
            params["known_variables"] = known_variable_names(task_vars, getattr(role, "_role_path", None))
        if not params.get("default_name") and task_vars.get("inventory_hostname"):
            params["default_name"] = task_vars["inventory_hostname"]
