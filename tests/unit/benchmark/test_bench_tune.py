"""The tuning run's choice (module_utils/benchmark/bench_tune.py) and its report, on verdicts of the benchmark's
own analysis (bench_analysis.analyse) of constructed runs: one baseline, one set of runs per candidate."""

from __future__ import annotations

import json

import pytest
from bench_helpers import ACCEPT, run, run_tasks

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_analysis as ba
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_tune as bt
from ansible_collections.specpilot.core.plugins.module_utils.report.plots import pyplot
from markdown_cells import unpadded

BASELINE = [run("baseline", 1, ttft_ms=50, tpot_ms=20, jitter=0.05)]


def accept(mean_len, rate):
    return dict(ACCEPT, mean_acceptance_length=mean_len, draft_acceptance_rate=rate)


def result(tpot_ms, acceptance, ttft_ms=52, policy=None, path=None):
    """What specpilot.core.benchmark_report returns for a candidate (the keys the choice reads)."""
    spec = [run("speculative", 1, ttft_ms=ttft_ms, tpot_ms=tpot_ms, jitter=0.05, acceptance=acceptance)]
    res = ba.analyse(BASELINE + spec, target={"qps": 1, "concurrency": None}, policy=policy)
    return {
        "decision": res["decision"],
        "verdict": res["verdict"],
        "levels": res["levels"],
        "paths": {"markdown": path} if path else None,
    }


def cand(k, res=None, configured=False, method="ngram", error=None):
    out = {"id": "k%d" % k, "method": method, "num_speculative_tokens": k, "configured": configured}
    if error:
        out["error"] = error
    else:
        out["result"] = res
    return out


@pytest.fixture(scope="module")
def three():
    """k1 slower than baseline (rollback), k2 2.5x (keep, configured), k3 3.1x (keep)."""
    return [
        cand(1, result(21, accept(1.3, 0.3))),
        cand(2, result(8, accept(2.6, 0.8)), configured=True),
        cand(3, result(6.5, accept(3.4, 0.8))),
    ]


def test_the_kept_candidate_with_the_largest_gain_on_the_bound_figure_is_recommended(three):
    report = bt.build_tune_report(
        three, service="svc", configured={"method": "ngram", "num_speculative_tokens": 2}
    )
    rows = {r["id"]: r for r in report["candidates"]}
    assert [rows[k]["decision"] for k in ("k1", "k2", "k3")] == ["rollback", "keep", "keep"]
    assert report["bound_by"] == "tpot" and rows["k3"]["bound"]["figure"] == "tpot"
    assert rows["k3"]["bound"]["value"] == pytest.approx(20 / 6.5, rel=0.03)
    assert rows["k3"]["bound"]["ci95"][0] > 1 and rows["k3"]["level"] == "qps=1"
    assert rows["k2"]["mean_acceptance_length"] == 2.6 and rows["k2"]["configured"]
    rec = report["recommendation"]
    assert (rec["id"], rec["method"], rec["num_speculative_tokens"], rec["decision"]) == (
        "k3",
        "ngram",
        3,
        "keep",
    )
    assert rec["change"] is True and rec["gain"]["value"] == rows["k3"]["bound"]["value"]
    assert "largest gain of the 2 kept candidate(s)" in rec["reason"]
    assert "the runner-up ngram k=2 gives 2.5" in rec["reason"]
    assert "the service runs ngram k=2 (keep, 2.5" in rec["reason"]
    assert report["summary"].startswith("recommended ngram num_speculative_tokens=3: ")
    assert "k1 (ngram k=1): rollback, TPOT 0.9" in bt.row_line(rows["k1"])


def test_the_configured_setting_recommended_means_nothing_to_change(three):
    three = [dict(c, configured=c["id"] == "k3") for c in three]
    rec = bt.build_tune_report(three)["recommendation"]
    assert rec["id"] == "k3" and rec["change"] is False
    assert "that is the configured setting: nothing to change" in rec["reason"]


def test_a_tie_goes_to_the_smaller_k():
    same = result(8, accept(2.6, 0.8))
    rec = bt.build_tune_report([cand(4, same), cand(2, same)])["recommendation"]
    assert rec["num_speculative_tokens"] == 2
    assert "the intervals overlap: the difference is within the noise" in rec["reason"]
    assert "the configured setting was not among the candidates" in rec["reason"]


