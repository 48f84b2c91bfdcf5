# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The benchmark's decision, beyond the noise: keep, rollback, inconclusive or invalid.

Pure functions over ``bench_analysis`` summaries (their ``samples``: one row per timed request).

1. **Validity first** (:func:`level_validity`). A level whose measurement measured nothing is
   *invalid* and takes no part in the decision: a side without successful requests or failing
   half of them, a baseline that fails, no warm-up, a stream that arrived in bursts (TPOT or ITL
   p50 below a physical floor, or the whole output in one or two chunks), a client that
   saturated its CPU or sent its requests late, a speculative side without acceptance
   counters, or a realised speedup above the acceptance ceiling (the mean acceptance length
   bounds the per-token speedup; above 1.1x of it the timing is wrong, not the engine).
2. **Ratios with confidence intervals** (:func:`ratios`). TTFT, TPOT, E2E (baseline /
   speculative) and per-request tok/s (speculative / baseline), at p50 and p99, each with a 95%
   interval from a paired two-stage bootstrap: the same prompts are drawn with replacement on
   both sides, then each prompt's runs (numpy, every resample at once). > 1 means speculative decoding is better.
3. **The decision** (:func:`decide`), by the service's policy (``workload.slo`` of the spec):

   * ``slo`` (default): the figure the service is bound by (``bound_by``, default TPOT) must
     improve significantly (its interval above 1 + ``min_gain``); every other figure may be
     worse by its allowance (TTFT and E2E 10%, TPOT and throughput 0) - a regression blocks a
     keep only when it is beyond the noise. **keep** when the bound figure's gain is significant
     and nothing regresses; **rollback** when a regression is significant (the bound figure
     worse than baseline, another figure beyond its allowance, an absolute p99 limit broken,
     more failed requests); **inconclusive** otherwise, with the runs that would likely decide.
   * ``strict``: the old rule, TTFT, TPOT and throughput all improve (each beyond its
     ``*_min_gain``), judged on the intervals the same way.

