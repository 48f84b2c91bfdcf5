"""What ``inventories/lab`` needs in the lab before ``stage.yml``. ``make lab-up`` seeds it,
``make demo`` reuses the same step, ``make lab-status`` reports it (:func:`describe`).

What is needed is read from the lab inventory itself (its group_vars, hosts.yml and host_vars;
values that are Jinja expressions are left aside), so the inventory and the seed never disagree:

* the namespace (``specpilot_namespace``);
* the tiny models (target/, draft/, eagle3/, see models.py), written once to ``<lab>/models``:
  the lab's own copy, which the Modelcar service stages from (``local_path``);
* every PVC a service reads, with the models copied onto it:
    - delivery ``pvc`` (option C): ``specpilot_pvc.name`` holds ``[<path>/]<subdir>`` of the target
      and the draft;
    - delivery ``storage_uris`` (option A): each ``pvc://claim[/path]`` entry holds its model at
      ``<path>`` (KServe 0.20 mounts the whole claim at the entry's mountPath);
  the model of an artifact is the lab model named like its ``subdir`` (target, draft or eagle3);
* for delivery ``modelcar`` (option B): the busybox base image as an OCI layout in
  ``<lab>/modelcar-base`` (what ``specpilot_stage_modelcar_base`` names), and the
  ClusterServingRuntime named by an existing-runtime service (``specpilot_runtime.create: false``,
  kind ClusterServingRuntime). The lab registry is one of the lab's processes; ``stage.yml``
  pushes the image into it.

Idempotent: what is there is left alone (a PVC whose models are there is not written again).
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .processes import REPO_ROOT, LabPaths

LAB_INVENTORY = REPO_ROOT / "inventories" / "lab"
LAB_GROUP_VARS = LAB_INVENTORY / "group_vars" / "specpilot_services.yml"
BIND_TIMEOUT = 30.0
# what models.py writes (one directory each)
MODEL_NAMES = ("target", "draft", "eagle3")
KSERVE = ("serving.kserve.io", "v1alpha1", "clusterservingruntimes")
LLMISVC = ("serving.kserve.io", "v1alpha2", "llminferenceservices")
LLMISVC_CONFIGS = ("serving.kserve.io", "v1alpha2", "llminferenceserviceconfigs")


class SeedFailed(RuntimeError):
    pass


@dataclass
class Needs:
    """What the lab inventory's services need in the lab."""

    namespace: str
    # claim -> {path on the claim ("" = its root): lab model}
    pvcs: dict[str, dict[str, str]] = field(default_factory=dict)
    # services delivered by Modelcar (they need the base image and the registry)
    modelcar: list[str] = field(default_factory=list)
    # ClusterServingRuntimes that services use without creating them
    cluster_runtimes: list[str] = field(default_factory=list)
    # services served by KServe's LLMInferenceService (specpilot_resource): the controller's
    # well-known LLMInferenceServiceConfigs in namespace kserve
    llm_services: list[str] = field(default_factory=list)


def _yaml(path: Path) -> dict:
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}


def _literal(value):
    """None for a Jinja expression (resolved by Ansible, not here)."""
    return None if isinstance(value, str) and "{{" in value else value


def inventory_hosts(inventory: Path = LAB_INVENTORY) -> dict[str, dict]:
    """Each host of group specpilot_services with its variables (group_vars, then hosts.yml's
    inline vars, then host_vars/<host>.yml; like Ansible, a later top-level key replaces)."""
    group = _yaml(inventory / "group_vars" / "specpilot_services.yml")
    hosts = ((_yaml(inventory / "hosts.yml").get("specpilot_services") or {}).get("hosts")) or {}
    out = {}
    for host, inline in hosts.items():
        merged = dict(group)
        merged.update(inline or {})
        merged.update(_yaml(inventory / "host_vars" / f"{host}.yml"))
        out[host] = merged
    return out


def _model(host: str, role: str, artifact: dict) -> str:
    name = _literal(artifact.get("subdir")) or role
    if name not in MODEL_NAMES:
        raise SeedFailed(
            f"{host}: specpilot_{role}.subdir {name!r} names no lab model ({', '.join(MODEL_NAMES)})"
        )
    return name


