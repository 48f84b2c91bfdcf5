# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The closed-loop canary: one step's window of live traffic per arm, and the step's decision.

Pure functions. An *arm* is the stable predictor (baseline) or the canary (speculative); each
is read from its own pods' ``/metrics`` at the start and the end of the window (:class:`PodPages`),
or from Prometheus over the window (``canary_prometheus.PrometheusArms``: the same window, from
``increase()`` queries); both give :func:`arm_window`'s shape to the one decision, and the step says
which (``source``: ``pods`` or ``prometheus``).

1. **The window** (:func:`arm_window`): per pod, the later page is parsed against the earlier
   with ``vllm_metrics.parse_metrics_text(previous=...)`` (deltas of counters and histogram
   buckets, restarts detected there), then the pods are summed: requests and failed requests
   (``vllm:request_success_total`` by ``finished_reason``: ``abort`` and ``error`` failed), the
   latency histograms' bucket deltas (TTFT, per-request TPOT or inter-token latency, E2E) and
   the spec-decode counters (acceptance rate, mean acceptance length).
2. **Quantiles** (:func:`histogram_quantile`): Prometheus' histogram_quantile on the bucket
   deltas (linear inside a bucket; the highest finite bound when the rank falls in +Inf).
3. **The decision** (:func:`decide_step`), with the benchmark verdict's policy and noise rules
   (``bench_verdict.ratios`` and ``bench_verdict.decide``, the spec's ``workload.slo``): the
   window's histogram is expanded into the per-request values it stands for (evenly spread
   inside each bucket, what histogram_quantile assumes), each value its own resampling unit,
   so the ratios get the same bootstrap intervals and the same keep / rollback / inconclusive
   rules as a benchmark. The verdict pairs the arms' values by index, so both arms give as many
   values as the smaller window holds (evenly spaced quantiles of the larger): the same quantile
   of each (:func:`_sizes`). Then:

   * too few requests on either arm: ``extend`` (hold the step longer) while extensions are
     left, else ``inconclusive``;
   * the canary's acceptance rate below the floor (``min_acceptance``, default 0.5, the
     decision framework's "off" band), or no spec-decode counters on the canary: ``abort``;
   * the verdict's ``rollback``: ``abort``; ``keep``: ``promote-step``; ``inconclusive``:
     ``extend`` while extensions are left, else ``inconclusive``.

   A figure whose p50 falls in the same bucket on both arms (canary_change.unresolved) is judged on its exact mean
   from the histogram's ``_sum``/``_count`` instead; read from the pods, its interval comes from the batch means of
   the step's scrape intervals (:class:`PodPages` keeps each interval's deltas, canary_means), and with fewer than
   ``canary_means.MIN_BATCHES`` batches an arm the figure is not judged (the step is undecided unless another figure
   regressed). The step says how each figure was judged (``methods``).

   Only ``promote-step`` and ``abort`` are acted on; the caller never acts on the others.

Where the canary runs (:func:`support_problem`): KServe >= 0.20 in Standard mode (``spec.canary[]``:
a second Deployment per canary) or Knative mode (``spec.predictor.canaryTrafficPercent``: the predictor's
new spec is a new revision, which takes that share of the traffic while the revision rolled out before it
keeps the rest; :func:`knative_split` reads the split from ``status.components.predictor``, the arms are
the two revisions' pods (:func:`arm_selectors`), and the abort restores the stable spec
(:func:`stable_of`, :func:`knative_abort_patch`)).

Per-request throughput has no histogram in vLLM, so the ``throughput`` figure has no data here
(with ``bound_by: throughput`` every step is undecided: the benchmark measures it). Validity rules
of the benchmark that describe the load generator (warm-up, client CPU, arrival lag) do not apply
to live traffic and are not checked.
"""

from __future__ import annotations

import time

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_verdict
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import parse_metrics_text
from ansible_collections.specpilot.core.plugins.module_utils.operate import canary_change
from ansible_collections.specpilot.core.plugins.module_utils.operate.canary_report import (  # noqa: F401 (re-exported)
    bucket_resolution,
    render_plots,
    report_markdown,
)
from ansible_collections.specpilot.core.plugins.module_utils.service import live

__all__ = [
    "DECISIONS",
    "DEFAULT_MIN_ACCEPTANCE",
    "PodPages",
    "StepStopped",
    "acceptance_figures",
    "arm_pods",
    "arm_selectors",
    "arm_window",
    "bucket_resolution",
    "decide_step",
    "histogram_quantile",
    "knative_abort_patch",
    "knative_restored_problem",
    "knative_split",
    "knative_step_problem",
    "left_canary",
    "lock_seconds",
    "merge_patch",
    "outcome_summary",
    "render_plots",
    "report_markdown",
    "run_step",
    "stable_of",
    "support_problem",
    "todo",
]

DECISIONS = ("promote-step", "abort", "extend", "inconclusive")
DEFAULT_MIN_ACCEPTANCE = 0.5
FAILED_REASONS = ("abort", "error")
# figure of the verdict -> latency histograms that carry it, first present wins
FIGURE_HISTOGRAMS = {"ttft": ("ttft",), "tpot": ("request_tpot", "itl", "tpot"), "e2e": ("e2e",)}
# values per figure and arm the bootstrap resamples; a longer window is represented by this many
# evenly spaced quantiles of its histogram (a wider interval than its requests would give: the
# decision errs towards undecided, never towards acting)
MAX_VALUES = 400
_SPEC_KEYS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


# --------------------------------------------------------------------------- window


def _pod_window(before, after):
    """One pod's window: the later page parsed against the earlier (vllm_metrics), and the
    window's requests by finished_reason (all of them when the window is not a delta)."""
    previous = parse_metrics_text(before) if before is not None else None
    win = parse_metrics_text(after, previous=previous)
    base = previous["finished"] if previous and win["derived"]["window"] == "delta" else {}
    finished = dict((k, v - (base.get(k) or 0)) for k, v in win["finished"].items())
    return win, finished