``recommend_tokens`` reads the per-position acceptance curve; ``equivalence`` compares the
completions of both sides at temperature 0; ``temperature_sweep`` bands acceptance per temperature.
"""

from __future__ import annotations

import datetime
import math

from ansible_collections.specpilot.core.plugins.module_utils.common import with_defaults
from ansible_collections.specpilot.core.plugins.module_utils.service.live import ENGINE_CONTAINERS
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import SLO_DEFAULTS

__all__ = [
    "DEFAULT_POLICY",
    "decide",
    "equivalence",
    "level_validity",
    "policy_with_defaults",
    "SAMPLE_KEYS",
    "ratios",
    "recommend_tokens",
    "sorted_percentile",
    "temperature_sweep",
]

FIGURES = ("ttft", "tpot", "e2e", "throughput")
# figure -> (sample key, True when larger is better)
_SAMPLE_KEYS = {
    "ttft": ("ttft_ms", False),
    "tpot": ("tpot_ms", False),
    "e2e": ("e2e_ms", False),
    "throughput": ("request_tok_s", True),
}
SAMPLE_KEYS = _SAMPLE_KEYS  # what a sample of each figure is keyed by (the canary builds samples)
_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E latency", "throughput": "per-request tok/s"}
# the spec's workload.slo defaults (module_utils/service/spec.py, one source), and the statistics
DEFAULT_POLICY = dict(
    SLO_DEFAULTS,
    p99_ms={},
    # the bound figure's gain must exceed this (0.1 = 10% better); specpilot_benchmark.min_speedup - 1
    min_gain=0.0,
    confidence=0.95,
    resamples=1000,
    seed=0,
)
# what a level must show to be judged at all
VALIDITY = {
    "floor_ms": 0.05,  # TPOT / ITL p50 below this: the stream arrived in one burst
    "burst_min_tokens": 16,  # ... or outputs of >= this many tokens came in <= 2 chunks
    "ceiling_margin": 1.1,  # realised speedup above 1.1x the mean acceptance length
    "client_cpu_share": 0.9,  # the load generator used >= 90% of a core
    "arrival_lag_ms": 250.0,  # median lag of sends behind their arrival time (levels without a cap)
    "max_side_error_rate": 0.5,
    "max_baseline_error_rate": 0.1,
    # requests whose output arrived in one burst are left out of TPOT; more than this share: invalid
    "max_burst_share": 0.25,  # a baseline that fails this often measures failures
}
POLICIES = ("slo", "strict")
BANDS = ((0.5, "off"), (0.65, "measure_p99"), (float("inf"), "likely_helps"))
BAND_TEXT = {
    "off": "below 0.5: speculative decoding likely adds latency, turn it off",
    "measure_p99": "0.5-0.65: borderline, measure P99 under load",
    "likely_helps": "above 0.65: likely helps",
}
# a proposer step's cost relative to a target forward pass, by method: an assumption for the
# recommendation only (the tuning run measures the real figure)
PROPOSER_COST = {
    "ngram": 0.02,
    "ngram_gpu": 0.02,
    "suffix": 0.02,
    "medusa": 0.05,
    "mlp_speculator": 0.05,
    "eagle": 0.08,
    "eagle3": 0.08,
    "mtp": 0.08,
    "deepseek_mtp": 0.08,
    "draft_model": 0.15,
}


# --------------------------------------------------------------------------- policy


def policy_with_defaults(policy):
    """The policy with defaults filled in; ValueError names a bad key or value."""
    out = with_defaults(DEFAULT_POLICY, policy, "policy key")
    if out["policy"] not in POLICIES:
        raise ValueError("policy must be one of %s, not %r" % (", ".join(POLICIES), out["policy"]))
    if out["bound_by"] not in FIGURES:
        raise ValueError("bound_by must be one of %s, not %r" % (", ".join(FIGURES), out["bound_by"]))
    for fig in FIGURES:
        key = fig + "_max_regression"
        out[key] = float(out[key])
        if out[key] < 0:
            raise ValueError("%s must be >= 0, not %r" % (key, out[key]))
    out["p99_ms"] = dict((k, float(v)) for k, v in (out["p99_ms"] or {}).items() if v is not None)
    unknown = set(out["p99_ms"]) - {"ttft", "tpot", "e2e"}
    if unknown:
        raise ValueError("p99_ms takes ttft, tpot and e2e, not %s" % ", ".join(sorted(unknown)))
    out["min_gain"] = float(out["min_gain"])
    out["confidence"] = float(out["confidence"])
    if not 0.5 <= out["confidence"] < 1:
        raise ValueError("confidence must be in [0.5, 1), not %r" % out["confidence"])
    out["resamples"] = int(out["resamples"])
    return out


# --------------------------------------------------------------------------- bootstrap


def sorted_percentile(sorted_values, q):
    """The q-th percentile (0..100) of an already sorted list, with linear interpolation between
    closest ranks (numpy's default, which ``vllm bench serve`` uses). None for an empty list."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * (q / 100.0)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _finite(value):
    return value is not None and not (isinstance(value, float) and (math.isnan(value) or math.isinf(value)))


def _burst(sample):
    """A request whose output arrived in one burst: its TPOT is below the physical floor."""
    v = sample.get("tpot_ms")
    return _finite(v) and v < VALIDITY["floor_ms"]


def _clusters(samples, key):
    """{prompt_id: [values of its runs]} of one side (a burst request has no TPOT)."""
    out = {}
    for s in samples or []:
        v = s.get(key)
        if key == "tpot_ms" and _burst(s):
            continue
        if _finite(v):
            out.setdefault(str(s.get("prompt_id")), []).append(float(v))
    return out


def _ratio(base, spec, higher_better):
    if base is None or spec is None:
        return None
    num, den = (spec, base) if higher_better else (base, spec)
    return num / den if den > 0 else None


def _stat_pair(bvals, svals, q, higher_better):
    return _ratio(sorted_percentile(sorted(bvals), q), sorted_percentile(sorted(svals), q), higher_better)


def _numpy():
    """numpy, imported at the first bootstrap (the preload callback imports every filter at each run's start)."""
    import numpy

    return numpy


def _padded(clusters, ids):
    """The runs of each prompt of ``ids`` as rows of a NaN-padded matrix, and each row's count."""
    np = _numpy()
    counts = np.array([len(clusters[i]) for i in ids])
    values = np.full((len(ids), int(counts.max())), np.nan)
    for row, i in enumerate(ids):
        values[row, : counts[row]] = clusters[i]
    return values, counts


def _resampled_percentiles(values, counts, picks, rng, qs):
    """The second stage of the bootstrap, for every resample at once: each picked prompt (``picks``, one row per
    resample) contributes as many of its runs as it has, drawn with replacement; the ``qs`` percentiles of each
    resample (linear interpolation, as sorted_percentile), one row per q."""
    np = _numpy()
    runs = counts[picks]
    width = values.shape[1]
    drawn = np.floor(rng.random(picks.shape + (width,)) * runs[..., None]).astype(int)
    got = values[picks[..., None], drawn]
    got[np.arange(width) >= runs[..., None]] = np.nan
    return np.nanpercentile(got.reshape(len(picks), -1), qs, axis=1)


def _interval(dist, policy):
    """[lo, hi] of a sorted bootstrap distribution at the policy's confidence."""
    tail = (1.0 - policy["confidence"]) / 2.0 * 100.0
    return [sorted_percentile(dist, tail), sorted_percentile(dist, 100.0 - tail)]


def _figure_ci(bc, sc, higher_better, policy, seed):
    """{value, ci95, p99: {value, ci95}, prompts, samples} of one figure (value and ci95 at p50)."""
    ids = sorted(set(bc) & set(sc))
    entry = {"prompts": len(ids), "samples": [sum(len(bc[i]) for i in ids), sum(len(sc[i]) for i in ids)]}
    ball = [v for i in ids for v in bc[i]]
    sall = [v for i in ids for v in sc[i]]
    boot = {50: [], 99: []}
    if ids:
        np = _numpy()
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, len(ids), size=(policy["resamples"], len(ids)))  # the same prompts on both sides
        bq = _resampled_percentiles(*_padded(bc, ids), picks, rng, [50, 99])
        sq = _resampled_percentiles(*_padded(sc, ids), picks, rng, [50, 99])
        for row, q in enumerate((50, 99)):
            num, den = (sq[row], bq[row]) if higher_better else (bq[row], sq[row])
            usable = den > 0
            boot[q] = (num[usable] / den[usable]).tolist()
    for q in (50, 99):
        dist = sorted(boot[q])
        stat = {
            "value": _stat_pair(ball, sall, q, higher_better) if ids else None,
            "ci95": _interval(dist, policy) if len(dist) >= 20 else None,
        }
        if q == 50:
            entry.update(stat)
        else:
            entry["p99"] = stat
    return entry


