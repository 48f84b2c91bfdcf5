# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Analysis of baseline vs speculative benchmark runs: statistics, ratios and the verdict.

Pure functions over plain data (the results of ``bench_client`` runs, or summaries built
from them), so every rule is unit-tested with constructed results.

Terms
-----
* A *level* is one load setting: a request rate (``qps``, None = unpaced) and/or a
  concurrency limit. Each level is measured on both *sides*: ``baseline`` (speculative
  decoding off) and ``speculative``.
* Latencies are in milliseconds: ``ttft_ms``, ``tpot_ms`` (``(e2e - ttft) / (tokens - 1)``,
  per request), ``itl_ms`` (gaps between streamed chunks), ``e2e_ms``.
* ``request_tok_s`` is a request's output tokens / its e2e latency (the per-request decode
  speed; independent of completion length); ``output_throughput`` is all output tokens /
  the run's wall time (what the server delivered at that arrival rate).
* Speedups are oriented so that > 1 means speculative decoding is better:
  ``baseline / speculative`` for latencies, ``speculative / baseline`` for throughput.
* Ceiling: the mean acceptance length (tokens per decode step) is the upper bound of the
  speedup with zero proposer overhead; ``headroom_converted = realised / ceiling``
  (1.84x realised against a 2.54x ceiling is 72%).

Verdict (per level, and overall at the target level): bench_verdict's. A level first passes
the validity checks (else ``invalid``, not judged), then its ratios get bootstrap confidence
intervals from the per-request ``samples`` and the service's SLO policy decides ``keep``,
``rollback`` or ``inconclusive`` (see bench_verdict). The checks, speedups, headroom and gaps
here are descriptive: point estimates at the ``statistic`` of the thresholds.
"""

from __future__ import annotations

import math

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_verdict
from ansible_collections.specpilot.core.plugins.module_utils.common import with_defaults
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import parse_metrics_text

__all__ = [
    "DEFAULT_THRESHOLDS",
    "acceptance_from_scrapes",
    "analyse",
    "compare_level",
    "percentile",
    "stats",
    "summarise_requests",
    "summarise_run",
]

SIDES = ("baseline", "speculative")
LATENCY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
DEFAULT_THRESHOLDS = {
    # each gain is the relative improvement of the speculative side (0.1 = 10% better)
    "ttft_min_gain": 0.0,
    "tpot_min_gain": 0.0,
    "throughput_min_gain": 0.0,
    # "request": median per-request output tok/s (the seed's completion-length-invariant speedup);
    # "system": output tokens / wall time of the run (flat while both sides keep up with the rate)
    "throughput_metric": "request",
    # which statistic of the per-request distributions the verdict compares
    "statistic": "p50",
    # the speculative side may fail at most this fraction of its requests
    "max_error_rate": 0.0,
    # when set (e.g. 0.1): speculative p99 TTFT and TPOT may be at most 10% worse than baseline
    "p99_max_regression": None,
    # warn (never fail) when the speculative P50-P99 gap is this much wider than the baseline's
    "gap_widening_warn": 0.25,
}
STATISTICS = ("p50", "p90", "p99", "mean")


# --------------------------------------------------------------------------- statistics


def percentile(values, q):
    """The q-th percentile (0..100) of values (None entries dropped), as numpy computes it."""
    data = sorted(float(v) for v in values if v is not None)
    return None if not data else float(bench_verdict.sorted_percentile(data, q))


def median(values):
    return percentile(values, 50)


def stats(values):
    """count, mean, min, p50, p90, p99, max of a list (None entries dropped); None when empty."""
    data = [float(v) for v in values if v is not None]
    if not data:
        return None
    return {
        "count": len(data),
        "mean": sum(data) / len(data),
        "min": min(data),
        "p50": percentile(data, 50),
        "p90": percentile(data, 90),
        "p99": percentile(data, 99),
        "max": max(data),
    }


def _ms(value):
    return None if value is None else value * 1000.0


def _req_tok_s(r):
    e2e, n = r.get("e2e_s"), r.get("output_tokens")
    if not e2e or not n or e2e <= 0:
        return None
    return n / e2e


def _counts(keys):
    """How often each key occurs, in the order first seen."""
    out = {}
    for key in keys:
        out[key] = out.get(key, 0) + 1
    return out


def _prompt_medians(ok):
    """The median figures of each prompt's successful runs, prompts in the order first seen."""
    per_prompt = {}
    for r in ok:
        per_prompt.setdefault(str(r.get("prompt_id")), []).append(r)
    return [
        {
            "prompt_id": pid,
            "runs": len(rs),
            "ttft_ms": median([_ms(r.get("ttft_s")) for r in rs]),
            "tpot_ms": median([_ms(r.get("tpot_s")) for r in rs]),
            "e2e_ms": median([_ms(r.get("e2e_s")) for r in rs]),
            "request_tok_s": median([_req_tok_s(r) for r in rs]),
            "output_tokens": median([r.get("output_tokens") for r in rs]),
        }
        for pid, rs in per_prompt.items()
    ]


