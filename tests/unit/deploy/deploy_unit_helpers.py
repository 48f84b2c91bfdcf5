"""Plans and live objects for the deploy unit tests (imported by name)."""

from __future__ import annotations

import copy

from ansible_collections.specpilot.core.plugins.module_utils.service import render
from service_plans import SPEC, applied, plan  # noqa: F401 (re-exported to the deploy tests)


def _merged(isvc: dict, runtime_args) -> list:
    """The container args as KServe makes them: the runtime's, then the model's, {{.Name}} filled in."""
    meta = isvc["metadata"]
    args = list(runtime_args) + list(isvc["spec"]["predictor"]["model"]["args"])
    return render.in_pod(args, meta["name"], meta.get("namespace"))


def deployment(
    isvc: dict,
    runtime_args=("--port=8080", "--served-model-name=svc"),
    generation=1,
    observed=1,
    replicas=1,
    updated=1,
    available=1,
    digest: str | None = "same",
) -> dict:
    anns = dict(isvc["metadata"].get("annotations") or {})
    if digest is None:
        anns.pop("specpilot.io/spec-digest", None)
    elif digest != "same":
        anns["specpilot.io/spec-digest"] = digest
    args = _merged(isvc, runtime_args)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "%s-predictor" % isvc["metadata"]["name"], "generation": generation},
        "spec": {
            "replicas": 1,
            "template": {
                "metadata": {"annotations": anns},
                "spec": {"containers": [{"name": "kserve-container", "args": args}]},
            },
        },
        "status": {
            "observedGeneration": observed,
            "replicas": replicas,
            "updatedReplicas": updated,
            "availableReplicas": available,
        },
    }


def ready_status(ready: bool = True) -> dict:
    cond = (
        {"type": "Ready", "status": "True"}
        if ready
        else {"type": "Ready", "status": "False", "reason": "MinimumReplicasUnavailable"}
    )
    return {"conditions": [cond]}


def pod(
    isvc: dict,
    name="svc-predictor-abc-1",
    runtime_args=("--port=8080",),
    phase="Running",
    ready=True,
    state=None,
    restarts=0,
    last=None,
    created="2026-01-01T00:00:00Z",
    unschedulable=None,
    annotations=None,
) -> dict:
    args = _merged(isvc, runtime_args)
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable:
        conds = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        ]
    cstatus = {
        "name": "kserve-container",
        "ready": ready,
        "restartCount": restarts,
        "state": state or ({"running": {}} if phase == "Running" else {"waiting": {"reason": "Pending"}}),
    }
    if last:
        cstatus["lastState"] = {"terminated": last}
    status = {"phase": phase, "conditions": conds}
    if not unschedulable:
        status["containerStatuses"] = [cstatus]
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "annotations": (
                annotations if annotations is not None else dict(isvc["metadata"].get("annotations") or {})
            ),
        },
        "spec": {"containers": [{"name": "kserve-container", "args": args}]},
        "status": status,
    }