def _add_buckets(total, buckets):
    for le, n in buckets or []:
        total[le] = total.get(le, 0) + (n or 0)


def arm_window(pages):
    """The window of one arm: ``pages`` is a list of ``{pod, before, after}`` (/metrics texts;
    ``before`` None when the pod started inside the window). Returns ``{pods, requests, failed,
    error_rate, histograms: {ttft, tpot, e2e: {metric, count, buckets}}, acceptance, notes}``."""
    out = {"pods": [], "requests": 0, "failed": 0, "histograms": {}, "notes": []}
    spec = dict((k, 0) for k in _SPEC_KEYS)
    spec["accepted_per_position"] = []
    spec_seen = False
    for page in pages:
        win, finished = _pod_window(page.get("before"), page["after"])
        out["pods"].append(page.get("pod"))
        out["notes"] += ["%s: %s" % (page.get("pod"), n) for n in win["notes"]]
        out["requests"] += sum(finished.values())
        out["failed"] += sum(v for k, v in finished.items() if k in FAILED_REASONS)
        _add_latency(out["histograms"], win["latency"] or {})
        if win["spec_decode_enabled"]:
            spec_seen = True
            for k in _SPEC_KEYS:
                spec[k] += win["derived"].get(k) or 0
            _add_positions(spec["accepted_per_position"], win["derived"].get("accepted_per_position"))
    for h in out["histograms"].values():
        b = h.pop("b")
        h["buckets"] = [[le, b[le]] for le in sorted(b)]
    out["error_rate"] = out["failed"] / out["requests"] if out["requests"] else 0.0
    out["acceptance"] = acceptance_figures(spec) if spec_seen else None
    return out


def _add_latency(histograms, latency):
    """Adds a pod's window of each figure's histogram (count, sum, bucket deltas) to the arm's."""
    for fig, keys in FIGURE_HISTOGRAMS.items():
        key = next((k for k in keys if latency.get(k)), None)
        if key is None:
            continue
        h = histograms.setdefault(fig, {"metric": latency[key]["metric"], "count": 0, "sum": 0.0, "b": {}})
        h["count"] += latency[key]["window_count"] or 0
        h["sum"] += latency[key]["window_sum"] or 0.0
        _add_buckets(h["b"], latency[key]["window_buckets"])


def _add_positions(total, per_pos):
    """Adds a pod's accepted tokens per draft position (a window's deltas) to the arm's."""
    for i, v in enumerate(per_pos or []):
        if i == len(total):
            total.append(0)
        total[i] += v or 0


def acceptance_figures(spec):
    """Acceptance rate, mean acceptance length and (with ``accepted_per_position``, the arm's accepted tokens
    per draft position) the rate per position of an arm's summed spec-decode counters."""
    drafts, tokens, accepted = spec["num_drafts"], spec["num_draft_tokens"], spec["num_accepted_tokens"]
    per_pos = list(spec.get("accepted_per_position") or []) or None
    return {
        "num_drafts": drafts,
        "num_draft_tokens": tokens,
        "num_accepted_tokens": accepted,
        "draft_acceptance_rate": accepted / float(tokens) if tokens else None,
        "mean_acceptance_length": 1.0 + accepted / float(drafts) if drafts else None,
        "accepted_per_position": per_pos,
        "per_position_acceptance": [a / float(drafts) for a in per_pos] if per_pos and drafts else None,
    }


# --------------------------------------------------------------------------- quantiles


def histogram_quantile(q, buckets, count):
    """Prometheus' histogram_quantile (0 <= q <= 1) of cumulative ``[[le, n], ...]`` finite
    buckets and the total ``count`` (the +Inf bucket); None without observations."""
    if not count:
        return None
    rank = q * count
    lower, below = 0.0, 0
    for le, n in buckets:
        if n >= rank and n > below:
            return lower + (le - lower) * (rank - below) / float(n - below)
        lower, below = le, n
    return lower  # in the +Inf bucket: the highest finite bound


def quantile_bucket(q, buckets, count):
    """The bucket ``[lower, upper]`` (seconds) the ``q`` quantile falls in: a quantile from a histogram is
    known only to its bucket's width (issue 39: a p99 shown as a bucket edge, a zero-width interval).
    ``upper`` is None in the +Inf bucket (the quantile is at least ``lower``); None without observations."""
    if not count:
        return None
    rank = q * count
    lower, below = 0.0, 0
    for le, n in buckets:
        if n >= rank and n > below:
            return [lower, le]
        lower, below = le, n
    return [lower, None]


