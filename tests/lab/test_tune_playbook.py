"""playbooks/tune.yml against the lab (API emulator + controller, the fake stream engine), fast.

The fake engine emits 1 + 0.8 k tokens per decode step with a speculative config of k draft tokens
(benchmarks/stream_server.py), so k=4 beats k=2 by far on TPOT even on a busy machine (TPOT 3.4x and
2.1x faster than baseline with the speculative step's cost below). The tuning run
measures one baseline twin and one speculative twin per candidate, one after another, judges each with
the benchmark's verdict, recommends the best keep, and leaves the service exactly as it found it. The
eagle3 candidates cannot be validated for lab-ngram (no draft): they are recorded as errors, without a
twin, and the run goes on.
"""

from __future__ import annotations

import json

import pytest
from test_benchmark_playbook import FAST_BENCHMARK, ISVC_API, Deployed, fake_engine_lab, playbook
from markdown_cells import unpadded

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture
def tune_lab(tmp_path):
    """The lab with the fake stream engine, steps of 10 ms and a speculative step 1.25x as dear as a plain
    one: the realised speedup (1 + 0.8 k) / 1.25 stays well under the acceptance ceiling (1 + 0.8 k), so a
    baseline measured while the machine was busier than during a candidate cannot push a candidate past
    the ceiling check (invalid). The baseline runs once, long before the last candidate."""
    with fake_engine_lab(tmp_path, "--step-ms", "10", "--spec-step-cost", "1.25") as emu:
        yield emu


def snapshot(lab):
    """The service as the cluster has it: its resourceVersion, args, pods, and every InferenceService."""
    pods = lab.res("v1", "Pod").get(
        namespace=lab.ns, label_selector="serving.kserve.io/inferenceservice=lab-ngram"
    )
    isvcs = lab.res(*ISVC_API).get(namespace=lab.ns)
    obj = lab.isvc("lab-ngram")
    return {
        "resource_version": obj["metadata"]["resourceVersion"],
        "generation": obj["metadata"].get("generation"),
        "args": obj["spec"]["predictor"]["model"]["args"],
        "pods": sorted((p.metadata.name, p.metadata.uid) for p in pods.items),
        "isvcs": sorted(i.metadata.name for i in isvcs.items),
    }


