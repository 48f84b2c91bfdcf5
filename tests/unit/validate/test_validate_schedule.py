"""The validator on a batch-size schedule of k (issue 37): vLLM drops it under data parallelism."""

from __future__ import annotations

import pytest
from validate_helpers import base_spec

from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate

SCHEDULE = [[1, 4, 3], [5, 256, 0]]


def _codes(result):
    return {w["code"] for w in result["warnings"]}


@pytest.mark.parametrize(
    "extra,dropped", [([], False), (["--data-parallel-size=1"], False), (["--data-parallel-size=2"], True)]
)
def test_data_parallel_drops_the_schedule(extra, dropped):
    spec = base_spec(
        speculative={
            "method": "eagle3",
            "num_speculative_tokens": 3,
            "num_speculative_tokens_per_batch_size": SCHEDULE,
        },
        vllm_args={"gpu_memory_utilization": 0.85, "max_model_len": 8192, "extra_args": extra},
    )
    result = validate(spec, {})
    assert result["ok"], result.get("errors")
    assert ("per-batch-dropped-by-dp" in _codes(result)) == dropped
    if dropped:
        (warning,) = [w for w in result["warnings"] if w["code"] == "per-batch-dropped-by-dp"]
        assert warning["path"].endswith("num_speculative_tokens_per_batch_size")
        assert "drops the batch-size schedule" in warning["message"]
