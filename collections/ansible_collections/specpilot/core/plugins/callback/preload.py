# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Load, once in ansible-playbook's own process, the Python code every task would otherwise load
again: each task runs in a worker process forked from it, so whatever the parent has imported the
worker inherits, while an import in a worker dies with it. Then freeze what the parent holds out of
the garbage collector's reach (gc.freeze), so that a worker's collections do not touch, and so copy,
the memory it shares with the parent."""

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Import the Kubernetes client and specpilot's plugins once, before the tasks run
version_added: 0.2.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Every task runs in a worker process that ansible-playbook forks for it. The kubernetes.core lookup that
    specpilot's action plugins read the cluster with, the kubernetes Python client under it, and specpilot's
    action and filter plugins were imported again in each worker (about half a second of CPU a task that reads
    the cluster). With this callback enabled they are imported once, when the playbook starts, and every worker
    inherits them.
  - When the playbook and then each play starts, it moves the objects ansible-playbook holds into the
    garbage collector's permanent generation (Python's C(gc.freeze)). A worker inherits the parent's memory
    copy-on-write; its garbage collections no longer visit those objects, so they no longer copy the pages
    they sit on (about 6% less CPU for a playbook that reads the cluster). The parent does not collect the
    frozen objects again; they are what it keeps for the run anyway (imported code, the inventory, the
    plays), a few plays' worth at most.
  - When each task starts, it collects what the hosts' last task left behind and freezes the rest (each host's
    registered results and facts, which grow with the number of hosts over a play), so that a worker's cost no
    longer grows with the number of hosts the play has run (over a fleet, a worker that walked them copied a
    fleet's worth of memory).
  - When a play runs a role whose reports draw PNG plots (smoke, benchmark, canary), it imports matplotlib
    at the play's start, so that the workers of the play's hosts inherit it rather than each importing it
    again (about half a second of CPU a service of smoke.yml).
  - When a task of a specpilot action starts, it imports what the action names in its C(WORKER_IMPORTS) (the
    kubernetes client's C(CoreV1Api) for reading a pod's log, an exec or a Job; with the client 37 about 0.5 s
    of CPU, which each of those workers paid again), once, so that the task's workers inherit it; a playbook
    that runs no such task does not pay it at its start.
  - It changes nothing else and prints nothing. Without the kubernetes client or kubernetes.core it does
    nothing (the tasks that need them fail as before, saying so).
requirements:
  - enabled in ansible.cfg (C(callbacks_enabled = specpilot.core.preload)), as the project's ansible.cfg does
"""

import gc
import importlib
import os
import pkgutil
import sys

from ansible.plugins.callback import CallbackBase

# the kubernetes client and the kubernetes.core lookup specpilot's action plugins read the cluster
# with (plugin_utils/k8s_reader.py), then specpilot's own controller-side plugins
MODULES = (
    "kubernetes.client",
    "kubernetes.dynamic",
    "kubernetes.config",
    "ansible_collections.kubernetes.core.plugins.lookup.k8s",
)
# the roles whose reports draw PNG plots (module_utils/report/plots.py): a play that runs one imports
# matplotlib here, once, instead of once in every host's worker (issue 40: smoke over a fleet)
DRAWING_ROLES = frozenset(("specpilot_smoke", "specpilot_benchmark", "specpilot_canary"))
# a task's action as the project writes it (FQCN), and the package of its action plugin
ACTION_PREFIX = "specpilot.core."
ACTION_PACKAGE = "ansible_collections.specpilot.core.plugins.action"
PACKAGES = tuple(
    "ansible_collections.specpilot.core.plugins." + kind for kind in ("action", "filter", "test")
)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "specpilot.core.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        preload()
        gc.freeze()

    def v2_playbook_on_play_start(self, play):
        known_variables(play)
        plots_for(play)
        # the play's tasks, variables and templates were built since the last freeze
        gc.freeze()

    def v2_playbook_on_task_start(self, task, is_conditional):
        worker_imports(task)
        # What the hosts' last task left in this process (each host's registered result and facts: a fleet's
        # worth by the end of a play) is collected, then frozen, so that the next task's workers, one a host,
        # do not walk it in their own collections and so copy it: without this, a worker's cost grew with the
        # number of hosts the play had run before it (issue 40). gc.collect() walks only what was made since
        # the last freeze; the frozen objects are acyclic results, freed by reference counting when replaced.
        gc.collect()
        gc.freeze()

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)


def worker_imports(task):
    """Import, before the task's workers are forked, what its specpilot action names in WORKER_IMPORTS
    (plugin_utils/action.py; e.g. the kubernetes client's CoreV1Api for pod_log, pod_exec and the Job runs: about
    0.5 s of CPU that every worker paid again, three a service in smoke.yml, issue 40). Only then: a playbook that
    never runs such a task does not pay it at its start. The names imported (none when there is nothing new)."""
    action = getattr(task, "action", None) or ""
    if not isinstance(action, str) or not action.startswith(ACTION_PREFIX):
        return []
    module = sys.modules.get(ACTION_PACKAGE + "." + action[len(ACTION_PREFIX):])
    wanted = getattr(getattr(module, "ActionModule", None), "WORKER_IMPORTS", ())
    missing = [name for name in wanted if name not in sys.modules]
    preload(modules=missing, packages=())
    return missing


def known_variables(play):
    """Read the project's specpilot_* names (spec_validate's typo check) once here, in the parent: a worker's own
    read dies with it, so every host's validation read about 130 files again. The worker finds them under the
    same folders (its playbook's and the roles beside it); where its folders differ it reads them itself."""
    path = getattr(play, "get_path", lambda: "")() or ""
    if not path:
        return
    try:
        from ansible_collections.specpilot.core.plugins.plugin_utils.action import known_variable_names
    except ImportError:  # the collection's own plugin_utils missing: spec_validate says so in its task
        return
    known_variable_names({"playbook_dir": os.path.dirname(path.rsplit(":", 1)[0])})


def plots_for(play):
    """Import matplotlib (plots.pyplot) when the play runs one of DRAWING_ROLES (its static roles: a role
    that another includes, as rollback includes smoke, imports it in the worker as before); whether it did."""
    roles = getattr(play, "get_roles", lambda: [])() or []
    if not {role.get_name() for role in roles} & DRAWING_ROLES:
        return False
    try:
        from ansible_collections.specpilot.core.plugins.module_utils.report import plots
    except ImportError:  # the collection's module_utils missing: the tasks say so
        return False
    plots.pyplot()  # without matplotlib: the reports say why there is no plot, as before
    return True


def preload(modules=MODULES, packages=PACKAGES):
    """Import ``modules`` and every module of ``packages``; returns the names that could not be
    imported (nothing is raised: a missing piece fails its own task later, as before)."""
    names = list(modules)
    for package in packages:
        try:
            path = importlib.import_module(package).__path__
        except ImportError:
            names.append(package)
            continue
        names.extend("%s.%s" % (package, m.name) for m in pkgutil.iter_modules(path))
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - ImportError, or a plugin's own error: its task says so later
            missing.append(name)
    return missing
