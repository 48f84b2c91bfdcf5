# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The canary of a change between two speculative configurations (issue 38): the stable arm already
speculates, the canary differs in anything the spec holds (k, the method, the draft, the runtime's vLLM).

Three things a canary that turns speculation on from off does not need:

1. **Acceptance per draft position** (:func:`compare_positions`). vLLM V1 counts, per draft, the
   positions it accepted (``vllm:spec_decode_num_accepted_tokens_per_pos_total{position}``, incremented in
   ``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingProm.observe`` from ``SpecDecodingStats.num_accepted_tokens_per_pos``)
   beside the drafts (``vllm:spec_decode_num_drafts_total``): position i's rate is accepted_i / drafts, the
   share of drafts that got at least i+1 tokens accepted. Only the positions both arms draft are compared
   (k=3 against k=2: positions 0 and 1); mean acceptance length across different k would compare apples and
   oranges. Each shared position's difference canary - stable gets Newcombe's hybrid score interval (the
   difference of two Wilson intervals, Newcombe 1998, method 10). The canary *drops* at a position when the
   whole interval lies below ``-margin``. The interval treats each draft as its own Bernoulli trial; drafts of
   one request are correlated, so the true uncertainty is wider than the interval: the margin (default 0.02)
   absorbs that, and a position with fewer than ``min_drafts`` drafts in either arm is not judged at all.
2. **Latency without a required gain** (:func:`judge_change`): both arms speculate, so the canary must not be
   slower beyond an allowance (non-inferiority: each figure's interval's lower end at or above
   1 / (1 + allowance)), where a canary from off must be faster.
3. **What the histograms can resolve** (:func:`unresolved`): a figure whose p50 falls in the same bucket on
   both arms (TPOT of a few ms, all below vLLM's first bucket edge of 10 ms; 21 against 23 ms, both in 10-25 ms)
   has a p50 ratio made of the even spread inside that bucket. It is judged on its mean instead (:func:`by_means`: the
   histogram's _sum / _count is exact; read from the pods, the interval comes from the batch means of the step's
   scrape intervals, ``canary_means``; read from Prometheus, which gives no batches, from the buckets' spread,
   :func:`mean_ratio`), and the step says which; a figure without a sum is not judged, and when that is the figure
   the service is bound by, E2E request latency decides instead.
"""

from __future__ import annotations

import math

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_verdict
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_state
from ansible_collections.specpilot.core.plugins.module_utils.operate import canary_means
from ansible_collections.specpilot.core.plugins.module_utils.report.plots import pyplot, saved
from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table
from ansible_collections.specpilot.core.plugins.module_utils.service import live

__all__ = [
    "DEFAULT_ACCEPTANCE_MARGIN",
    "DEFAULT_CHANGE_ALLOWANCE",
    "MIN_DRAFTS",
    "compare_positions",
    "by_means",
    "image_arms",
    "judge_change",
    "mean_ratio",
    "next_step",
    "positions_markdown",
    "positions_problem",
    "promotion_writes",
    "render_positions_plot",
    "sampling",
    "unresolved",
]

DEFAULT_ACCEPTANCE_MARGIN = 0.02
DEFAULT_CHANGE_ALLOWANCE = 0.05
MIN_DRAFTS = 50
Z95 = 1.959964
LATENCY = ("ttft", "tpot", "e2e")
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}
POSITION_COLUMNS = ("position", "stable", "canary", "difference (95% CI)", "verdict")


# --------------------------------------------------------------------------- acceptance per position


def wilson(accepted, n, z=Z95):
    """Wilson's score interval [low, high] of accepted / n."""
    p = accepted / float(n)
    den = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / den
    half = z / den * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n))
    return [max(0.0, centre - half), min(1.0, centre + half)]


def newcombe(a1, n1, a2, n2, z=Z95):
    """Newcombe's hybrid score interval of p1 - p2 (p1 = a1/n1, p2 = a2/n2)."""
    p1, p2 = a1 / float(n1), a2 / float(n2)
    l1, u1 = wilson(a1, n1, z)
    l2, u2 = wilson(a2, n2, z)
    d = p1 - p2
    return [d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)]


def _arm_counts(acceptance):
    """(drafts, [accepted per position]) of an arm's acceptance figures, or (drafts, None) without per-position counters."""
    acc = acceptance or {}
    per_pos = acc.get("accepted_per_position")
    return acc.get("num_drafts") or 0, (list(per_pos) if per_pos else None)


