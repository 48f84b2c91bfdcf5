"""The paired two-stage bootstrap on numpy (issue 36) against the pure-Python one it replaced: the same RNG
stream is not possible, so on fixed data the intervals agree within the bootstrap's own Monte Carlo noise, and
the verdict of the recorded benchmark (benchmarks/results/lab_ngram_vllm_cpu_2026-11-27) is unchanged."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_verdict as bv

ROOT = Path(__file__).resolve().parents[3]
RECORDED = ROOT / "benchmarks" / "results" / "lab_ngram_vllm_cpu_2026-11-27" / "report.json"


# ---- the replaced implementation, as it was (random.Random, one resample at a time)
def _old_resample(clusters, pick, rng):
    return sorted(v for i in pick for v in (rng.choice(clusters[i]) for _unused in clusters[i]))


def _old_ci(bc, sc, higher_better, policy, seed):
    rng = random.Random(seed)
    ids = sorted(set(bc) & set(sc))
    boot = {50: [], 99: []}
    for _unused in range(policy["resamples"]):
        pick = [rng.choice(ids) for _unused in ids]
        bs, ss = _old_resample(bc, pick, rng), _old_resample(sc, pick, rng)
        for q in boot:
            r = bv._ratio(bv.sorted_percentile(bs, q), bv.sorted_percentile(ss, q), higher_better)
            if r is not None:
                boot[q].append(r)
    return {q: bv._interval(sorted(boot[q]), policy) for q in boot}


def _sides(seed, prompts=24, runs=5, gain=1.3):
    """Lognormal TPOTs per prompt (a prompt effect and run noise), the speculative side faster by ``gain``."""
    rng = random.Random(seed)
    base, spec = [], []
    for p in range(prompts):
        level = rng.lognormvariate(3.0, 0.25)
        for r in range(runs):
            base.append({"prompt_id": p, "run": r, "tpot_ms": level * rng.lognormvariate(0, 0.08)})
            spec.append({"prompt_id": p, "run": r, "tpot_ms": level / gain * rng.lognormvariate(0, 0.08)})
    return {"samples": base}, {"samples": spec}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_intervals_agree_with_the_pure_python_bootstrap(seed):
    policy = bv.policy_with_defaults({"seed": seed})
    base, spec = _sides(seed)
    new = bv.ratios(base, spec, policy)["tpot"]
    old = _old_ci(bv._clusters(base["samples"], "tpot_ms"), bv._clusters(spec["samples"], "tpot_ms"), False, policy, 7)
    width = new["ci95"][1] - new["ci95"][0]
    # 1000 resamples: an interval end moves by a few percent of the interval's width between RNG streams
    for got, want in zip(new["ci95"] + new["p99"]["ci95"], old[50] + old[99]):
        assert abs(got - want) <= 0.15 * width + 0.01, (new, old)
    assert new["ci95"][0] < new["value"] < new["ci95"][1]


def test_the_interval_covers_the_true_gain_as_often_as_it_claims():
    """Across independent data sets the numpy interval of the p50 ratio holds the true gain (1.3) about 95% of
    the time: not narrower than the pure-Python one was."""
    covered = 0
    trials = 40
    for seed in range(trials):
        base, spec = _sides(100 + seed, prompts=30, runs=4)
        lo, hi = bv.ratios(base, spec, bv.policy_with_defaults({"seed": seed, "resamples": 400}))["tpot"]["ci95"]
        covered += lo <= 1.3 <= hi
    assert covered >= 0.8 * trials


def test_the_recorded_benchmark_keeps_its_verdict():
    report = json.loads(RECORDED.read_text())
    levels = [level for level in report["levels"] if level["valid"]]
    assert levels, "no valid level recorded"
    for level in levels:
        base, spec = level["baseline"], level["speculative"]
        figs = bv.ratios(base, spec, report["policy"])
        for fig, recorded in level["ratios"].items():
            assert figs[fig]["value"] == pytest.approx(recorded["value"])  # the statistic itself: no resampling
            if recorded.get("ci95") and figs[fig]["ci95"]:
                width = recorded["ci95"][1] - recorded["ci95"][0]
                for got, want in zip(figs[fig]["ci95"], recorded["ci95"]):
                    assert abs(got - want) <= 0.2 * width + 0.01, (fig, figs[fig], recorded)
        decided = bv.decide(base, spec, figs, report["policy"], report.get("thresholds"))
        assert decided["decision"] == level["decision"] == "keep"