def _expanded(buckets, count, size=None):
    """The per-request values (seconds) a window's histogram stands for: each bucket's
    observations evenly spread inside it; ``size`` of them at most (default MAX_VALUES), as evenly
    spaced quantiles when the window holds more."""
    size = MAX_VALUES if size is None else min(size, MAX_VALUES)
    if count > size:
        return [histogram_quantile((i + 0.5) / size, buckets, count) for i in range(size)]
    values, lower, below = [], 0.0, 0
    for le, n in list(buckets) + [[None, count]]:
        k = int(round(n - below))
        for i in range(k):
            values.append(lower if le is None else lower + (le - lower) * (i + 0.5) / k)
        if le is not None:
            lower, below = le, n
    return values


def _sizes(baseline, canary):
    """Values per figure of both arms: the smaller window's count. The verdict pairs the arms' samples
    by prompt id (value i of one arm with value i of the other, both ascending), so the arms must be
    the same quantiles: a 10% step's baseline has nine times the canary's requests, and pairing the
    lowest ninth of its values with all of the canary's would make the canary look slower (and, at
    the 100% step against a smaller reference, faster)."""
    both = set(baseline["histograms"]) & set(canary["histograms"])
    return dict(
        (fig, int(round(min(baseline["histograms"][fig]["count"], canary["histograms"][fig]["count"]))))
        for fig in both
    )


def _summary(arm, sizes=None):
    """The arm as the benchmark verdict reads a side: requests, failures and one sample per
    value of each figure (its own prompt id: the resampling unit), ``sizes[fig]`` values of each."""
    samples = []
    for fig, h in arm["histograms"].items():
        key = bench_verdict.SAMPLE_KEYS[fig][0]
        for i, v in enumerate(_expanded(h["buckets"], h["count"], (sizes or {}).get(fig))):
            samples.append({"prompt_id": "%s-%d" % (fig, i), key: 1000.0 * v})
    return {
        "samples": samples,
        "requests": arm["requests"],
        "failed": arm["failed"],
        "error_rate": arm["error_rate"],
    }


def arm_figures(arm):
    """{ttft, tpot, e2e: {p50_ms, p99_ms, count}} of one arm's window."""
    out = {}
    for fig in FIGURE_HISTOGRAMS:
        h = arm["histograms"].get(fig)
        if not h:
            out[fig] = None
            continue
        q = [histogram_quantile(p, h["buckets"], h["count"]) for p in (0.5, 0.99)]
        out[fig] = {
            "metric": h["metric"],
            "count": h["count"],
            "p50_ms": None if q[0] is None else 1000.0 * q[0],
            "p99_ms": None if q[1] is None else 1000.0 * q[1],
        }
        for name, p in (("p50_bucket_ms", 0.5), ("p99_bucket_ms", 0.99)):
            edges = quantile_bucket(p, h["buckets"], h["count"])
            out[fig][name] = None if edges is None else [None if e is None else 1000.0 * e for e in edges]
    return out


# --------------------------------------------------------------------------- decision


def decide_step(
    baseline,
    canary,
    policy=None,
    min_acceptance=DEFAULT_MIN_ACCEPTANCE,
    min_requests=20,
    extensions_left=0,
    change=None,
):
    """The step's decision from both arms' windows (:func:`arm_window`). ``change``: ``{acceptance_margin,
    allowance}`` of a change between two speculative configs (canary_change's defaults when not given).

    Returns ``{decision, reasons, verdict, ratios, arms: {baseline, canary: {requests, failed,
    figures, acceptance}}, positions (a change: canary_change.compare_positions), unresolved, judged_by}``;
    ``decision`` is one of DECISIONS."""
    out = {
        "arms": dict(
            (
                name,
                {
                    "requests": arm["requests"],
                    "failed": arm["failed"],
                    "figures": arm_figures(arm),
                    "acceptance": arm["acceptance"],
                },
            )
            for name, arm in (("baseline", baseline), ("canary", canary))
        ),
        "verdict": None,
        "ratios": None,
    }
    # an arm its source could not read (Prometheus has no series of its pods): said first, never a silent 0
    unread = [
        "%s arm: %s" % (name, arm["unread"])
        for name, arm in (("baseline", baseline), ("canary", canary))
        if arm.get("unread")
    ]
    few = unread + [
        "%s arm: %d request(s) in the window, fewer than the %d a decision needs"
        % (name, arm["requests"], min_requests)
        for name, arm in (("baseline", baseline), ("canary", canary))
        if arm["requests"] < min_requests and not arm.get("unread")
    ]
    if few:
        return _undecided(out, few, extensions_left)
    acc = (canary["acceptance"] or {}).get("draft_acceptance_rate")
    if canary["acceptance"] is None or acc is None:
        return dict(
            out,
            decision="abort",
            reasons=[
                "the canary exports no speculative-decoding counters (vllm:spec_decode_*): it is not running "
                "the speculative config"
            ],
        )
    if acc < min_acceptance:
        return dict(
            out,
            decision="abort",
            reasons=[
                "canary acceptance rate %.3f is below the floor %.2f (specpilot_canary_min_acceptance_rate)"
                % (acc, min_acceptance)
            ],
        )
    floor = "canary acceptance rate %.3f (floor %.2f)" % (acc, min_acceptance)
    return _judged(out, baseline, canary, policy, floor, extensions_left, change or {})


