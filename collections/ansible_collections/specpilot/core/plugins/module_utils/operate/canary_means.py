# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The mean of a latency figure the histograms cannot resolve, from batch means (issues 38 and 39).

vLLM's latency histograms carry ``_sum`` and ``_count`` beside their buckets: their deltas over a window give
the window's exact mean, whatever the buckets. On a fast engine (the lab's tiny model: TPOT of 2-7 ms) both arms'
values fall in the first bucket (0-10 ms), where a quantile or an interval made from the buckets is the even spread
the bucket is assumed to hold, not a measurement. The canary reads the arms' ``/metrics`` every ``poll`` seconds
(``canary.PodPages``); each scrape interval's deltas of ``_sum`` and ``_count`` are one *batch* (its mean is
sum / count), and the batches' spread measures the noise of the window's mean without any assumption about the
values inside a bucket.

**The estimate.** Per arm, the window's mean is m = sum of the batches' sums / sum of their counts (a ratio
estimator: each batch weighs by its requests; batches with no request of the figure drop out). Its variance is the
ratio estimator's from the batches (the "cluster-robust" form, Cochran, *Sampling Techniques*, 3rd ed., 6.2 and
6.11): ``V(m) = B / (B - 1) * sum_i (s_i - m n_i)^2 / N^2`` over the B non-empty batches (s_i, n_i), N = sum n_i.
Requests served in the same interval share the engine's batches and queue, so they are correlated; a batch as the
unit takes that in, where each request as its own unit (the bootstrap of the bucket expansion) does not.

