# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The per-service lock that every run writing a service takes: deploy, rollback, the guard's
rollback, the benchmark's twin.

The lock is the coordination.k8s.io Lease ``specpilot-deploy-<service>`` in the service's
namespace (:func:`lease_name`), with a holder and an expiry (``renewTime`` +
``leaseDurationSeconds``), like Kubernetes' own leader election.  It is taken by compare-and-swap:
a JSON patch whose first operation tests the ``resourceVersion`` just read, so of two runs that
race one gets 422 and is told who won.  A lock whose holder died expires and is taken over.  It is
released by deleting the Lease with the ``resourceVersion`` the holder wrote as a precondition, so
a lock another run took over (after this one's expired) is left alone.

This module decides what to write; the action plugin ``specpilot.core.service_lock`` writes it
through kubernetes.core's modules.  Pure standard library; times are epoch seconds (``now``).
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.common import k8s_meta, micro_time, parse_time

__all__ = [
    "LEASE_API",
    "lease_name",
    "lease_spec",
    "lease_status",
    "holder_id",
    "lease_object",
    "acquire_step",
    "renew_patch",
    "held_message",
]

LEASE_API = "coordination.k8s.io/v1"


def lease_name(name):
    return "specpilot-deploy-%s" % name


def lease_spec(holder, duration, now, transitions=0):
    stamp = micro_time(now)
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": int(duration),
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": int(transitions),
    }


# what lease_status says when there is no Lease
_NO_LEASE = {
    "present": False,
    "held": False,
    "mine": False,
    "expired": False,
    "free": True,
    "holder": None,
    "acquire_time": None,
    "renew_time": None,
    "duration": None,
    "expires_at": None,
    "expires_in": None,
    "resource_version": None,
    "transitions": 0,
    "message": "no lease",
    "refusal": None,
}


def _lease_message(out):
    """One line on a present Lease: held by another (since, expiry), expired, free or ours."""
    if out["held"] and not out["mine"]:
        return "held by %s%s, expires %s%s" % (
            out["holder"],
            " since %s" % out["acquire_time"] if out["acquire_time"] else "",
            out["expires_at"] or "never",
            " (in %ss)" % out["expires_in"] if out["expires_in"] is not None else "",
        )
    if out["expired"]:
        return "expired (last holder %s, expired %s)" % (out["holder"], out["expires_at"])
    return "free" if not out["holder"] else "held by this deploy"


def lease_status(lease, holder, now):
    """What a deploy Lease says to ``holder`` at ``now``.

    ``{present, held, mine, expired, free, holder, acquire_time, renew_time, duration, expires_at,
    expires_in, resource_version, transitions, message, refusal}``; ``free`` means ``holder`` may take it,
    ``refusal`` is :func:`held_message` when another holder has it (None otherwise).
    """
    if not lease:
        return dict(_NO_LEASE)
    spec = lease.get("spec") or {}
    current = spec.get("holderIdentity") or None
    renew = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    expires_at = renew + float(duration) if renew is not None and duration is not None else None
    expired = current is not None and expires_at is not None and now >= expires_at
    mine = current is not None and current == holder
    held = current is not None and not expired
    out = {
        "present": True,
        "held": held,
        "mine": mine,
        "expired": expired,
        "free": (not held) or mine,
        "holder": current,
        "acquire_time": spec.get("acquireTime"),
        "renew_time": spec.get("renewTime"),
        "duration": duration,
        "expires_at": micro_time(expires_at) if expires_at is not None else None,
        "expires_in": int(expires_at - now) if expires_at is not None else None,
        "resource_version": k8s_meta(lease).get("resourceVersion"),
        "transitions": int(spec.get("leaseTransitions") or 0),
    }
    out["message"] = _lease_message(out)
    meta = k8s_meta(lease)
    out["refusal"] = held_message(out, meta.get("namespace"), meta.get("name")) if held and not mine else None
    return out


def holder_id(purpose, user, host, job_id, pid, nonce):
    """The one identity formula: ``user@host/purpose/awx-job-N|pid-N/nonce``.

    The purpose (deploy, rollback, guard, benchmark...) tells a reader of the Lease what holds it;
    the AWX job (or the controller's process id) where to look; the nonce keeps two runs of one
    process apart.
    """
    run = "awx-job-%s" % job_id if job_id not in (None, "") else "pid-%s" % pid
    return "%s@%s/%s/%s/%s" % (user or "ansible", host or "localhost", purpose, run, nonce)


def lease_object(name, namespace, labels=None, spec=None):
    """The Lease manifest of service ``name`` (without a spec: the object a first holder creates)."""
    obj = {
        "apiVersion": LEASE_API,
        "kind": "Lease",
        "metadata": {"name": lease_name(name), "namespace": namespace, "labels": dict(labels or {})},
    }
    if spec is not None:
        obj["spec"] = spec
    return obj


def acquire_step(lease, holder, now, duration):
    """What taking the lock needs, given the Lease as read (None when there is none).

    ``{"do": "create"}``: there is no Lease yet (create an empty one, then take it);
    ``{"do": "refuse", "status": ...}``: another holder has it and it has not expired;
    ``{"do": "patch", "patch": [...], "status": ...}``: it is free, expired or already ours - the
    compare-and-swap patch that takes it.
    """
    status = lease_status(lease, holder, now)
    if not status["present"]:
        return {"do": "create", "status": status}
    if not status["free"]:
        return {"do": "refuse", "status": status}
    transitions = status["transitions"] + (1 if status["holder"] and not status["mine"] else 0)
    return {
        "do": "patch",
        "status": status,
        "patch": [
            {"op": "test", "path": "/metadata/resourceVersion", "value": status["resource_version"]},
            {"op": "add", "path": "/spec", "value": lease_spec(holder, duration, now, transitions)},
        ],
    }


def renew_patch(holder, resource_version, now):
    """The patch that renews a lock ``holder`` holds at ``resource_version`` (fails, 422, otherwise)."""
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        {"op": "test", "path": "/spec/holderIdentity", "value": holder},
        {"op": "replace", "path": "/spec/renewTime", "value": micro_time(now)},
    ]


def held_message(status, namespace, lease, running="deploy or rollback"):
    """Why a run may not write the service now (``status``: what lease_status said), and what the
    user can do.  Every refusal of the lock says it this way."""
    service = lease[len(lease_name("")) :] if lease and lease.startswith(lease_name("")) else lease
    return (
        "another %s of this service is running - lock %s/%s %s. Wait for it to finish; "
        "if it died, the lock expires by itself%s, or break it now: "
        "playbooks/break_lock.yml --limit %s -e specpilot_break_lock_confirm=true"
        % (
            running,
            namespace,
            lease,
            status["message"],
            " at %s" % status["expires_at"] if status.get("expires_at") else "",
            service,
        )
    )
