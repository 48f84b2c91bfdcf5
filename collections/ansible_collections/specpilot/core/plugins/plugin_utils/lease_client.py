# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The service lock's writes, for the action plugins that hold it: ``specpilot.core.service_lock``
(take, renew, release), and ``specpilot.core.rollout_wait``, ``specpilot.core.canary_step``,
``specpilot.core.k8s_job_wait`` and ``specpilot.core.vllm_load``, which renew it while they wait
(:class:`Renewer`).

The decisions are module_utils/k8s/service_lock.py's; this class reads the Lease through the
kubernetes.core ``k8s`` lookup (plugin_utils/k8s_reader.py) and writes it with plugin_utils/k8s_api.py's
Writer (create, a delete with a resourceVersion precondition, a JSON patch whose tests make it a
compare-and-swap), in the worker process, with kubernetes.core's client and connection options.
Transient API errors are retried.
"""

from __future__ import annotations

import multiprocessing
import os
import time

from ansible.errors import AnsibleActionFail

from ansible_collections.specpilot.core.plugins.module_utils.k8s import service_lock
from ansible_collections.specpilot.core.plugins.module_utils.common import k8s_meta
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import Backoff, status_code
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_api import Writer
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import (
    REQUEST_TIMEOUT,
    ReadError,
    auth_options,
)
from ansible_collections.specpilot.core.plugins.plugin_utils.module_retry import retried

__all__ = ["LeaseClient", "ROUNDS", "Renewer", "renewer_for", "held_lock_renewer"]

ROUNDS = 4  # reads and decisions again after a conflict


def _conflict(out):
    return bool(out.get("failed")) and status_code(out) in (409, 422)


class LeaseClient(object):
    """The lock of service ``params["name"]`` in ``params["namespace"]``.

    ``params``: name, namespace, retries, and for the operations that need them duration, labels.
    ``writer`` is a k8s_api.Writer; ``reader`` a K8sReader; ``check_mode`` writes nothing."""

    def __init__(self, writer, reader, params, check_mode=False, sleep=time.sleep, rand=None):
        self._writer = writer
        self._reader = reader
        self._params = params
        self._check_mode = check_mode
        self._backoff = Backoff(
            max(1, params["retries"]), base=0.5, cap=5.0, sleep=sleep, **({"rand": rand} if rand else {})
        )

    # ------------------------------------------------------------ the three operations
    # A conflict (409, 422) on a conditional write means the Lease is not as it was read: it is read
    # again and the step decided again, at most ROUNDS times.  A real race then ends in a refusal
    # naming the winner; a conflict that was not one (a lost answer, a proxy's 409) in a retry.
    def acquire(self, holder, manifest):
        """Take the lock for ``holder`` (``manifest``: the Lease to create when there is none)."""
        p = self._params
        if self._check_mode:
            status = service_lock.lease_status(self._read(), holder, time.time())
            return dict(
                acquired=False,
                status=status,
                message="check mode: the lock is not taken (%s)" % status["message"],
            )
        before = out = None
        for _unused in range(ROUNDS):
            step = service_lock.acquire_step(self._read(), holder, time.time(), p["duration"])
            before = before or step["status"]
            if step["do"] == "refuse":
                return self._refused(step["status"])
            if step["do"] == "create":
                out = self._write(False, self._writer.create, manifest)
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

    def renew(self, holder, version):
        """Move renewTime to now while ``holder`` holds the lock (taken or renewed at ``version``)."""
        p = self._params
        if self._check_mode:
            return dict(renewed=False, resource_version=version, message="check mode: not renewed")
        for _unused in range(ROUNDS):
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

    def release(self, holder, version):
        """Delete the Lease while it is ``holder``'s (or, without a holder, still at ``version``).  It never
        fails: ``left`` says the Lease may still be this run's (a write or a read that failed for good)."""
        if not version:
            return dict(released=False, message="not held by this run: nothing to release")
        if self._check_mode:
            return dict(released=False, message="check mode: not released")
        for _unused in range(ROUNDS):
            out = self._delete(version)
            if not out.get("failed"):
                return dict(released=True, message="released")
            if not _conflict(out):
                break
            try:
                lease = self._read()
            except ReadError as exc:
                # the release never fails the run (the lock expires on its own): it says why it was left
                return dict(
                    released=False, left=True, message="not released: the Lease could not be read (%s)" % exc
                )
            status = service_lock.lease_status(lease, holder, time.time())
            if not lease:
                return dict(released=True, message="released (the Lease was already gone)")
            still_mine = status["mine"] if holder else status["resource_version"] == version
            if not still_mine:
                # a lock taken over after it expired stays with its new holder
                return dict(released=False, message="not released: %s" % status["message"])
            version = status["resource_version"]
        return dict(released=False, left=True, message="not released: %s" % str(out.get("msg") or "")[:300])

    def break_lock(self, confirm):
        """Delete the Lease whoever holds it (the operator's way out), only when ``confirm``; the
        delete has the resourceVersion just read as precondition, so what is broken is what was
        shown."""
        p = self._params
        lease = self._read()
        status = service_lock.lease_status(lease, None, time.time())
        out = {"broken": False, "status": status, "broken_holder": status["holder"]}
        if not lease:
            return dict(out, message="no lock to break")
        if self._check_mode:
            return dict(out, message="check mode: not broken (the lock is %s)" % status["message"])
        if not confirm:
            # the operator runs playbooks/break_lock.yml: name its variable, not the task's option
            how = "playbooks/break_lock.yml --limit %s -e specpilot_break_lock_confirm=true" % p["name"]
            return dict(
                out,
                failed=True,
                msg="%s: the lock is %s; not broken without the confirmation: %s breaks it"
                % (p["name"], status["message"], how),
                message="not broken: no confirmation (the lock is %s)" % status["message"],
            )
        deleted = self._delete(status["resource_version"])
        if deleted.get("failed"):
            return dict(
                out,
                failed=True,
                msg="%s: the lock changed while it was broken - read it again (%s)"
                % (p["name"], str(deleted.get("msg") or "")[:200]),
            )
        return dict(out, broken=True, changed=True, message="broken (it was %s)" % status["message"])

    # ------------------------------------------------------------ helpers
    def _lease_ref(self):
        p = self._params
        return dict(
            api_version=service_lock.LEASE_API,
            kind="Lease",
            name=service_lock.lease_name(p["name"]),
            namespace=p["namespace"],
        )

    def _delete(self, version):
        """Delete the Lease only while it is at ``version`` (a precondition: a conflict otherwise)."""
        ref = self._lease_ref()
        return self._write(
            True, self._writer.delete, ref["api_version"], ref["kind"], ref["name"], ref["namespace"], version
        )

    def _patch(self, ops):
        """The conditional JSON patch of the Lease (its test operations make it a compare-and-swap)."""
        ref = self._lease_ref()
        return self._write(
            True, self._writer.json_patch, ref["api_version"], ref["kind"], ref["name"], ref["namespace"], ops
        )

    def _read(self):
        ref = self._lease_ref()
        return self._reader.get(ref["kind"], ref["api_version"], name=ref["name"], namespace=ref["namespace"])

    def _write(self, conditional, write, *args):
        """``write(*args)``, again while it fails with a transient error (module_retry.retried). For a
        conditional write (a patch that tests the resourceVersion, a delete with a precondition) a
        conflict (409; 422 is final anyway) is the answer, not a transient error; for the others (a
        create that raced a delete) it is retried."""
        return retried(lambda: write(*args), self._backoff, conflict=not conditional)

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


