# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Speculation that knows its load: a batch-size schedule of k from a sweep of concurrency x k.

The schedule sweep of the tuning run (``tune.yml -e specpilot_benchmark_tune_schedule=true``)
measures one baseline (k = 0) and every candidate k at every concurrency level (closed loop,
unpaced), the way the benchmark measures. ``bench_analysis`` already judges every (level,
candidate) cell against the baseline: its validity, the ratios with 95% intervals, and the
decision under the service's SLO (keep, rollback, inconclusive, invalid). This module only reads
those per-level decisions; it computes no statistic of its own:

* :func:`cells_from_candidates` - the grid, one cell per (concurrency, k);
* :func:`decide_level` - per level: the kept k with the largest gain on the bound figure (ties:
  the smaller k), else 0; *decided* when a cell is a keep or every cell is a valid rollback,
  otherwise *undecided* (0 in the schedule, never a guess) with the cells and runs that would
  decide it;
* :func:`build_schedule` - ``[[start, end, k], ...]`` from batch 1, contiguous up to
  ``max_num_seqs``: a level's k covers the batch sizes above the level below it up to the
  level itself; above the highest level nothing was measured, so k = 0 there;
* :func:`crossover` - the highest concurrency where speculation still pays, with the interval
  the grid allows (it stops paying somewhere before the next level decided off) and the bound
  figure's ratio there with its 95% interval; ``undecided`` when no cell decides;
