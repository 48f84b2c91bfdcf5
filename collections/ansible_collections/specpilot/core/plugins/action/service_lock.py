# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see galaxy.yml)
"""Action plugin of specpilot.core.service_lock: take, renew or release a service's lock.

The decision is module_utils/service_lock.py's; this plugin reads the Lease through the
kubernetes.core ``k8s`` lookup (plugin_utils/k8s_reader.py) and writes it through the
kubernetes.core modules (``k8s`` to create and delete, ``k8s_json_patch`` for the
compare-and-swap), so the connection options and ``K8S_AUTH_*`` variables are kubernetes.core's
own.  Transient API errors are retried.  The lock is not managed state: the task never reports a
change, and in check mode nothing is written.
"""

from __future__ import annotations

import os
import secrets
import socket
import string
import time

from ansible.errors import AnsibleActionFail
from ansible_collections.specpilot.core.plugins.module_utils import deploy_args, service_lock
from ansible_collections.specpilot.core.plugins.module_utils.deploy_retry import retryable, status_code
from ansible_collections.specpilot.core.plugins.module_utils.common import k8s_meta
from ansible_collections.specpilot.core.plugins.module_utils.render import LABEL_MANAGED_BY, LABEL_SERVICE
from ansible_collections.specpilot.core.plugins.plugin_utils.action import ControllerAction
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import (
    K8sReader,
    ReadError,
    auth_options,
)

MODULE_AUTH = ("kubeconfig", "context", "host", "api_key", "validate_certs", "ca_cert")
ROUNDS = 4  # reads and decisions again after a conflict


def _conflict(out):
    return bool(out.get("failed")) and status_code(out) in (409, 422)