def _request_metrics(ok):
    """The statistics of each per-request figure over the successful requests."""
    return {
        "ttft_ms": stats([_ms(r.get("ttft_s")) for r in ok]),
        "tpot_ms": stats([_ms(r.get("tpot_s")) for r in ok]),
        "itl_ms": stats([_ms(v) for r in ok for v in (r.get("itl_s") or [])]),
        "e2e_ms": stats([_ms(r.get("e2e_s")) for r in ok]),
        "queue_ms": stats([_ms(r.get("queue_s")) for r in ok]),
        "output_tokens": stats([r.get("output_tokens") for r in ok]),
        "prompt_tokens": stats([r.get("prompt_tokens") for r in ok]),
        "request_tok_s": stats([_req_tok_s(r) for r in ok]),
    }


def summarise_requests(requests, duration_s):
    """Statistics of one run's requests (the ``requests`` list of a bench_client result)."""
    ok = [r for r in requests if r.get("ok")]
    failed = [r for r in requests if not r.get("ok")]
    metrics = _request_metrics(ok)
    total_out = sum(r.get("output_tokens") or 0 for r in ok)
    errors = _counts(str(r.get("error") or "failed")[:200] for r in failed)
    sources = _counts(r.get("token_source") or "unknown" for r in ok)
    n = len(requests)
    return {
        "samples": [_sample(r) for r in ok],
        "requests": n,
        "ok": len(ok),
        "failed": len(failed),
        "error_rate": (len(failed) / n) if n else None,
        "errors": [{"error": k, "count": v} for k, v in sorted(errors.items(), key=lambda kv: -kv[1])][:10],
        "duration_s": duration_s,
        "output_tokens_total": total_out,
        "output_throughput": (total_out / duration_s) if duration_s else None,
        "request_throughput": (len(ok) / duration_s) if duration_s else None,
        "token_sources": sources,
        "metrics": metrics,
        "gaps": {m: gap(metrics[m]) for m in ("ttft_ms", "tpot_ms", "e2e_ms")},
        "per_prompt": _prompt_medians(ok),
    }


def _sample(r):
    """One timed request as the verdict's bootstrap and the equivalence check read it."""
    return {
        "prompt_id": str(r.get("prompt_id")),
        "run": r.get("run"),
        "ttft_ms": _ms(r.get("ttft_s")),
        "tpot_ms": _ms(r.get("tpot_s")),
        "e2e_ms": _ms(r.get("e2e_s")),
        "request_tok_s": _req_tok_s(r),
        "output_tokens": r.get("output_tokens"),
        "chunks": r.get("chunks"),
        "text_sha256": r.get("text_sha256"),
        "text_head": r.get("text_head"),
    }


def gap(st):
    """P50 vs P99 of one metric: the absolute gap and the p99/p50 ratio."""
    if not st or st.get("p50") is None or st.get("p99") is None:
        return None
    p50, p99 = st["p50"], st["p99"]
    return {"p50": p50, "p99": p99, "gap": p99 - p50, "ratio": (p99 / p50) if p50 else None}


def summarise_run(run):
    """A compact summary of one bench_client result (drops the per-request lists)."""
    summary = summarise_requests(run.get("requests") or [], run.get("duration_s"))
    level = run.get("level") or {}
    summary["offered_qps"] = level.get("qps")
    summary["concurrency"] = level.get("concurrency")
    summary["warmup"] = run.get("warmup")
    summary["client_cpu_share"] = run.get("client_cpu_share")
    return summary