def _judged(out, baseline, canary, policy, floor, extensions_left, change):
    """The step judged, when the stable arm speculates too (a change between two configs), first on acceptance
    per shared draft position, then on latency without a required gain (canary_change); a figure whose quantiles
    the histograms cannot resolve is judged on its mean (canary_change.mean_ratio), or not at all."""
    acc_reasons = []
    if baseline["acceptance"] is not None:
        out["positions"] = canary_change.compare_positions(
            baseline["acceptance"], canary["acceptance"],
            change.get("acceptance_margin", canary_change.DEFAULT_ACCEPTANCE_MARGIN))
        kind, acc_reasons = canary_change.positions_problem(out["positions"])
        if kind == "drop":
            return dict(out, decision="abort", reasons=acc_reasons)
        if kind == "undecided":
            return _undecided(out, acc_reasons, extensions_left)
    full = bench_verdict.policy_with_defaults(policy)
    unres = canary_change.unresolved(out["arms"]["baseline"]["figures"], out["arms"]["canary"]["figures"])
    sizes = _sizes(baseline, canary)
    base, spec = _summary(baseline, sizes), _summary(canary, sizes)
    figs = bench_verdict.ratios(base, spec, policy)
    means = canary_change.by_means(figs, unres, baseline, canary, full["confidence"])
    decide_by, more = canary_change.resolution_reasons(dict((f, unres[f]) for f in means["skip"]), full["bound_by"])
    notes = means["notes"] + more
    out.update(unresolved=unres, judged_by=decide_by, ratios=figs, methods=_methods(figs, unres, means["methods"]))
    if decide_by is None:
        return _undecided(out, notes + ["no latency figure that decides is resolved by the histograms"], extensions_left)
    skip = tuple(means["skip"] + means["short"])
    allowance = None
    if baseline["acceptance"] is not None:
        allowance = change.get("allowance", canary_change.DEFAULT_CHANGE_ALLOWANCE)
        verdict = canary_change.judge_change(figs, policy, allowance, skip=skip)
    else:
        # the canary's own next step, not benchmark.yml's runs per prompt (issue 39)
        verdict = bench_verdict.decide(base, spec, figs, dict(policy or {}, bound_by=decide_by), hint=False)
    out.update(verdict=verdict)
    reasons = verdict["reasons"] + acc_reasons + notes + [floor]
    if verdict["decision"] == "inconclusive" and extensions_left <= 0:
        reasons.append(canary_change.next_step(
            verdict, min(baseline["requests"], canary["requests"]), allowance))
    if verdict["decision"] == "rollback":
        return dict(out, decision="abort", reasons=reasons)
    if verdict["decision"] == "keep" and not means["short"]:
        return dict(out, decision="promote-step", reasons=reasons)
    if means["short"]:
        # a figure its batches cannot judge yet is never taken as fine: only a regression elsewhere acts
        out["held_for_batches"] = True
        names = [canary_change.LABELS[f] for f in means["short"]]
        reasons = ["%s not judged yet: too few batches for an interval of the mean (held for more)" % (
            ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0])] + reasons
    return _undecided(out, reasons, extensions_left)


def _methods(figs, unres, by_means):
    """{figure: how the step judged it, in words}: the histograms' p50 where their buckets resolve it, else the
    mean (canary_change.by_means' words)."""
    out = {}
    for fig in canary_change.LATENCY:
        if fig in by_means:
            out[fig] = by_means[fig]
        elif (figs.get(fig) or {}).get("value") is not None:
            out[fig] = (
                "%s: p50 from the histograms, %.2fx (the buckets resolve it: the arms' p50 fall in different buckets); "
                "bootstrap interval over the requests' values spread inside their buckets" % (
                    canary_change.LABELS[fig], figs[fig]["value"]))
    return out


def _undecided(out, reasons, extensions_left):
    if extensions_left > 0:
        return dict(
            out,
            decision="extend",
            reasons=reasons
            + ["the step is held for another window (%d extension(s) left)" % extensions_left],
        )
    return dict(
        out,
        decision="inconclusive",
        reasons=reasons
        + ["no extension left (specpilot_canary_max_extensions): the canary stops undecided and is removed"],
    )


# --------------------------------------------------------------------------- the step, live