def ratios(baseline, speculative, policy=None):
    """{ttft, tpot, e2e, throughput} -> {value, ci95: [lo, hi], p99: {value, ci95}, prompts, samples};
    value and ci95 are the p50 ratio.

    ci95 is None where there are too few samples (fewer than 20 usable resamples)."""
    policy = policy_with_defaults(policy)
    out = {}
    for n, fig in enumerate(FIGURES):
        key, higher_better = _SAMPLE_KEYS[fig]
        out[fig] = _figure_ci(
            _clusters((baseline or {}).get("samples"), key),
            _clusters((speculative or {}).get("samples"), key),
            higher_better,
            policy,
            policy["seed"] * 1000 + n,
        )
    return out


def p99_interval(summary, key, policy):
    """The p99 of one side's samples with its bootstrap interval: {value, ci95}."""
    clusters = _clusters((summary or {}).get("samples"), key)
    ids = sorted(clusters)
    if not ids:
        return {"value": None, "ci95": None}
    np = _numpy()
    rng = np.random.default_rng(policy["seed"] + 7)
    picks = rng.integers(0, len(ids), size=(policy["resamples"], len(ids)))
    dist = _resampled_percentiles(*_padded(clusters, ids), picks, rng, [99])[0].tolist()
    return {
        "value": sorted_percentile(sorted(v for i in ids for v in clusters[i]), 99),
        "ci95": _interval(sorted(dist), policy),
    }


# --------------------------------------------------------------------------- validity


def _metric(summary, metric, statistic="p50"):
    st = ((summary or {}).get("metrics") or {}).get(metric) or {}
    v = st.get(statistic)
    return v if _finite(v) else None


def _side_validity(side, summary, reasons):
    """Reasons one side measured nothing that can be judged."""
    if not summary or not summary.get("ok"):
        reasons.append("%s: no successful requests" % side)
        return
    err = summary.get("error_rate") or 0.0
    if err >= VALIDITY["max_side_error_rate"]:
        reasons.append(
            "%s: %d of %d requests failed" % (side, summary.get("failed", 0), summary.get("requests", 0))
        )
    warm = summary.get("warmup")
    if isinstance(warm, dict) and (not warm.get("requests") or not warm.get("ok")):
        reasons.append(
            "%s: warm-up not done (%s of %s warm-up requests succeeded): the first requests paid for "
            "compilation and caches" % (side, warm.get("ok", 0), warm.get("requests", 0))
        )
    for metric, label in (("tpot_ms", "TPOT"), ("itl_ms", "ITL")):
        v = _metric(summary, metric)
        if v is not None and v < VALIDITY["floor_ms"]:
            reasons.append(
                "%s: %s p50 %.3g ms is below the %.2g ms physical floor: the stream arrived in bursts "
                "(the engine or the client was starved of CPU)" % (side, label, v, VALIDITY["floor_ms"])
            )
    _stream_validity(side, summary, reasons)
    _client_validity(side, summary, reasons)


