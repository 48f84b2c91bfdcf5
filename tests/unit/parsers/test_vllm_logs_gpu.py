"""The parsers and the 0.24.0 profile against a real GPU vLLM.

tests/data/vllm/gpu_0.24.0_h200 holds the logs of vLLM 0.24.0 (the PyPI wheel, CUDA 13) serving the lab's
tiny models on an NVIDIA H200, written by benchmarks/gpu_flow.py on 2026-11-27 (its report:
benchmarks/results/gpu_flow_h200_2026-11-27.json): one engine without speculative decoding, one with
ngram, one with a draft model. eagle3.log is the EAGLE-3 engine of the second run that day (the lab's
built EAGLE-3 head; report benchmarks/results/gpu_flow_h200_2026-11-27b.json). Each file is the last
start of that engine, byte for byte (CRLF included).
"""

from __future__ import annotations

import pytest

from vllm_samples import DATA

from ansible_collections.specpilot.core.plugins.module_utils.engine import vllm_logs
from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import parse_version
from ansible_collections.specpilot.core.plugins.module_utils.verify import smoke

GPU = DATA / "gpu_0.24.0_h200"
MODELS = "/tmp/gpu-flow/models"
PLANNED = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    "draft_model": {"method": "draft_model", "model": MODELS + "/draft", "num_speculative_tokens": 3},
    "eagle3": {"method": "eagle3", "model": MODELS + "/eagle3", "num_speculative_tokens": 3},
}
# the methods vLLM 0.24.0 runs without async scheduling (vllm/config/vllm.py warns and turns it off)
ASYNC_OFF = ("draft_model", "ngram")


def parsed(name):
    return vllm_logs.parse_log_file(str(GPU / ("%s.log" % name)))


def test_the_baseline_engine_is_read_as_ready_without_speculation():
    res = parsed("baseline")
    assert (res["vllm_version"], res["engine"], res["ready"]) == ("0.24.0", "v1", True)
    assert res["speculative_config_found"] and res["speculative_config"] is None
    assert res["requested_speculative_config"] is None and res["log_errors"] == []


@pytest.mark.parametrize("method", sorted(PLANNED))
def test_the_engine_init_line_of_a_gpu_engine_matches_the_plan(method):
    res = parsed(method)
    assert (res["vllm_version"], res["ready"], res["tensor_parallel_size"]) == ("0.24.0", True, 1)
    assert res["requested_speculative_config"] == PLANNED[method]
    assert res["speculative_config"]["method"] == method and res["speculative_config"]["num_spec_tokens"] == 3
    assert smoke.compare_engine_config(PLANNED[method], res["speculative_config"]) == []
    wrong = dict(PLANNED[method], num_speculative_tokens=5)
    assert smoke.compare_engine_config(wrong, res["speculative_config"]) == ["num_spec_tokens 3 (planned 5)"]
    assert res["log_errors"] == []


@pytest.mark.parametrize("method", ASYNC_OFF)
def test_the_profile_knows_the_engine_turns_async_scheduling_off(method):
    """vLLM 0.24.0 logged 'Async scheduling not supported with <method>-based speculative decoding and will
    be disabled' (vllm/config/vllm.py): the 0.24.0 profile must say the method does not keep it."""
    res = parsed(method)
    assert "ASYNC_SCHEDULING_DISABLED" in [w["code"] for w in res["log_warnings"]]
    assert res["async_scheduling"] is False
    profile = vp.profile_for(parse_version("0.24.0"))[0]
    assert profile["x-specpilot"]["methods"][method]["keeps_async_scheduling"] is False


def test_the_eagle3_engine_is_read_with_its_head_and_async_scheduling_on():
    """EAGLE-3 ran on the V2 model runner with async scheduling kept ('Asynchronous scheduling is enabled.',
    vllm/config/vllm.py) and no ASYNC_SCHEDULING_DISABLED warning, as the 0.24.0 profile says; the init
    line names the head's path as given. The engine was stopped after the load: the APIServer's
    EngineDeadError traceback after '[shutdown]' is a consequence of the stop, a warning, not an error."""
    res = parsed("eagle3")
    assert res["speculative_config"] == {
        "method": "eagle3",
        "model": MODELS + "/eagle3",
        "num_spec_tokens": 3,
        "repr": "SpeculativeConfig(method='eagle3', model='%s/eagle3', num_spec_tokens=3)" % MODELS,
    }
    assert (res["model"], res["served_model_name"], res["engine_init_line"]) == (
        MODELS + "/target",
        "tiny",
        24,
    )
    assert res["async_scheduling"] is True
    profile = vp.profile_for(parse_version("0.24.0"))[0]
    assert profile["x-specpilot"]["methods"]["eagle3"]["keeps_async_scheduling"] is True
    assert res["shutdown"] is True and res["log_errors"] == []
    assert [(w["code"], w["line"], w.get("after_shutdown")) for w in res["log_warnings"]] == [
        ("ENGINE_DEAD", 168, True)
    ]
    assert res["log_levels"] == {"WARNING": 7, "ERROR": 8}
    # no SpecDecoding metrics line: the engine served for about 6 s after it was ready, inside vLLM's 10 s
    # stats-log interval, so the report's acceptance (1.0, mean length 4.0) came from /metrics alone
    assert res["windows_total"] == 0 and res["summary"]["draft_acceptance_rate"] is None