class PodPages(object):
    """The arms read from their own pods' /metrics: every pod scraped when the step begins, the
    window of each read the later pages against those. Each read also keeps, per arm, the scrape
    interval's deltas of each latency histogram's ``_sum`` and ``_count`` since the read before (one
    *batch*: ``{seconds, figures: {ttft, tpot, e2e: [sum, count]}}``), in the window's ``batches``: the
    batch means a figure the buckets cannot resolve is judged on (canary_means)."""

    name = "pods"

    def __init__(self, fetch, clock=None):
        self.fetch = fetch
        self.clock = clock or time.monotonic
        self.arms = self.before = self.last = None
        self.batches = {}

    def begin(self, arms):
        self.arms = arms
        self.before = _scrape(self.fetch, arms)
        self.last = dict((arm, {"at": self.clock(), "totals": {}}) for arm in arms)
        self.batches = dict((arm, []) for arm in arms)

    def read(self):
        wins = _windows(self.arms, self.before, _scrape(self.fetch, self.arms))
        now = self.clock()
        for arm, win in wins.items():
            totals = dict((fig, [h.get("sum") or 0.0, h["count"]]) for fig, h in win["histograms"].items())
            batch = _batch(self.last[arm]["totals"], totals, now - self.last[arm]["at"])
            if batch is not None:
                self.batches[arm].append(batch)
            self.last[arm] = {"at": now, "totals": totals}
            win["batches"] = list(self.batches[arm])
        return wins

    def details(self):
        return {}


def _batch(before, after, seconds):
    """One scrape interval's batch: each figure's deltas of the window's sum and count; None when a count went
    back (an engine restarted inside the interval: its counters start again, the interval is no batch)."""
    figures = {}
    for fig, (s, n) in after.items():
        s0, n0 = before.get(fig, (0.0, 0))
        if n < n0:
            return None
        figures[fig] = [s - s0, n - n0]
    return {"seconds": round(seconds, 3), "figures": figures}


def _scrape(fetch, arms):
    return dict((arm, dict((p["pod"], fetch(p["url"])) for p in pods)) for arm, pods in arms.items())


def _windows(arms, before, after):
    return dict(
        (
            arm,
            arm_window(
                [
                    {"pod": p["pod"], "before": before[arm].get(p["pod"]), "after": after[arm][p["pod"]]}
                    for p in pods
                ]
            ),
        )
        for arm, pods in arms.items()
    )


class StepStopped(Exception):
    """The step could not be held to its end: ``keep`` said why (the service's lock was lost)."""


def _keep(keep, now):
    stop = keep(now) if keep is not None else None
    if stop:
        raise StepStopped(stop)


def run_step(
    fetch,
    arms,
    window_s,
    min_requests,
    max_extensions=0,
    policy=None,
    min_acceptance=DEFAULT_MIN_ACCEPTANCE,
    poll_s=2.0,
    clock=None,
    sleep=None,
    reference=None,
    keep=None,
    source=None,
    change=None,
    warmup_requests=0,
):
    """Hold one step and decide it. ``change``: :func:`decide_step`'s. ``arms``: ``{baseline: [{pod, url}], canary: [{pod, url}]}``
    (each pod's /metrics URL); ``fetch(url)`` returns a page's text. ``source``: what reads the
    arms (``begin(arms)``, then ``read()`` -> ``{arm: window}``, ``name`` and ``details()``), by
    default :class:`PodPages` over ``fetch``. The window ends after
    ``window_s`` seconds or as soon as both arms have ``min_requests`` requests; an ``extend``
    decision holds it another ``window_s`` (the same start), at most ``max_extensions`` times, or until both arms
    have ``min_requests`` more requests per extension.
    ``reference``: the baseline's window of an earlier step, compared with instead of the
    baseline's pods (at 100% the stable predictor serves nothing to measure).
    ``warmup_requests``: the canary arm's first requests at the step, served before the window starts and left out
    of it (:func:`_warm_up`).
    ``keep(now)``, when given, runs at every scrape (the service lock's renewal, with ``clock``'s
    time): a message it returns stops the step (:class:`StepStopped`).
    Returns :func:`decide_step`'s result with ``window_s`` (seconds held), ``extensions``,
    ``baseline_window`` (the baseline's window: the reference of a later step) and ``source``."""
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    source = source or PodPages(fetch, clock)
    if reference is not None:
        arms = {"canary": arms["canary"]}
    source.begin(arms)
    warmup = _warm_up(source, arms, warmup_requests, window_s, (clock, sleep, poll_s, keep))
    start = clock()
    extensions = 0
    while True:
        deadline = clock() + window_s
        # An extension holds the step for more data (the same start): its early end waits for (extensions + 1) x
        # min_requests on both arms. A step extended because its figures are within the noise already has
        # min_requests; ending at once would decide it again on the same window (seen on the real engine: two
        # "extensions" in 25 s of a 60 s window, then inconclusive).
        need = min_requests * (extensions + 1)
        wins, result = _held(
            source,
            reference,
            need,
            deadline,
            lambda w, left=max_extensions - extensions: decide_step(
                w["baseline"], w["canary"], policy, min_acceptance, min_requests, left, change
            ),
            (clock, sleep, poll_s, keep),
        )
        if result["decision"] != "extend":
            break
        extensions += 1
    result.update(
        window_s=round(clock() - start, 3),
        extensions=extensions,
        baseline_window=wins["baseline"],
        warmup=warmup,
        source=source.name,
        **source.details(),
    )
    if reference is not None:
        result["reasons"] = result["reasons"] + [
            "the baseline arm is the stable predictor's window of the previous step (it serves no traffic at 100%)"
        ]
    result["notes"] = wins["baseline"]["notes"] + wins["canary"]["notes"]
    return result