def _position(i, stable, canary, margin, min_drafts):
    (n_s, a_s), (n_c, a_c) = stable, canary
    entry = {
        "position": i,
        "stable": {"accepted": a_s, "drafts": n_s, "rate": a_s / float(n_s) if n_s else None},
        "canary": {"accepted": a_c, "drafts": n_c, "rate": a_c / float(n_c) if n_c else None},
        "difference": None,
        "ci95": None,
    }
    if min(n_s, n_c) < min_drafts:
        entry["verdict"] = "too-few-drafts"
        return entry
    entry["difference"] = entry["canary"]["rate"] - entry["stable"]["rate"]
    entry["ci95"] = newcombe(a_c, n_c, a_s, n_s)
    entry["verdict"] = "drop" if entry["ci95"][1] < -margin else "holds"
    return entry


def compare_positions(stable, canary, margin=DEFAULT_ACCEPTANCE_MARGIN, min_drafts=MIN_DRAFTS):
    """Both arms' acceptance per draft position (their :func:`canary.acceptance_figures`, with
    ``accepted_per_position``). Returns ``{shared, stable_k, canary_k, positions: [{position, stable, canary:
    {accepted, drafts, rate}, difference, ci95, verdict: holds|drop|too-few-drafts}], missing, margin}``;
    ``missing`` names an arm without per-position counters (then nothing is compared)."""
    n_s, pos_s = _arm_counts(stable)
    n_c, pos_c = _arm_counts(canary)
    out = {"margin": margin, "min_drafts": min_drafts, "positions": [], "missing": [],
           "stable_k": len(pos_s) if pos_s else None, "canary_k": len(pos_c) if pos_c else None}
    out["missing"] = [arm for arm, pos in (("stable", pos_s), ("canary", pos_c)) if not pos]
    if out["missing"]:
        out["shared"] = 0
        return out
    out["shared"] = min(len(pos_s), len(pos_c))
    for i in range(out["shared"]):
        out["positions"].append(
            _position(i, (n_s, pos_s[i] or 0), (n_c, pos_c[i] or 0), margin, min_drafts)
        )
    return out


def _pct(value):
    return "n/a" if value is None else "%.3f" % value


def positions_problem(comparison):
    """(kind, reasons) of the comparison: ``drop`` (the canary accepts less beyond the noise at a shared
    position, named), ``undecided`` (it cannot be judged: no per-position counters, too few drafts) or ``holds``."""
    if comparison["missing"]:
        return "undecided", [
            "acceptance per position cannot be compared: the %s arm exports no vllm:spec_decode_num_accepted_tokens_per_pos "
            "counters (vLLM >= 0.8.5 V1 does)" % " and ".join(comparison["missing"])
        ]
    drops = [p for p in comparison["positions"] if p["verdict"] == "drop"]
    if drops:
        return "drop", [
            "acceptance drop at draft position %d: stable %s -> canary %s (%+.3f, 95%% CI %+.3f to %+.3f, beyond the "
            "noise and the %.2f margin; %d / %d drafts)"
            % (p["position"], _pct(p["stable"]["rate"]), _pct(p["canary"]["rate"]), p["difference"], p["ci95"][0],
               p["ci95"][1], comparison["margin"], p["stable"]["drafts"], p["canary"]["drafts"])
            for p in drops
        ]
    few = [p for p in comparison["positions"] if p["verdict"] == "too-few-drafts"]
    if few:
        return "undecided", [
            "acceptance per position not judged: fewer than %d drafts in an arm (stable %d, canary %d)"
            % (comparison["min_drafts"], few[0]["stable"]["drafts"], few[0]["canary"]["drafts"])
        ]
    return "holds", [
        "acceptance holds at the %d shared draft position(s) (stable k=%s, canary k=%s): %s"
        % (comparison["shared"], comparison["stable_k"], comparison["canary_k"], "; ".join(
            "position %d %s -> %s (95%% CI of the difference %+.3f to %+.3f)"
            % (p["position"], _pct(p["stable"]["rate"]), _pct(p["canary"]["rate"]), p["ci95"][0], p["ci95"][1])
            for p in comparison["positions"]))
    ]


# --------------------------------------------------------------------------- latency