def test_the_bound_figure_is_the_services_slo():
    """Bound by TTFT: the candidate with the better TTFT wins although its TPOT gain is smaller."""
    policy = {"bound_by": "ttft", "tpot_max_regression": 0.5}
    fast_ttft = cand(2, result(10, accept(2.6, 0.8), ttft_ms=30, policy=policy))
    fast_tpot = cand(3, result(7, accept(3.4, 0.8), ttft_ms=40, policy=policy))
    report = bt.build_tune_report([fast_ttft, fast_tpot])
    assert report["bound_by"] == "ttft" and report["policy"]["bound_by"] == "ttft"
    assert [r["decision"] for r in report["candidates"]] == ["keep", "keep"]
    assert report["recommendation"]["id"] == "k2"


def test_no_keep_no_recommendation():
    report = bt.build_tune_report(
        [cand(1, result(21, accept(1.3, 0.3))), cand(2, error="Bring up the candidate's twin: not Ready")]
    )
    rec = report["recommendation"]
    assert rec["id"] is None and rec["num_speculative_tokens"] is None and rec["gain"] is None
    assert "no candidate is a keep under the service's SLO (1 error, 1 rollback)" in rec["reason"]
    assert report["summary"].startswith("no recommendation: ")
    err = report["candidates"][1]
    assert err["decision"] == "error" and err["reasons"] == ["Bring up the candidate's twin: not Ready"]
    assert err["bound"] == {"figure": "tpot", "value": None, "ci95": None}


def test_an_invalid_candidate_is_never_recommended():
    """k3's speedup is above its acceptance ceiling: invalid, although its TPOT ratio is the largest."""
    rows = bt.build_tune_report([cand(2, result(8, accept(2.6, 0.8))), cand(3, result(4, accept(2.0, 0.5)))])
    assert [r["decision"] for r in rows["candidates"]] == ["keep", "invalid"]
    assert rows["recommendation"]["id"] == "k2"


def test_report_files_table_and_plot(three, tmp_path):
    three[1]["result"]["paths"] = {"markdown": str(tmp_path / "k2" / "report.md")}
    report = bt.build_tune_report(
        three, service="svc", configured={"method": "ngram", "num_speculative_tokens": 2}
    )
    paths = bt.write_tune_report(report, str(tmp_path))
    data = json.loads((tmp_path / "tune.json").read_text())
    assert data["kind"] == "specpilot-tune" and data["recommendation"]["num_speculative_tokens"] == 3
    assert [c["id"] for c in data["candidates"]] == ["k1", "k2", "k3"]
    md = unpadded((tmp_path / "tune.md").read_text())
    assert md.startswith(
        "# Speculative decoding tuning run: svc\n\nrecommended ngram num_speculative_tokens=3"
    )
    assert "| k3 (recommended) | ngram | 3 | **keep** | 3.0" in md
    assert "| k2 (configured) | ngram | 2 | **keep** |" in md and "[report](k2/report.md)" in md
    assert "- k1 (rollback): at qps=1: TPOT is worse than baseline beyond the noise" in md
    assert pyplot()[0] is not None, "matplotlib is in requirements.txt"
    assert paths["plots"] == [str(tmp_path / "tune.png")]
    assert (tmp_path / "tune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![Candidates against the baseline](tune.png)" in md


def test_the_module_writes_nothing_in_check_mode(three, tmp_path):
    args = {"candidates": three, "service": "svc", "output_dir": str(tmp_path / "out"), "plots": False}
    (checked, written), _ = run_tasks(
        tmp_path,
        [
            {"specpilot.core.benchmark_tune": args, "check_mode": True},
            {"specpilot.core.benchmark_tune": args},
        ],
    )
    assert checked["paths"] is None and not checked["changed"] and checked["recommendation"]["id"] == "k3"
    assert written["changed"] and written["paths"]["json"] == str(tmp_path / "out" / "tune.json")
    assert written["lines"][2].startswith("k3 (ngram k=3): keep, TPOT 3.0")
