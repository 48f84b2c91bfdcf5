"""The schedule sweep's decision (module_utils/benchmark/bench_schedule.py) on sweeps judged by the benchmark's own
analysis (bench_analysis.analyse) of constructed runs: one baseline per concurrency level, one candidate per k.
"""

from __future__ import annotations

import pytest
from bench_helpers import ACCEPT, run

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_analysis as ba
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_schedule as bs

BASE_TPOT = 20.0
ACC = dict(ACCEPT, mean_acceptance_length=3.4, draft_acceptance_rate=0.8)


def sweep(grid, base_jitter=0.05):
    """grid: {k: {concurrency: tpot_ms | ("noise", tpot_ms) | "invalid"}} -> candidates as tune.yml passes them."""
    levels = sorted({c for per in grid.values() for c in per})
    baseline = [
        run("baseline", None, ttft_ms=50, tpot_ms=BASE_TPOT, jitter=base_jitter, concurrency=c)
        for c in levels
    ]
    out = []
    for k, per in sorted(grid.items()):
        spec = []
        for c, cell in sorted(per.items()):
            kw = {"jitter": 0.05}
            if cell == "invalid":
                tpot, kw = BASE_TPOT, {"failed": 15}
            elif isinstance(cell, tuple):
                tpot, kw = cell[1], {"jitter": 0.4}
            else:
                tpot = cell
            spec.append(
                run("speculative", None, ttft_ms=50, tpot_ms=tpot, concurrency=c, acceptance=ACC, **kw)
            )
        res = ba.analyse(baseline + spec, target={"qps": None, "concurrency": levels[0]})
        out.append({"id": "k%d" % k, "method": "ngram", "num_speculative_tokens": k, "result": res})
    return out


@pytest.fixture(scope="module")
def crossing():
    """k pays at 1 and 2 concurrent requests (k=3 best at 1, k=2 best at 2), every k is slower from 4 on."""
    return sweep(
        {
            1: {1: 15, 2: 16, 4: 26, 8: 30},
            2: {1: 10, 2: 12, 4: 28, 8: 34},
            3: {1: 8, 2: 13, 4: 30, 8: 38},
        }
    )


def test_a_clear_crossover_gives_a_contiguous_schedule_and_the_crossover(crossing):
    out = bs.analyse_sweep(crossing, max_num_seqs=64, method="ngram", version=(0, 32, 0))
    by = {lv["concurrency"]: lv for lv in out["levels"]}
    assert [(c, by[c]["k"], by[c]["status"]) for c in (1, 2, 4, 8)] == [
        (1, 3, "speculate"),
        (2, 2, "speculate"),
        (4, 0, "off"),
        (8, 0, "off"),
    ]
    assert out["schedule"] == [[1, 1, 3], [2, 2, 2], [3, 64, 0]]
    cross = out["crossover"]
    assert cross["status"] == "found" and cross["concurrency"] == 2 and cross["k"] == 2
    assert cross["interval"] == [2, 3]  # off at 4: it stops paying at 3 or 4
    lo, hi = cross["bound"]["ci95"]
    assert lo > 1.0 and lo <= cross["bound"]["value"] <= hi  # the bound figure's interval, from the verdict
    assert (
        "speculation pays up to 2 concurrent requests" in cross["text"] and "above it, off" in cross["text"]
    )
    assert out["open"] == []
    advice = out["advice"]
    assert advice["form"] == "per_batch_size"
    assert advice["speculative"] == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": out["schedule"],
    }


def test_the_schedule_starts_at_1_and_is_contiguous_to_max_num_seqs(crossing):
    for max_seqs in (5, 64, 256):
        sched = bs.analyse_sweep(crossing, max_num_seqs=max_seqs)["schedule"]
        assert sched[0][0] == 1 and sched[-1][1] == max_seqs
        assert all(a[1] + 1 == b[0] for a, b in zip(sched, sched[1:]))
        assert all(a[2] != b[2] for a, b in zip(sched, sched[1:]))  # adjacent equal k merged
        assert all(k >= 0 for _a, _b, k in sched)


def test_speculation_that_pays_at_every_level_is_a_lower_bound_not_extrapolated():
    out = bs.analyse_sweep(sweep({2: {1: 10, 4: 12}}), max_num_seqs=32)
    assert out["schedule"] == [[1, 4, 2], [5, 32, 0]]  # nothing measured above 4: off there
    assert out["crossover"]["status"] == "above_range" and out["crossover"]["interval"] == [4, 32]


def test_a_crossover_next_to_the_level_that_is_off_names_one_batch_size():
    """Off at the very next batch size: it stops paying there (not "between 2 and 2")."""
    cross = bs.analyse_sweep(sweep({3: {1: 8, 2: 30}}), max_num_seqs=8)["crossover"]
    assert cross["status"] == "found" and cross["concurrency"] == 1 and cross["interval"] == [1, 1]
    assert "it stops paying at 2, the next level, decided off" in cross["text"]
    assert "between 2 and 2" not in cross["text"]


def test_no_crossover_when_every_k_is_slower_everywhere():
    out = bs.analyse_sweep(sweep({1: {1: 24, 4: 26}, 2: {1: 27, 4: 30}}), max_num_seqs=16, version=(0, 32, 0))
    assert [lv["status"] for lv in out["levels"]] == ["off", "off"]
    assert out["schedule"] == [[1, 16, 0]]
    assert out["crossover"]["status"] == "none" and out["crossover"]["concurrency"] == 0
    assert out["advice"]["form"] == "off" and out["advice"]["speculative"] is None


