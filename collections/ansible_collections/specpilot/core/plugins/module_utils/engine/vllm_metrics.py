# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""vLLM ``/metrics`` facts for speculative decoding.

The Prometheus text is parsed with prometheus_client's public parser
(``prometheus_client.parser.text_fd_to_metric_families`` / ``text_string_to_metric_families``,
or the OpenMetrics parser when the page ends with ``# EOF``), never by splitting strings.
Samples are read as (name, labels-map, value); label order is irrelevant.

Names per vLLM version (``../shared/reference/vllm-facts.md`` section 4):

* V1 (0.8.3+): counters ``vllm:spec_decode_num_drafts_total`` (0.8.5+),
  ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total``,
  ``..._num_accepted_tokens_per_pos_total{position}`` (0.8.5+), labels ``model_name``, ``engine``
  (one series per data-parallel engine from 0.11.0): summed over ``engine``.
* V0 (<= 0.9.2): gauges ``vllm:spec_decode_draft_acceptance_rate``, ``vllm:spec_decode_efficiency``
  and ``_total`` counters that OVER-COUNT (each interval adds the cumulative total), so V0
  acceptance comes from the gauge.
* ``X_created`` companions (a counter's creation time) are used to detect engine restarts.
* latency histograms: TTFT, inter-token latency (0.10.2+) or time-per-output-token (older),
  per-request TPOT (0.11.0+), e2e; mean = sum / count (deltas with ``previous``).
"""

from __future__ import annotations

import io
import math
import time

try:
    from prometheus_client.parser import text_fd_to_metric_families as _text_fd_families
    from prometheus_client.openmetrics.parser import text_fd_to_metric_families as _om_fd_families

    HAS_PROMETHEUS_CLIENT = True
    PROMETHEUS_CLIENT_IMPORT_ERROR = None
except ImportError as exc:  # reported by the module with missing_required_lib()
    HAS_PROMETHEUS_CLIENT = False
    PROMETHEUS_CLIENT_IMPORT_ERROR = exc

__all__ = [
    "COUNTERS",
    "HISTOGRAMS",
    "HAS_PROMETHEUS_CLIENT",
    "MetricsParseError",
    "parse_metrics_file",
    "parse_metrics_stream",
    "parse_metrics_text",
    "running_requests",
]

SPEC_PREFIX = "vllm:spec_decode"
# metric base name (without _total) -> key in ``counters``
COUNTERS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
    "vllm:spec_decode_num_emitted_tokens": "num_emitted_tokens",  # V0 only
    "vllm:generation_tokens": "generation_tokens",
    "vllm:prompt_tokens": "prompt_tokens",
    "vllm:request_success": "request_success",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
# the requests in the running batch (a gauge, every release): what the batch-size schedule is looked up by
RUNNING = "vllm:num_requests_running"
V0_GAUGES = {
    "vllm:spec_decode_draft_acceptance_rate": "draft_acceptance_rate",
    "vllm:spec_decode_efficiency": "efficiency",
}
# key in ``latency`` -> histogram base name
HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",  # 0.10.2+
    "tpot": "vllm:time_per_output_token_seconds",  # inter-token gap, V0 and V1 <= 0.14 (hidden 0.12+)
    "request_tpot": "vllm:request_time_per_output_token_seconds",  # per request, 0.11.0+
    "e2e": "vllm:e2e_request_latency_seconds",
}
_HIST_BY_NAME = {v: k for k, v in HISTOGRAMS.items()}
_SPEC_COUNTER_KEYS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_emitted_tokens")
_ALL_COUNTER_KEYS = tuple(COUNTERS.values())


class MetricsParseError(ValueError):
    """The page is not valid Prometheus/OpenMetrics text."""


def _clean(value):
    if value is None or (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    return value


def _ratio(num, den):
    if num is None or not den:
        return None
    return num / den


class _Collector(object):
    """Accumulates the samples that matter; everything else is dropped as it streams by."""

    def __init__(self, model_name=None):
        self.model_name = model_name
        self.counters = {}
        self.created = {}
        self.per_pos = {}
        self.gauges = {}
        self.hist = {}
        self.buckets = {}  # histogram key -> {le: cumulative count}, summed over engines
        self.finished = {}  # finished_reason -> vllm:request_success_total
        self.spec_series = 0
        self.spec_names = set()
        self.engines = set()
        self.model_names = set()
        self.samples = 0
        self.families = 0
        self.running = []

    def family(self, fam):
        self.families += 1
        for sample in fam.samples:
            self.samples += 1
            name = sample.name
            if not name.startswith("vllm:"):
                continue
            labels = sample.labels
            model = labels.get("model_name")
            if model is not None:
                self.model_names.add(model)
                if self.model_name is not None and model != self.model_name:
                    continue
            self._sample(name, labels, sample.value)

    def _sample(self, name, labels, value):
        suffix = None
        base = name
        for suf in ("_created", "_total", "_sum", "_count", "_bucket"):
            if name.endswith(suf):
                suffix = suf
                base = name[: -len(suf)]
                break
        if name.startswith(SPEC_PREFIX):
            self.spec_series += 1
            self.spec_names.add(name)
            engine = labels.get("engine")
            if engine is not None:
                self.engines.add(engine)
        if suffix == "_created":
            if base in COUNTERS or base == PER_POSITION:
                if value is not None and not math.isnan(value):
                    self.created[base] = max(self.created.get(base, 0.0), value)
            return
        if suffix in ("_total", None):
            key = COUNTERS.get(base)
            if key is not None:
                if not math.isnan(value):
                    self.counters[key] = self.counters.get(key, 0.0) + value
                    if key == "request_success" and "finished_reason" in labels:
                        reason = labels["finished_reason"]
                        self.finished[reason] = self.finished.get(reason, 0.0) + value
                return
            if base == PER_POSITION:
                pos = labels.get("position")
                if pos is not None and pos.isdigit() and not math.isnan(value):
                    idx = int(pos)
                    self.per_pos[idx] = self.per_pos.get(idx, 0.0) + value
                return
            if suffix is None and base == RUNNING:
                if not math.isnan(value):
                    self.running.append(value)
                return
            if suffix is None and base in V0_GAUGES:
                self.gauges.setdefault(V0_GAUGES[base], []).append(value)
                return
        if suffix == "_bucket" and base in _HIST_BY_NAME and not math.isnan(value):
            le = float(labels.get("le", "nan"))
            if not math.isnan(le):
                b = self.buckets.setdefault(_HIST_BY_NAME[base], {})
                b[le] = b.get(le, 0.0) + value
            return
        if suffix in ("_sum", "_count"):
            key = _HIST_BY_NAME.get(base)
            if key is not None and not math.isnan(value):
                h = self.hist.setdefault(key, {"sum": 0.0, "count": 0.0})
                h[suffix[1:]] += value


def _iso_utc(epoch):
    return "%s.%03dZ" % (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)), int((epoch % 1) * 1000))


def _previous_parts(previous):
    """The raw numbers of an earlier result, or None when it is unusable."""
    if not isinstance(previous, dict) or not isinstance(previous.get("counters"), dict):
        return None
    return previous


def _current(col, notes):
    """The page's counters, per-position counts, creation times and V0 gauges."""
    counters = {key: _clean(col.counters.get(key)) for key in _ALL_COUNTER_KEYS}
    positions = sorted(col.per_pos)
    per_pos = None
    if positions:
        per_pos = [None] * (positions[-1] + 1)
        for idx in positions:
            per_pos[idx] = _clean(col.per_pos[idx])
    counters["accepted_per_position"] = per_pos
    created = {COUNTERS.get(k, "accepted_per_position"): v for k, v in sorted(col.created.items())}
    gauges = {}
    for key in V0_GAUGES.values():
        values = [v for v in col.gauges.get(key, ()) if v is not None and not math.isnan(v)]
        gauges[key] = sum(values) / len(values) if values else None
        if len(values) > 1:
            notes.append("%d series of the V0 gauge %s; their mean is reported" % (len(values), key))
    return counters, created, gauges


def _engine_era(col, counters, gauges):
    has_v1 = (
        counters["num_drafts"] is not None
        or counters["accepted_per_position"] is not None
        or bool(col.engines and col.spec_series > 0)
    )
    has_v0 = any(v is not None for v in gauges.values()) or counters["num_emitted_tokens"] is not None
    if has_v1 and has_v0:
        return "mixed"
    return "v1" if has_v1 else ("v0" if has_v0 else None)


def _was_reset(prev, counters, created):
    """True when a counter went down or a series was re-created since the previous scrape."""
    pc = prev["counters"]
    for key, cur in counters.items():
        old = pc.get(key) if key != "accepted_per_position" else None
        if cur is not None and old is not None and cur < old:
            return True
    per_pos, base_pos = counters["accepted_per_position"], pc.get("accepted_per_position")
    if per_pos and base_pos:
        for i, v in enumerate(per_pos):
            if v is not None and i < len(base_pos) and base_pos[i] is not None and v < base_pos[i]:
                return True
    pcreated = prev.get("created") or {}
    return any(
        pcreated.get(key) is not None and ts is not None and ts > pcreated[key] + 1e-6
        for key, ts in created.items()
    )


def _window(previous, prev, counters, created, now, notes):
    """(window, interval_seconds, base counters, base per-position) of the figures' window."""
    if previous is not None and prev is None:
        notes.append("previous has no 'counters'; figures are cumulative since the engine started")
    if prev is None:
        return "cumulative", None, {}, None
    prev_epoch = prev.get("scraped_at_epoch")
    interval = round(now - prev_epoch, 3) if isinstance(prev_epoch, (int, float)) else None
    if _was_reset(prev, counters, created):
        notes.append(
            "counters were reset (engine restart) since the previous scrape; "
            "figures cover the time since the restart"
        )
        return "since_restart", interval, {}, None
    pc = prev["counters"]
    return "delta", interval, {k: pc.get(k) for k in _ALL_COUNTER_KEYS}, pc.get("accepted_per_position")


def _deltas(counters, base, base_pos):
    def delta(key):
        cur = counters.get(key)
        if cur is None:
            return None
        old = base.get(key)
        return _clean(cur - old) if old is not None else cur

    d = {key: delta(key) for key in _SPEC_COUNTER_KEYS}
    d_pos = None
    if counters["accepted_per_position"] is not None:
        d_pos = []
        for i, v in enumerate(counters["accepted_per_position"]):
            old = base_pos[i] if base_pos and i < len(base_pos) else None
            d_pos.append(_clean(v - old) if v is not None and old is not None else v)
    return d, d_pos


def _derived(era, spec_enabled, counters, gauges, d, d_pos, notes):
    """Acceptance rate, mean acceptance length and per-position acceptance of the window."""
    derived = {
        "num_drafts": d["num_drafts"],
        "num_draft_tokens": d["num_draft_tokens"],
        "num_accepted_tokens": d["num_accepted_tokens"],
        "accepted_per_position": d_pos,
        "draft_acceptance_rate": None,
        "mean_acceptance_length": None,
        "per_position_acceptance": None,
        "draft_tokens_per_draft": None,
        "source": None,
    }
    if era == "v0":
        derived["source"] = "v0_gauges"
        derived["draft_acceptance_rate"] = gauges["draft_acceptance_rate"]
        notes.append(
            "V0 engine: the vllm:spec_decode_*_total counters over-count (each interval adds the "
            "cumulative total since startup); draft_acceptance_rate is the V0 gauge "
            "(cumulative since startup), not a counter ratio"
        )
        return derived
    if not spec_enabled:
        return derived
    derived["source"] = "counters"
    derived["draft_acceptance_rate"] = _ratio(d["num_accepted_tokens"], d["num_draft_tokens"])
    drafts = d["num_drafts"]
    if drafts:
        if d["num_accepted_tokens"] is not None:
            derived["mean_acceptance_length"] = 1.0 + d["num_accepted_tokens"] / drafts
        derived["draft_tokens_per_draft"] = _ratio(d["num_draft_tokens"], drafts)
        if d_pos is not None:
            derived["per_position_acceptance"] = [_ratio(v, drafts) if v is not None else None for v in d_pos]
    elif counters["num_drafts"] is None and counters["num_draft_tokens"] is not None:
        notes.append(
            "no vllm:spec_decode_num_drafts counter (vLLM 0.8.3-0.8.4): mean acceptance "
            "length and per-position acceptance cannot be derived"
        )
    if d["num_draft_tokens"] == 0 or (drafts == 0):
        notes.append("no drafts in this window: acceptance figures are null")
    return derived


def _bucket_list(col, key):
    """[[le, cumulative count], ...] of one histogram's finite buckets, le ascending (the +Inf
    bucket is the histogram's count; left out so that the facts stay plain JSON)."""
    return [[le, _clean(n)] for le, n in sorted((col.buckets.get(key) or {}).items()) if not math.isinf(le)]


def _bucket_deltas(now, before):
    """The window's cumulative bucket counts: now minus before, bucket by bucket (same le)."""
    old = dict((le, n) for le, n in before or [])
    return [[le, _clean(n - old.get(le, 0))] for le, n in now]


def _latency(col, prev, window):
    """Each latency histogram's totals, buckets and the window's count, sum, mean and buckets."""
    latency = {}
    prev_lat = (prev or {}).get("latency") or {}
    for key, metric in HISTOGRAMS.items():
        h = col.hist.get(key)
        if h is None:
            latency[key] = None
            continue
        total_sum, total_count = h["sum"], h["count"]
        win_sum, win_count = total_sum, total_count
        buckets = _bucket_list(col, key)
        win_buckets = buckets
        p = prev_lat.get(key) if window == "delta" else None
        if isinstance(p, dict) and p.get("count") is not None and p.get("sum") is not None:
            win_sum = total_sum - p["sum"]
            win_count = total_count - p["count"]
            win_buckets = _bucket_deltas(buckets, p.get("buckets"))
        latency[key] = {
            "metric": metric,
            "count": _clean(total_count),
            "sum": _clean(total_sum),
            "window_count": _clean(win_count),
            "window_sum": _clean(win_sum),
            "mean": win_sum / win_count if win_count > 0 else None,
            "buckets": buckets,
            "window_buckets": win_buckets,
        }
    return latency


def _build(col, previous, source, now):
    notes = []
    counters, created, gauges = _current(col, notes)
    spec_enabled = col.spec_series > 0
    era = _engine_era(col, counters, gauges)
    prev = _previous_parts(previous)
    window, interval, base, base_pos = _window(previous, prev, counters, created, now, notes)
    d, d_pos = _deltas(counters, base, base_pos)
    derived = {"window": window, "interval_seconds": interval}
    derived.update(_derived(era, spec_enabled, counters, gauges, d, d_pos, notes))
    active = None
    if spec_enabled:
        probe = d["num_drafts"] if d["num_drafts"] is not None else d["num_draft_tokens"]
        active = bool(probe) if probe is not None else None
    latency = _latency(col, prev, window)
    if col.model_name is not None and col.model_name not in col.model_names and col.model_names:
        notes.append(
            "no series for model_name %r; models on this page: %s"
            % (col.model_name, ", ".join(sorted(col.model_names)))
        )
    return {
        "source": source,
        "scraped_at": _iso_utc(now),
        "scraped_at_epoch": round(now, 3),
        "model_name": col.model_name,
        "model_names": sorted(col.model_names),
        "spec_decode_enabled": spec_enabled,
        "spec_decode_active": active,
        "spec_metric_names": sorted(col.spec_names),
        "engine_era": era,
        "engines": sorted(col.engines, key=lambda e: (len(e), e)),
        "counters": counters,
        "finished": dict((k, _clean(v)) for k, v in sorted(col.finished.items())),
        "created": created,
        "gauges": gauges,
        # vllm:num_requests_running at the scrape (summed over engines), None when the page has none
        "running": sum(col.running) if col.running else None,
        "derived": derived,
        "latency": latency,
        "families": col.families,
        "samples": col.samples,
        "notes": notes,
    }


def _consume(families, col):
    try:
        for fam in families:
            col.family(fam)
    except ValueError as exc:  # prometheus_client raises ValueError on malformed text
        raise MetricsParseError("not valid Prometheus text: %s" % exc)


def parse_metrics_stream(fh, model_name=None, previous=None, source="stream", openmetrics=None, now=None):
    """Parse a text file object (streaming, family by family)."""
    if not HAS_PROMETHEUS_CLIENT:
        raise PROMETHEUS_CLIENT_IMPORT_ERROR
    col = _Collector(model_name)
    parser = _om_fd_families if openmetrics else _text_fd_families
    _consume(parser(fh), col)
    return _build(col, previous, source, time.time() if now is None else now)


def parse_metrics_text(text, model_name=None, previous=None, source="content", openmetrics=None, now=None):
    """Parse /metrics text held in a string. OpenMetrics is detected by its ``# EOF`` line."""
    if openmetrics is None:
        openmetrics = text.rstrip().endswith("# EOF")
    return parse_metrics_stream(io.StringIO(text), model_name=model_name, previous=previous,
                                source=source, openmetrics=openmetrics, now=now)


def parse_metrics_file(path, model_name=None, previous=None, now=None):
    """Parse a saved /metrics page from disk (streaming)."""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - 64))
        openmetrics = fh.read().rstrip().endswith(b"# EOF")
    with io.open(path, "r", encoding="utf-8", errors="replace") as fh:
        return parse_metrics_stream(fh, model_name=model_name, previous=previous, source=path,
                                    openmetrics=openmetrics, now=now)


def running_requests(text, model_name=None):
    """``vllm:num_requests_running`` of a /metrics page (or of its lines of that gauge), summed over
    engines and filtered by ``model_name``; None when the page has no such series."""
    if not HAS_PROMETHEUS_CLIENT:
        raise PROMETHEUS_CLIENT_IMPORT_ERROR
    col = _Collector(model_name)
    _consume(_text_fd_families(io.StringIO(text)), col)
    return sum(col.running) if col.running else None