def _held(source, reference, need, deadline, decide, timing):
    """Reads the arms every poll until both have ``need`` requests or the window's ``deadline`` passes, then decides
    (``decide(windows)``). A decision that waits for the batches of a mean (``held_for_batches``: a figure the buckets
    cannot resolve has fewer than canary_means.MIN_BATCHES batches in an arm, and nothing else regressed) is taken
    again at each poll until it no longer waits or the deadline passes: the step is held for the batches, not ended
    early and judged undecided. ``timing``: (clock, sleep, poll_s, keep). Returns (windows, decision)."""
    clock, sleep, poll_s, keep = timing
    while True:
        wins = source.read()
        if reference is not None:
            wins["baseline"] = reference
        late = clock() >= deadline
        if late or all(w["requests"] >= need for w in wins.values()):
            result = decide(wins)
            if late or not result.get("held_for_batches"):
                return wins, result
        _keep(keep, clock())
        sleep(max(0.0, min(poll_s, deadline - clock())))


def _warm_up(source, arms, requests, limit_s, timing):
    """The canary's first requests at a step pay one-time costs that are not the config's: a new engine's first
    batches, vLLM's n-gram proposer compiling (numba) on its first use. Measured in this lab: a healthy n-gram
    canary's mean TTFT 365 ms against the stable arm's 14 ms over its first 20 requests (p99 4.5 s), which aborted
    it. The window starts once the canary arm has served ``requests`` (at most ``limit_s`` seconds), both arms read
    again from there. ``timing``: (clock, sleep, poll_s, keep). None when there is no warm-up."""
    if requests <= 0:
        return None
    clock, sleep, poll_s, keep = timing
    start = clock()
    deadline = start + limit_s
    while True:
        served = source.read()["canary"]["requests"]
        if served >= requests or clock() >= deadline:
            break
        _keep(keep, clock())
        sleep(max(0.0, min(poll_s, deadline - clock())))
    source.begin(arms)
    return {"requests": served, "seconds": round(clock() - start, 3), "asked": requests}


# --------------------------------------------------------------------------- support and report


def left_canary(isvc):
    """The canary a run left on the live InferenceService, or None: ``{name, percent}`` - Standard mode's
    first ``spec.canary`` entry (its predictor's name), or Knative mode's ``spec.predictor.canaryTrafficPercent``
    (name None: the predictor itself carries the canary's spec, its newest revision takes that share)."""
    spec = (isvc or {}).get("spec") or {}
    if spec.get("canary"):
        entry = spec["canary"][0] or {}
        return {
            "name": (entry.get("predictor") or {}).get("name"),
            "percent": int(entry.get("trafficPercent") or 0),
        }
    percent = (spec.get("predictor") or {}).get("canaryTrafficPercent")
    if percent is not None:
        return {"name": None, "percent": int(percent)}
    return None


def todo(isvc, plan, record, retry=False, resume_name=None, runtime=None):
    """What a run does with the live InferenceService: ``resume`` (this spec's own canary, left by a run
    killed mid-step, is there - a canary entry named ``resume_name``, or in Knative mode
    canaryTrafficPercent on a predictor running the plan - and resuming is asked for),
    ``interrupted`` (another canary is there: it is aborted), ``promoted`` (the predictor already
    runs the plan: its arguments and its image, ``live.runs_plan``; ``runtime``: the live ServingRuntime the
    predictor names, whose image it runs unless it names one), ``recorded`` (this spec's canary already ended,
    on record, and no retry is asked) or ``run``."""
    running = live.runs_plan(isvc, plan, runtime)
    left = left_canary(isvc)
    if left is not None:
        mine = left["name"] == resume_name if left["name"] is not None else running
        return "resume" if resume_name and mine else "interrupted"
    if running:
        return "promoted"
    if (record or {}).get("digest", "") == plan.get("spec_digest") and not retry:
        return "recorded"
    return "run"


def ready_seconds(requested, plan):
    """How long the canary waits for its predictor to be ready (a step's, the promotion's, the abort's
    rollout): ``requested`` seconds, or (0, the default) the plan's ``startup_timeout_seconds`` (the
    startupProbe's budget, which the engine may use up) + 300 s for scheduling and pulling, as deploy
    waits for a rollout (action/rollout_wait.py)."""
    if int(requested or 0) < 0:
        raise ValueError("the ready timeout must be 0 (the plan's startup timeout + 300 s) or more, not %r" % requested)
    if int(requested or 0):
        return int(requested)
    return int((plan or {}).get("startup_timeout_seconds") or 900) + 300


def lock_seconds(ready_timeout, requested=0):
    """How long the service lock of a canary run lasts between renewals. It is renewed at the start of
    every step and while each step is held (canary_step) and the promotion rolls out (rollout_wait), so
    it must outlast what is waited for without a renewal: a step's readiness wait and, when a run fails
    there, the abort's own wait (each up to ``ready_timeout``). Default (``requested`` 0): twice
    ``ready_timeout`` and 5 minutes to spare; a ``requested`` duration must be longer than one wait."""
    ready = int(ready_timeout)
    if ready <= 0:
        raise ValueError("the ready timeout must be a positive number of seconds, not %r" % ready_timeout)
    if not int(requested):
        return 2 * ready + 300
    if int(requested) <= ready:
        raise ValueError(
            "a lock of %s s would expire while the run waits %s s for the canary to be ready without "
            "renewing it: give more than %s s (or 0, the default: %s s)"
            % (requested, ready, ready, 2 * ready + 300)
        )
    return int(requested)