def _run_pid():
    """The pid of ansible-playbook as the worker was forked from it: multiprocessing records it in the child
    (ansible's WorkerProcess is a multiprocessing.Process), so a run killed between the fork and the Renewer
    is still seen as gone; os.getppid() where the worker is not one (no parent_process)."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None else os.getppid()


class Renewer(object):
    """Renews the lock a run holds every third of its duration (``keep(now)``: None, or why the
    wait must stop).

    The worker process that runs the wait is ansible-playbook's child: when ansible-playbook is
    killed (SIGKILL, a lost controller) the worker lives on, re-parented.  It then releases the
    lock at once and stops, rather than keep a service locked for a run that no longer exists."""

    def __init__(self, client, lock, clock=time.time, parent=os.getppid, renew_first=False):
        self._client = client
        self._holder = lock["holder"]
        self._version = lock["resource_version"]
        self._every = max(1.0, lock["duration"] / 3.0)
        # renew_first: the lock was renewed by an earlier task, when is not known - renew at the first call
        self._last = float("-inf") if renew_first else clock()
        self._renewals = 0
        self._parent = parent
        self._run = _run_pid() if parent is os.getppid else parent()

    def __call__(self, now):
        if self._parent() != self._run:
            out = self._client.release(self._holder, self._version)
            return "ansible-playbook (pid %s) is gone; the lock was %s" % (
                self._run,
                "released" if out.get("released") else "left to expire (%s)" % out.get("message"),
            )
        if now - self._last < self._every:
            return None
        out = self._client.renew(self._holder, self._version)
        if out.get("failed"):
            return out.get("msg") or "the lock could not be renewed"
        self._version, self._last = out["resource_version"], now
        self._renewals += 1
        return None

    def state(self):
        return {"holder": self._holder, "resource_version": self._version, "renewals": self._renewals}


def renewer_for(params, reader, name, namespace, check_mode=False, clock=time.time, renew_first=False):
    """The Renewer of ``params["lock"]`` (the lock of service ``name`` in ``namespace``) for an action that
    waits: its writes with the task's connection options (``params``), its reads through ``reader``;
    ``renew_first``: renew at its first call (Renewer)."""
    client = LeaseClient(
        Writer(auth_options(params), params.get("request_timeout")),
        reader,
        dict(params, name=name, namespace=namespace),
        check_mode=check_mode,
    )
    return Renewer(client, params["lock"], clock=clock, renew_first=renew_first)


def held_lock_renewer(params, auth, reader):
    """The Renewer of a Job's wait (specpilot.core.k8s_job, k8s_job_wait): ``params["lock"]`` (with the name
    and namespace of its service) with the connection ``auth``; renewed at the first poll (an earlier task
    renewed it last), then every third of its duration."""
    lock = params["lock"]
    if not lock["name"]:
        raise AnsibleActionFail("lock.name and lock.namespace: the service whose lock to renew")
    conn = dict(auth, retries=8, request_timeout=REQUEST_TIMEOUT, lock=lock)
    return renewer_for(conn, reader, lock["name"], lock["namespace"], clock=time.monotonic, renew_first=True)