def _stream_validity(side, summary, reasons):
    """Requests that arrived in one burst, or outputs that came in one or two chunks: not streamed."""
    samples = summary.get("samples") or []
    bursts = sum(1 for s in samples if _burst(s))
    if samples and bursts > VALIDITY["max_burst_share"] * len(samples):
        reasons.append(
            "%s: %d of %d requests arrived in one burst (TPOT below %.2g ms): the engine or the client was "
            "starved of CPU" % (side, bursts, len(samples), VALIDITY["floor_ms"])
        )
    chunks = [s.get("chunks") for s in samples if s.get("chunks") is not None]
    tokens = _metric(summary, "output_tokens")
    if chunks and tokens is not None and tokens >= VALIDITY["burst_min_tokens"]:
        med = sorted(chunks)[len(chunks) // 2]
        if med <= 2:
            reasons.append(
                "%s: outputs of %d tokens arrived in %d chunk(s) (median): the stream was not "
                "streamed token by token, so TTFT/TPOT measure nothing" % (side, tokens, med)
            )


def _client_validity(side, summary, reasons):
    share = summary.get("client_cpu_share")
    if _finite(share) and share >= VALIDITY["client_cpu_share"]:
        reasons.append(
            "%s: the load generator used %.0f%% of a CPU core: the client, not the engine, set the pace"
            % (side, 100 * share)
        )
    if summary.get("concurrency") is None:
        lag = _metric(summary, "queue_ms", "p50")
        if lag is not None and lag > VALIDITY["arrival_lag_ms"]:
            reasons.append(
                "%s: requests left the client %.0f ms (median) after their arrival time: the client was "
                "saturated" % (side, lag)
            )


def _acceptance_validity(acceptance, figs, reasons):
    if not acceptance or acceptance.get("error"):
        why = (acceptance or {}).get("error") or "no /metrics scrapes around the timed requests"
        reasons.append("speculative: no acceptance counters (%s): the ceiling check cannot run" % why)
        return
    if not acceptance.get("spec_decode_enabled") or not acceptance.get("num_drafts"):
        reasons.append(
            "speculative: no speculative-decoding drafts were counted in the window (vllm:spec_decode_*): "
            "the speculative side did not speculate"
        )
        return
    ceiling = acceptance.get("mean_acceptance_length")
    if not ceiling:
        return
    for fig in ("tpot", "throughput"):
        v = (figs.get(fig) or {}).get("value")
        if v is not None and v > VALIDITY["ceiling_margin"] * ceiling:
            reasons.append(
                "%s speedup %.2fx is above the acceptance ceiling %.2fx (mean acceptance length; at "
                "most %.1fx of it is plausible): at equal step times a token cannot come faster than the "
                "tokens per step allow, so the sides ran under different conditions (a busier machine or "
                "larger batches on one side) or the timing is wrong"
                % (_LABELS[fig], v, ceiling, VALIDITY["ceiling_margin"])
            )


def _restart_counts(pods, container=None):
    """{(pod name): restartCount of its ``container``} and the container statuses, by pod name; without
    ``container``, the engine's (``live.ENGINE_CONTAINERS``: an InferenceService's or an
    LLMInferenceService's)."""
    names = (container,) if container else ENGINE_CONTAINERS
    out = {}
    for pod in pods or []:
        for c in (pod.get("status") or {}).get("containerStatuses") or []:
            if c.get("name") in names:
                out[(pod.get("metadata") or {}).get("name")] = c
    return out


def _epoch(stamp):
    """A Kubernetes time (``2026-11-28T23:41:39Z``, fractions allowed) as epoch seconds, or None."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def _restarted_pod(name, c, more):
    last = (c.get("lastState") or {}).get("terminated") or {}
    running = (c.get("state") or {}).get("running") or {}
    return {"pod": name, "restarts": more, "last_reason": last.get("reason"), "last_exit_code": last.get("exitCode"),
            "last_finished_at": last.get("finishedAt"), "terminated_at": _epoch(last.get("finishedAt")),
            "running_since": _epoch(running.get("startedAt"))}


def _restart_record(pods, when):
    restarts = sum(p["restarts"] for p in pods)
    oom = sum(p["restarts"] for p in pods if p["last_reason"] == "OOMKilled")
    which = ", ".join("pod %s: %s, exit %s%s" % (
        p["pod"], p["last_reason"] or "?", p["last_exit_code"],
        " at %s" % p["last_finished_at"] if p.get("last_finished_at") else "") for p in pods)
    reason = "the engine restarted %d time(s) %s (%s)%s: the figures include a cold start" % (
        restarts, when, which, ", out of memory: give the engine more memory or lower max_num_seqs" if oom else "")
    return {"restarts": restarts, "oom": oom, "pods": pods, "reason": reason}


def engine_restarts(before, after, container=None):
    """The engine restarts between two reads of a side's pods (lists of Pod objects): ``{restarts, oom,
    pods, reason}``, or None when none restarted. A pod absent from ``before`` counts all its restarts
    (it was created meanwhile: the engine started cold). Each pod says when its last termination ended
    (``terminated_at``) and its container runs again (``running_since``), epoch seconds or None."""
    was = _restart_counts(before, container)
    pods = []
    for name, c in sorted(_restart_counts(after, container).items()):
        more = int(c.get("restartCount") or 0) - int((was.get(name) or {}).get("restartCount") or 0)
        if more > 0:
            pods.append(_restarted_pod(name, c, more))
    return _restart_record(pods, "while it was measured") if pods else None


# a level's window is widened by this much on each side: the controller's and the node's clocks differ
RESTART_CLOCK_SLACK_S = 2.0


def _pod_hit_level(p, start, end):
    """Whether pod ``p``'s restarts fall in the level measured from ``start`` to ``end`` (epoch s): its
    container was down (from its last termination until it ran again) during the level; when a restart's
    time is unknown (no lastState, or earlier restarts of several), every level up to the last one."""
    down_from = p.get("terminated_at")
    if down_from is None:
        return True
    if p["restarts"] > 1 and start <= down_from + RESTART_CLOCK_SLACK_S:
        return True
    down_until = p.get("running_since") or float("inf")
    return down_from <= end + RESTART_CLOCK_SLACK_S and down_until >= start - RESTART_CLOCK_SLACK_S


def restarts_of_level(restarted, run):
    """The part of a side's ``engine_restarts`` that hit one level (a run with ``started_at``, epoch s,
    and ``duration_s``), or None. A run without its times (vllm bench serve) gets the side's."""
    if not restarted:
        return None
    start, duration = run.get("started_at"), run.get("duration_s")
    if not isinstance(start, (int, float)) or not isinstance(duration, (int, float)):
        return dict(restarted, reason=restarted["reason"].replace(
            "while it was measured", "while this side was measured (the level's times are unknown)"))
    pods = [p for p in restarted["pods"] if _pod_hit_level(p, start, start + duration)]
    return _restart_record(pods, "while this level was measured") if pods else None