def _same_bucket(fig_b, fig_c, quantile):
    b = (fig_b or {}).get(quantile + "_bucket_ms")
    c = (fig_c or {}).get(quantile + "_bucket_ms")
    return bool(b and c and b == c)


def unresolved(figures_b, figures_c):
    """{figure: bucket [low, high] ms} of the figures whose p50 falls in one and the same bucket on both arms
    (``canary.arm_figures``): the p50 ratio the step is judged on is then the even spread inside that bucket on both
    sides, finer than the histogram measured (the lab's real engine: TPOT p50 of 21 and 23 ms, both in 10-25 ms)."""
    out = {}
    for fig in LATENCY:
        b, c = figures_b.get(fig), figures_c.get(fig)
        if b and c and _same_bucket(b, c, "p50"):
            out[fig] = b["p50_bucket_ms"]
    return out


def _spread(h, mean):
    """The variance of one arm's values as its histogram allows: each bucket's values uniform inside it (variance
    of the bucket's midpoint about the mean plus width^2 / 12); values past the last bound taken at that bound."""
    var, lower, below = 0.0, 0.0, 0.0
    for le, n in list(h["buckets"]) + [[None, h["count"]]]:
        k = (n or 0) - below
        top = lower if le is None else le
        var += k * (((lower + top) / 2.0 - mean) ** 2 + (top - lower) ** 2 / 12.0)
        if le is not None:
            lower, below = le, n
    return var / h["count"]


def mean_ratio(hb, hc, z=Z95):
    """The ratio of the arms' means (baseline / canary, > 1 the canary faster) of one figure, from the histograms'
    ``sum`` and ``count`` (exact, whatever the buckets), with a normal-approximation 95% interval on the log
    ratio whose variance comes from the buckets (:func:`_spread`); None without a sum or with under 2 values."""
    if not hb or not hc or hb.get("sum") is None or hc.get("sum") is None or min(hb["count"], hc["count"]) < 2:
        return None
    mb, mc = hb["sum"] / hb["count"], hc["sum"] / hc["count"]
    if mb <= 0 or mc <= 0:
        return None
    se = math.sqrt(_spread(hb, mb) / (hb["count"] * mb * mb) + _spread(hc, mc) / (hc["count"] * mc * mc))
    value = mb / mc
    return {
        "value": value,
        "ci95": [value * math.exp(-z * se), value * math.exp(z * se)],
        "statistic": "mean",
        "mean_ms": [1000.0 * mb, 1000.0 * mc],
        "prompts": int(min(hb["count"], hc["count"])),
        "samples": [int(hb["count"]), int(hc["count"])],
        "p99": {"value": None, "ci95": None},
    }


def by_means(figs, unres, base, canary, confidence=0.95):
    """Replaces in ``figs`` (bench_verdict.ratios) each figure the buckets cannot resolve (:func:`unresolved`) by the
    ratio of its means. ``base`` and ``canary`` are the arms' windows (``canary.arm_window``): with the batches of
    their scrape intervals (the pods' /metrics), the batch-means interval (``canary_means.batch_ratio``); without
    (Prometheus), the histogram method (:func:`mean_ratio`). Returns ``{skip, short, notes, methods}``: ``skip`` the
    figures without a mean (not judged), ``short`` those whose batches cannot decide yet (too few: the step is
    undecided), ``methods`` {figure: how it is judged, in words: the report's one statement of the method}, ``notes``
    a short line per figure judged on its mean for the step's reasons, which point to ``methods`` rather than
    repeat it (issue 39: the report said each method twice)."""
    out = {"skip": [], "short": [], "notes": [], "methods": {}}
    for fig, edges in sorted(unres.items()):
        why = "the histogram's %s bucket holds both arms' p50 and cannot resolve it" % _bucket_text(edges)
        entry = canary_means.batch_ratio(base, canary, fig, confidence, label=LABELS[fig])
        if entry is not None:
            figs[fig] = entry
            if entry.get("problem"):
                out["short"].append(fig)
                out["methods"][fig] = "mean from _sum/_count by batch means: not judged, %s" % entry["problem"]
                continue
            out["notes"].append(_brief(fig, edges, "batch means"))
            out["methods"][fig] = "%s; %s" % (_batch_text(fig, entry, confidence), why)
            continue
        entry = mean_ratio(base["histograms"].get(fig), canary["histograms"].get(fig))
        if entry is None:
            out["skip"].append(fig)
            figs[fig] = {"value": None, "ci95": None, "prompts": 0, "samples": [0, 0], "p99": {"value": None, "ci95": None}}
            out["methods"][fig] = "not judged: %s, and no _sum gives its mean" % why
            continue
        figs[fig] = dict(entry, method="histogram-means")
        text = (
            "%s p50 of both arms falls in the same histogram bucket (%s): judged on the mean %s instead "
            "(vLLM's _sum / _count, exact: %.2f ms stable, %.2f ms canary, %.2fx, 95%% CI %.2f-%.2fx; the histogram "
            "method: no batches of the window (%s), so the interval takes each value as spread evenly inside its "
            "bucket, an assumption)"
            % (LABELS[fig], _bucket_text(edges), LABELS[fig], entry["mean_ms"][0], entry["mean_ms"][1], entry["value"],
               entry["ci95"][0], entry["ci95"][1], base.get("source") or "read from two scrapes")
        )
        out["notes"].append(_brief(fig, edges, "the histogram method"))
        out["methods"][fig] = text
    return out