# --------------------------------------------------------------------------- acceptance


def acceptance_from_scrapes(before_text, after_text, model_name=None):
    """Speculative-decoding figures for the window between two raw ``/metrics`` pages, from
    specpilot.core's vllm_metrics parser (counter deltas). None when a page is missing."""
    if not before_text or not after_text:
        return None
    before = parse_metrics_text(before_text, model_name=model_name, source="before")
    after = parse_metrics_text(after_text, model_name=model_name, previous=before, source="after")
    d = after["derived"]
    lat = {}
    for key, val in (after.get("latency") or {}).items():
        if val and val.get("mean") is not None:
            lat[key + "_ms"] = val["mean"] * 1000.0
    return {
        "spec_decode_enabled": after["spec_decode_enabled"],
        "window": d["window"],
        "num_drafts": d["num_drafts"],
        "num_draft_tokens": d["num_draft_tokens"],
        "num_accepted_tokens": d["num_accepted_tokens"],
        "draft_acceptance_rate": d["draft_acceptance_rate"],
        "mean_acceptance_length": d["mean_acceptance_length"],
        "per_position_acceptance": d["per_position_acceptance"],
        "draft_tokens_per_draft": d["draft_tokens_per_draft"],
        "server_latency_means": lat,
        "notes": list(after.get("notes") or []),
    }


def acceptance_band(rate):
    """The seed's reading of a draft acceptance rate (bench_verdict's bands, as a sentence)."""
    name = bench_verdict.band(rate)
    return bench_verdict.BAND_TEXT[name] if name else None


# --------------------------------------------------------------------------- comparison