def level_validity(baseline, speculative, acceptance, figs):
    """[] when the level can be judged, else the reasons it cannot."""
    reasons = []
    _side_validity("baseline", baseline, reasons)
    _side_validity("speculative", speculative, reasons)
    for side, summary in (("baseline", baseline), ("speculative", speculative)):
        restarted = (summary or {}).get("engine_restarts")
        if restarted:
            # issue 39: out-of-memory restarts during a benchmark went unreported
            reasons.append("%s: %s" % (side, restarted.get("reason") or "the engine restarted while measured"))
    b_err = (baseline or {}).get("error_rate") or 0.0
    if VALIDITY["max_baseline_error_rate"] < b_err < VALIDITY["max_side_error_rate"]:
        reasons.append(
            "baseline: %.0f%% of its requests failed: the comparison would measure failures" % (100 * b_err)
        )
    _acceptance_validity(acceptance, figs, reasons)
    return reasons


# --------------------------------------------------------------------------- decision


def _floor(fig, policy):
    allow = policy[fig + "_max_regression"]
    return (1.0 - allow) if fig == "throughput" else 1.0 / (1.0 + allow)


def _pct_change(fig, ratio):
    """A speedup ratio as the change users read: '+9%' worse latency, '-12%' less throughput."""
    if ratio is None:
        return "n/a"
    change = (1.0 / ratio - 1.0) if fig != "throughput" else (ratio - 1.0)
    return "%+.0f%%" % (100 * change)


def _ci_text(entry):
    ci = entry.get("ci95")
    return "95%% CI %.2f-%.2fx" % tuple(ci) if ci else "no CI: too few samples"


