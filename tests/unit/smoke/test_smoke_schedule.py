"""The smoke verdict on a service with a batch-size schedule of k (issue 37): the engine runs the schedule
(given at start, not dropped), and the batch sizes it ran the probes at (vllm:num_requests_running read
during the probes). Inputs: the validator's plan of lab-ngram with a schedule, logs in vLLM 0.32's format
through the real log parser."""

from __future__ import annotations

import copy

import pytest
import smoke_samples as s

from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import parse_log_text
from ansible_collections.specpilot.core.plugins.module_utils.verify import smoke, smoke_schedule

SCHEDULE = [[1, 2, 3], [3, 4, 0]]
DP_DROP = (
    "(APIServer pid=7) WARNING 11-21 06:00:01 [vllm.py:1066] Dynamic speculative decoding is not supported "
    "with data parallelism because data-parallel ranks can select different speculative-token counts, causing "
    "DP divergence and deadlocks. Disabling num_speculative_tokens_per_batch_size and falling back to static "
    "num_speculative_tokens=3."
)


@pytest.fixture(scope="module")
def plan():
    return s.plan_for(
        "lab-ngram",
        speculative={
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
            "num_speculative_tokens_per_batch_size": SCHEDULE,
        },
    )


def running(*values):
    return [
        {"t": 0.1 * i, "text": 'vllm:num_requests_running{engine="0",model_name="lab-ngram"} %.1f' % v}
        for i, v in enumerate(values)
    ]


def verdict(plan, log_plan=None, extra="", **over):
    data = s.data_for(plan, **over)
    data["log_facts"] = parse_log_text(s.log_text(log_plan or plan, [], extra=extra))
    return smoke.evaluate(data)


def by_id(result):
    return {c["id"]: c for c in result["checks"]}


def test_the_engine_runs_the_planned_schedule(plan):
    result = verdict(plan, probes=dict(s.probes_ok(), running_samples=running(0, 1, 1, 0)))
    c = by_id(result)
    assert result["verdict"] == "pass", result["message"]
    assert c["engine_schedule"]["status"] == "pass"
    assert c["engine_schedule"]["message"] == (
        "the engine runs batch 1-2: k=3; batch 3-4: off (given at start, engine-init line "
        "SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3), data_parallel_size=1)"
    )
    assert c["probe_running"]["status"] == "pass"
    assert c["probe_running"]["message"] == (
        "the engine ran 1 request(s) at once during the probes (2 of 4 reads of vllm:num_requests_running); "
        "the schedule runs k=3 there"
    )


def test_an_engine_started_without_the_schedule_fails(plan):
    started = copy.deepcopy(plan)
    del started["speculative_config"]["num_speculative_tokens_per_batch_size"]
    c = by_id(verdict(plan, log_plan=started))
    assert c["engine_schedule"]["status"] == "fail"
    assert c["engine_schedule"]["message"] == (
        "the engine was given num_speculative_tokens_per_batch_size=None, planned [[1, 2, 3], [3, 4, 0]]"
    )


def test_a_schedule_vllm_dropped_under_data_parallelism_fails(plan):
    result = verdict(plan, extra=DP_DROP)
    c = by_id(result)
    assert result["verdict"] == "fail"
    assert c["engine_schedule"]["status"] == "fail"
    assert (
        "does not run it: vLLM logged: Dynamic speculative decoding is not supported"
        in c["engine_schedule"]["message"]
    )
    assert "DYNAMIC_SD_DROPPED" in c["engine_warnings"]["message"]


def test_probes_run_where_the_schedule_turns_speculation_off_warn(plan):
    c = by_id(verdict(plan, probes=dict(s.probes_ok(), running_samples=running(3, 4, 3))))
    assert c["probe_running"]["status"] == "warn"
    assert "3-4 request(s) at once" in c["probe_running"]["message"]
    assert "k=0 there: speculation was off for the probes" in c["probe_running"]["message"]


@pytest.mark.parametrize(
    "samples,needle",
    [
        ([], "0 read(s) of /metrics during the probes, none with vllm:num_requests_running"),
        (running(0, 0), "read 2 time(s) during the probes, 0 each time"),
    ],
)
def test_probes_the_reads_missed_are_said_not_judged(plan, samples, needle):
    c = by_id(verdict(plan, probes=dict(s.probes_ok(), running_samples=samples)))
    assert c["probe_running"]["status"] == "info" and needle in c["probe_running"]["message"]


def test_without_a_schedule_there_is_no_schedule_check():
    plain = s.plan_for("lab-ngram")
    result = smoke.evaluate(dict(s.data_for(plain), probes=dict(s.probes_ok(), running_samples=running(1))))
    c = by_id(result)
    assert "engine_schedule" not in c and result["verdict"] == "pass"
    assert c["probe_running"]["message"].endswith("(1 of 1 reads of vllm:num_requests_running)")


def test_k_at_follows_vllm_s_lookup():
    """build_dynamic_sd_schedule_lookup: a range's k inside it, the previous k across a gap and past the end."""
    table = [[1, 2, 3], [5, 8, 1]]
    assert [smoke_schedule.k_at(table, b) for b in (1, 2, 3, 5, 9)] == [3, 3, 3, 1, 1]