def lab_needs(inventory: Path = LAB_INVENTORY) -> Needs:
    hosts = inventory_hosts(inventory)
    namespaces = {_literal(v.get("specpilot_namespace")) for v in hosts.values()} or {None}
    if None in namespaces or len(namespaces) != 1:
        raise SeedFailed(f"{inventory}: every service needs the same literal specpilot_namespace")
    needs = Needs(namespace=namespaces.pop())
    for host, v in hosts.items():
        if _literal(v.get("specpilot_resource")) == "LLMInferenceService":
            needs.llm_services.append(host)
        delivery = _literal(v.get("specpilot_delivery"))
        artifacts = [(r, v.get(f"specpilot_{r}")) for r in ("target", "draft")]
        artifacts = [(r, a) for r, a in artifacts if isinstance(a, dict)]
        if delivery == "pvc":
            pvc = v.get("specpilot_pvc") or {}
            claim = _literal(pvc.get("name"))
            if not claim:
                raise SeedFailed(f"{host}: delivery pvc needs a literal specpilot_pvc.name")
            base = (_literal(pvc.get("path")) or "").strip("/")
            for role, art in artifacts:
                model = _model(host, role, art)
                needs.pvcs.setdefault(claim, {})["/".join(p for p in (base, model) if p)] = model
        elif delivery == "storage_uris":
            for role, art in artifacts:
                uri = _literal(art.get("uri")) or ""
                if uri.startswith("pvc://"):
                    claim, _, path = uri[len("pvc://") :].partition("/")
                    needs.pvcs.setdefault(claim, {})[path.strip("/")] = _model(host, role, art)
        elif delivery == "modelcar":
            needs.modelcar.append(host)
            runtime = v.get("specpilot_runtime") or {}
            if runtime.get("create") is False and runtime.get("kind") == "ClusterServingRuntime":
                name = _literal(runtime.get("name"))
                if name and name not in needs.cluster_runtimes:
                    needs.cluster_runtimes.append(name)
    return needs


def lab_targets(group_vars: Path = LAB_GROUP_VARS) -> tuple[str, str]:
    """(namespace, models PVC) of the lab inventory's cluster defaults."""
    data = _yaml(group_vars)
    namespace = data.get("specpilot_namespace")
    pvc = (data.get("specpilot_pvc") or {}).get("name")
    if not namespace or not pvc:
        raise SeedFailed(f"{group_vars}: specpilot_namespace and specpilot_pvc.name must be set")
    return namespace, pvc


def core_api(paths: LabPaths):
    """A CoreV1Api client on the lab's kubeconfig."""
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(paths.kubeconfig)))


def custom_api(paths: LabPaths):
    from kubernetes import client, config

    return client.CustomObjectsApi(config.new_client_from_config(str(paths.kubeconfig)))


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


def models_store(paths: LabPaths) -> Path:
    """The lab's own copy of the tiny models (the Modelcar service's local_path)."""
    return paths.root / "models"


def modelcar_base(paths: LabPaths) -> Path:
    """The Modelcar base image (busybox), an OCI layout: ``oci:<this>:latest``."""
    return paths.root / "modelcar-base"


def cluster_runtime(name: str) -> dict:
    """The lab's vLLM runtime without the Modelcar startup guard: the lab runs the vLLM server
    command only (not the shell that the runtime specpilot renders for option B waits in)."""
    return {
        "apiVersion": "/".join(KSERVE[:2]),
        "kind": "ClusterServingRuntime",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "specpilot-lab"}},
        "spec": {
            "supportedModelFormats": [{"name": "vLLM", "autoSelect": False}],
            "annotations": {"prometheus.kserve.io/port": "8080", "prometheus.kserve.io/path": "/metrics"},
            "containers": [
                {
                    "name": "kserve-container",
                    "image": "specpilot-lab/vllm-cpu:0.32.0",
                    "command": ["vllm", "serve"],
                    "args": ["--port=8080", "--served-model-name={{.Name}}"],
                }
            ],
        },
    }


def _copy_model(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest, dirs_exist_ok=True)


def seed(paths: LabPaths, say=print) -> list[str]:
    """Everything lab_needs() names; returns what was created ([] when all was there)."""
    from .models import make_models_subprocess

    needs = lab_needs()
    core = core_api(paths)
    created = []
    if _create(core.create_namespace, {"metadata": {"name": needs.namespace}}):
        created.append(f"namespace {needs.namespace}")
    store = models_store(paths)
    if not (store / "manifest.json").exists():
        t0 = time.monotonic()
        manifest = make_models_subprocess(store)
        created.append("tiny models")
        say(
            f"tiny models written in {time.monotonic() - t0:.1f}s "
            f"({len(manifest.get('files', manifest))} files)"
        )
    for claim, contents in needs.pvcs.items():
        body = {
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        }
        if _create(core.create_namespaced_persistent_volume_claim, needs.namespace, body):
            created.append(f"PVC {needs.namespace}/{claim}")
        _wait_bound(core, needs.namespace, claim)
        backing = models_dir(paths, needs.namespace, claim)
        missing = {p: m for p, m in contents.items() if not (backing / p / "config.json").exists()}
        for path, model in sorted(missing.items()):
            _copy_model(store / model, backing / path)
        if missing:
            created.append(f"{', '.join(sorted(set(missing.values())))} on {claim}")
    if needs.modelcar:
        from . import registry

        base = modelcar_base(paths)
        if not (base / "index.json").exists():
            registry.build_base_layout(base, tag="latest")
            created.append("Modelcar base image")
    if needs.cluster_runtimes:
        api = custom_api(paths)
        for name in needs.cluster_runtimes:
            if _create(api.create_cluster_custom_object, *KSERVE, cluster_runtime(name)):
                created.append(f"ClusterServingRuntime {name}")
    return created