def runs_needed(entry, bound, runs_per_prompt):
    """Further runs per prompt that would likely put the interval clear of ``bound``; None when
    the point estimate sits on it (no number of runs would decide)."""
    ci, value = entry.get("ci95"), entry.get("value")
    if not ci or not value or ci[0] <= 0 or bound <= 0:
        return None
    dist = abs(math.log(value) - math.log(bound))
    half = (math.log(ci[1]) - math.log(ci[0])) / 2.0
    if dist < 1e-9:
        return None
    factor = max((half / dist) ** 2, 1.25)
    return max(1, int(math.ceil(max(runs_per_prompt or 1, 1) * (factor - 1.0))))


def _judge_bound(fig, entry, policy, out):
    """The figure the service is bound by: a significant gain, a significant loss, or undecided."""
    need = 1.0 + policy["min_gain"]
    ci, value = entry.get("ci95"), entry.get("value")
    text = "%s %.2fx faster (%s)" % (_LABELS[fig], value, _ci_text(entry)) if value else "%s: no data" % fig
    if not ci:
        out["undecided"].append((fig, entry, need, "%s: the interval is unknown" % text))
    elif ci[0] > need:
        out["gains"].append(text)
    elif ci[1] < 1.0:
        out["regressions"].append(
            "%s is worse than baseline beyond the noise: %.2fx (%s)" % (_LABELS[fig], value, _ci_text(entry))
        )
    elif ci[1] < need:
        out["regressions"].append(
            "%s %.2fx is below the required %.2fx beyond the noise (%s)"
            % (_LABELS[fig], value, need, _ci_text(entry))
        )
    else:
        needs = " (needs > %.2fx)" % need if policy["min_gain"] else ""
        out["undecided"].append((fig, entry, need, "%s: the gain is within the noise%s" % (text, needs)))


def _judge_other(fig, entry, policy, out):
    """A figure with an allowance: significant regression beyond it, a likely one, or fine."""
    floor = _floor(fig, policy)
    ci, value = entry.get("ci95"), entry.get("value")
    if value is None:
        out["notes"].append("%s: no data on one side" % _LABELS[fig])
        return
    allow = "%d%%" % round(100 * policy[fig + "_max_regression"])
    if ci and ci[1] < floor:
        out["regressions"].append(
            "%s %s, beyond the %s allowance and beyond the noise (%s)"
            % (_LABELS[fig], _pct_change(fig, value), allow, _ci_text(entry))
        )
    elif value < floor and ci and ci[1] < 1.0:
        out["undecided"].append(
            (
                fig,
                entry,
                floor,
                "%s %s is worse beyond the noise; whether beyond the %s allowance is "
                "undecided (%s)" % (_LABELS[fig], _pct_change(fig, value), allow, _ci_text(entry)),
            )
        )
    elif value < 1.0:
        out["fine"].append(
            "%s %s, %s (%s)"
            % (
                _LABELS[fig],
                _pct_change(fig, value),
                "inside the %s allowance" % allow if value >= floor else "not distinguishable from noise",
                _ci_text(entry),
            )
        )


def _judge_p99(baseline, speculative, policy, out):
    keys = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}
    for fig, limit in sorted(policy["p99_ms"].items()):
        spec = p99_interval(speculative, keys[fig], policy)
        base = _metric(baseline, keys[fig], "p99")
        if spec["value"] is None:
            continue
        what = "%s p99 %.1f ms (%s) vs the %g ms limit" % (
            _LABELS[fig],
            spec["value"],
            "95%% CI %.1f-%.1f ms" % tuple(spec["ci95"]),
            limit,
        )
        if spec["ci95"][0] > limit:
            if base is not None and base > limit:
                out["notes"].append("%s; the baseline breaks it too (%.1f ms)" % (what, base))
            else:
                out["regressions"].append("%s: broken beyond the noise" % what)
        elif spec["value"] > limit:
            out["undecided"].append((fig, spec, limit, "%s: above the limit within the noise" % what))


def _judge_p99_relative(figs, thresholds, out):
    """thresholds.p99_max_regression: speculative p99 TTFT/TPOT at most that much worse."""
    limit = thresholds.get("p99_max_regression")
    if limit is None:
        return
    floor = 1.0 / (1.0 + float(limit))
    for fig in ("ttft", "tpot"):
        entry = figs[fig]["p99"]
        ci, value = entry.get("ci95"), entry.get("value")
        if value is None:
            continue
        text = "%s p99 regressed: %s (allowed +%d%%; %s)" % (
            _LABELS[fig],
            _pct_change(fig, value),
            round(100 * float(limit)),
            _ci_text(entry),
        )
        if ci and ci[1] < floor:
            out["regressions"].append(text)
        elif value < floor:
            out["undecided"].append((fig, entry, floor, text + ": within the noise"))