def outcome_summary(outcome, last_step=None):
    """One sentence on where the traffic is after a run: its ``outcome`` (promoted, aborted,
    inconclusive, promotion-failed) and the last step's first reason."""
    if outcome == "promoted":
        return "the speculative predictor serves all the traffic"
    last = last_step or {}
    reason = (last.get("reasons") or ["the run failed before a decision"])[0]
    where = "at step %s%%: %s" % (last.get("traffic_percent", "?"), reason)
    if outcome == "promotion-failed":
        return (
            "%s; the predictor took the speculative spec but its rollout did not complete: see the "
            "rollout message, then deploy.yml (same spec) or rollback.yml" % where
        )
    return where + "; the stable predictor serves all the traffic, untouched"


# KServe's canaryTrafficPercent rollout as the role follows it (the last revision rolled out with 100% keeps
# the rest, tag "prev"; a revision sent back below 100% hands the rollout back): kserve/kserve #2040 and #2097
# (2022), in every release since 0.9
KNATIVE_SINCE = (0, 9)


def kind_problem(kind):
    """Why a service of this resource kind cannot have a canary ('' when it can): an LLMInferenceService
    (serving.kserve.io v1alpha1/v1alpha2, kserve v0.20.0 pkg/apis/serving/v1alpha2/llm_inference_service_types.go
    LLMInferenceServiceSpec) has no traffic-split field, neither spec.canary nor canaryTrafficPercent."""
    if kind == "LLMInferenceService":
        return (
            "an LLMInferenceService has no traffic-split field (neither spec.canary nor canaryTrafficPercent), "
            "so a canary cannot put speculative decoding on a slice "
            "of the traffic, and none is faked; nothing was changed. Measure it with playbooks/benchmark.yml "
            "(a baseline twin without speculative decoding) and keep it in check with playbooks/guard.yml"
        )
    return ""


def support_problem(kserve_version, deployment_mode):
    """Why this cluster cannot split traffic for a canary ('' when it can). ``kserve_version`` a
    (major, minor, patch) tuple or None."""
    if deployment_mode == "Knative":
        if kserve_version is None:
            return (
                "the KServe version is unknown: set specpilot_kserve_version (the canary's Knative mode, "
                "spec.predictor.canaryTrafficPercent, needs KServe >= %d.%d)" % KNATIVE_SINCE
            )
        if tuple(kserve_version[:2]) < KNATIVE_SINCE:
            return (
                "KServe %s: its canaryTrafficPercent rollout could send the traffic back to an older revision "
                "(fixed in 0.9, kserve/kserve #2040 and #2097); upgrade KServe, or measure with playbooks/benchmark.yml"
                % ".".join(str(x) for x in kserve_version)
            )
        return ""
    if kserve_version is None:
        return (
            "the KServe version is unknown: set specpilot_kserve_version (spec.canary needs KServe >= 0.20)"
        )
    if tuple(kserve_version[:2]) < (0, 20):
        return (
            "KServe %s in Standard mode has no traffic split: spec.canary (trafficPercent) arrived in KServe 0.20 "
            "(kserve/kserve #5672), and a canary is never faked without one; measure speculative decoding with "
            "playbooks/benchmark.yml (a baseline twin) instead" % ".".join(str(x) for x in kserve_version)
        )
    return ""


LAB_URL_ANNOTATION = "specpilot.io/lab-url"
KNATIVE_REVISION_LABEL = "serving.knative.dev/revision"


# --------------------------------------------------------------------------- Knative mode


def knative_split(isvc):
    """The split of a Knative-mode InferenceService, from ``status.components.predictor`` as KServe
    writes it (PropagateStatus, pkg/apis/serving/v1beta1/inference_service_status.go): the canary is the
    traffic target on the latest revision (``latestRevision: true``, tag ``latest`` with tag routing), the
    baseline the revision last rolled out with 100% (``latestRevision: false``, tag ``prev``), as
    createKnativeService (reconcilers/knative/ksvc_reconciler.go) writes the targets.
    Returns ``{latest_created, latest_ready, rolled_out, canary: {revision, percent}, baseline: {revision,
    percent} or None, ready}`` (``ready``: the Ready condition is True)."""
    status = (isvc or {}).get("status") or {}
    comp = (status.get("components") or {}).get("predictor") or {}
    latest, baseline = {"revision": None, "percent": 0}, None
    for t in comp.get("traffic") or []:
        entry = {"revision": t.get("revisionName"), "percent": int(t.get("percent") or 0)}
        if t.get("latestRevision"):
            latest = entry
        elif t.get("tag") == "prev" or baseline is None:
            baseline = entry
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return {
        "latest_created": comp.get("latestCreatedRevision"),
        "latest_ready": comp.get("latestReadyRevision"),
        "rolled_out": comp.get("latestRolledoutRevision"),
        "canary": latest,
        "baseline": baseline,
        "ready": ready,
    }