* :func:`deploy_advice` - what the service's vLLM can run: the schedule
  (``num_speculative_tokens_per_batch_size``), V0's ``disable_by_batch_size`` threshold from
  the crossover, or the single best k with a note (the version facts are vllm_profiles'). The
  schedule exists from vLLM 0.24.0 (vllm/config/speculative.py ``SpeculativeConfig`` and
  vllm/v1/core/sched/scheduler.py ``Scheduler.__init__``, absent from 0.23.0's wheel); issue 37's
  "since 0.26" is the release that drops it under data parallelism (service/speculative.py
  ``PER_BATCH_DP_DROPPED_SINCE``).

A closed-loop level of N concurrent requests keeps about N requests in the running batch, which
is what vLLM's scheduler looks the schedule up by (the number of requests scheduled in a step).
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.service import speculative
from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import (
    format_version,
    parse_version,
)

__all__ = [
    "analyse_sweep",
    "build_schedule",
    "cells_from_candidates",
    "crossover",
    "decide_level",
    "deploy_advice",
    "schedule_text",
]

# vLLM's default --max-num-seqs (EngineArgs; the V1 engine's default for GPUs); the spec's
# vllm_args.max_num_seqs wins when set
DEFAULT_MAX_NUM_SEQS = 256
NOT_JUDGED = ("invalid", "error")


def _bound(level, bound_by):
    entry = (level.get("ratios") or {}).get(bound_by) or {}
    ci = entry.get("ci95")
    return {"figure": bound_by, "value": entry.get("value"), "ci95": list(ci) if ci else None}


def cells_from_candidates(candidates, bound_by="tpot"):
    """One cell per (concurrency, k) from the candidates' benchmark reports (their ``levels``).

    candidates: what ``specpilot.core.benchmark_tune`` receives (``{id, method,
    num_speculative_tokens, result, error}``). A candidate that was not measured gives an
    ``error`` cell at each concurrency the others were measured at. Rate levels are skipped."""
    cells, seen = [], set()
    for cand in candidates:
        for lv in (cand.get("result") or {}).get("levels") or []:
            level = lv.get("level") or {}
            if level.get("qps") is not None or not level.get("concurrency"):
                continue
            seen.add(int(level["concurrency"]))
            cells.append(
                {
                    "concurrency": int(level["concurrency"]),
                    "k": int(cand.get("num_speculative_tokens") or 0),
                    "id": cand.get("id"),
                    "decision": lv.get("decision"),
                    "bound": _bound(lv, bound_by),
                    "runs_needed": lv.get("runs_needed"),
                    "reasons": list(lv.get("reasons") or [])[:3],
                }
            )
    for cand in candidates:
        if cand.get("error") or not (cand.get("result") or {}).get("levels"):
            for c in sorted(seen):
                cells.append(
                    {
                        "concurrency": c,
                        "k": int(cand.get("num_speculative_tokens") or 0),
                        "id": cand.get("id"),
                        "decision": "error",
                        "bound": {"figure": bound_by, "value": None, "ci95": None},
                        "runs_needed": None,
                        "reasons": [str(cand.get("error") or "not measured")],
                    }
                )
    return sorted(cells, key=lambda c: (c["concurrency"], c["k"]))


def _open_cell(cell):
    """An inconclusive or invalid cell, named with what would decide it."""
    if cell["decision"] == "inconclusive":
        need = (
            "about %d more run(s) per prompt (specpilot_benchmark_runs_per_prompt)" % cell["runs_needed"]
            if cell["runs_needed"]
            else "more runs may not resolve it at this load"
        )
    else:
        need = "a valid measurement (see its reasons), then a re-run"
    return {
        "concurrency": cell["concurrency"],
        "k": cell["k"],
        "decision": cell["decision"],
        "runs_needed": cell["runs_needed"],
        "would_decide": need,
        "reasons": cell["reasons"],
    }


def decide_level(cells):
    """The decision at one concurrency from its cells (k >= 1): ``{concurrency, k, status, bound,
    open}``. status: ``speculate`` (a keep), ``off`` (every cell a valid rollback) or
    ``undecided`` (k = 0, not judged: the open cells say what would decide)."""
    conc = cells[0]["concurrency"]
    kept = [c for c in cells if c["decision"] == "keep" and c["bound"]["value"] is not None]
    open_cells = [_open_cell(c) for c in cells if c["decision"] not in ("keep", "rollback")]
    if kept:
        best = sorted(kept, key=lambda c: (-c["bound"]["value"], c["k"]))[0]
        return {
            "concurrency": conc,
            "k": best["k"],
            "status": "speculate",
            "bound": best["bound"],
            "open": open_cells,
        }
    status = "off" if cells and not open_cells else "undecided"
    return {"concurrency": conc, "k": 0, "status": status, "bound": None, "open": open_cells}


def _merge(ranges):
    out = []
    for start, end, k in ranges:
        if out and out[-1][2] == k and out[-1][1] + 1 == start:
            out[-1][1] = end
        else:
            out.append([start, end, k])
    return out


def build_schedule(levels, max_num_seqs=DEFAULT_MAX_NUM_SEQS):
    """``[[start, end, k], ...]``: batch 1 to max_num_seqs, contiguous, adjacent equal k merged.

    levels: :func:`decide_level` results. A level covers the batch sizes above the level below
    it up to itself (the first from 1); above the highest level k = 0 (not measured)."""
    ranges, start = [], 1
    for lv in sorted(levels, key=lambda x: x["concurrency"]):
        end = min(lv["concurrency"], max_num_seqs)
        if end >= start:
            ranges.append([start, end, lv["k"]])
            start = end + 1
    if start <= max_num_seqs:
        ranges.append([start, max_num_seqs, 0])
    return _merge(ranges)


def _next_off(levels, above):
    return next(
        (lv["concurrency"] for lv in levels if lv["concurrency"] > above and lv["status"] == "off"), None
    )


def crossover(levels, max_num_seqs=DEFAULT_MAX_NUM_SEQS):
    """``{status, concurrency, interval, k, bound, text}`` - the highest concurrency where
    speculation still pays. status: ``found`` (pays up to N, off at a higher level), ``above_range``
    (pays at the highest level measured), ``none`` (decided off at every level), ``undecided``."""
    levels = sorted(levels, key=lambda x: x["concurrency"])
    paying = [lv for lv in levels if lv["status"] == "speculate"]
    if not paying:
        if levels and all(lv["status"] == "off" for lv in levels):
            return {
                "status": "none",
                "concurrency": 0,
                "interval": [0, 0],
                "k": 0,
                "bound": None,
                "text": "speculation pays at no measured concurrency (every level a rollback): keep it off",
            }
        return {
            "status": "undecided",
            "concurrency": None,
            "interval": None,
            "k": None,
            "bound": None,
            "text": "undecided: no cell of the sweep decides where speculation stops paying (see the open cells)",
        }
    top = paying[-1]
    n = top["concurrency"]
    off = _next_off(levels, n)
    upper = (off - 1) if off else max_num_seqs
    bound = top["bound"]
    ci = " (%s %.2fx, 95%% CI %.2f-%.2fx at k=%d)" % (
        bound["figure"].upper(),
        bound["value"],
        (bound["ci95"] or [bound["value"]] * 2)[0],
        (bound["ci95"] or [bound["value"]] * 2)[1],
        top["k"],
    )
    if off:
        where = (
            "it stops paying at %d, the next level, decided off" % off
            if off == n + 1
            else "it stops paying between %d and %d, decided off at %d" % (n + 1, off, off)
        )
    else:
        where = "nothing above %d decided it off, so the crossover is at least %d" % (n, n)
    return {
        "status": "found" if off else "above_range",
        "concurrency": n,
        "interval": [n, upper],
        "k": top["k"],
        "bound": bound,
        "text": "speculation pays up to %d concurrent requests%s; above it, off (%s)" % (n, ci, where),
    }


def schedule_text(schedule):
    """The schedule in words: 'batch 1-4: k=3; batch 5-256: off'."""
    return "; ".join(
        "batch %s: %s" % ("%d" % a if a == b else "%d-%d" % (a, b), "k=%d" % k if k else "off")
        for a, b, k in schedule
    )


def _supports(key, version):
    history = vp.key_history(key)
    if not history or version is None:
        return False
    since, until = history
    return parse_version(since) <= version and (until is None or version < parse_version(until))


def deploy_advice(schedule, cross, method=None, version=None, data_parallel_size=1):
    """What to put in the spec for the service's vLLM: ``{form, speculative, notes}``.

    form: ``per_batch_size`` (the schedule), ``disable_by_batch_size`` (V0: the crossover + 1),
    ``static`` (the single best k), or ``off``. version: a parsed version tuple (or None)."""
    max_k = max([k for _a, _b, k in schedule] or [0])
    label = format_version(version) if version else "unknown"
    notes = []
    if max_k == 0:
        return {
            "form": "off",
            "speculative": None,
            "notes": [
                "no k pays at any measured concurrency: run the service without speculative decoding "
                "(or measure again where the sweep is undecided)"
            ],
        }
    spec = {"method": method, "num_speculative_tokens": max_k}
    if _supports("num_speculative_tokens_per_batch_size", version):
        spec["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule]
        form = "per_batch_size"
        if (data_parallel_size or 1) > 1:
            # what the release does with it under data parallelism: service/speculative.py
            # per_batch_dp_note (vLLM 0.26.0+ drops it, 0.24-0.25 keep it on every rank)
            notes.append(speculative.per_batch_dp_note(version, data_parallel_size, max_k))
    elif _supports("disable_by_batch_size", version) and cross.get("concurrency"):
        # V0 vllm/spec_decode/spec_decode_worker.py SpecDecodeWorker._should_disable_all_speculation:
        # off when running_queue_size >= disable_by_batch_size, so N + 1 keeps it on up to N
        spec["disable_by_batch_size"] = max(2, cross["concurrency"] + 1)
        form = "disable_by_batch_size"
        notes.append(
            "vLLM %s has no per-batch-size schedule: speculation is disabled for new requests above "
            "a batch of %d (the crossover); k is the largest that pays" % (label, cross["concurrency"])
        )
    else:
        form = "static"
        notes.append(
            "vLLM %s can neither schedule k by batch size nor disable it by batch size: one k "
            "at every load; %s" % (label, cross.get("text") or "crossover undecided")
        )
    return {"form": form, "speculative": spec, "notes": notes}


def analyse_sweep(
    candidates, bound_by="tpot", max_num_seqs=None, method=None, version=None, data_parallel_size=1
):
    """The schedule sweep's result for tune.json: ``{levels, cells, schedule, schedule_text,
    crossover, open, advice, max_num_seqs, notes}``."""
    notes = []
    if not max_num_seqs:
        max_num_seqs = DEFAULT_MAX_NUM_SEQS
        notes.append(
            "max_num_seqs is not set in the spec (vllm_args.max_num_seqs): the schedule runs to "
            "vLLM's default of %d" % DEFAULT_MAX_NUM_SEQS
        )
    if method:
        others = sorted({c.get("method") for c in candidates if c.get("method") not in (None, method)})
        if others:
            notes.append(
                "candidates of %s are left out of the schedule: it varies k of one method (%s)"
                % (", ".join(others), method)
            )
            candidates = [c for c in candidates if c.get("method") in (None, method)]
    cells = cells_from_candidates(candidates, bound_by)
    by_level = {}
    for cell in cells:
        by_level.setdefault(cell["concurrency"], []).append(cell)
    levels = [decide_level(by_level[c]) for c in sorted(by_level)]
    above = [lv["concurrency"] for lv in levels if lv["concurrency"] > max_num_seqs]
    if above:
        notes.append("levels above max_num_seqs=%d are left out of the schedule: %s" % (max_num_seqs, above))
    schedule = build_schedule(levels, max_num_seqs)
    cross = crossover(levels, max_num_seqs)
    return {
        "bound_by": bound_by,
        "max_num_seqs": max_num_seqs,
        "levels": levels,
        "cells": cells,
        "schedule": schedule,
        "schedule_text": schedule_text(schedule),
        "crossover": cross,
        "open": [o for lv in levels for o in lv["open"]],
        "advice": deploy_advice(schedule, cross, method, version, data_parallel_size),
        "notes": notes,
    }