def _judge_errors(baseline, speculative, thresholds, out):
    b_err, s_err = baseline.get("error_rate") or 0.0, speculative.get("error_rate") or 0.0
    if s_err > thresholds.get("max_error_rate", 0.0) and s_err > b_err:
        out["regressions"].append(
            "speculative side failed %d of %d requests (%.1f%%; baseline %.1f%%)"
            % (speculative.get("failed", 0), speculative.get("requests", 0), 100 * s_err, 100 * b_err)
        )


def _judge_strict(figs, thresholds, out):
    for fig, key in (
        ("ttft", "ttft_min_gain"),
        ("tpot", "tpot_min_gain"),
        ("throughput", "throughput_min_gain"),
    ):
        entry = figs[fig]
        need = 1.0 + float(thresholds.get(key) or 0.0)
        ci, value = entry.get("ci95"), entry.get("value")
        text = "%s %s (%s)" % (_LABELS[fig], "%.2fx" % value if value else "n/a", _ci_text(entry))
        if ci and ci[0] > need:
            out["gains"].append(text)
        elif ci and ci[1] <= need:
            out["regressions"].append("%s does not improve (needs > %.2fx)" % (text, need))
        else:
            out["undecided"].append((fig, entry, need, "%s: within the noise of %.2fx" % (text, need)))


def _burst_notes(baseline, speculative):
    """A note for each side whose requests arrived in one burst (left out of TPOT)."""
    notes = []
    for side, summary in (("baseline", baseline), ("speculative", speculative)):
        bursts = sum(1 for s in (summary or {}).get("samples") or [] if _burst(s))
        if bursts:
            notes.append(
                "%s: %d request(s) arrived in one burst (TPOT below %.2g ms) and are left out of TPOT"
                % (side, bursts, VALIDITY["floor_ms"])
            )
    return notes


def _inconclusive(result, out, needed, hint=True):
    """An inconclusive result: what was undecided, and (``hint``) how many more runs would likely decide it."""
    result["decision"] = "inconclusive"
    result["reasons"] = [text for _unused, _unused, _unused, text in out["undecided"]] or [
        "nothing improved beyond the noise"
    ]
    known = [n for n in needed if n is not None]
    if known and len(known) == len(needed):
        result["runs_needed"] = max(known)
        if hint:
            result["reasons"].append(
                "about %d more run(s) per prompt would likely decide it (specpilot_benchmark_runs_per_prompt)"
                % result["runs_needed"]
            )
    elif hint:
        result["reasons"].append("a difference this small cannot be resolved by more runs at this load")


def decide(baseline, speculative, figs, policy, thresholds=None, runs_per_prompt=None, hint=True):
    """{decision, reasons, fine, notes, runs_needed} of one valid level. ``hint``: False leaves benchmark.yml's
    advice (more runs per prompt, specpilot_benchmark_runs_per_prompt) out of an inconclusive result's reasons, for
    a caller that gives its own next step (the canary, issue 39); ``runs_needed`` is set either way."""
    policy = policy_with_defaults(policy)
    thresholds = thresholds or {}
    out = {"gains": [], "regressions": [], "undecided": [], "fine": [], "notes": []}
    if policy["policy"] == "strict":
        _judge_strict(figs, thresholds, out)
    else:
        bound = policy["bound_by"]
        _judge_bound(bound, figs[bound], policy, out)
        for fig in FIGURES:
            if fig != bound:
                _judge_other(fig, figs[fig], policy, out)
        _judge_p99(baseline, speculative, policy, out)
    _judge_p99_relative(figs, thresholds, out)
    _judge_errors(baseline, speculative, thresholds, out)
    needed = [runs_needed(e, b, runs_per_prompt) for _unused, e, b, _unused in out["undecided"]]
    out["notes"].extend(_burst_notes(baseline, speculative))
    result = {"fine": out["fine"], "notes": out["notes"], "runs_needed": None}
    if not any(figs[f]["prompts"] for f in FIGURES) and not out["regressions"]:
        result.update(
            decision="inconclusive",
            reasons=[
                "no per-request samples on both sides (vllm bench serve without its --save-detailed result "
                "reports aggregates only): no confidence interval, so no decision; measure with "
                "specpilot_benchmark_client controller or job, or vllm_bench with "
                "specpilot_benchmark_vllm_bench_save_detailed on a vLLM that has --save-detailed, for one"
            ],
        )
        return result
    if out["regressions"]:
        result.update(decision="rollback", reasons=out["regressions"])
    elif out["undecided"] or not out["gains"]:
        _inconclusive(result, out, needed, hint)
    else:
        result.update(decision="keep", reasons=out["gains"] + out["fine"])
    return result