def knative_step_problem(isvc, percent, stable_revision=None):
    """'' once a step's split is in place, else what is still missing: the newest revision ready (not
    ``stable_revision``, the one the canary started from) with ``percent`` of the traffic and, below 100,
    the revision rolled out before it the rest."""
    split = knative_split(isvc)
    created, canary, base = split["latest_created"], split["canary"], split["baseline"]
    if not created or created != split["latest_ready"]:
        return "the newest revision %s is not ready (latest ready: %s)" % (created, split["latest_ready"])
    if stable_revision and created == stable_revision:
        return "KServe has not made a revision of the canary's spec yet (latest %s)" % created
    if canary["revision"] != created or canary["percent"] != int(percent):
        return "revision %s has %s%% of the traffic, not %s%%" % (created, canary["percent"], percent)
    if int(percent) < 100 and (
        not base or base["revision"] == created or base["percent"] != 100 - int(percent)
    ):
        return "the revision rolled out before %s does not have the other %s%%: %s" % (
            created,
            100 - int(percent),
            base,
        )
    return ""


def knative_restored_problem(isvc, before_revision, new_revision=True):
    """'' once an abort's restored spec runs: the newest revision ready and, when the restoring write changed
    the template (``new_revision``), newer than ``before_revision`` (the newest before that write: a stale
    status still shows the canary's revision as the newest ready one); else what is still missing."""
    split = knative_split(isvc)
    created = split["latest_created"]
    if new_revision and (not created or created == before_revision):
        return "KServe has not made a revision of the restored spec yet (newest %s)" % created
    if not created or created != split["latest_ready"]:
        return "the restored spec's revision %s is not ready yet (latest ready %s)" % (
            created,
            split["latest_ready"],
        )
    return ""


def stable_of(isvc):
    """What a Knative-mode abort restores: the live service's metadata labels and annotations and its
    predictor (without canaryTrafficPercent), read before the canary's first step."""
    md = (isvc or {}).get("metadata") or {}
    predictor = dict(((isvc or {}).get("spec") or {}).get("predictor") or {})
    predictor.pop("canaryTrafficPercent", None)
    return {
        "labels": dict(md.get("labels") or {}),
        "annotations": dict(md.get("annotations") or {}),
        "predictor": predictor,
    }


def merge_patch(current, target):
    """The JSON merge patch (RFC 7386) that turns ``current`` into ``target``: keys only ``current`` has
    become null, objects are patched key by key, anything else is ``target``'s."""
    if not isinstance(current, dict) or not isinstance(target, dict):
        return target
    out = dict((k, None) for k in current if k not in target)
    for k, v in target.items():
        if k not in current or current[k] != v:
            out[k] = merge_patch(current.get(k), v)
    return out


def knative_abort_patch(live, stable):
    """The abort's one write (KServe's documented rollback, docs/samples/v1beta1/rollout/README.md
    "Rollback and pin the model"): canaryTrafficPercent 0, so the revision rolled out before the canary
    takes all the traffic, and the metadata and predictor back to ``stable`` (:func:`stable_of`), which
    Knative makes a new revision of; canaryTrafficPercent is removed once that revision is ready."""
    now = stable_of(live)
    patch = merge_patch(now, stable)
    predictor = dict(patch.get("predictor") or {}, canaryTrafficPercent=0)
    out = {"spec": {"predictor": predictor}}
    meta = dict((k, patch[k]) for k in ("labels", "annotations") if k in patch)
    if meta:
        out["metadata"] = meta
    return out


def arm_selectors(deployment_mode, baseline, canary):
    """The label selector of each arm's pods: in Standard mode ``baseline`` and ``canary`` are the two
    predictor Deployments (their pods' ``app: isvc.<Deployment>``, constants.GetRawServiceLabel), in Knative
    mode the two revisions (Knative's ``serving.knative.dev/revision`` label)."""
    if deployment_mode == "Knative":
        return {
            "baseline": "%s=%s" % (KNATIVE_REVISION_LABEL, baseline),
            "canary": "%s=%s" % (KNATIVE_REVISION_LABEL, canary),
        }
    return {"baseline": "app=isvc.%s" % baseline, "canary": "app=isvc.%s" % canary}


def arm_pods(pods, port=8080):
    """[{pod, url}] of an arm's ready pods: each pod's /metrics at its IP and the engine's port,
    or where the lab publishes the pod's engine (annotation specpilot.io/lab-url)."""
    out = []
    for pod in pods or []:
        md, st = pod.get("metadata") or {}, pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or []
        )
        if md.get("deletionTimestamp") or not ready:
            continue
        base = (md.get("annotations") or {}).get(LAB_URL_ANNOTATION) or (
            "http://%s:%d" % (st["podIP"], int(port)) if st.get("podIP") else None
        )
        if base:
            out.append({"pod": md.get("name"), "url": base.rstrip("/") + "/metrics"})
    return sorted(out, key=lambda p: p["pod"])
