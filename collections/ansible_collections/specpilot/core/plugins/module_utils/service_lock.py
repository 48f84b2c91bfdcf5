# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see galaxy.yml)
"""The per-service lock that every run writing a service takes: deploy, rollback, the guard's
rollback, the benchmark's twin.

The lock is the coordination.k8s.io Lease ``specpilot-deploy-<service>`` in the service's
namespace (:func:`deploy_state.lease_name`), with a holder and an expiry (``renewTime`` +
``leaseDurationSeconds``), like Kubernetes' own leader election.  It is taken by compare-and-swap:
a JSON patch whose first operation tests the ``resourceVersion`` just read, so of two runs that
race one gets 422 and is told who won.  A lock whose holder died expires and is taken over.  It is
released by deleting the Lease with the ``resourceVersion`` the holder wrote as a precondition, so
a lock another run took over (after this one's expired) is left alone.

This module decides what to write; the action plugin ``specpilot.core.service_lock`` writes it
through kubernetes.core's modules.  Pure standard library; times are epoch seconds (``now``).
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.deploy_state import (
    lease_name,
    lease_spec,
    lease_status,
    micro_time,
)

__all__ = [
    "LEASE_API",
    "holder_id",
    "lease_object",
    "acquire_step",
    "renew_patch",
    "held_message",
]

LEASE_API = "coordination.k8s.io/v1"


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


def held_message(name, namespace, status):
    """Why a run may not write service ``name`` now, and what the user can do."""
    return (
        "%s: another deploy or rollback of this service is running - lock %s/%s %s. Wait for it to finish; "
        "if it died, the lock expires by itself%s, or delete the Lease."
        % (
            name,
            namespace,
            lease_name(name),
            status["message"],
            " at %s" % status["expires_at"] if status.get("expires_at") else "",
        )
    )