def _brief(fig, edges, method):
    """A reason's words for a figure judged on its mean: what was compared and why, the method itself left to the
    step's ``methods`` (the report's "How each figure was judged")."""
    return (
        "%s is compared by its mean (%s), not its p50: both arms' p50 fall in the %s bucket (the method: see the "
        "report's \"How each figure was judged\")" % (LABELS[fig], method, _bucket_text(edges))
    )


def _batch_text(fig, entry, confidence):
    """The sentence of a figure judged on its batch means."""
    return (
        "%s: mean %.2f ms stable vs %.2f ms canary from vLLM's _sum/_count, %.2fx, %d%% CI %.2f-%.2fx over %d / %d "
        "batches of about %.0f s (batch means, delta-method t interval, %.0f df)"
        % (LABELS[fig], entry["mean_ms"][0], entry["mean_ms"][1], entry["value"], round(100 * confidence),
           entry["ci95"][0], entry["ci95"][1], entry["batches"][0], entry["batches"][1], entry["batch_s"], entry["df"])
    )


def _bucket_text(edges):
    return "%s-%s ms" % (_pct(edges[0]).rstrip("0").rstrip("."), "inf" if edges[1] is None else "%g" % edges[1])


def resolution_reasons(unres, bound):
    """Words for the figures the buckets cannot resolve, and the figure that decides instead of ``bound``."""
    reasons = [
        "%s p50 of both arms falls in the same histogram bucket (%s) and no sum gives its mean: %s is not judged"
        % (LABELS[f], _bucket_text(edges), LABELS[f])
        for f, edges in sorted(unres.items())
    ]
    decide_by = bound
    if bound in unres:
        decide_by = next((f for f in ("e2e", "ttft") if f not in unres), None)
        if decide_by:
            reasons.append(
                "the service is bound by %s; %s request latency decides instead (its buckets resolve it)"
                % (LABELS[bound], LABELS[decide_by])
            )
    return decide_by, reasons


def judge_change(figs, policy, allowance=DEFAULT_CHANGE_ALLOWANCE, skip=()):
    """The latency of a change between two speculative configs (non-inferiority): ``figs`` are
    ``bench_verdict.ratios`` (baseline / canary, > 1 the canary faster). The bound figure may be worse by
    ``allowance``, the others by the policy's allowance (or ``allowance`` where that is smaller); ``skip``: figures
    not judged. Returns ``{decision: keep|rollback|inconclusive, reasons, runs_needed}``: ``runs_needed`` (an
    inconclusive one) as bench_verdict's at one run per prompt, the further multiples of the window's samples that
    would likely decide it (None: no amount would, or no interval)."""
    policy = bench_verdict.policy_with_defaults(policy)
    worse, unsure, fine, needed = [], [], [], []
    for fig in LATENCY:
        entry = figs.get(fig) or {}
        if fig in skip or entry.get("value") is None:
            continue
        allow = max(allowance, policy[fig + "_max_regression"]) if fig != policy["bound_by"] else allowance
        floor = 1.0 / (1.0 + allow)
        ci = entry.get("ci95")
        text = "%s %.2fx (%s; allowance %d%%)" % (
            LABELS[fig], entry["value"], "95%% CI %.2f-%.2fx" % tuple(ci) if ci else "no CI", round(100 * allow))
        if ci and ci[1] < floor:
            worse.append("%s: the canary is slower beyond the allowance and the noise" % text)
        elif ci and ci[0] >= floor:
            fine.append("%s: not slower beyond the allowance" % text)
        else:
            unsure.append("%s: whether the canary is slower beyond the allowance is within the noise" % text)
            needed.append(bench_verdict.runs_needed(entry, floor, 1))
    if worse:
        return {"decision": "rollback", "reasons": worse, "runs_needed": None}
    if unsure or not fine:
        known = None not in needed and needed
        return {"decision": "inconclusive", "reasons": unsure or ["no latency figure could be judged"],
                "runs_needed": max(needed) if known else None}
    return {"decision": "keep", "reasons": fine, "runs_needed": None}