**The ratio and its interval: the delta method on the log scale**, not a bootstrap over batches. The two arms are
independent (their own pods), so Var(log m_b - log m_c) = V(m_b) / m_b^2 + V(m_c) / m_c^2; the interval is
exp(log ratio +- t * se) with Student's t at the Welch-Satterthwaite degrees of freedom of the two arms' variances
(at least min(B) - 1). With the 10 to 30 batches a step holds, a percentile bootstrap over batches is known to be
too narrow (it behaves like a z interval with the variance's divisor B instead of B - 1), and it is random; the
delta-method t interval is exact for normal batch means, widens with few batches as it should, and gives the same
interval on every run of the same window. The batches' means are not normal with two requests each, which is why a
decision needs :data:`MIN_BATCHES` of them.

**How many batches.** :data:`MIN_BATCHES` (10) non-empty batches in each arm, per figure: the smallest number of
batches the batch-means literature uses (Schmeiser 1982, "Batch size effects in the analysis of simulation output",
Operations Research 30(3): 10 to 30 batches); with fewer the variance estimate itself is too noisy to bound the
error (its relative standard error is sqrt(2 / (B - 1)), 47% at B = 10). Fewer batches: the figure is *undecided*
and the step says so (the step is held for more, ``canary.run_step``), never judged on a guess. Batches whose means
do not vary at all give no interval (a zero-width interval is no measurement: issue 39) and are undecided too.

**Not here:** the batches assume that consecutive intervals are roughly independent (a queue that builds over many
seconds makes them correlated, and the interval too narrow); the lab's loads are far from saturation. Prometheus
(``canary_prometheus``) gives a window's ``increase()`` only, at its own scrape interval (30 s by default, as long as
a window): no batches, so a figure its buckets cannot resolve is judged there on the histogram method
(``canary_change.mean_ratio``: the exact mean, its interval from the buckets' spread), and the step says so.

Standard library only.
"""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["MIN_BATCHES", "batch_ratio", "batches_of", "t_quantile"]

MIN_BATCHES = 10


def t_quantile(p, df):
    """Student's t quantile ``p`` (0.5 < p < 1) at ``df`` degrees of freedom (> 0, not an integer necessarily):
    the Cornish-Fisher expansion about the normal quantile (Abramowitz and Stegun 26.7.5), within 0.001 of the exact
    value from 5 degrees of freedom on (t_0.975 at 9 df: 2.2622)."""
    z = NormalDist().inv_cdf(p)
    if df == float("inf"):
        return z
    g1 = (z ** 3 + z) / 4.0
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96.0
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384.0
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160.0
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def batches_of(window, fig):
    """[(sum, count)] of one arm's window's non-empty batches of ``fig`` (``window["batches"]``: one entry per scrape
    interval, ``{figure: [sum, count]}``), or None when the window has no batches (read from Prometheus, or built
    from two pages)."""
    if window.get("batches") is None:
        return None
    out = []
    for batch in window["batches"]:
        s, n = (batch.get("figures") or {}).get(fig) or (0.0, 0)
        if n and n > 0:
            out.append((float(s), float(n)))
    return out


def _arm(batches):
    """(mean, variance of the mean) of an arm's batches (the ratio estimator and its variance)."""
    total_s, total_n = sum(b[0] for b in batches), sum(b[1] for b in batches)
    mean = total_s / total_n
    b = len(batches)
    var = b / (b - 1.0) * sum((s - mean * n) ** 2 for s, n in batches) / total_n ** 2
    return mean, var


def _problem(fig, counts, seconds, min_batches):
    few = ["%s arm %d" % (arm, n) for arm, n in zip(("stable", "canary"), counts) if n < min_batches]
    if few:
        return (
            "%s: %s non-empty batch(es) (scrape intervals of about %.0f s with a request), fewer than the %d a "
            "batch-means interval needs: not judged yet" % (fig, " and ".join(few), seconds, min_batches)
        )
    return ""


def batch_ratio(base, canary, fig, confidence=0.95, min_batches=MIN_BATCHES, label=None):
    """The ratio of the arms' means of ``fig`` (baseline / canary, > 1 the canary faster, as bench_verdict.ratios)
    from their windows' batches, with its delta-method t interval. None when either window has no batches (the
    caller judges on the histogram instead); else ``{value, ci95, statistic: mean, method: batch-means, mean_ms,
    batches, batch_s, df, prompts, samples, p99}``, or ``{problem, batches, ...}`` when the batches cannot decide
    (too few, or no variation); ``label``: the figure's name in the problem's words."""
    bb, bc = batches_of(base, fig), batches_of(canary, fig)
    if bb is None or bc is None:
        return None
    seconds = _batch_seconds(base, canary)
    out = {"statistic": "mean", "method": "batch-means", "batches": [len(bb), len(bc)], "batch_s": seconds,
           "value": None, "ci95": None, "prompts": 0, "samples": [0, 0], "p99": {"value": None, "ci95": None}}
    label = label or fig
    problem = _problem(label, out["batches"], seconds, max(2, int(min_batches)))
    if problem:
        return dict(out, problem=problem)
    (mb, vb), (mc, vc) = _arm(bb), _arm(bc)
    out["mean_ms"] = [1000.0 * mb, 1000.0 * mc]
    out["samples"] = [int(sum(b[1] for b in bb)), int(sum(b[1] for b in bc))]
    out["prompts"] = min(out["samples"])
    if mb <= 0 or mc <= 0:
        return dict(out, problem="%s: a mean of 0 (no latency recorded): no ratio" % label)
    rb, rc = vb / (mb * mb), vc / (mc * mc)
    if rb + rc <= 1e-12:  # a relative standard error below 1e-6: rounding, not variation
        return dict(out, problem=(
            "%s: the %d and %d batches' means do not vary at all: no interval can be formed (is the figure "
            "recorded?)" % (label, len(bb), len(bc))))
    df = (rb + rc) ** 2 / (rb * rb / (len(bb) - 1) + rc * rc / (len(bc) - 1))
    half = t_quantile(0.5 + float(confidence) / 2.0, df) * math.sqrt(rb + rc)
    value = mb / mc
    out.update(value=value, ci95=[value * math.exp(-half), value * math.exp(half)], df=df)
    return out


def _batch_seconds(*windows):
    """The batches' mean length in seconds (each batch carries its ``seconds``), 0 when unknown."""
    lengths = [b.get("seconds") or 0.0 for w in windows for b in w.get("batches") or []]
    return sum(lengths) / len(lengths) if lengths else 0.0