# --------------------------------------------------------------------------- acceptance


def band(rate):
    """The seed's band of a draft acceptance rate: off, measure_p99, likely_helps (None: no rate)."""
    if rate is None:
        return None
    return next(name for limit, name in BANDS if rate < limit)


def temperature_sweep(runs, production_temperature=None):
    """[{temperature, acceptance_rate, mean_acceptance_length, per_position, band, requests,
    production}] from the sweep runs (each with tag.temperature and acceptance)."""
    rows = []
    for run in sorted(runs or [], key=lambda r: float((r.get("tag") or {}).get("temperature") or 0.0)):
        t = float((run.get("tag") or {}).get("temperature") or 0.0)
        acc = run.get("acceptance") or {}
        rate = acc.get("draft_acceptance_rate")
        rows.append(
            {
                "temperature": t,
                "acceptance_rate": rate,
                "mean_acceptance_length": acc.get("mean_acceptance_length"),
                "per_position": acc.get("per_position_acceptance") or [],
                "band": band(rate),
                "requests": (run.get("summary") or {}).get("ok"),
                "production": production_temperature is not None
                and abs(t - float(production_temperature)) < 1e-9,
            }
        )
    return rows


def recommend_tokens(per_position, method=None, configured=None, source=None):
    """{num_speculative_tokens, expected_tokens_per_step: {k: value}, reason} from the per-position
    acceptance curve (a_i: drafts whose position i was accepted / drafts; cumulative by vLLM's
    counting). With k draft tokens a step yields 1 + a_1 + ... + a_k tokens and costs about
    1 + c*k target passes (c: PROPOSER_COST of the method, an assumption); the k with the most
    tokens per unit of cost is recommended. None without a curve."""
    curve = [float(a) for a in (per_position or []) if _finite(a)]
    if not curve:
        return None
    cost = PROPOSER_COST.get((method or "").lower(), 0.1)
    expected, total = {}, 1.0
    best_k, best_eff = 1, 0.0
    for k, a in enumerate(curve, start=1):
        total += a
        expected[str(k)] = round(total, 4)
        eff = total / (1.0 + cost * k)
        if eff > best_eff + 1e-9:
            best_k, best_eff = k, eff
    reason = "expected tokens per step %.2f at k=%d" % (expected[str(best_k)], best_k)
    if best_k < len(curve):
        reason += (
            "; position %d is accepted in only %.0f%% of steps, which does not pay for a %s "
            "proposer step (~%.0f%% of a target pass, assumed)"
            % (best_k + 1, 100 * curve[best_k], method or "proposer", 100 * cost)
        )
    elif configured and best_k >= configured:
        reason += (
            "; every configured position still pays off: a larger k may help (measure it with the tuning run)"
        )
    if source:
        reason += " (curve: %s)" % source
    return {
        "num_speculative_tokens": best_k,
        "configured": configured,
        "expected_tokens_per_step": expected,
        "proposer_cost_assumed": cost,
        "reason": reason,
    }


def equivalence(pairs, temperature):
    """{compared, identical, differing: [...], skipped} of (prompt_id, run, baseline sample,
    speculative sample) pairs; compared only at temperature 0."""
    out = {"compared": 0, "identical": 0, "differing": [], "skipped": None}
    if temperature is None or float(temperature) != 0.0:
        out["skipped"] = "the benchmark ran at temperature %s: outputs are compared at 0 only" % temperature
        return out
    for pid, run, b, s in pairs:
        if not b.get("text_sha256") or not s.get("text_sha256"):
            continue
        out["compared"] += 1
        if b["text_sha256"] == s["text_sha256"]:
            out["identical"] += 1
        elif len(out["differing"]) < 5:
            out["differing"].append(
                {
                    "prompt_id": pid,
                    "run": run,
                    "baseline": b.get("text_head"),
                    "speculative": s.get("text_head"),
                }
            )
    if not out["compared"]:
        out["skipped"] = (
            "the load generator recorded no output hashes (vllm bench serve without --save-detailed, "
            "or an older client)"
        )
    return out