def next_step(verdict, requests, change=None):
    """What the canary's user can do about a step that ends undecided on latency (``verdict``: bench_verdict.decide's
    or :func:`judge_change`'s, inconclusive; ``requests``: the fewer requests of the two arms' windows; ``change``:
    the allowance of a change between two speculative configs, None when the canary turns speculation on). Issue 39:
    the canary gave benchmark.yml's advice (more runs per prompt, specpilot_benchmark_runs_per_prompt), which no
    canary variable sets; a step ends early once each arm served specpilot_canary_min_requests (times the extensions
    + 1), so more data is more requests, with a window that lets the traffic bring them."""
    more = verdict.get("runs_needed")
    if more:
        text = (
            "about %d more request(s) per arm would likely decide it: raise specpilot_canary_min_requests or "
            "specpilot_canary_max_extensions, with a specpilot_canary_window long enough for the service's traffic to "
            "bring them (or more traffic)" % (more * max(int(requests), 1))
        )
    else:
        text = ("more requests may not decide it: the figure that decides sits about on its bound (or has no "
                "interval yet)")
    if change is not None:
        return text + "; or, if the service's SLO allows it, a wider specpilot_canary_change_allowance (now %d%%)" % (
            round(100 * change))
    return text + ("; or, if the service's SLO allows it, a looser specpilot_canary_slo (the bound the figure is "
                   "judged against: min_gain, *_max_regression or p99_ms)")


# --------------------------------------------------------------------------- sampling

# the engine arguments that set the server's default sampling parameters (a request's own override them):
# vllm/engine/arg_utils.py EngineArgs.add_cli_args, ModelConfig.get_diff_sampling_param
SAMPLING_FLAGS = ("--generation-config", "--override-generation-config")


def _flag_values(args):
    """{flag: value or None} of SAMPLING_FLAGS in an engine's args (``--flag=value`` or ``--flag value``)."""
    out = dict((f, None) for f in SAMPLING_FLAGS)
    args = [str(a) for a in args or []]
    for i, word in enumerate(args):
        flag, eq, value = word.partition("=")
        if flag in out:
            out[flag] = value if eq else (args[i + 1] if i + 1 < len(args) else "")
    return out


def sampling(isvc, plan):
    """The sampling both arms of a change run with: ``{stable, canary: {flag: value}, change, problem}``. ``change``:
    the live service speculates already; ``problem`` ('' when none): the arms' server-side sampling defaults
    differ, which would move acceptance by itself (vllm #33497 moved `vllm bench serve`'s default temperature),
    so a change of them is not canaried together with a speculative change."""
    view = live.view(isvc)
    stable, canary = _flag_values(view.args), _flag_values((plan or {}).get("args"))
    differ = [f for f in SAMPLING_FLAGS if stable[f] != canary[f]]
    out = {"stable": stable, "canary": canary, "change": view.speculative, "problem": ""}
    if view.speculative and differ:
        out["problem"] = (
            "the spec's %s differs from the live service's (%s): the arms would sample with different server "
            "defaults, which changes acceptance by itself. Pin sampling in both arms: deploy that change on its own "
            "first, or keep the live value in the spec" % (
                " and ".join(differ), "; ".join("%s: live %s, spec %s" % (f, stable[f], canary[f]) for f in differ))
        )
    return out


