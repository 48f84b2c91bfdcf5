"""A valid service spec and what validation plans of it, and what the API server stores of an applied
manifest: shared by the unit tests of deploy and the canary (imported by name; tests/ is on sys.path as the
rootdir's conftest.py directory), so each checks the one plan validator.validate makes, not a copy of it."""

from __future__ import annotations

import copy

from ansible_collections.specpilot.core.plugins.module_utils.service import validator

SPEC = {
    "name": "svc",
    "namespace": "ml",
    "kserve_version": "0.20",
    "deployment_mode": "Standard",
    "vllm_version": "0.32.0",
    "runtime": {"image": "vllm/vllm-openai:v0.32.0"},
    "gpu": {"count": 1, "memory_gib": 80, "node_selector": {"nvidia.com/gpu.product": "H100"}},
    "delivery": "pvc",
    "pvc": {"name": "models"},
    "target": {"subdir": "target", "params_b": 8.0, "dtype": "bfloat16"},
    "speculative": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
    "vllm_args": {"gpu_memory_utilization": 0.85, "max_model_len": 4096},
    "acknowledged_warnings": ["async-scheduling-disabled"],
}


def plan(**changes) -> dict:
    spec = copy.deepcopy(SPEC)
    spec.update(changes)
    result = validator.validate(spec, {"kserve_version": spec["kserve_version"]})
    assert result["ok"], result["report"]
    return result["plan"]


def applied(manifest: dict, manager: str = "specpilot", extra_status: dict | None = None) -> dict:
    """What the API server stores for a manifest applied by ``manager`` (defaults, managedFields)."""
    obj = copy.deepcopy(manifest)
    md = obj["metadata"]
    md.update(
        uid="u-1",
        resourceVersion="7",
        generation=1,
        creationTimestamp="2026-01-01T00:00:00Z",
        managedFields=[
            {
                "manager": manager,
                "operation": "Apply",
                "apiVersion": obj["apiVersion"],
                "fieldsType": "FieldsV1",
                "fieldsV1": {},
            }
        ],
    )
    if extra_status is not None:
        obj["status"] = extra_status
    return obj
