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


def test_before_0_26_data_parallel_keeps_the_schedule_on_every_rank():
    """vLLM 0.24.0 and 0.25.1 have the schedule but not the guard that drops it under data parallelism
    (VllmConfig._maybe_disable_dynamic_sd_for_data_parallel, 0.26.0): the warning says what they do."""
    spec = base_spec(
        vllm_version="0.25.1",
        speculative={
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_max": 4,
            "num_speculative_tokens_per_batch_size": SCHEDULE,
        },
        vllm_args={
            "gpu_memory_utilization": 0.85,
            "max_model_len": 8192,
            "extra_args": ["--data-parallel-size=2"],
        },
    )
    result = validate(spec, {})
    assert result["ok"], result.get("errors")
    (warning,) = [w for w in result["warnings"] if w["code"] == "per-batch-dropped-by-dp"]
    assert "keeps the batch-size schedule on every data-parallel rank" in warning["message"]
    assert "vLLM 0.25.1" in warning["message"]


def test_before_0_24_the_schedule_is_refused():
    """vLLM 0.23.0 has no num_speculative_tokens_per_batch_size (vllm/config/speculative.py): the key
    is refused with the release that brings it."""
    spec = base_spec(
        vllm_version="0.23.0",
        speculative={
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_max": 4,
            "num_speculative_tokens_per_batch_size": SCHEDULE,
        },
    )
    result = validate(spec, {})
    assert not result["ok"]
    assert any(
        "num_speculative_tokens_per_batch_size" in e["path"] and "0.24.0" in e["message"]
        for e in result["errors"]
    ), result["errors"]
