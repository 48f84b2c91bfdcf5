# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.k8s_retry: kubernetes.core.k8s, run again while it fails with a
transient error, with exponential backoff and full jitter (the retries an ``until:`` loop would make at
a fixed delay).  The connection options (module_defaults group/specpilot.core.k8s) are passed on to
kubernetes.core.k8s where its ``args`` do not set them.

A server-side apply (``state: present``, ``apply: true``, ``server_side_apply`` and a ``definition``, and
nothing else) is made here, in the worker, by plugin_utils/k8s_api.py ``Writer.apply``, which makes the
same calls and answers the same result as the module (check mode: a server-side dry run; ``--diff``: the
diff). The module would start a Python process that imports the kubernetes client again: about half a
second of CPU for each write of a deploy or a rollback. Any other arguments (the canary's merge patches,
another state, ``wait``) go to the module. Either way, the ``diff`` shown leaves out what the API server
manages itself (:func:`readable_diff`)."""

from __future__ import annotations

import json
from functools import partial

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import Backoff
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_api import Writer
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import auth_options
from ansible_collections.specpilot.core.plugins.plugin_utils.module_retry import retried

MODULE = "kubernetes.core.k8s"


class ActionModule(Action):
    _requires_connection = True  # it runs a kubernetes.core module
    ARGUMENT_SPEC = deploy_args.K8S_RETRY

    def act(self, params, task_vars, result):
        args = dict(params["args"])
        for key in deploy_args.K8S_CONNECTION:
            if params.get(key) is not None:
                args.setdefault(key, params[key])

        ssa = server_side_apply(args)
        if ssa is None:
            execute = partial(self._execute_module, module_name=MODULE, module_args=args, task_vars=task_vars)
        else:
            mode = {"dry_run": bool(self._task.check_mode), "diff": bool(self._task.diff)}
            execute = partial(Writer(auth_options(args)).apply, **dict(ssa, **mode))

        backoff = Backoff(max(1, params["retries"]), base=0.5, cap=10.0)
        result.update(retried(execute, backoff, conflict=params["conflict"]))
        if isinstance(result.get("diff"), dict):
            result["diff"] = readable_diff(result["diff"])
        return result


# what the API server writes itself: a diff of them tells the user nothing about the change (issue 39:
# check mode's diff was full of managedFields and timestamps)
SERVER_METADATA = {
    "managedFields",
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "selfLink",
}


def _without_server_fields(obj):
    if not isinstance(obj, dict):
        return obj
    out = {k: v for k, v in obj.items() if k != "status"}
    if isinstance(out.get("metadata"), dict):
        metadata = {k: v for k, v in out["metadata"].items() if k not in SERVER_METADATA}
        if metadata:
            out["metadata"] = metadata
        else:
            out.pop("metadata")
    return out


def readable_diff(diff):
    """kubernetes.core.k8s's ``diff`` (``{before, after}``) without the fields the API server manages
    (``status``, metadata's managedFields, resourceVersion, uid, generation, creationTimestamp,
    selfLink); ``{}`` when nothing else differs. ``changed`` is left as the module said."""
    before = _without_server_fields(diff.get("before"))
    after = _without_server_fields(diff.get("after"))
    if before == after:
        return {}
    return dict(diff, before=before, after=after)


# what a server-side apply made in the worker may be given: kubernetes.core.k8s's arguments that
# Writer.apply implements, and the connection options
SSA_ARGS = {"state", "apply", "server_side_apply", "definition"} | set(deploy_args.K8S_CONNECTION)
SSA_OPTIONS = {"field_manager", "force_conflicts"}


def server_side_apply(args):
    """Writer.apply's ``manifest`` (the definition as JSON has it), ``field_manager`` and
    ``force_conflicts`` when ``args`` ask kubernetes.core.k8s for a server-side apply of one object and
    nothing more, else None: the module is run (and says what is wrong with arguments it would refuse, a
    flag that is not a boolean, a definition JSON cannot carry)."""
    ssa, definition = args.get("server_side_apply"), args.get("definition")
    if set(args) - SSA_ARGS or args.get("state", "present") != "present":
        return None
    if not (isinstance(ssa, dict) and ssa.get("field_manager") and set(ssa) <= SSA_OPTIONS):
        return None
    if not (isinstance(definition, dict) and definition.get("apiVersion") and definition.get("kind")):
        return None
    if not (definition.get("metadata") or {}).get("name"):
        return None
    try:
        if not boolean(args.get("apply"), strict=True):
            return None
        force = boolean(ssa.get("force_conflicts", False), strict=True)
        body = json.loads(json.dumps(definition))
    except (TypeError, ValueError):
        return None
    return {"manifest": body, "field_manager": str(ssa["field_manager"]), "force_conflicts": force}