def image_arms(isvc, plan, runtime=None):
    """The runtime image and the vLLM release of both arms: ``{stable, canary, changed, pinned, on_canary,
    stable_vllm, canary_vllm, text, problem}``. ``changed``: the plan changes the image (``live.changes``, the one definition of a change; the
    stable image is the live predictor's own, else its ServingRuntime's, ``runtime``), so the canary's predictor names
    the spec's image itself: KServe merges the predictor's container over its runtime's, the image included
    (``MergeRuntimeContainers``, pkg/controller/v1beta1/inferenceservice/utils/utils.go@v0.20.0, a strategic merge:
    ``MergeContainerWithPatch``, pkg/utils/container_merge.go), so the canary arm runs it while the stable arm keeps its
    runtime's. ``pinned``: the live predictor names an image itself (a Knative-mode canary a killed run left, or a
    promotion by an earlier release): the runtime's may differ, so the canary's predictor names the spec's image then
    too. ``on_canary``: the image the canary's predictor names (None: none), which a promotion moves to the runtime
    (:func:`promotion_writes`).
    ``text``: what the report says of it ('' without an image change). ``problem`` ('' when none): the change cannot
    be promoted as ``deploy.yml`` would run it (:func:`runtime_problem`)."""
    current = live.view(isvc)
    out = {
        "stable": current.image or live.runtime_image(runtime),
        "canary": live.plan_image(plan),
        "changed": any(c["field"] == "image" for c in live.changes(isvc, plan, runtime)),
        "pinned": bool(current.image),
        "on_canary": None,
        "stable_vllm": current.vllm_version,
        "canary_vllm": (plan or {}).get("vllm_version"),
    }
    if out["changed"] or out["pinned"]:
        out["on_canary"] = out["canary"]
    out["text"] = image_text(out) if out["changed"] else ""
    out["problem"] = runtime_problem(plan, out) if out["changed"] else ""
    return out


def _own_image(isvc):
    """The image a rendered InferenceService's predictor names itself (an override deploy applies), or None."""
    return ((((isvc or {}).get("spec") or {}).get("predictor") or {}).get("model") or {}).get("image") or None


def runtime_problem(plan, arms):
    """Why an image change cannot be canaried ('' when it can): ``deploy.yml`` names the image on the ServingRuntime
    it renders; with a runtime specpilot does not create (``runtime.create: false``, one other services may share)
    deploy runs that runtime's image whatever ``runtime.image`` says, so a promoted canary of the spec's image would
    run what ``deploy.yml`` of the same spec never does."""
    plan = plan or {}
    runtime, isvc = deploy_state.desired_objects(plan, None)
    if runtime is not None or _own_image(isvc):
        return ""
    rt = plan.get("runtime") or {}
    return (
        "specpilot_runtime.image: the spec's image %s is not the image of the existing %s %s (%s), which specpilot "
        "does not create (specpilot_runtime.create: false, a runtime other services may share): deploy.yml of this "
        "spec runs that runtime's image, so a canary cannot promote %s. Change the image of %s itself, or let "
        "specpilot create this service's runtime (specpilot_runtime.create: true). Nothing was changed" % (
            arms["canary"], rt.get("kind") or "ServingRuntime", rt.get("name"), arms["stable"], arms["canary"],
            rt.get("name"))
    )


def promotion_writes(plan, arms):
    """What a promotion writes after the promoted predictor, so that the live service is what ``deploy.yml`` of the
    same spec makes (one model of the truth): ``{runtime, unpin}``, each None when there is nothing to write (the
    canary's predictor named no image: ``arms``' ``on_canary``, :func:`image_arms`).

    An image change ran on the canary's predictor (``spec.predictor.model.image``). ``deploy.yml``
    names the image on the ServingRuntime only, and its server-side apply removes only the fields its own field manager
    owns: a ``model.image`` the promotion's merge patch left would stay and pin this image over the runtime's of every
    later deploy. So ``runtime`` is deploy's own ServingRuntime of the plan (``deploy_state.desired_objects``: the
    spec's image), which the promotion applies with deploy's field manager, and ``unpin`` the merge patch that then
    removes ``model.image`` (None where the plan's own InferenceService names an image: an override deploy applies
    itself). The predictor's merged container is the same before and after each write (the predictor's image over the
    runtime's, the same image: ``MergeRuntimeContainers``), so neither rolls a pod, although KServe reconciles the
    namespace's InferenceServices when a ServingRuntime's spec changes (``servingRuntimeFunc`` and
    ``servingRuntimesPredicate``, pkg/controller/v1beta1/inferenceservice/controller.go@v0.20.0)."""
    if not (arms or {}).get("on_canary"):
        return {"runtime": None, "unpin": None}
    runtime, isvc = deploy_state.desired_objects(plan or {}, None)
    if runtime is None or _own_image(isvc):  # runtime_problem refuses the first before any change
        return {"runtime": runtime, "unpin": None}
    return {"runtime": runtime, "unpin": {"spec": {"predictor": {"model": {"image": None}}}}}


