# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one base of specpilot's action plugins (``Action``): how an action runs module_utils.

An action plugin runs on the controller, in the Ansible worker process: nothing is transferred, check
mode is supported, and it needs no connection unless it runs a module (it then sets
``_requires_connection = True``). A subclass names its ``ARGUMENT_SPEC`` (the dict its module documents)
and its ``VALIDATION`` (mutually_exclusive, required_one_of, ... as the module passes them to
AnsibleModule); ``run`` validates the task's arguments against them, so every action fails the same way
on bad input, then calls ``act(params, task_vars, result)``, which does one of:

- ``TASK``: a function of module_utils/fact_tasks.py, the one its module runs (``run_task``: a
  ``TaskFailure`` becomes a failed result with its fields); ``act`` need not be written;
- ``MODULE``: a long module, run in a thread while its progress lines are shown
  (``run_module``, plugin_utils/progress_relay.py); its own AnsibleModule checks the arguments;
- else its own ``act``, over module_utils and the clients of plugin_utils (k8s_api, k8s_reader,
  lease_client, job_runner).
"""

from __future__ import annotations

import os
import re

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.specpilot.core.plugins.module_utils.fact_tasks import TaskFailure

from ansible_collections.specpilot.core.plugins.module_utils.service.spec import (
    CONTROL_VARS,
    SPEC_KEYS,
    VAR_PREFIX,
    assemble_from_vars,
)
from ansible_collections.specpilot.core.plugins.plugin_utils.progress_relay import execute_showing_progress

display = Display()


class Action(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    ARGUMENT_SPEC = {}
    VALIDATION = {}
    TASK = None  # a function of module_utils/fact_tasks.py: (params, check_mode) -> result
    MODULE = None  # a long module run with its progress shown: "specpilot.core.<name>"
    # modules the action imports where it runs, costly to import: the preload callback imports them in
    # ansible-playbook's process when a task of this action starts, so that its workers inherit them
    WORKER_IMPORTS = ()

    def run(self, tmp=None, task_vars=None):
        result = super(Action, self).run(tmp, task_vars)
        del tmp
        if self.MODULE:
            params = self._task.args  # the module's AnsibleModule checks them
        else:
            _validation, params = self.validate_argument_spec(
                argument_spec=self.ARGUMENT_SPEC, **self.VALIDATION
            )
        return self.act(params, task_vars or {}, result)

    def act(self, params, task_vars, result):
        if self.TASK is not None:
            return self.run_task(self.TASK, params, result)
        if self.MODULE is not None:
            return self.run_module(self.MODULE, params, task_vars, result)
        raise NotImplementedError(
            "%s: an action names TASK or MODULE, or implements act" % type(self).__name__
        )

    def run_task(self, task, params, result, **kwargs):
        """``task(params, check_mode, **kwargs)`` here, in the worker, instead of as a module in a new
        process; a TaskFailure is the failed result it describes."""
        try:
            result.update(task(params, bool(self._task.check_mode), **kwargs))
        except TaskFailure as exc:
            result.update(exc.fields, failed=True, msg=exc.msg)
        return result

    def run_module(self, module, args, task_vars, result):
        """Module ``module`` with ``args``, its progress lines shown as ``[host] line`` while it runs."""
        host = task_vars.get("inventory_hostname", "")
        result.update(
            execute_showing_progress(
                self, module, args, task_vars, lambda line: display.display("[%s] %s" % (host, line))
            )
        )
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


_VARIABLE = re.compile(r"\b%s[a-z0-9_]+" % VAR_PREFIX)
_KNOWN = {}


def _names_in(folder, depth=4):
    """The specpilot_* names in the YAML files of ``folder``, ``depth`` levels down at most (a playbook kept in
    a home directory must not make this read the whole tree), hidden folders left out."""
    names = set()
    top = folder.rstrip(os.sep).count(os.sep)
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")] if root.count(os.sep) - top < depth else []
        for name in files:
            if name.endswith((".yml", ".yaml")):
                with open(os.path.join(root, name), encoding="utf-8", errors="replace") as handle:
                    names.update(_VARIABLE.findall(handle.read()))
    return names


def known_variable_names(task_vars, role_path=None):
    """Every ``specpilot_*`` name the project's playbooks and roles use (their YAML: defaults,
    argument_specs, tasks, the variables they set), for spec_validate's typo check: the playbook's
    folder and the roles beside it (``playbook_dir/../roles``, and the running role's own folder's
    parent). About 130 files, read once a process (50 ms)."""
    folders = []
    playbook_dir = task_vars.get("playbook_dir")
    if playbook_dir:
        folders += [playbook_dir, os.path.join(os.path.dirname(playbook_dir), "roles")]
    if role_path:
        folders.append(os.path.dirname(role_path))
    key = tuple(sorted({os.path.realpath(f) for f in folders if os.path.isdir(f)}))
    if key not in _KNOWN:
        _KNOWN[key] = sorted(set().union(*(_names_in(f) for f in key))) if key else []
    return _KNOWN[key]
