# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The speculative metrics windows of a vLLM engine log: the key/value body of one ``SpecDecoding metrics:``
or ``Speculative metrics:`` line (read by key, never by position), one window's fields, and the
draft-weighted sums over the windows (:class:`_Accumulator`), as :class:`engine.vllm_logs.LogParser`
keeps them.
Pure standard library."""

from __future__ import annotations

import math
import re

# normalised key (lower case, "tokens tokens" typo folded) -> (field, kind)
_KEYS = {
    "mean acceptance length": ("mean_acceptance_length", "float"),
    "accepted throughput": ("accepted_throughput", "float"),
    "drafted throughput": ("drafted_throughput", "float"),
    "accepted": ("accepted_tokens", "int"),
    "drafted": ("drafted_tokens", "int"),
    "per-position acceptance rate": ("per_position_acceptance", "list"),
    "avg draft acceptance rate": ("draft_acceptance_rate", "rate"),
    "draft acceptance rate": ("draft_acceptance_rate", "rate"),
    "system efficiency": ("system_efficiency", "float"),
    "number of speculative tokens": ("num_spec_tokens", "int"),
    "number of accepted tokens": ("accepted_tokens", "int"),
    "number of draft tokens": ("drafted_tokens", "int"),
    "number of emitted tokens": ("emitted_tokens", "int"),
}
_KEY_CACHE = {}  # printed key -> (field, kind) or None; bounded (see _key_spec)
_WINDOW_FIELDS = (
    "mean_acceptance_length", "draft_acceptance_rate", "accepted_tokens", "drafted_tokens",
    "accepted_throughput", "drafted_throughput", "per_position_acceptance",
    "system_efficiency", "num_spec_tokens", "emitted_tokens",
)
# key order of a window; every key present, null when the line does not print it
_WINDOW_TEMPLATE = dict.fromkeys(("line", "timestamp", "process", "engine", "format", "cumulative")
                                 + _WINDOW_FIELDS + ("extra",))
_WINDOW_TEMPLATE["cumulative"] = False


# one "Key: value" pair of a metrics body; a list value continues with ", <number>" pieces
_KV_RE = re.compile(r"([A-Za-z][\w \-]*): ?([^,]*)((?:, ?(?:[-+]?[\d.]+(?:[eE][-+]?\d+)?|nan|-?inf))*)")


def _number(text, kind="float"):
    """First token of a printed value (``150 tokens``, ``38.8%``, ``10616.``, ``nan``).

    ``kind``: ``int``, ``float`` or ``rate`` (a percentage becomes a fraction 0..1).
    ``nan``/``inf``/unparsable -> None.
    """
    tok = text.strip().partition(" ")[0]
    try:
        val = float(tok.rstrip("%."))
    except ValueError:
        return None
    if not math.isfinite(val):
        return None
    if kind == "int":
        return int(val) if val.is_integer() else None
    if kind == "rate" and tok.endswith("%"):
        return round(val / 100.0, 9)
    return val


def _key_spec(key):
    """(field, kind) of a body key, tolerant to case, spacing and the ``tokens tokens`` typo."""
    try:
        return _KEY_CACHE[key]
    except KeyError:
        pass
    norm = " ".join(key.lower().split())
    if " tokens tokens" in norm:  # builds before 0.5.5 printed "Number of draft tokens tokens"
        norm = norm.replace(" tokens tokens", " tokens")
    spec = _KEYS.get(norm)
    if len(_KEY_CACHE) < 256:
        _KEY_CACHE[key] = spec
    return spec


# Fast path for the one format that fills multi-GB logs: the exact format string of vLLM
# 0.10.2-0.33.0 (vllm/v1/spec_decode/metrics.py, vllm-facts.md 3.3). It yields exactly what the
# key/value parser yields (tests/unit/parsers assert it); every other body (older formats,
# reordered or extra keys, nan) fails this match and is read as key/value pairs.
_V1_FAST_BODY = (
    r"Mean acceptance length: (\d+\.\d+), Accepted throughput: (\d+\.\d+) tokens/s, "
    r"Drafted throughput: (\d+\.\d+) tokens/s, Accepted: (\d+) tokens, Drafted: (\d+) tokens, "
    r"Per-position acceptance rate: (\d\.\d+(?:, \d\.\d+)*), Avg Draft acceptance rate: (\d+\.\d+)%$"
)
_V1_FAST_RE = re.compile(_V1_FAST_BODY)
# the same as a whole single-record INFO line (header + body, bytes): one regex for the line
# that fills long logs; the numbers are converted straight from bytes
_V1_LINE_FAST_B_RE = re.compile(
    (r"(?:\(([^()]*?) pid=(\d+)\) )?INFO (\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?) "
     r"\[?[\w.\-/]+:\d+\] ?SpecDecoding metrics: " + _V1_FAST_BODY[:-1] + r"\r?$").encode()
)


def _fast_fields(mal, acc_tp, draft_tp, acc, drafted, per_pos, rate):
    return {
        "mean_acceptance_length": float(mal),
        "accepted_throughput": float(acc_tp),
        "drafted_throughput": float(draft_tp),
        "accepted_tokens": int(acc),
        "drafted_tokens": int(drafted),
        "per_position_acceptance": [float(x) for x in per_pos.split(b"," if isinstance(per_pos, bytes) else ",")],
        "draft_acceptance_rate": round(float(rate) / 100.0, 9),
    }


def parse_metrics_body(body):
    """Key/value pairs of a ``SpecDecoding metrics:`` / ``Speculative metrics:`` body.

    Returns ``(fields, extra)``: ``fields`` maps known keys to converted values (a list for
    per-position acceptance), ``extra`` maps unknown keys to their raw text.
    """
    m = _V1_FAST_RE.match(body)
    if m is not None:
        return _fast_fields(*m.groups()), {}
    return parse_metrics_pairs(body)


def parse_metrics_pairs(body):
    """Key/value pairs of a ``SpecDecoding metrics:`` / ``Speculative metrics:`` body.

    Returns ``(fields, extra)``: ``fields`` maps known keys to converted values (a list for
    per-position acceptance), ``extra`` maps unknown keys to their raw text. Pairs are found by
    their keys, never by position; ``, <number>`` pieces after a value continue it
    (``Per-position acceptance rate: 0.543, 0.357, 0.264``).
    """
    out = {}
    extra = {}
    for key, value, more in _KV_RE.findall(body):
        spec = _key_spec(key)
        if spec is None:
            extra[key.strip()] = (value + more).strip()
            continue
        field, kind = spec
        if kind == "list":
            parts = (value + more).split(",")
            try:
                vals = [float(x) for x in parts]
            except ValueError:
                out[field] = [_number(x) for x in parts if x.strip()]
                continue
            out[field] = [v if math.isfinite(v) else None for v in vals]
            continue
        tok = value.strip().partition(" ")[0]
        try:
            val = float(tok.rstrip("%."))
        except ValueError:
            out[field] = None
            continue
        if not math.isfinite(val):
            val = None
        elif kind == "int":
            val = int(val) if val.is_integer() else None
        elif kind == "rate" and tok.endswith("%"):
            val = round(val / 100.0, 9)
        out[field] = val
    return out, extra


class _Accumulator(object):
    """Running draft-weighted sums over V1 windows (constant memory)."""

    __slots__ = ("windows", "accepted", "drafted", "mal_sum", "mal_weight", "pp_sum", "pp_weight",
                 "first_line", "last_line", "first_ts", "last_ts")

    def __init__(self):
        self.windows = 0
        self.accepted = 0
        self.drafted = 0
        self.mal_sum = 0.0
        self.mal_weight = 0
        self.pp_sum = []
        self.pp_weight = []
        self.first_line = self.last_line = None
        self.first_ts = self.last_ts = None

    def add(self, line, ts, drafted, accepted, mal, pp):
        self.windows += 1
        if self.first_line is None:
            self.first_line, self.first_ts = line, ts
        self.last_line, self.last_ts = line, ts
        if not drafted or accepted is None:
            return  # a zero/nan window carries no weight
        self.accepted += accepted
        self.drafted += drafted
        if mal is not None:
            self.mal_sum += mal * drafted
            self.mal_weight += drafted
        if pp:
            if len(self.pp_sum) < len(pp):
                self.pp_sum.extend([0.0] * (len(pp) - len(self.pp_sum)))
                self.pp_weight.extend([0] * (len(pp) - len(self.pp_weight)))
            pp_sum = self.pp_sum
            pp_weight = self.pp_weight
            for i, p in enumerate(pp):
                if p is not None:
                    pp_sum[i] += p * drafted
                    pp_weight[i] += drafted

    def merge(self, other):
        """Add another accumulator's sums (to combine per-engine accumulators)."""
        self.windows += other.windows
        self.accepted += other.accepted
        self.drafted += other.drafted
        self.mal_sum += other.mal_sum
        self.mal_weight += other.mal_weight
        n = len(other.pp_sum)
        if len(self.pp_sum) < n:
            self.pp_sum.extend([0.0] * (n - len(self.pp_sum)))
            self.pp_weight.extend([0] * (n - len(self.pp_weight)))
        for i in range(n):
            self.pp_sum[i] += other.pp_sum[i]
            self.pp_weight[i] += other.pp_weight[i]
        if other.first_line is not None:
            if self.first_line is None or other.first_line < self.first_line:
                self.first_line, self.first_ts = other.first_line, other.first_ts
            if self.last_line is None or other.last_line > self.last_line:
                self.last_line, self.last_ts = other.last_line, other.last_ts
        return self

    def summary(self):
        out = _empty_summary()
        out.update({
            "windows": self.windows,
            "format": "v1" if self.windows else None,
            "weighting": "drafted_tokens" if self.windows else None,
            "first_line": self.first_line, "last_line": self.last_line,
            "first_timestamp": self.first_ts, "last_timestamp": self.last_ts,
        })
        if self.drafted:
            out["accepted_tokens"] = self.accepted
            out["drafted_tokens"] = self.drafted
            out["draft_acceptance_rate"] = round(self.accepted / self.drafted, 6)
        if self.mal_weight:
            out["mean_acceptance_length"] = round(self.mal_sum / self.mal_weight, 6)
        if self.pp_sum:
            out["per_position_acceptance"] = [
                round(s / w, 6) if w else None for s, w in zip(self.pp_sum, self.pp_weight)]
        return out


def _window_dict(entry):
    """The public window dict of a compact window entry (see LogParser._add_window)."""
    line, ts, proc, engine, fmt, fields, extra = entry
    w = dict(_WINDOW_TEMPLATE)
    if fmt == "fast":
        fmt, fields, extra = "v1", _fast_fields(*fields), {}
    w.update(fields)
    w["line"] = line
    w["timestamp"] = ts
    w["process"] = proc
    w["engine"] = engine
    w["format"] = fmt
    w["cumulative"] = fmt == "v0"
    w["extra"] = extra
    return w


def _empty_summary():
    return {
        "windows": 0, "format": None, "weighting": None,
        "accepted_tokens": None, "drafted_tokens": None, "draft_acceptance_rate": None,
        "mean_acceptance_length": None, "per_position_acceptance": None,
        "system_efficiency": None, "num_spec_tokens": None, "emitted_tokens": None,
        "first_line": None, "last_line": None, "first_timestamp": None, "last_timestamp": None,
        "notes": [],
    }