def _finite_or_none(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _stat(summary, metric, statistic):
    st = (summary.get("metrics") or {}).get(metric)
    return _finite_or_none(st.get(statistic)) if st else None


def _throughput(summary, how, statistic):
    if how == "system":
        return _finite_or_none(summary.get("output_throughput"))
    return _stat(summary, "request_tok_s", statistic)


def _ratio(num, den):
    if num is None or den is None or den == 0:
        return None
    return num / den


def _fmt(value, unit=""):
    if value is None:
        return "n/a"
    return ("%.3g" % value) + unit


def thresholds_with_defaults(thresholds):
    out = with_defaults(DEFAULT_THRESHOLDS, thresholds, "threshold", keep_none=("p99_max_regression",))
    if out["statistic"] not in STATISTICS:
        raise ValueError("statistic must be one of %s" % ", ".join(STATISTICS))
    if out["throughput_metric"] not in ("request", "system"):
        raise ValueError("throughput_metric must be 'request' or 'system'")
    for key in (
        "ttft_min_gain",
        "tpot_min_gain",
        "throughput_min_gain",
        "max_error_rate",
        "gap_widening_warn",
    ):
        out[key] = float(out[key])
    if out["p99_max_regression"] is not None:
        out["p99_max_regression"] = float(out["p99_max_regression"])
    return out


def _checks(baseline, speculative, th):
    """The three judged figures (TTFT, TPOT, throughput), each with its speedup and verdict."""
    st = th["statistic"]
    checks = []
    for metric, label, key in (("ttft_ms", "TTFT", "ttft_min_gain"), ("tpot_ms", "TPOT", "tpot_min_gain")):
        b, s = _stat(baseline, metric, st), _stat(speculative, metric, st)
        checks.append(
            {
                "metric": metric,
                "label": label,
                "baseline": b,
                "speculative": s,
                "speedup": _ratio(b, s),
                "min_gain": th[key],
                "unit": "ms",
            }
        )
    how = th["throughput_metric"]
    b, s = _throughput(baseline, how, st), _throughput(speculative, how, st)
    checks.append(
        {
            "metric": "request_tok_s" if how == "request" else "output_throughput",
            "label": "throughput (%s tok/s)" % ("per-request" if how == "request" else "system"),
            "baseline": b,
            "speculative": s,
            "speedup": _ratio(s, b),
            "min_gain": th["throughput_min_gain"],
            "unit": " tok/s",
        }
    )
    for c in checks:
        _judge_check(c, st)
    return checks


def _judge_check(c, st):
    if c["speedup"] is None:
        c.update(improved=None, gain=None, text="%s: no data on one side" % c["label"])
        return
    c["gain"] = c["speedup"] - 1.0
    c["improved"] = c["gain"] > c["min_gain"]
    c["text"] = "%s %s: baseline %s, speculative %s (%sx%s)" % (
        c["label"],
        st,
        _fmt(c["baseline"], c["unit"]),
        _fmt(c["speculative"], c["unit"]),
        "%.2f" % c["speedup"],
        "" if not c["min_gain"] else ", needs > %.2fx" % (1.0 + c["min_gain"]),
    )


def _speedups(baseline, speculative, checks, st):
    return {
        "ttft": checks[0]["speedup"],
        "tpot": checks[1]["speedup"],
        "request_tok_s": _ratio(
            _stat(speculative, "request_tok_s", st), _stat(baseline, "request_tok_s", st)
        ),
        "output_throughput": _ratio(
            _finite_or_none(speculative.get("output_throughput")),
            _finite_or_none(baseline.get("output_throughput")),
        ),
        "e2e": _ratio(_stat(baseline, "e2e_ms", st), _stat(speculative, "e2e_ms", st)),
    }


def _headroom(acceptance, speedups, notes):
    """Ceiling (mean acceptance length) vs the realised speedup; None without acceptance figures."""
    if acceptance and acceptance.get("mean_acceptance_length"):
        ceiling = acceptance["mean_acceptance_length"]
        realised = speedups["request_tok_s"] if speedups["request_tok_s"] is not None else speedups["tpot"]
        pos = acceptance.get("per_position_acceptance") or []
        if len(pos) > 1 and pos[1] is not None and pos[1] < 0.05:
            notes.append(
                "per-position acceptance collapses by position 2 (%.3f): the workload is not a fit "
                "for this proposer" % pos[1]
            )
        return {
            "ceiling": ceiling,
            "realised": realised,
            "converted": _ratio(realised, ceiling),
            "draft_acceptance_rate": acceptance.get("draft_acceptance_rate"),
            "acceptance_band": acceptance_band(acceptance.get("draft_acceptance_rate")),
        }
    if acceptance is not None and not acceptance.get("spec_decode_enabled"):
        notes.append(
            "the speculative side exported no vllm:spec_decode_* metrics: is speculative decoding on?"
        )
    return None


def _side_gap(side, metric):
    return (side.get("gaps") or {}).get(metric) or gap((side.get("metrics") or {}).get(metric))


def _gaps(baseline, speculative, th, notes):
    """P50 vs P99 per metric (the mixed-workload signal)."""
    gaps = {}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        bg, sg = _side_gap(baseline, metric), _side_gap(speculative, metric)
        entry = {"baseline": bg, "speculative": sg, "widened": None}
        if bg and sg and bg["gap"] is not None and sg["gap"] is not None:
            widened = sg["gap"] > max(bg["gap"], 0.0) * (1.0 + th["gap_widening_warn"]) and sg["gap"] > 0
            entry["widened"] = widened
            if widened and sg["p50"] <= bg["p50"]:
                notes.append(
                    "%s: P50 improves (%s -> %s) but the P50-P99 gap widens (%s -> %s): "
                    "a mixed-workload signal, check the tail"
                    % (
                        metric.replace("_ms", "").upper(),
                        _fmt(bg["p50"], " ms"),
                        _fmt(sg["p50"], " ms"),
                        _fmt(bg["gap"], " ms"),
                        _fmt(sg["gap"], " ms"),
                    )
                )
        gaps[metric] = entry
    return gaps


def _per_prompt(baseline, speculative):
    bp = {p["prompt_id"]: p for p in baseline.get("per_prompt") or []}
    rows = []
    for p in speculative.get("per_prompt") or []:
        b = bp.get(p["prompt_id"])
        if b:
            rows.append(
                {
                    "prompt_id": p["prompt_id"],
                    "runs": [b["runs"], p["runs"]],
                    "tpot_speedup": _ratio(b.get("tpot_ms"), p.get("tpot_ms")),
                    "tok_s_speedup": _ratio(p.get("request_tok_s"), b.get("request_tok_s")),
                    "ttft_speedup": _ratio(b.get("ttft_ms"), p.get("ttft_ms")),
                }
            )
    return rows


def compare_level(baseline, speculative, acceptance=None, thresholds=None):
    """The descriptive comparison of one level (summaries from summarise_requests): point
    speedups, headroom, P50-P99 gaps and per-prompt speedups. The decision is bench_verdict's.

    Returns ``{statistic, checks, speedups, headroom, gaps, per_prompt, acceptance, notes}``."""
    th = thresholds_with_defaults(thresholds)
    notes = []
    out = {
        "statistic": th["statistic"],
        "checks": [],
        "speedups": {},
        "headroom": None,
        "per_prompt": [],
        "gaps": {},
        "acceptance": acceptance,
        "notes": notes,
    }
    if not baseline or not speculative or not baseline.get("ok") or not speculative.get("ok"):
        return out
    out["checks"] = checks = _checks(baseline, speculative, th)
    out["speedups"] = _speedups(baseline, speculative, checks, th["statistic"])
    out["headroom"] = _headroom(acceptance, out["speedups"], notes)
    out["gaps"] = _gaps(baseline, speculative, th, notes)
    out["per_prompt"] = _per_prompt(baseline, speculative)
    return out


# --------------------------------------------------------------------------- whole benchmark


def _level_sort_key(level):
    q = level.get("qps")
    c = level.get("concurrency")
    return (math.inf if q is None else q, math.inf if c is None else c)


def _level_label(level):
    return level.get("key") or "qps=%s%s" % (
        "inf" if level.get("qps") is None else "%g" % level["qps"],
        "" if not level.get("concurrency") else ",c=%d" % level["concurrency"],
    )


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))


