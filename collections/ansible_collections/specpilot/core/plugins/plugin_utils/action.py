# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The base of specpilot's action plugins.

They run on the controller (in the Ansible worker process): nothing is transferred, check mode is
supported, and most need no connection (an action that runs modules sets
``_requires_connection = True``).  A subclass names its ``ARGUMENT_SPEC`` (the same dict its
module documents), its ``VALIDATION`` (mutually_exclusive, required_one_of, ... as the module passes
them to AnsibleModule) and implements ``act(params, task_vars, result)``; ``run`` validates the
task's arguments against them first, so every action fails the same way on bad input.
A ``TaskAction`` runs a function of module_utils/fact_tasks.py, the same one its module runs.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.specpilot.core.plugins.module_utils.fact_tasks import TaskFailure

from ansible_collections.specpilot.core.plugins.module_utils.service.spec import (
    CONTROL_VARS,
    SPEC_KEYS,
    VAR_PREFIX,
    assemble_from_vars,
)


class ControllerAction(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    ARGUMENT_SPEC = {}
    VALIDATION = {}

    def run(self, tmp=None, task_vars=None):
        result = super(ControllerAction, self).run(tmp, task_vars)
        del tmp
        _validation, params = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC, **self.VALIDATION)
        return self.act(params, task_vars or {}, result)

    def act(self, params, task_vars, result):  # pragma: no cover - every action implements it
        raise NotImplementedError


class TaskAction(ControllerAction):
    """The action of a module whose work is a function of its parameters (``TASK``, from
    module_utils/fact_tasks.py): run here, in the worker, instead of as a module in a new process."""

    TASK = None

    def act(self, params, task_vars, result):
        try:
            result.update(self.TASK(params, bool(self._task.check_mode)))
        except TaskFailure as exc:
            result.update(exc.fields, failed=True, msg=exc.msg)
        return result


def spec_from_task_vars(templar, task_vars, default_name=None):
    """The host's specpilot_<key> variables (templated), as a spec (spec.assemble_from_vars), and all
    specpilot_* names. Only the spec keys are templated: other specpilot_* variables may refer to what
    the run has not set yet."""
    names = sorted(name for name in task_vars if name.startswith(VAR_PREFIX) and name not in CONTROL_VARS)
    keys = set(SPEC_KEYS)
    variables = {
        name: templar.template(task_vars[name]) if name[len(VAR_PREFIX) :] in keys else None for name in names
    }
    spec, _unknown = assemble_from_vars(variables, default_name or task_vars.get("inventory_hostname"))
    return spec, names