def test_all_invalid_is_undecided_and_names_every_cell():
    out = bs.analyse_sweep(
        sweep({1: {1: "invalid", 2: "invalid"}, 2: {1: "invalid", 2: "invalid"}}), max_num_seqs=8
    )
    assert [lv["status"] for lv in out["levels"]] == ["undecided", "undecided"]
    assert out["schedule"] == [[1, 8, 0]]  # never a guess
    assert out["crossover"]["status"] == "undecided" and out["crossover"]["concurrency"] is None
    assert sorted((o["concurrency"], o["k"], o["decision"]) for o in out["open"]) == [
        (1, 1, "invalid"),
        (1, 2, "invalid"),
        (2, 1, "invalid"),
        (2, 2, "invalid"),
    ]
    assert all("valid measurement" in o["would_decide"] for o in out["open"])


def test_noise_is_inconclusive_with_the_runs_that_would_decide_it():
    out = bs.analyse_sweep(sweep({2: {1: ("noise", 19.0), 4: 30}}, base_jitter=0.4), max_num_seqs=8)
    lv1 = out["levels"][0]
    assert lv1["status"] == "undecided" and lv1["k"] == 0
    (cell,) = out["open"]
    assert (cell["concurrency"], cell["k"], cell["decision"]) == (1, 2, "inconclusive")
    assert (
        "specpilot_benchmark_runs_per_prompt" in cell["would_decide"]
        or "may not resolve" in cell["would_decide"]
    )
    assert out["crossover"]["status"] == "undecided"


def test_an_unmeasured_candidate_is_an_error_cell_not_a_zero():
    cands = sweep({2: {1: 10, 4: 28}}) + [
        {"id": "k3", "method": "ngram", "num_speculative_tokens": 3, "error": "twin: failed"}
    ]
    out = bs.analyse_sweep(cands, max_num_seqs=8)
    assert out["schedule"] == [[1, 1, 2], [2, 8, 0]]
    assert {(o["concurrency"], o["k"], o["decision"]) for o in out["open"]} == {
        (1, 3, "error"),
        (4, 3, "error"),
    }
    assert out["levels"][1]["status"] == "undecided"  # k=3 at 4 was not measured: not decided off


@pytest.mark.parametrize(
    "version,dp,form,key",
    [
        ((0, 32, 0), 1, "per_batch_size", "num_speculative_tokens_per_batch_size"),
        ((0, 8, 1), 1, "disable_by_batch_size", "disable_by_batch_size"),
        ((0, 20, 2), 1, "static", None),
        ((0, 32, 0), 2, "per_batch_size", "num_speculative_tokens_per_batch_size"),
        ((0, 25, 1), 2, "per_batch_size", "num_speculative_tokens_per_batch_size"),
    ],
)
def test_what_the_service_s_vllm_can_run(version, dp, form, key):
    sched = [[1, 2, 3], [3, 64, 0]]
    cross = {"concurrency": 2, "text": "speculation pays up to 2 concurrent requests"}
    advice = bs.deploy_advice(sched, cross, "ngram", version, dp)
    assert advice["form"] == form
    assert advice["speculative"]["num_speculative_tokens"] == 3
    if key == "disable_by_batch_size":
        assert advice["speculative"][key] == 3  # disabled above a batch of 2
    elif key:
        assert advice["speculative"][key] == sched
    else:
        assert "one k at every load" in advice["notes"][0] and "up to 2" in advice["notes"][0]
    # vLLM 0.26.0+ drops the schedule under data parallelism (VllmConfig._maybe_disable_dynamic_sd_for_
    # data_parallel); 0.24.0-0.25.1 keep it on every rank, where ranks may diverge
    dropped = "drops the batch-size schedule under data parallelism" if version >= (0, 26, 0) else "diverge"
    assert any(dropped in n for n in advice["notes"]) == (dp > 1)


def test_tune_report_carries_the_schedule_the_crossover_the_snippet_and_the_heatmap(crossing, tmp_path):
    import json

    from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_tune as bt
    from ansible_collections.specpilot.core.plugins.module_utils.report.plots import pyplot

    cands = crossing + [
        {"id": "k4", "method": "ngram", "num_speculative_tokens": 4, "error": "twin: not ready"}
    ]
    report = bt.build_tune_report(
        cands,
        service="svc",
        configured={"method": "ngram", "num_speculative_tokens": 3},
        sweep={"max_num_seqs": 64, "version": (0, 32, 0), "data_parallel_size": 1},
    )
    paths = bt.write_tune_report(report, str(tmp_path))
    data = json.loads((tmp_path / "tune.json").read_text())
    assert data["schedule"] == [[1, 1, 3], [2, 2, 2], [3, 64, 0]]
    # k=4 was not measured: 4 and 8 are not decided off, so the crossover is only bounded from below
    assert data["crossover"]["concurrency"] == 2 and data["crossover"]["status"] == "above_range"
    assert data["crossover"]["interval"] == [2, 64]
    md = (tmp_path / "tune.md").read_text()
    assert "speculation pays up to 2 concurrent requests" in md and "above it, off" in md
    assert "num_speculative_tokens_per_batch_size: [[1, 1, 3], [2, 2, 2], [3, 64, 0]]" in md
    assert "concurrency 1, k=4: error" in md  # the unmeasured candidate is named, not guessed
    if pyplot()[0] is not None:
        assert str(tmp_path / "tune_schedule.png") in paths["plots"]
        assert "tune_schedule.png" in md


def test_a_tune_report_without_a_sweep_is_unchanged(crossing):
    from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_tune as bt

    report = bt.build_tune_report(crossing, service="svc")
    assert "schedule" not in report and "crossover" not in report
    assert "Schedule by load" not in bt.render_markdown(report)