def _registry_repositories(paths: LabPaths) -> list[str] | None:
    try:
        addr = json.loads(paths.ready_file("registry").read_text())["addr"]
        with urllib.request.urlopen(f"http://{addr}/v2/_catalog", timeout=3) as resp:
            return sorted(json.load(resp).get("repositories") or [])
    except (OSError, ValueError, KeyError):
        return None


def _layout(backing: Path, contents: dict[str, str]) -> str:
    """Where each model sits on the claim, as the services' paths read it: "model target at
    /target, model draft at /draft", or "model target at the claim's root"."""
    parts = []
    for path, model in sorted(contents.items()):
        where = f"/{path}" if path else "the claim's root"
        state = "" if (backing / path / "config.json").exists() else " (missing: make lab-up seeds it)"
        parts.append(f"model {model} at {where}{state}")
    return ", ".join(parts) or "no models"


def _llm_lines(paths: LabPaths, needs: Needs) -> list[str]:
    """The LLMInferenceService services: the well-known configs the lab controller keeps in namespace
    kserve (controller/llmisvc_configs.py), and each service's Ready and address once deployed."""
    from kubernetes import client

    api = custom_api(paths)
    try:
        configs = api.list_namespaced_custom_object(*LLMISVC_CONFIGS[:2], "kserve", LLMISVC_CONFIGS[2])["items"]
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        configs = []
    names = sorted(c["metadata"]["name"] for c in configs)
    lines = [
        "inventories/lab: LLMInferenceServiceConfigs in kserve: "
        + (", ".join(names) if names else "none yet (the lab controller creates them when it starts)")
    ]
    for host in needs.llm_services:
        try:
            obj = api.get_namespaced_custom_object(*LLMISVC[:2], needs.namespace, LLMISVC[2], host)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            lines.append(f"inventories/lab: LLMInferenceService {needs.namespace}/{host}: not deployed (deploy.yml)")
            continue
        status = obj.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        state = f"Ready {ready.get('status', 'Unknown')}" + (f" ({ready['reason']})" if ready.get("reason") else "")
        lines.append(
            f"inventories/lab: LLMInferenceService {needs.namespace}/{host}: {state}, url {status.get('url') or '-'}"
        )
    return lines


def describe(paths: LabPaths) -> list[str]:
    """What the lab inventory finds in the lab (for ``make lab-status``)."""
    from kubernetes import client

    needs = lab_needs()
    core = core_api(paths)
    lines = []
    for claim, contents in needs.pvcs.items():
        try:
            phase = core.read_namespaced_persistent_volume_claim(claim, needs.namespace).status.phase
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            lines.append(f"inventories/lab: PVC {needs.namespace}/{claim} missing (make lab-up seeds it)")
            continue
        backing = models_dir(paths, needs.namespace, claim)
        lines.append(f"inventories/lab: PVC {needs.namespace}/{claim} {phase}, {_layout(backing, contents)}")
    if needs.llm_services:
        lines += _llm_lines(paths, needs)
    if needs.modelcar:
        base = (
            "there" if (modelcar_base(paths) / "index.json").exists() else "missing (make lab-up writes it)"
        )
        lines.append(f"inventories/lab: Modelcar base image {modelcar_base(paths)}: {base}")
        api = custom_api(paths)
        for name in needs.cluster_runtimes:
            try:
                api.get_cluster_custom_object(*KSERVE, name)
                state = "there"
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
                state = "missing (make lab-up creates it)"
            lines.append(f"inventories/lab: ClusterServingRuntime {name}: {state}")
        repos = _registry_repositories(paths)
        if repos is not None:
            lines.append(
                "inventories/lab: registry holds "
                + (
                    ", ".join(repos)
                    if repos
                    else f"no image yet (stage.yml pushes {', '.join(needs.modelcar)})"
                )
            )
    return lines