class ActionModule(ControllerAction):
    _requires_connection = True  # it runs kubernetes.core modules
    ARGUMENT_SPEC = deploy_args.SERVICE_LOCK

    def act(self, params, task_vars, result):
        self._vars = task_vars or {}
        self._params = params
        self._reader = K8sReader(
            self._loader, self._templar, self._vars, auth_options(params), attempts=params["retries"]
        )
        holder = params.get("holder") or self._holder()
        result.update(
            changed=False,
            holder=holder,
            lease=service_lock.lease_name(params["name"]),
            namespace=params["namespace"],
            resource_version=None,
        )
        try:
            if params["state"] == "acquired":
                result.update(self._acquire(holder))
            elif params["state"] == "renewed":
                result.update(self._renew(holder))
            else:
                result.update(self._release())
        except ReadError as exc:
            raise AnsibleActionFail("%s: the lock could not be read: %s" % (params["name"], exc)) from exc
        return result

    # ------------------------------------------------------------ the three operations
    # A conflict (409, 422) on a conditional write means the Lease is not as it was read: it is read
    # again and the step decided again, at most ROUNDS times.  A real race then ends in a refusal
    # naming the winner; a conflict that was not one (a lost answer, a proxy's 409) in a retry.
    def _acquire(self, holder):
        p = self._params
        if self._task.check_mode:
            status = service_lock.lease_status(self._read(), holder, time.time())
            return dict(
                acquired=False,
                status=status,
                message="check mode: the lock is not taken (%s)" % status["message"],
            )
        before = out = None
        for _ in range(ROUNDS):
            step = service_lock.acquire_step(self._read(), holder, time.time(), p["duration"])
            before = before or step["status"]
            if step["do"] == "refuse":
                return self._refused(step["status"])
            if step["do"] == "create":
                out = self._module("kubernetes.core.k8s", state="present", definition=self._manifest())
            else:
                out = self._patch(step["patch"])
                if not out.get("failed"):
                    return self._held(out["result"], before, "taken")
            if out.get("failed") and not _conflict(out):
                break
        return self._after_a_failed_take(holder, before, out)

    def _after_a_failed_take(self, holder, before, out):
        """A write that failed for good, or whose answer was lost: the Lease says whose it is."""
        now = service_lock.lease_status(self._read(), holder, time.time())
        if now["mine"] and now["held"]:
            return dict(
                acquired=True, resource_version=now["resource_version"], status=before, message="taken"
            )
        if now["free"]:
            return self._failed("the lock could not be taken", out)
        refused = self._refused(now)
        refused["msg"] += " (%s)" % str(out.get("msg") or "")[:200]
        return refused

    def _renew(self, holder):
        p = self._params
        version = p.get("resource_version")
        if not version:
            raise AnsibleActionFail(
                "state=renewed needs the resource_version the lock was taken (or renewed) at"
            )
        if self._task.check_mode:
            return dict(renewed=False, resource_version=version, message="check mode: not renewed")
        for _ in range(ROUNDS):
            out = self._patch(service_lock.renew_patch(holder, version, time.time()))
            if not out.get("failed"):
                return self._held(out["result"], None, "renewed", key="renewed")
            status = service_lock.lease_status(self._read(), holder, time.time())
            if not (_conflict(out) and status["mine"] and status["held"]):
                break
            version = status["resource_version"]  # still this run's: its last answer was lost
        return dict(
            failed=True,
            renewed=False,
            status=status,
            msg="%s: the lock could not be renewed - %s (%s)"
            % (
                p["name"],
                "it is no longer this run's" if not status["mine"] else "the API refused",
                status["message"],
            ),
        )

    def _release(self):
        p = self._params
        version = p.get("resource_version")
        if not version:
            return dict(released=False, message="not held by this run: nothing to release")
        if self._task.check_mode:
            return dict(released=False, message="check mode: not released")
        holder = p.get("holder")
        for _ in range(ROUNDS):
            out = self._module(
                "kubernetes.core.k8s",
                conditional=True,
                state="absent",
                delete_options={"preconditions": {"resourceVersion": version}},
                **self._lease_ref(),
            )
            if not out.get("failed"):
                return dict(released=True, message="released")
            if not _conflict(out):
                break
            lease = self._read()
            status = service_lock.lease_status(lease, holder, time.time())
            if not lease:
                return dict(released=True, message="released (the Lease was already gone)")
            still_mine = status["mine"] if holder else status["resource_version"] == version
            if not still_mine:
                # a lock taken over after it expired stays with its new holder
                return dict(released=False, message="not released: %s" % status["message"])
            version = status["resource_version"]
        return dict(released=False, message="not released: %s" % str(out.get("msg") or "")[:300])

    # ------------------------------------------------------------ helpers
    def _holder(self):
        job = self._vars.get("awx_job_id") or self._vars.get("tower_job_id")
        nonce = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
        # the worker is forked from ansible-playbook: its parent is the run
        return service_lock.holder_id(
            self._params["purpose"], os.environ.get("USER"), socket.gethostname(), job, os.getppid(), nonce
        )

    def _manifest(self):
        p = self._params
        labels = {LABEL_MANAGED_BY: "specpilot", LABEL_SERVICE: p["name"]}
        labels.update(p["labels"])
        return service_lock.lease_object(p["name"], p["namespace"], labels)

    def _lease_ref(self):
        p = self._params
        return dict(
            api_version=service_lock.LEASE_API,
            kind="Lease",
            name=service_lock.lease_name(p["name"]),
            namespace=p["namespace"],
        )

    def _patch(self, ops):
        """The conditional JSON patch of the Lease (its test operations make it a compare-and-swap)."""
        return self._module(
            "kubernetes.core.k8s_json_patch", conditional=True, patch=ops, **self._lease_ref()
        )

    def _read(self):
        ref = self._lease_ref()
        return self._reader.get(ref["kind"], ref["api_version"], name=ref["name"], namespace=ref["namespace"])

    def _module(self, module, conditional=False, **args):
        """Run a kubernetes.core module, again while it fails with a transient error.  For a conditional
        write (a patch that tests the resourceVersion, a delete with a precondition) a conflict is the
        answer, not a transient error."""
        args.update({k: self._params[k] for k in MODULE_AUTH if self._params.get(k) is not None})
        attempts = max(1, self._params["retries"])
        for attempt in range(attempts):
            out = self._execute_module(module_name=module, module_args=args, task_vars=self._vars)
            final = conditional and status_code(out) in (409, 422)
            if not out.get("failed") or final or not retryable(out) or attempt + 1 == attempts:
                return out
            time.sleep(min(0.5 * 2**attempt, 5.0))
        return out

    def _held(self, lease, status, how, key="acquired"):
        version = k8s_meta(lease).get("resourceVersion")
        return {key: True, "resource_version": version, "status": status, "message": how}

    def _refused(self, status):
        p = self._params
        return dict(
            failed=True,
            acquired=False,
            status=status,
            msg="%s: %s"
            % (
                p["name"],
                service_lock.held_message(status, p["namespace"], service_lock.lease_name(p["name"])),
            ),
        )

    def _failed(self, what, out):
        return dict(
            failed=True,
            acquired=False,
            msg="%s: %s: %s" % (self._params["name"], what, str(out.get("msg") or "")[:300]),
        )
