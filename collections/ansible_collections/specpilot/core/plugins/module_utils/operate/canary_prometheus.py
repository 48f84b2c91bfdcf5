# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""A canary step's arms read from Prometheus instead of their pods' ``/metrics``.

Each read gives, per arm, the window :func:`canary.arm_window` gives from two scrapes (requests and
failed requests, the TTFT / TPOT / E2E histograms' bucket counts, the spec-decode counters), from
instant queries over the step's window, all evaluated at one instant ``at``:

* the window is ``[start, at]``: it starts when the step begins (:meth:`PrometheusArms.begin`) and
  ends at the queries' evaluation time, so a longer hold (an extension) re-queries a longer range;
* an arm's series are its pods' (``<pod label>=~"pod-a|pod-b"`` and ``<namespace label>="ns"``, the
  target labels a PodMonitor or ServiceMonitor scrape adds; the label names are settings), plus an
  optional fixed ``selector`` (e.g. a Thanos ``cluster`` label);
* histograms: ``sum by (le) (increase(<name>_bucket{sel}[range]))``, the +Inf bucket being the
  count; the names are the /metrics path's (``vllm_metrics.HISTOGRAMS``: per-request TPOT, else
  inter-token latency under its new and old names, as ``canary.FIGURE_HISTOGRAMS`` picks them);
* requests: ``sum by (finished_reason) (increase(vllm:request_success_total{sel}[range]))``;
  acceptance: ``sum(increase(vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total...))``;
* which pods Prometheus has, and how many samples: ``max by (pod) (count_over_time(
  vllm:request_success_total{sel}[range]))`` (vLLM creates that counter for every finished reason when
  the engine starts: vllm/v1/metrics/loggers.py ``PrometheusStatLogger``, so an engine that served
  nothing has it too). An arm without series, or with a single sample of each (``increase()`` needs
  two: the range is shorter than two scrape intervals), is *unread*: the step says why
  (``canary.decide_step``), never a silent window of zero requests.

``increase()`` extrapolates to the range's edges (prometheus/promql/functions.go
``extrapolatedRate``): counts may exceed the pods' deltas by up to about a scrape interval's share of
the window, and miss what happened between the last sample before the start and the first inside;
quantiles and the acceptance rate, ratios of counts of the same scrapes, are not moved by it.

