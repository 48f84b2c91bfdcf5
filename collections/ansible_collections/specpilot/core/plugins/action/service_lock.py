# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin of specpilot.core.service_lock: take, renew or release a service's lock.

The decision is module_utils/k8s/service_lock.py's, the reads and writes plugin_utils/lease_client.py's
(through kubernetes.core, whose connection options and ``K8S_AUTH_*`` variables apply).  The lock
is not managed state: the task never reports a change, and in check mode nothing is written.
"""

from __future__ import annotations

import os
import secrets
import socket
import string

from ansible.errors import AnsibleActionFail
from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args, service_lock
from ansible_collections.specpilot.core.plugins.module_utils.service.render import (
    LABEL_MANAGED_BY,
    LABEL_SERVICE,
)
from ansible_collections.specpilot.core.plugins.plugin_utils.action import Action
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_api import Writer
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import (
    ReadError,
    auth_options,
    task_reader,
)
from ansible_collections.specpilot.core.plugins.plugin_utils.lease_client import LeaseClient


class ActionModule(Action):
    ARGUMENT_SPEC = deploy_args.SERVICE_LOCK

    def act(self, params, task_vars, result):
        self._vars = task_vars or {}
        self._params = params
        reader = task_reader(self._loader, self._templar, self._vars, params)
        writer = Writer(auth_options(params), params.get("request_timeout"))
        client = LeaseClient(writer, reader, params, check_mode=self._task.check_mode)
        holder = params.get("holder") or self._holder()
        version = params.get("resource_version")
        result.update(
            changed=False,
            holder=holder,
            lease=service_lock.lease_name(params["name"]),
            namespace=params["namespace"],
            resource_version=None,
        )
        try:
            if params["state"] == "acquired":
                result.update(client.acquire(holder, self._manifest()))
            elif params["state"] == "renewed":
                if not version:
                    raise AnsibleActionFail(
                        "state=renewed needs the resource_version the lock was taken (or renewed) at"
                    )
                result.update(client.renew(holder, version))
            elif params["state"] == "broken":
                result.update(client.break_lock(params["confirm"]))
                # the holder is the one whose lock is (or would be) broken, never this run
                result["holder"] = result.get("broken_holder")
            else:
                result.update(client.release(params.get("holder"), version))
                if result.pop("left", False):
                    result["warnings"] = [self._left_warning(result["message"])]
        except ReadError as exc:
            raise AnsibleActionFail("%s: the lock could not be read: %s" % (params["name"], exc)) from exc
        return result

    # ------------------------------------------------------------ helpers
    def _left_warning(self, message):
        p = self._params
        return (
            "%s: the lock was left in place (%s); it expires on its own once its duration has passed, "
            "or playbooks/break_lock.yml --limit %s -e specpilot_break_lock_confirm=true breaks it now"
            % (p["name"], message, p["name"])
        )

    def _holder(self):
        job = self._vars.get("awx_job_id") or self._vars.get("tower_job_id")
        nonce = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _unused in range(8))
        # the worker is forked from ansible-playbook: its parent is the run
        return service_lock.holder_id(
            self._params["purpose"], os.environ.get("USER"), socket.gethostname(), job, os.getppid(), nonce
        )

    def _manifest(self):
        p = self._params
        labels = {LABEL_MANAGED_BY: "specpilot", LABEL_SERVICE: p["name"]}
        labels.update(p["labels"])
        return service_lock.lease_object(p["name"], p["namespace"], labels)
