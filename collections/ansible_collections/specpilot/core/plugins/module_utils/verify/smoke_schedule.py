# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Smoke checks of a batch-size schedule of k (issue 37): does the engine run the planned schedule,
and at which batch sizes did it run the probes?

* ``engine_schedule``: vLLM's repr of its ``SpeculativeConfig`` (the engine-init line) names the
  method, the model and ``num_spec_tokens`` but not the schedule (vllm/config/speculative.py
  ``SpeculativeConfig.__repr__``, 0.24.0-0.32.0), so the check reads it from what the engine
  logged around that line: the ``non-default args`` line carries the schedule the engine was given,
  the engine-init line the k it sizes for (the schedule's k are clamped to it:
  vllm/v1/spec_decode/dynamic/utils.py ``build_dynamic_sd_schedule_lookup``) and its
  ``data_parallel_size``, and vLLM 0.26.0+ warns when it drops the schedule under data parallelism
  (vllm/config/vllm.py ``VllmConfig._maybe_disable_dynamic_sd_for_data_parallel``, rule
  ``DYNAMIC_SD_DROPPED``).
* ``probe_running``: ``vllm:num_requests_running`` read while the probes ran (the probe's
  ``running_samples``), and the k the schedule runs at the batch sizes seen.
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.engine import vllm_metrics
from ansible_collections.specpilot.core.plugins.module_utils.service import speculative
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import parse_version
from ansible_collections.specpilot.core.plugins.module_utils.verify.smoke_checks import _check

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
TITLE = "Engine batch-size schedule"


def _rows(table):
    """A schedule as a list of [start, end, k] lists (the log's literal may hold tuples)."""
    if not isinstance(table, (list, tuple)):
        return None
    return [list(r) if isinstance(r, (list, tuple)) else r for r in table]


def k_at(schedule, batch):
    """The k a schedule runs at ``batch`` concurrent requests (vLLM carries the last k past the table's
    end; ``build_dynamic_sd_schedule_lookup``); None without a schedule."""
    rows = _rows(schedule) or []
    k = None
    for start, end, kk in rows:
        if batch >= start:
            k = kk
        if start <= batch <= end:
            return kk
    return k


def _dropped(log_facts):
    """Why vLLM runs the static k instead of the schedule, from the engine's own log; None if it does not."""
    for w in log_facts.get("log_warnings") or []:
        if w.get("code") == "DYNAMIC_SD_DROPPED" and not w.get("after_shutdown"):
            return "vLLM logged: %s" % w.get("message")
    dp = log_facts.get("data_parallel_size")
    version = log_facts.get("vllm_version")
    if isinstance(dp, int) and dp > 1:
        try:
            parsed = parse_version(str(version)) if version else None
        except ValueError:
            parsed = None
        return speculative.per_batch_dp_note(parsed, dp, log_facts.get("num_spec_tokens"))
    return None


def _schedule_checks(ctx):
    """``engine_schedule``: the planned schedule reached the engine and the engine runs it."""
    plan_cfg, log_facts = ctx["plan_cfg"], ctx["log_facts"]
    planned = _rows((plan_cfg or {}).get(SCHEDULE_KEY))
    if ctx["expect"] != "on" or not planned or log_facts is None:
        return []
    logged = log_facts.get("speculative_config")
    requested = log_facts.get("requested_speculative_config")
    got = _rows((requested or {}).get(SCHEDULE_KEY)) if isinstance(requested, dict) else None
    if logged is None:
        return [
            _check(
                "engine_schedule",
                "fail",
                TITLE,
                "the engine-init line shows no speculative config: the schedule does not run",
            )
        ]
    if requested is None:
        return [
            _check(
                "engine_schedule",
                "warn",
                TITLE,
                "no 'non-default args' line with speculative_config in the log: the engine-init line "
                "(%s) does not print the schedule, so it cannot be confirmed" % logged.get("repr"),
            )
        ]
    if got != planned:
        return [
            _check(
                "engine_schedule",
                "fail",
                TITLE,
                "the engine was given %s=%s, planned %s" % (SCHEDULE_KEY, got, planned),
                requested=got,
                planned=planned,
            )
        ]
    dropped = _dropped(dict(log_facts, num_spec_tokens=logged.get("num_spec_tokens")))
    if dropped:
        return [
            _check(
                "engine_schedule",
                "fail",
                TITLE,
                "the engine was given the schedule but does not run it: %s" % dropped,
            )
        ]
    k = logged.get("num_spec_tokens")
    top = max(r[2] for r in planned)
    clamp = (
        ""
        if k is None or top <= k
        else ("; k above num_spec_tokens=%d is clamped to it (planned up to %d)" % (k, top))
    )
    return [
        _check(
            "engine_schedule",
            "warn" if clamp else "pass",
            TITLE,
            "the engine runs %s (given at start, engine-init line %s, data_parallel_size=%s)%s"
            % (schedule_words(planned), logged.get("repr"), log_facts.get("data_parallel_size") or 1, clamp),
            schedule=planned,
        )
    ]


def schedule_words(schedule):
    """'batch 1-4: k=3; batch 5-256: off'."""
    return "; ".join(
        "batch %s: %s" % ("%d" % a if a == b else "%d-%d" % (a, b), "k=%d" % k if k else "off")
        for a, b, k in _rows(schedule)
    )


def running_reads(samples, model_name=None):
    """The values of ``vllm:num_requests_running`` (summed over engines) in the probe's samples: list of
    floats, one per read that carried the gauge."""
    out = []
    for sample in samples or []:
        text = sample.get("text") if isinstance(sample, dict) else None
        if not text:
            continue
        value = vllm_metrics.running_requests(text, model_name)
        if value is not None:
            out.append(value)
    return out


def _running_checks(ctx):
    """``probe_running``: how many requests the engine ran at once while the probes ran."""
    probes = ctx["probes"] or {}
    samples = probes.get("running_samples")
    if not probes or samples is None:
        return []
    reads = running_reads(samples, ctx.get("model_name"))
    title = "Running requests during the probes"
    if not reads:
        return [
            _check(
                "probe_running",
                "info",
                title,
                "%d read(s) of /metrics during the probes, none with vllm:num_requests_running"
                % len(samples),
            )
        ]
    busy = [int(v) for v in reads if v >= 1]
    if not busy:
        return [
            _check(
                "probe_running",
                "info",
                title,
                "vllm:num_requests_running read %d time(s) during the probes, 0 each time (every probe "
                "finished between two reads)" % len(reads),
                reads=len(reads),
            )
        ]
    low, high = min(busy), max(busy)
    sizes = "%d" % low if low == high else "%d-%d" % (low, high)
    message = (
        "the engine ran %s request(s) at once during the probes (%d of %d reads of "
        "vllm:num_requests_running)" % (sizes, len(busy), len(reads))
    )
    schedule = (ctx["plan_cfg"] or {}).get(SCHEDULE_KEY)
    status = "pass"
    if schedule and ctx["expect"] == "on":
        ks = sorted({k_at(schedule, b) for b in range(low, high + 1)})
        message += "; the schedule runs k=%s there" % "/".join(str(k) for k in ks)
        if ks == [0]:
            status = "warn"
            message += ": speculation was off for the probes, their acceptance says nothing of the schedule"
    return [_check("probe_running", status, title, message, batch_sizes=[low, high], reads=len(reads))]
