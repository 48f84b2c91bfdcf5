"""The lab's processes beside the API emulator: the OCI registry and the lab controller.

Imported by :mod:`specpilot_lab.processes`, which starts them after the emulator
(``make lab-up``) and stops them before it (``make lab-down``).
Environment: ``SPECPILOT_LAB_REGISTRY_PORT`` (default: a free port), and the controller's
``SPECPILOT_LAB_ENGINE`` (vllm or fake), ``SPECPILOT_LAB_NODE_GPUS`` / ``_NODE_LABELS`` / ``_NODE_TAINTS`` / ``_CRASH_BACKOFF_S`` /
``_JOB_BACKOFF_S`` (see ``python -m specpilot_lab.controller --help``).
"""

from __future__ import annotations

import os
import sys

from .processes import LabPaths, ProcessSpec, register


def _registry_command(paths: LabPaths) -> list[str]:
    return [
        sys.executable,
        "-m",
        "specpilot_lab.registry",
        "serve",
        "--state-dir",
        str(paths.root),
        "--port",
        os.environ.get("SPECPILOT_LAB_REGISTRY_PORT", "0"),
        "--ready-file",
        str(paths.ready_file("registry")),
    ]


def _registry_describe(paths: LabPaths, info: dict) -> list[str]:
    return [
        f"url {info.get('url', '?')} (alias in oci:// URIs: registry.lab)",
        f"storage {info.get('storage', '?')}",
    ]


def _controller_command(paths: LabPaths) -> list[str]:
    return [
        sys.executable,
        "-m",
        "specpilot_lab.controller",
        "--state-dir",
        str(paths.root),
        "--kubeconfig",
        str(paths.kubeconfig),
        "--ready-file",
        str(paths.ready_file("controller")),
    ]


def _controller_describe(paths: LabPaths, info: dict) -> list[str]:
    lines = [
        f"node {info.get('node', '?')} with {info.get('node_gpus', '?')} nvidia.com/gpu (counted only; "
        "engines run on this CPU)"
    ]
    if info.get("engine") == "fake":
        lines.append("engine: the lab's stand-in (SPECPILOT_LAB_ENGINE=fake): vLLM's log lines and /metrics, no model")
    elif not info.get("vllm_installed"):
        lines.append("engine NOT installed: predictor pods will fail until `make vllm`")
    else:
        lines.append(f"engine: the real vLLM engine ({info.get('vllm_python', '?')})")
    from .controller.cpus import describe as describe_cores  # the controller's package: only here

    lines += describe_cores(paths.root)
    if not info.get("bwrap"):
        lines.append(
            "bubblewrap unusable: Job pods and predictor engines will fail ("
            + (info.get("bwrap_problem") or "see the controller's log")
            + ")"
        )
    return lines


register(
    ProcessSpec(
        name="registry",
        command=_registry_command,
        describe=_registry_describe,
        after=("apiserver",),
        ready_timeout=20.0,
    )
)
register(
    ProcessSpec(
        name="controller",
        command=_controller_command,
        describe=_controller_describe,
        after=("apiserver", "registry"),
        ready_timeout=40.0,
    )
)