def pick_target(levels, target):
    """(level, note) for the target ``{qps, concurrency}``: the exact level, else the nearest
    level above it (else the highest); no target: the highest level."""
    if not levels:
        return None, "no levels were measured"
    ordered = sorted(levels, key=_level_sort_key)
    if not target or (target.get("qps") is None and target.get("concurrency") is None):
        return ordered[-1], "no target level given: the highest measured level (%s) stands in" % _level_label(
            ordered[-1]
        )
    tq, tc = target.get("qps"), target.get("concurrency")
    for lv in ordered:
        if (tq is None or _same(lv.get("qps"), tq)) and (tc is None or lv.get("concurrency") == tc):
            return lv, None
    key = (math.inf if tq is None else float(tq), math.inf if tc is None else tc)
    above = [lv for lv in ordered if _level_sort_key(lv) >= key]
    chosen = above[0] if above else ordered[-1]
    want = _level_label({"qps": tq, "concurrency": tc})
    return chosen, "target %s was not measured; the verdict uses %s" % (want, _level_label(chosen))


def _group_runs(runs):
    """{level key: {level, baseline, speculative, acceptance, runs_per_prompt, temperature}}."""
    by_level = {}
    for run in runs:
        side = run.get("side")
        if side not in SIDES:
            raise ValueError("run side must be one of %s, not %r" % (", ".join(SIDES), side))
        level = dict(run.get("level") or {})
        level.setdefault("qps", None)
        level.setdefault("concurrency", None)
        level["key"] = _level_label(level)
        entry = by_level.setdefault(
            level["key"], {"level": level, "baseline": None, "speculative": None, "acceptance": None}
        )
        entry[side] = run.get("summary")
        config = run.get("config") or {}
        entry["runs_per_prompt"] = config.get("runs_per_prompt")
        entry["temperature"] = (config.get("sampling") or {}).get("temperature")
        if side == "speculative":
            entry["acceptance"] = run.get("acceptance")
    return by_level


def _judge_level(e, th, policy):
    """One level: the descriptive comparison, its validity, its ratios and its decision."""
    cmp = compare_level(e["baseline"], e["speculative"], e["acceptance"], th)
    figs = bench_verdict.ratios(e["baseline"], e["speculative"], policy)
    invalid = bench_verdict.level_validity(e["baseline"], e["speculative"], e["acceptance"], figs)
    if invalid:
        dec = {"decision": "invalid", "reasons": invalid, "fine": [], "notes": [], "runs_needed": None}
    else:
        dec = bench_verdict.decide(
            e["baseline"], e["speculative"], figs, policy, th, e.get("runs_per_prompt")
        )
    return {
        "level": e["level"],
        "baseline": e["baseline"],
        "speculative": e["speculative"],
        "acceptance": e["acceptance"],
        "comparison": cmp,
        "valid": not invalid,
        "invalid_reasons": invalid,
        "ratios": figs,
        "decision": dec["decision"],
        "verdict": dec["decision"],
        "reasons": dec["reasons"],
        "fine": dec["fine"],
        "runs_needed": dec["runs_needed"],
        "notes": cmp["notes"] + dec["notes"],
    }


