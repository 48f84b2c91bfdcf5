"""What ``inventories/lab`` needs in the lab before ``stage.yml``: its namespace and its models PVC
holding the tiny models (target/, draft/, eagle3/). ``make lab-up`` seeds it, ``make demo``
reuses the same step, ``make lab-status`` reports it.

The names are read from the lab inventory's cluster defaults (``specpilot_namespace``,
``specpilot_pvc.name``), so the inventory and the seed never disagree. Idempotent: what is
there is left alone (a PVC whose models are there is not written again).
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from .processes import REPO_ROOT, LabPaths

LAB_GROUP_VARS = REPO_ROOT / "inventories" / "lab" / "group_vars" / "specpilot_services.yml"
BIND_TIMEOUT = 30.0


class SeedFailed(RuntimeError):
    pass


def lab_targets(group_vars: Path = LAB_GROUP_VARS) -> tuple[str, str]:
    """(namespace, models PVC) of the lab inventory."""
    data = yaml.safe_load(group_vars.read_text(encoding="utf-8")) or {}
    namespace = data.get("specpilot_namespace")
    pvc = (data.get("specpilot_pvc") or {}).get("name")
    if not namespace or not pvc:
        raise SeedFailed(f"{group_vars}: specpilot_namespace and specpilot_pvc.name must be set")
    return namespace, pvc


def core_api(paths: LabPaths):
    """A CoreV1Api client on the lab's kubeconfig."""
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(paths.kubeconfig)))


def _create(call, *args) -> bool:
    """True when created, False when it was there (409)."""
    from kubernetes import client

    try:
        call(*args)
        return True
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        return False


def _wait_bound(core, namespace: str, pvc: str) -> None:
    deadline = time.monotonic() + BIND_TIMEOUT
    while core.read_namespaced_persistent_volume_claim(pvc, namespace).status.phase != "Bound":
        if time.monotonic() > deadline:
            raise SeedFailed(f"PVC {namespace}/{pvc} not Bound after {BIND_TIMEOUT:.0f} s")
        time.sleep(0.5)


def models_dir(paths: LabPaths, namespace: str, pvc: str) -> Path:
    """The lab's storage backend for a PVC is a directory."""
    return paths.root / "pvcs" / namespace / pvc


def seed(paths: LabPaths, say=print) -> list[str]:
    """Namespace, PVC and tiny models; returns what was created ([] when all was there)."""
    from .models import make_models_subprocess

    namespace, pvc = lab_targets()
    core = core_api(paths)
    created = []
    if _create(core.create_namespace, {"metadata": {"name": namespace}}):
        created.append(f"namespace {namespace}")
    claim = {
        "metadata": {"name": pvc},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    if _create(core.create_namespaced_persistent_volume_claim, namespace, claim):
        created.append(f"PVC {namespace}/{pvc}")
    _wait_bound(core, namespace, pvc)
    backing = models_dir(paths, namespace, pvc)
    if not (backing / "target" / "config.json").exists():
        t0 = time.monotonic()
        manifest = make_models_subprocess(backing)
        created.append(f"tiny models on {pvc}")
        say(
            f"tiny models written to the PVC in {time.monotonic() - t0:.1f}s ({len(manifest.get('files', manifest))} files)"
        )
    return created


def describe(paths: LabPaths) -> list[str]:
    """What the lab inventory finds in the lab (for ``make lab-status``)."""
    from kubernetes import client

    namespace, pvc = lab_targets()
    core = core_api(paths)
    try:
        phase = core.read_namespaced_persistent_volume_claim(pvc, namespace).status.phase
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        return [f"inventories/lab: PVC {namespace}/{pvc} missing (make lab-up seeds it)"]
    have = sorted(p.name for p in models_dir(paths, namespace, pvc).iterdir() if (p / "config.json").exists())
    return [f"inventories/lab: PVC {namespace}/{pvc} {phase}, models: {', '.join(have) or 'none'}"]