def image_text(arms):
    """The report's sentence on an image change: which image each arm ran, and what that says of the vLLM release -
    two images recorded as one release are not an upgrade, and a release the canary did not read is the spec's
    word, not a measurement."""
    text = ("The canary arm runs another runtime image, %s (the stable arm: %s), named on its predictor "
            "(spec.predictor.model.image, over the runtime's)." % (arms["canary"], arms["stable"]))
    if arms["stable_vllm"] and arms["stable_vllm"] == arms["canary_vllm"]:
        text += (" Both arms are recorded as vLLM %s: this canary compared two images of one release, not a vLLM "
                 "upgrade." % arms["stable_vllm"])
    else:
        text += (" vLLM release: stable %s (recorded on the live service), canary %s (the spec's; deploy's cluster "
                 "probe reads it from the image): the arms are compared as they ran." % (
                     arms["stable_vllm"] or "not recorded", arms["canary_vllm"] or "not said"))
    return text + (" A promotion moves the image to the service's ServingRuntime (as deploy.yml of this spec names "
                   "it, with deploy's field manager) and removes it from the predictor, so a later deploy.yml's image "
                   "runs.")


# --------------------------------------------------------------------------- report


def positions_markdown(step):
    """The per-position comparison of one step as Markdown lines (none when the step has none)."""
    comp = step.get("positions")
    if not comp or not comp.get("positions"):
        return []
    lines = [
        "",
        "Acceptance per draft position (accepted / drafts; stable k=%s, canary k=%s; the canary may not be lower "
        "beyond the noise and a %.2f margin: Newcombe 95%% interval of the difference, each draft a trial, so the "
        "true uncertainty is wider):" % (comp.get("stable_k"), comp.get("canary_k"), comp.get("margin", 0)),
        "",
    ]
    rows = [
        (
            p["position"],
            "%s (%s / %s)" % (_pct(p["stable"]["rate"]), p["stable"]["accepted"], p["stable"]["drafts"]),
            "%s (%s / %s)" % (_pct(p["canary"]["rate"]), p["canary"]["accepted"], p["canary"]["drafts"]),
            "%+.3f (%+.3f to %+.3f)" % (p["difference"], p["ci95"][0], p["ci95"][1]) if p.get("ci95") else "n/a",
            p["verdict"],
        )
        for p in comp["positions"]
    ]
    return lines + markdown_table(POSITION_COLUMNS, rows)


def render_positions_plot(report, out_dir):
    """acceptance_positions.png: per step, both arms' acceptance rate per draft position, with the canary's
    Wilson 95% interval. Nothing when no step compared positions."""
    plt = pyplot()[0]
    steps = [s for s in report.get("steps") or [] if (s.get("positions") or {}).get("positions")]
    if plt is None or not steps:
        return []
    fig, axes = plt.subplots(1, len(steps), figsize=(4 * len(steps) + 1, 3.5), squeeze=False)
    for ax, step in zip(axes[0], steps):
        pos = step["positions"]["positions"]
        xs = [p["position"] for p in pos]
        for arm, colour, dx in (("stable", "#1f77b4", -0.08), ("canary", "#d62728", 0.08)):
            ys = [p[arm]["rate"] for p in pos]
            err = [[], []]
            for p in pos:
                low, high = wilson(p[arm]["accepted"], p[arm]["drafts"]) if p[arm]["drafts"] else (0.0, 0.0)
                err[0].append(max(0.0, (p[arm]["rate"] or 0.0) - low))
                err[1].append(max(0.0, high - (p[arm]["rate"] or 0.0)))
            ax.errorbar([x + dx for x in xs], ys, yerr=err, fmt="o", color=colour, capsize=3, label=arm)
        ax.set_title("step %s%%" % step["traffic_percent"])
        ax.set_xlabel("draft position")
        ax.set_xticks(xs)
        ax.set_ylim(0, 1.05)
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("acceptance rate (95% Wilson interval)")
    axes[0][0].legend(fontsize=8)
    return [saved(fig, out_dir, "acceptance_positions.png", "Acceptance per draft position, both arms, per step")]