def _client_notes(runs):
    unavailable = []
    for run in runs:
        for item in (run.get("summary") or {}).get("unavailable") or []:
            if item not in unavailable:
                unavailable.append(item)
    if not unavailable:
        return []
    clients = sorted(set((run.get("summary") or {}).get("client") or "the load generator" for run in runs))
    return [
        "measured with %s, which does not report: %s (empty in this report)"
        % (" and ".join(clients), "; ".join(unavailable))
    ]


ACTIONS = {
    "keep": "keep speculative decoding on: it meets the service's SLO at the target load beyond the noise",
    "rollback": "turn speculative decoding off (playbooks/rollback.yml, or run the benchmark with "
    "specpilot_benchmark_auto_rollback=true): a regression beyond the noise at the target load",
    "inconclusive": "no decision: the measurement cannot tell the sides apart beyond the noise; run more "
    "(see the reasons). Nothing is rolled back automatically",
    "invalid": "no decision: the measurement at the target load is invalid (see the reasons); fix the "
    "measurement and re-run. Nothing is rolled back automatically",
}


def _overall(levels, target, policy):
    """The verdict at the target level: {decision, level, reasons, policy} and notes."""
    notes = []
    chosen, note = pick_target([lv["level"] for lv in levels], target)
    if note:
        notes.append(note)
    verdict = {"decision": "inconclusive", "level": chosen, "reasons": [], "policy": policy}
    if chosen is None:
        verdict["reasons"] = ["no benchmark level was measured"]
        return verdict, notes
    tl = next(lv for lv in levels if lv["level"]["key"] == chosen["key"])
    verdict["decision"] = tl["decision"]
    verdict["reasons"] = ["at %s: %s" % (chosen["key"], r) for r in tl["reasons"]]
    notes.extend("at %s: %s" % (chosen["key"], n) for n in tl["notes"])
    keep = [lv["level"]["key"] for lv in levels if lv["decision"] == "keep"]
    worse = [lv["level"]["key"] for lv in levels if lv["decision"] == "rollback"]
    if keep and worse:
        notes.append(
            "speculative decoding helps at %s and hurts at %s: measure where you actually run"
            % (", ".join(keep), ", ".join(worse))
        )
    invalid = [lv["level"]["key"] for lv in levels if lv["decision"] == "invalid" and lv["level"] != chosen]
    if invalid:
        notes.append("invalid and not judged: %s (see each level's reasons)" % ", ".join(invalid))
    return verdict, notes


def _equivalence(levels):
    pairs = []
    for lv in levels:
        spec = {(s["prompt_id"], s.get("run")): s for s in (lv.get("speculative") or {}).get("samples") or []}
        for b in (lv.get("baseline") or {}).get("samples") or []:
            s = spec.get((b["prompt_id"], b.get("run")))
            if s:
                pairs.append((b["prompt_id"], b.get("run"), b, s))
    return pairs


def _figures(acceptance, temperature, where):
    """A speculative run's acceptance as the acceptance record takes it (None without any)."""
    acc = acceptance or {}
    if acc.get("draft_acceptance_rate") is None and not acc.get("per_position_acceptance"):
        return None
    return {
        "acceptance_rate": acc.get("draft_acceptance_rate"),
        "mean_acceptance_length": acc.get("mean_acceptance_length"),
        "per_position_acceptance": list(acc.get("per_position_acceptance") or []),
        "num_drafts": acc.get("num_drafts"),
        "num_draft_tokens": acc.get("num_draft_tokens"),
        "temperature": temperature,
        "where": where,
    }