def test_tune_playbook_in_the_lab(tune_lab, tmp_path):
    emu = tune_lab
    lab = Deployed(tmp_path, emu)
    before = snapshot(lab)
    assert before["isvcs"] == ["lab-ngram"] and before["pods"]

    root = tmp_path / "reports"
    extra = {
        "specpilot_report_dir": str(root),
        "specpilot_benchmark_tune_num_speculative_tokens": [2, 4],
        # eagle3 needs a draft, which lab-ngram has none of: both its candidates are recorded as errors
        # without a twin, and the run goes on with the others
        "specpilot_benchmark_tune_methods": ["ngram", "eagle3"],
        "specpilot_benchmark_qps_levels": [20],
        "specpilot_benchmark_target_qps": 20,
        # the schedule sweep (issue 37) on the same run: every side also at 1 and 2 concurrent requests
        "specpilot_benchmark_tune_schedule": True,
        "specpilot_benchmark_tune_schedule_levels": [1, 2],
        **FAST_BENCHMARK,
    }

    # check mode measures nothing, creates nothing, and says so
    proc = playbook(tmp_path, emu, "-e", json.dumps(extra), "--check", playbook_file="playbooks/tune.yml")
    assert "check mode: the tuning run would create a twin per candidate and send load" in proc.stdout
    assert not root.exists() and snapshot(lab) == before

    proc = playbook(tmp_path, emu, "-e", json.dumps(extra), playbook_file="playbooks/tune.yml")
    out = proc.stdout
    # progress: the loop names each candidate
    assert "candidate 1/4: method=ngram num_speculative_tokens=2" in out, out[-4000:]
    assert "candidate 4/4: method=eagle3 num_speculative_tokens=4" in out
    assert "TASK [specpilot_benchmark : Show the recommendation]" in out, out[-4000:]
    # the schedule sweep says up front how many cells (5 k: 0 and 4 candidates, x 3 levels) and about how long
    flat = " ".join(out.replace("\\\n", "\n").split())  # the YAML result format wraps long messages
    assert "Schedule sweep: 5 k (0 and the candidates) x 3 level(s) (concurrency 1, 2) = 15 cells, about" in flat, [
        line for line in out.splitlines() if "Schedule sweep" in line or "cells, about" in line
    ]

    d = root / "tune" / "lab-ngram"
    data = json.loads((d / "tune.json").read_text())
    rows = {r["id"]: r for r in data["candidates"]}
    assert [r["decision"] for r in data["candidates"]] == ["keep", "keep", "error", "error"], [
        r["reasons"] for r in rows.values()
    ]
    assert "eagle3 needs specpilot_draft" in rows["eagle3-k2"]["reasons"][0]
    rec = data["recommendation"]
    assert data["summary"].startswith("recommended ngram num_speculative_tokens=4: ngram k=4: kept with TPOT")
    assert (rec["id"], rec["num_speculative_tokens"], rec["method"], rec["change"]) == (
        "ngram-k4",
        4,
        "ngram",
        True,
    )
    assert data["bound_by"] == "tpot" and data["configured"] == {
        "method": "ngram",
        "num_speculative_tokens": 3,
    }
    assert rows["ngram-k4"]["bound"]["value"] > rows["ngram-k2"]["bound"]["value"] > 1.3
    assert rows["ngram-k4"]["mean_acceptance_length"] > rows["ngram-k2"]["mean_acceptance_length"]
    # the schedule: from batch 1, contiguous to max_num_seqs, k >= 0; the crossover; the heatmap; the words
    sched = data["schedule"]
    assert sched[0][0] == 1 and sched[-1][1] == data["sweep"]["max_num_seqs"], sched
    assert all(a[1] + 1 == b[0] for a, b in zip(sched, sched[1:])) and all(k >= 0 for _a, _b, k in sched)
    assert [lv["concurrency"] for lv in data["sweep"]["levels"]] == [1, 2]
    # a schedule varies k of one method: the ngram candidates' cells, each judged by the benchmark's verdict
    cells = {(c["concurrency"], c["k"]): c["decision"] for c in data["sweep"]["cells"]}
    assert set(cells) == {(1, 2), (1, 4), (2, 2), (2, 4)} and "error" not in cells.values(), cells
    assert any("candidates of eagle3 are left out" in n for n in data["sweep"]["notes"])
    cross = data["crossover"]
    assert cross["status"] in ("found", "above_range", "none", "undecided") and cross["text"] in (d / "tune.md").read_text()
    if cross["status"] in ("found", "above_range"):
        assert "speculation pays up to %d concurrent requests" % cross["concurrency"] in cross["text"]
    # a cell no measurement decided is named with what would decide it, never guessed
    assert all(o["would_decide"] for o in data["sweep"]["open"])
    assert "num_speculative_tokens_per_batch_size" in (d / "tune.md").read_text() or cross["status"] in ("none", "undecided")
    for f in ("tune.md", "tune.png", "tune_schedule.png", "raw-baseline-0.json"):
        assert (d / f).exists(), f
    assert "| ngram-k4 (recommended) | ngram | 4 | **keep** |" in unpadded((d / "tune.md").read_text())
    # each candidate: the benchmark's own report, of its own twin's engine arguments, against one baseline
    for k in (2, 4):
        cand = json.loads((d / ("ngram-k%d" % k) / "report.json").read_text())
        assert (
            cand["decision"] == "keep"
            and cand["context"]["model"]["speculative_config"]["num_speculative_tokens"] == k
        )
        spec_args = cand["context"]["runtime"]["engine_args_speculative"]
        assert '"num_speculative_tokens":%d,' % k in " ".join(spec_args)
        assert cand["levels"][0]["baseline"]["ok"] == 12 and cand["levels"][0]["speculative"]["ok"] == 12
    base_k2 = json.loads((d / "ngram-k2" / "report.json").read_text())["levels"][0]["baseline"]["metrics"]
    base_k4 = json.loads((d / "ngram-k4" / "report.json").read_text())["levels"][0]["baseline"]["metrics"]
    assert base_k2 == base_k4  # the same baseline runs for every candidate

    # the service exactly as it was: same object version, args and pods; no twin left
    assert snapshot(lab) == before
    assert lab.ready("lab-ngram")