A window read here has no ``batches``: ``increase()`` at Prometheus' own scrape interval (30 s by default, as long as
a canary window) gives no sub-windows to take batch means over, and the differences of successive reads' extrapolated
increases are not the scrape intervals' deltas. So a figure whose buckets cannot resolve it is judged here on the
histogram method (``canary_change.mean_ratio``: the exact mean from ``_sum``, its interval from the buckets' spread),
and the step's ``methods`` say so; the pods' ``/metrics`` (``canary.PodPages``) give the batch-means interval.

Standard library only, plus the other specpilot.core module_utils.
"""

from __future__ import annotations

import math
import time
import urllib.parse

from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import COUNTERS, HISTOGRAMS
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import PER_POSITION as _PER_POSITION
from ansible_collections.specpilot.core.plugins.module_utils.operate import canary
from ansible_collections.specpilot.core.plugins.module_utils.operate import monitoring as sm
from ansible_collections.specpilot.core.plugins.module_utils.operate import prometheus_api

__all__ = [
    "DEFAULT_LABELS",
    "DEFAULT_SCRAPE_INTERVAL",
    "PrometheusArms",
    "arm_queries",
    "arm_selector",
    "arm_window_from_answers",
    "range_text",
    "settings_problem",
]

DEFAULT_LABELS = {"pod": "pod", "namespace": "namespace"}
# kube-prometheus-stack's scrape interval (Prometheus' own global default is 1m)
DEFAULT_SCRAPE_INTERVAL = 30.0
MIN_SCRAPES = 2  # increase() of a series needs two samples inside the range
_NAMES = dict((key, base + "_total") for base, key in COUNTERS.items())
REQUESTS = _NAMES["request_success"]
SPEC_COUNTERS = dict((key, _NAMES[key]) for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"))
PER_POSITION = _PER_POSITION + "_total"
# the setting names the messages use: the module's parameters (the role passes its own)
PARAMETERS = {
    "url": "prometheus_url",
    "window": "window",
    "scrape_interval": "prometheus_scrape_interval",
    "labels": "prometheus_labels",
    "selector": "prometheus_selector",
}


# --------------------------------------------------------------------------- settings


def _scrape_problem(window_s, scrape_interval_s, names):
    try:
        interval = float(scrape_interval_s)
    except (TypeError, ValueError):
        interval = float("nan")
    if math.isnan(interval) or interval <= 0:
        return (
            "%s: %r is not a number of seconds > 0: give the interval at which Prometheus scrapes the pods (the "
            "PodMonitor's or ServiceMonitor's interval, else Prometheus' global scrape_interval)"
            % (names["scrape_interval"], scrape_interval_s)
        )
    try:
        window = float(window_s)
    except (TypeError, ValueError):
        return "%s: %r is not a number of seconds" % (names["window"], window_s)
    if window < MIN_SCRAPES * interval:
        return (
            "%s: a step window of %s s spans fewer than %d scrapes %s s apart (%s): increase() needs two samples of "
            "each series inside the window, so Prometheus would read nothing; hold each step at least %s s, or give "
            "the interval Prometheus really scrapes the pods at"
            % (
                names["window"],
                window_s,
                MIN_SCRAPES,
                scrape_interval_s,
                names["scrape_interval"],
                "%g" % (MIN_SCRAPES * interval),
            )
        )
    return ""


def _labels_problem(labels, selector, names):
    if not isinstance(labels, dict) or set(labels) - set(DEFAULT_LABELS):
        return "%s: %r must map pod and namespace to label names" % (names["labels"], labels)
    if not isinstance(selector, dict):
        return "%s: %r must be a mapping of label names to values" % (names["selector"], selector)
    try:
        sm.selector_text(dict((name, "") for name in labels_of(labels).values()))
        sm.selector_text(selector)
    except sm.MonitoringError as exc:
        return "%s / %s: %s" % (names["labels"], names["selector"], exc)
    clash = sorted(set(selector) & set(labels_of(labels).values()))
    if clash:
        return (
            "%s: sets %s, the label(s) each arm's pods and namespace are selected by (%s): leave them out"
            % (names["selector"], ", ".join(clash), names["labels"])
        )
    return ""


def settings_problem(url, window_s, scrape_interval_s, labels=None, selector=None, names=None):
    """Why these settings cannot read the arms from Prometheus ('' when they can): the URL, the window
    against the scrape interval, the label names. ``names``: how the messages name each setting
    (PARAMETERS' keys; default the module's parameters)."""
    names = dict(PARAMETERS, **(names or {}))
    parts = urllib.parse.urlsplit(str(url or ""))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return (
            "%s: %r is not the http(s) URL of a Prometheus HTTP API: give its base URL, e.g. "
            "http://prometheus-operated.monitoring.svc:9090 (empty: read the pods' /metrics)"
            % (names["url"], url)
        )
    return _scrape_problem(window_s, scrape_interval_s, names) or _labels_problem(
        labels or {}, selector or {}, names
    )


def labels_of(labels):
    """{pod: <label>, namespace: <label>}: the defaults with what is given."""
    return dict(DEFAULT_LABELS, **dict((k, v) for k, v in (labels or {}).items() if v))


# --------------------------------------------------------------------------- queries


def range_text(seconds):
    """A PromQL range of ``seconds`` in whole milliseconds (Prometheus durations take no fractions)."""
    return "%dms" % max(1, int(round(float(seconds) * 1000)))


def arm_selector(namespace, pods, labels=None, selector=None):
    """The series of one arm's pods: the fixed selector, the namespace and the pods."""
    labels = labels_of(labels)
    fixed = dict((str(k), str(v)) for k, v in (selector or {}).items())
    fixed[labels["namespace"]] = namespace
    return "%s,%s" % (sm.selector_text(fixed), sm.one_of_matcher(labels["pod"], sorted(pods)))


def arm_queries(sel, rng, pod_label="pod"):
    """{key: PromQL} of one read of an arm: ``samples``, ``requests``, ``hist:<key>`` (each latency
    histogram the /metrics path reads), ``spec:<key>`` (the spec-decode counters)."""
    out = {
        "samples": "max by (%s) (count_over_time(%s{%s}[%s]))" % (pod_label, REQUESTS, sel, rng),
        "requests": "sum by (finished_reason) (increase(%s{%s}[%s]))" % (REQUESTS, sel, rng),
    }
    for key in sorted(set(k for keys in canary.FIGURE_HISTOGRAMS.values() for k in keys)):
        out["hist:" + key] = "sum by (le) (increase(%s_bucket{%s}[%s]))" % (HISTOGRAMS[key], sel, rng)
        # the window's sum: the mean a figure is judged on when its buckets cannot resolve it (canary_change)
        out["sum:" + key] = "sum(increase(%s_sum{%s}[%s]))" % (HISTOGRAMS[key], sel, rng)
    for key, name in SPEC_COUNTERS.items():
        out["spec:" + key] = "sum(increase(%s{%s}[%s]))" % (name, sel, rng)
    # accepted tokens per draft position: a change between two speculative configs is judged on them
    out["spec:per_pos"] = "sum by (position) (increase(%s{%s}[%s]))" % (PER_POSITION, sel, rng)
    return out


# --------------------------------------------------------------------------- the window of the answers


def _num(value):
    return round(value, 6)


def _histogram(vector):
    """{count, buckets} of a ``sum by (le)`` answer: finite buckets le ascending, made monotonic as
    histogram_quantile does (prometheus/promql/quantile.go ``ensureMonotonic``: each bucket's
    increase() is extrapolated on its own), the +Inf bucket the count; None when empty."""
    finite, count = [], None
    for metric, value in vector:
        if math.isnan(value):
            continue
        le = float(metric.get("le", "nan"))
        if math.isinf(le):
            count = value
        elif not math.isnan(le):
            finite.append([le, value])
    if not finite and count is None:
        return None
    finite.sort()
    top = 0.0
    for bucket in finite:
        top = bucket[1] = max(top, bucket[1])
    count = max(top, count if count is not None else top)
    return {"count": _num(count), "buckets": [[le, _num(n)] for le, n in finite]}


def _histograms(answers):
    out = {}
    for fig, keys in canary.FIGURE_HISTOGRAMS.items():
        for key in keys:
            h = _histogram(answers.get("hist:" + key) or [])
            if h is not None:
                total = prometheus_api.vector_total(answers.get("sum:" + key) or [])
                out[fig] = dict(h, metric=HISTOGRAMS[key], sum=None if total is None else _num(total))
                break
    return out


def _acceptance(spec, answers):
    """The arm's acceptance figures from the spec-decode counters' increases and the accepted tokens per position."""
    counts = dict((k, _num(v or 0.0)) for k, v in spec.items())
    counts["accepted_per_position"] = _per_position(answers.get("spec:per_pos") or [])
    return canary.acceptance_figures(counts)


def _per_position(vector):
    """[accepted tokens at position 0, 1, ...] of a ``sum by (position)`` answer; None when empty."""
    found = dict((int(m["position"]), v) for m, v in vector if str(m.get("position", "")).isdigit() and not math.isnan(v))
    if not found:
        return None
    return [_num(found.get(i, 0.0)) for i in range(max(found) + 1)]


def _unread(samples, seconds, where):
    """Why an arm's series give no window ('' when they do)."""
    if not samples:
        return (
            "Prometheus %s has no series of %s{%s} in the last %.0f s: the arm is not scraped (a PodMonitor or "
            "ServiceMonitor on its pods), or its series do not carry these pod and namespace labels "
            "(specpilot_canary_prometheus_labels)" % (where["url"], REQUESTS, where["selector"], seconds)
        )
    if max(samples.values()) < MIN_SCRAPES:
        return (
            "Prometheus %s has a single sample of each series of the arm in the last %.0f s: increase() needs two, "
            "the window is shorter than two scrape intervals (specpilot_canary_prometheus_scrape_interval)"
            % (where["url"], seconds)
        )
    return ""


def arm_window_from_answers(answers, pods, seconds, where, pod_label="pod"):
    """One arm's window (:func:`canary.arm_window`'s shape, plus ``unread`` and ``series``) from the
    answers of :func:`arm_queries` (``{key: [(labels, value)]}``). ``where``: ``{url, selector}`` for
    the messages."""
    samples = dict((m.get(pod_label), int(v)) for m, v in answers.get("samples") or [] if not math.isnan(v))
    read = sorted(p for p, n in samples.items() if n >= MIN_SCRAPES)
    missing = sorted(set(pods) - set(read))
    unread = _unread(samples, seconds, where)
    notes = []
    if read and missing:
        notes.append(
            "%s: under two samples in Prometheus over the window (not scraped yet, or not labelled %s): "
            "not counted" % (", ".join(missing), pod_label)
        )
    finished = dict(
        (m.get("finished_reason", ""), v) for m, v in answers.get("requests") or [] if not math.isnan(v)
    )
    requests = _num(sum(finished.values()))
    failed = _num(sum(v for k, v in finished.items() if k in canary.FAILED_REASONS))
    spec = dict((key, prometheus_api.vector_total(answers.get("spec:" + key) or [])) for key in SPEC_COUNTERS)
    seen = any(v is not None for v in spec.values())
    return {
        "source": "prometheus",
        "pods": read,
        "requests": requests,
        "failed": failed,
        "error_rate": failed / requests if requests else 0.0,
        "histograms": _histograms(answers),
        "acceptance": _acceptance(spec, answers) if seen else None,
        "notes": notes,
        "unread": unread or None,
        "series": {"samples": samples, "missing": missing},
    }


# --------------------------------------------------------------------------- the source of a step


class PrometheusArms(object):
    """canary.run_step's source over a Prometheus HTTP API: ``begin(arms)`` marks the window's start
    (and checks Prometheus answers, before the step is held), each ``read()`` queries both arms over
    ``[start, now]`` at one instant. ``fetch(url, headers, timeout, validate_certs)`` returns a body;
    ``now`` the wall clock (epoch seconds, the queries' evaluation time)."""

    name = "prometheus"

    def __init__(
        self,
        fetch,
        url,
        namespace,
        labels=None,
        selector=None,
        headers=None,
        timeout=10.0,
        validate_certs=True,
        now=None,
    ):
        self.fetch, self.url, self.namespace = fetch, url, namespace
        self.labels, self.selector = labels_of(labels), dict(selector or {})
        self.http = (headers or {}, timeout, validate_certs)
        self.now = now or time.time
        self.arms = self.start = self.last = None

    def _query(self, expr, at):
        return prometheus_api.instant_vector(
            self.fetch, self.url, expr, self.http[0], self.http[1], self.http[2], at
        )

    def begin(self, arms):
        self.arms = arms
        self.start = self.now()
        self._query("vector(1)", self.start)  # unreachable or refusing: the step fails before it is held

    def read(self):
        at = self.now()
        seconds = at - self.start
        rng = range_text(seconds)
        self.last = {"at": at, "range": rng, "selectors": {}}
        out = {}
        for arm, pods in self.arms.items():
            names = [p["pod"] for p in pods]
            sel = arm_selector(self.namespace, names, self.labels, self.selector)
            self.last["selectors"][arm] = sel
            answers = dict(
                (key, self._query(expr, at))
                for key, expr in arm_queries(sel, rng, self.labels["pod"]).items()
            )
            where = {"url": prometheus_api.public_url(self.url), "selector": sel}
            out[arm] = arm_window_from_answers(answers, names, seconds, where, self.labels["pod"])
        return out

    def details(self):
        last = self.last or {}
        at = last.get("at")
        return {
            "prometheus": {
                "url": prometheus_api.public_url(self.url),
                "range": last.get("range"),
                "evaluated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) if at else None,
                "selectors": last.get("selectors"),
            }
        }