def measured_acceptance(sweep_runs, production_temperature, entries, target):
    """The acceptance the benchmark measured on the speculative side, what it records (acceptance_record.py) and
    recommends k from: the sweep's run at the production temperature (with its per-position curve), else the target
    level's. ``{acceptance_rate, mean_acceptance_length, per_position_acceptance, num_drafts, num_draft_tokens,
    temperature, where}``, or None."""
    if production_temperature is not None:
        for run in sweep_runs or []:
            t = float((run.get("tag") or {}).get("temperature") or 0.0)
            if abs(t - float(production_temperature)) < 1e-9 and (run.get("acceptance") or {}).get("per_position_acceptance"):
                return _figures(run["acceptance"], t, "the sweep at the production temperature %g" % t)
    entry = entries.get(target["key"]) if target else None
    if entry is None:
        return None
    return _figures(entry["acceptance"], entry.get("temperature"), "the target level %s" % target["key"])


def _extras(result, entries, levels, sweep, method, production_temperature):
    """Acceptance by temperature, the recommended k and output equivalence."""
    rows = bench_verdict.temperature_sweep((sweep or {}).get("runs"), production_temperature)
    result["temperature_sweep"] = rows
    result["temperature_sweep_skipped"] = (sweep or {}).get("skipped") or (
        None if rows else "no sweep runs were given"
    )
    prod = next((r for r in rows if r["production"]), None)
    if prod and prod["band"]:
        result["verdict"]["reasons"].append(
            "acceptance %.2f at the production temperature %g: %s"
            % (prod["acceptance_rate"], prod["temperature"], bench_verdict.BAND_TEXT[prod["band"]])
        )
    measured = measured_acceptance((sweep or {}).get("runs"), production_temperature, entries, result["verdict"]["level"])
    result["measured_acceptance"] = measured
    curve = (measured or {}).get("per_position_acceptance") or None
    source = measured["where"] if curve else None
    configured = len(curve) if curve else None
    result["recommendation"] = bench_verdict.recommend_tokens(curve, method, configured, source)
    temps = sorted({e.get("temperature") for e in entries.values()}, key=str)
    result["equivalence"] = bench_verdict.equivalence(
        _equivalence(levels), temps[0] if len(temps) == 1 else None
    )
    eq = result["equivalence"]
    if eq["compared"] and eq["identical"] < eq["compared"]:
        result["notes"].append(
            "%d of %d completions differ between the sides at temperature 0 (batch numerics can differ; "
            "the first are listed under equivalence)" % (eq["compared"] - eq["identical"], eq["compared"])
        )


def analyse(
    runs, target=None, thresholds=None, policy=None, sweep=None, method=None, production_temperature=None
):
    """The whole comparison and its verdict.

    runs: dicts ``{side, level: {qps, concurrency, key}, summary, acceptance, config}`` (one per
    side and level; ``summary`` from summarise_run, ``acceptance`` from acceptance_from_scrapes).
    target: ``{qps, concurrency}`` of the production load (the verdict's level).
    policy: the service's SLO policy (bench_verdict.DEFAULT_POLICY); thresholds: the strict
    policy's gains and the descriptive comparison's options (DEFAULT_THRESHOLDS).
    sweep: ``{runs, skipped}`` of the temperature sweep (runs with tag.temperature).
    Returns ``{levels, target, verdict: {decision, level, reasons, policy}, decision, reasons,
    notes, action, recommendation, measured_acceptance, temperature_sweep, equivalence, per_level, thresholds}``."""
    th = thresholds_with_defaults(thresholds)
    policy = bench_verdict.policy_with_defaults(policy)
    entries = _group_runs(runs)
    levels = [
        _judge_level(entries[k], th, policy)
        for k in sorted(entries, key=lambda k: _level_sort_key(entries[k]["level"]))
    ]
    verdict, notes = _overall(levels, target, policy)
    result = {
        "levels": levels,
        "thresholds": th,
        "policy": policy,
        "target": {"requested": target, "level": verdict["level"]},
        "notes": _client_notes(runs) + notes,
        "verdict": verdict,
        "per_level": {lv["level"]["key"]: lv["decision"] for lv in levels},
    }
    _extras(result, entries, levels, sweep, method, production_temperature)
    result["decision"] = verdict["decision"]
    result["reasons"] = verdict["reasons"]
    result["action"] = ACTIONS[verdict["decision"]]
    return result
