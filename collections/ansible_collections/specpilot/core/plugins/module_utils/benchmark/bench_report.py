# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The benchmark report: the five context fields, JSON, Markdown and PNG plots.

Numbers without their context cannot be reproduced or trusted, so every report carries:

1. ``hardware``: GPU product and count (node labels ``nvidia.com/gpu.product`` /
   ``nvidia.com/gpu.count`` / capacity ``nvidia.com/gpu``, and the pod's GPU request);
2. ``model``: target and draft identifiers and the speculative config;
3. ``runtime``: the vLLM version the engine reports (``GET /version``) and the image;
4. ``request_params``: sampling parameters, warm-ups, runs per prompt, arrivals, levels;
5. ``workload``: its name, file, number of prompts and token sizes.

A field that could not be filled is named in ``context_missing`` and the report says the
figures are anecdotal. Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import datetime
import json
from ansible_collections.specpilot.core.plugins.module_utils.report.plots import plot_links, pyplot, saved
from ansible_collections.specpilot.core.plugins.module_utils.common import get_path
from ansible_collections.specpilot.core.plugins.module_utils.report import files as report_files
from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table

__all__ = [
    "CONTEXT_FIELDS",
    "build_context",
    "build_report",
    "fmt_value",
    "hardware_from_node",
    "md_escape",
    "ratio_ci",
    "render_markdown",
    "render_plots",
    "write_report",
]

REPORT_FORMAT = 1
CONTEXT_FIELDS = ("hardware", "model", "runtime", "request_params", "workload")
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "habana.ai/gaudi")


# --------------------------------------------------------------------------- context


def _int(value):
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def pod_gpu_request(pod):
    """{resource: count} requested by the pod's containers (limits, else requests)."""
    out = {}
    for c in get_path(pod, "spec", "containers") or []:
        res = c.get("resources") or {}
        for name in GPU_RESOURCES:
            n = _int((res.get("limits") or {}).get(name) or (res.get("requests") or {}).get(name))
            if n:
                out[name] = out.get(name, 0) + n
    return out


def pod_compute(pod):
    """What the predictor pod's containers ask for: {cpu: {requests, limits}, memory: {...}}, each None when
    not set (the node's capacity is the node's, not what the engine gets)."""
    out = {"cpu": {"requests": None, "limits": None}, "memory": {"requests": None, "limits": None}}
    containers = get_path(pod, "spec", "containers") or []
    engine = [c for c in containers if c.get("name") == "kserve-container"] or containers[:1]
    for c in engine:
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for name in ("cpu", "memory"):
                if (res.get(kind) or {}).get(name) is not None:
                    out[name][kind] = str(res[kind][name])
    return out


def _capacity_text(hw):
    """The node's declared capacity and its allocatable, then what the engine's pod asks for, each labelled
    (issue 39: a 2-core lab VM read "cpu 32, memory 256Gi", the lab node's declared capacity)."""
    text = "node declares %s CPUs, %s memory; allocatable %s CPUs, %s memory" % (
        hw["cpu"],
        hw["memory"],
        hw.get("cpu_allocatable") or "?",
        hw.get("memory_allocatable") or "?",
    )
    pod = hw.get("pod_resources")
    if pod:
        asked = ", ".join(
            "%s %s %s" % (kind, name, pod[name][kind])
            for name in ("cpu", "memory")
            for kind in ("requests", "limits")
            if pod[name][kind] is not None
        )
        text += "; the engine's pod: %s" % (asked or "no CPU or memory requests or limits (best effort)")
    return text


# the node labels that name its GPU product, by vendor (NVIDIA GPU feature discovery, AMD, GKE, Intel)
_GPU_PRODUCT_LABELS = (
    "nvidia.com/gpu.product",
    "amd.com/gpu.product-name",
    "cloud.google.com/gke-accelerator",
    "gpu.intel.com/product",
)


def _hardware_summary(hw, node_gpus, per_replica):
    """One line: the GPU product and count, the GPUs without a product label, or CPU only."""
    product = hw["gpu_product"]
    if product and (per_replica or node_gpus):
        return "%s x %d%s (node %s%s)" % (
            product,
            per_replica or node_gpus,
            " per replica" if per_replica else "",
            hw["node"],
            ", %d on the node" % node_gpus if node_gpus else "",
        )
    if node_gpus:
        return "%d x %s, product unknown (no nvidia.com/gpu.product label on node %s)" % (
            node_gpus,
            hw["gpu_resource"],
            hw["node"],
        )
    return "CPU only: no GPU on node %s (%s%s)" % (
        hw["node"],
        _capacity_text(hw),
        ", instance type %s" % hw["instance_type"] if hw["instance_type"] else "",
    )


def hardware_from_node(node, pod=None):
    """The hardware context from a Node object (and the predictor Pod, for its GPU request)."""
    if not node:
        return None
    labels = get_path(node, "metadata", "labels") or {}
    cap = get_path(node, "status", "capacity") or {}
    resource = next((r for r in GPU_RESOURCES if _int(cap.get(r))), None)
    node_gpus = _int(cap.get(resource)) if resource else _int(labels.get("nvidia.com/gpu.count"))
    product = next(
        (labels[k] for k in _GPU_PRODUCT_LABELS if labels.get(k)), labels.get(_GPU_PRODUCT_LABELS[-1])
    )
    mem = _int(labels.get("nvidia.com/gpu.memory"))
    pod_req = pod_gpu_request(pod) if pod else {}
    per_replica = sum(pod_req.values()) if pod_req else (0 if pod else None)
    info = get_path(node, "status", "nodeInfo") or {}
    hw = {
        "node": get_path(node, "metadata", "name"),
        "gpu_resource": resource,
        "gpu_product": product,
        "gpu_memory_mib": mem,
        "gpu_count_node": node_gpus or 0,
        "gpu_count_pod": per_replica,
        "instance_type": labels.get("node.kubernetes.io/instance-type"),
        "cpu": cap.get("cpu"),
        "memory": cap.get("memory"),
        "cpu_allocatable": get_path(node, "status", "allocatable", "cpu"),
        "memory_allocatable": get_path(node, "status", "allocatable", "memory"),
        "pod_resources": pod_compute(pod) if pod else None,
        "kubelet": info.get("kubeletVersion"),
        "os_image": info.get("osImage"),
    }
    hw["summary"] = _hardware_summary(hw, node_gpus, per_replica)
    return hw


def _present(value):
    if value is None:
        return False
    if isinstance(value, (dict, list, str)):
        return bool(value)
    return True


def _hardware_present(hw):
    return bool(_present(hw) and (hw.get("summary") or hw.get("gpu_product") or hw.get("node")))


# each context field, and when it counts as given
_CONTEXT_PRESENT = (
    ("hardware", _hardware_present),
    ("model", lambda m: bool((m or {}).get("target"))),
    ("runtime", lambda r: bool((r or {}).get("vllm_version"))),
    ("request_params", lambda p: bool(_present(p))),
    ("workload", lambda w: bool((w or {}).get("name"))),
)


def _model_summary(m):
    spec = m.get("speculative_config") or {}
    draft = m.get("draft") or (("%s (no draft model)" % spec.get("method")) if spec.get("method") else None)
    return "target %s; draft %s; speculative %s" % (
        m["target"],
        draft or "none",
        json.dumps(spec, sort_keys=True) if spec else "off",
    )


def build_context(hardware=None, model=None, runtime=None, request_params=None, workload=None):
    """(context, missing): the five fields and the names of those that are empty. Each
    field keeps what the caller gave; a ``summary`` line is added where one is missing."""
    ctx = {
        "hardware": hardware or None,
        "model": model or None,
        "runtime": runtime or None,
        "request_params": request_params or None,
        "workload": workload or None,
    }
    missing = [field for field, present in _CONTEXT_PRESENT if not present(ctx[field])]
    m = ctx["model"] or {}
    if m.get("target") and "summary" not in m:
        m["summary"] = _model_summary(m)
    r = ctx["runtime"] or {}
    if r.get("vllm_version") and "summary" not in r:
        r["summary"] = "vLLM %s%s" % (r["vllm_version"], " (%s)" % r["image"] if r.get("image") else "")
    return ctx, missing


def _prompt_sizes(prompts):
    """The number of prompts, their sizes in characters, their categories."""
    out = {"num_prompts": len(prompts)}
    chars = [len(p.get("prompt") or json.dumps(p.get("messages") or "")) for p in prompts]
    out["prompt_chars"] = {"min": min(chars), "max": max(chars), "total": sum(chars)} if chars else None
    cats = sorted({p.get("category") for p in prompts if p.get("category")})
    if cats:
        out["categories"] = cats
    return out


def _run_medians(summaries, figure):
    """The median of ``figure`` (prompt_tokens, output_tokens) of each run that has it."""
    return [
        s["metrics"][figure]["p50"] for s in summaries or [] if s and (s.get("metrics") or {}).get(figure)
    ]


def workload_context(name, path=None, prompts=None, summaries=None, description=None):
    """The workload field: name, file, number of prompts, characters and token sizes (token
    sizes from the runs' usage figures)."""
    w = {"name": name, "file": path, "description": description}
    if prompts is not None:
        w.update(_prompt_sizes(prompts))
    for figure in ("prompt_tokens", "output_tokens"):
        medians = _run_medians(summaries, figure)
        if medians:
            w[figure + "_median"] = sorted(medians)[len(medians) // 2]
    reqs = [s.get("requests") for s in summaries or [] if s]
    if reqs:
        w["requests_per_run"] = max(reqs)
    return w


# --------------------------------------------------------------------------- report


def _ratio_phrase(fig, entry):
    value, ci = entry.get("value"), entry.get("ci95")
    if value is None:
        return None
    label = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E", "throughput": "per-request throughput"}[fig]
    if value >= 1:
        text = "%s %.2fx %s" % (label, value, "higher" if fig == "throughput" else "faster")
    else:
        change = (1.0 / value - 1.0) if fig != "throughput" else (1.0 - value)
        text = "%s %.0f%% %s" % (label, 100 * change, "lower" if fig == "throughput" else "slower")
    return text + (" (95%% CI %.2f-%.2fx)" % tuple(ci) if ci else " (no CI)")


def summary_paragraph(analysis):
    """One plain-language paragraph: the decision, the bound figure with its interval, the other
    figures, acceptance at the production temperature, the recommended k."""
    verdict = analysis["verdict"]
    level = verdict.get("level") or {}
    tl = next((lv for lv in analysis["levels"] if lv["level"].get("key") == level.get("key")), None)
    parts = ["%s at %s" % (verdict["decision"], level.get("key", "no level"))]
    if tl and tl["decision"] == "invalid":
        parts.append("the measurement is invalid: " + "; ".join(tl["invalid_reasons"][:2]))
    elif tl:
        bound = verdict["policy"]["bound_by"]
        figs = tl["ratios"]
        order = [bound] + [f for f in ("ttft", "tpot", "throughput", "e2e") if f != bound]
        parts.extend(p for p in (_ratio_phrase(f, figs.get(f) or {}) for f in order) if p)
    prod = next((r for r in analysis.get("temperature_sweep") or [] if r["production"]), None)
    if prod and prod.get("acceptance_rate") is not None:
        parts.append(
            "acceptance %.2f at the production temperature %g (%s)"
            % (prod["acceptance_rate"], prod["temperature"], prod["band"].replace("_", " "))
        )
    rec = analysis.get("recommendation")
    if rec:
        parts.append("recommended num_speculative_tokens %d" % rec["num_speculative_tokens"])
    return "; ".join(parts) + "."


def build_report(analysis, context, missing, service=None, generated_at=None, extra=None):
    report = {
        "format": REPORT_FORMAT,
        "kind": "specpilot-benchmark",
        "service": service,
        "generated_at": generated_at
        or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "verdict": analysis["verdict"],
        "decision": analysis["decision"],
        "action": analysis["action"],
        "summary": summary_paragraph(analysis),
        "recommendation": analysis.get("recommendation"),
        "measured_acceptance": analysis.get("measured_acceptance"),
        "temperature_sweep": analysis.get("temperature_sweep") or [],
        "temperature_sweep_skipped": analysis.get("temperature_sweep_skipped"),
        "equivalence": analysis.get("equivalence"),
        "reasons": analysis["reasons"],
        "notes": list(analysis.get("notes") or []),
        "target": analysis["target"],
        "per_level": analysis.get("per_level"),
        "policy": analysis.get("policy"),
        "thresholds": analysis["thresholds"],
        "context": context,
        "context_missing": missing,
        "levels": analysis["levels"],
        "plots": [],
    }
    if missing:
        report["notes"].insert(
            0,
            "context incomplete (%s): treat these figures as anecdotal, not as evidence" % ", ".join(missing),
        )
    if extra:
        report.update(extra)
    return report


def fmt_value(value, fmt="%.2f"):
    return "n/a" if value is None else fmt % value


def _x(value):
    return "n/a" if value is None else "%.2fx" % value


def md_escape(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _st(summary, metric, key):
    st = ((summary or {}).get("metrics") or {}).get(metric) or {}
    return st.get(key)


def _md_verdict(report):
    """The title, the plain-language paragraph, the verdict and why."""
    out = []
    name = report.get("service") or "service"
    badge = {
        "keep": "KEEP speculative decoding",
        "rollback": "ROLL BACK speculative decoding",
        "inconclusive": "INCONCLUSIVE",
        "invalid": "INVALID MEASUREMENT",
    }[report["decision"]]
    out.append("# Speculative decoding benchmark: %s" % name)
    out.append("")
    out.append(report["summary"])
    out.append("")
    out.append("Generated %s." % report["generated_at"])
    out.append("")
    tgt = (report.get("target") or {}).get("level") or {}
    out.append("## Verdict: %s (at %s)" % (badge, tgt.get("key", "n/a")))
    out.append("")
    out.append(report["action"] + ".")
    out.append("")
    for r in report.get("reasons") or []:
        out.append("- " + md_escape(r))
    pol = report.get("policy") or {}
    if pol:
        out.append("")
        out.append(
            "Policy: %s, bound by %s; allowances TTFT +%d%%, E2E +%d%%, TPOT +%d%%, throughput -%d%%%s."
            % (
                pol["policy"],
                pol["bound_by"],
                round(100 * pol["ttft_max_regression"]),
                round(100 * pol["e2e_max_regression"]),
                round(100 * pol["tpot_max_regression"]),
                round(100 * pol["throughput_max_regression"]),
                "; p99 limits %s" % json.dumps(pol["p99_ms"], sort_keys=True) if pol.get("p99_ms") else "",
            )
        )
    if report.get("per_level"):
        out.append("")
        out.append(
            "Per level: " + ", ".join("%s **%s**" % (k, v) for k, v in report["per_level"].items()) + "."
        )
    if report.get("notes"):
        out.append("")
        out.append("Notes:")
        out.append("")
        for n in report["notes"]:
            out.append("- " + md_escape(n))
    out.append("")
    return out


def ratio_ci(entry, no_ci=" [no CI]"):
    """A ratio {value, ci95} as '1.57x [1.51-1.67]' (no_ci appended when the interval is unknown)."""
    entry = entry or {}
    if entry.get("value") is None:
        return "n/a"
    ci = entry.get("ci95")
    return "%.2fx [%.2f-%.2f]" % (entry["value"], ci[0], ci[1]) if ci else "%.2fx%s" % (entry["value"], no_ci)


def _samples_text(entry):
    """'24/24 (12 prompts)': the samples each side gave a ratio, and the prompts they share."""
    entry = entry or {}
    samples = entry.get("samples") or []
    if len(samples) != 2:
        return "n/a"
    return "%d/%d (%d prompts)" % (samples[0], samples[1], entry.get("prompts") or 0)


def _md_decision(report):
    """Per level: valid or why not, the ratios with their 95% intervals, the decision."""
    out = [
        "## Decision per level (ratios with 95% confidence intervals; > 1 is better)",
        "",
        "The speedups of record: each the ratio of the two sides' p50 over the per-request samples of the prompts "
        "both sides measured (samples: baseline/speculative, the TPOT column's), with a bootstrap interval over "
        "prompts.",
        "",
    ]
    columns = (
        "level",
        "valid",
        "decision",
        "TTFT p50",
        "TPOT p50",
        "E2E p50",
        "tok/s p50",
        "TPOT p99",
        "samples",
    )
    out += markdown_table(columns + ("more runs",), [_decision_row(lv) for lv in report["levels"]])
    out.append("")
    for lv in report["levels"]:
        for reason in lv.get("invalid_reasons") or []:
            out.append("- %s invalid: %s" % (lv["level"]["key"], md_escape(reason)))
    out.append("")
    return out


def _decision_row(lv):
    figs = lv.get("ratios") or {}
    return (
        lv["level"]["key"],
        "yes" if lv.get("valid") else "no",
        "**%s**" % lv.get("decision"),
        ratio_ci(figs.get("ttft")),
        ratio_ci(figs.get("tpot")),
        ratio_ci(figs.get("e2e")),
        ratio_ci(figs.get("throughput")),
        ratio_ci((figs.get("tpot") or {}).get("p99")),
        _samples_text(figs.get("tpot")),
        lv.get("runs_needed") or "",
    )


def _temperature_row(r):
    return (
        "%g%s" % (r["temperature"], " (production)" if r["production"] else ""),
        fmt_value(r["acceptance_rate"], "%.3f"),
        fmt_value(r["mean_acceptance_length"]),
        " / ".join("%.2f" % p for p in r["per_position"] if p is not None) or "n/a",
        r["band"] or "n/a",
    )


def _md_temperature(report):
    """Acceptance by temperature, the recommended k, output equivalence."""
    out = ["## Acceptance by temperature (speculative side)", ""]
    rows = report.get("temperature_sweep") or []
    if not rows:
        out.append("Not measured: %s." % (report.get("temperature_sweep_skipped") or "no sweep runs"))
    else:
        columns = ("temperature", "acceptance rate", "mean acceptance length", "per position", "band")
        out += markdown_table(columns, [_temperature_row(r) for r in rows])
    out.append("")
    rec = report.get("recommendation")
    out.append("## num_speculative_tokens")
    out.append("")
    if rec:
        out.append("Recommended: **%d**. %s." % (rec["num_speculative_tokens"], md_escape(rec["reason"])))
        out.append("")
        out.append(
            "Expected tokens per step: "
            + ", ".join(
                "k=%s: %.2f" % kv
                for kv in sorted(rec["expected_tokens_per_step"].items(), key=lambda kv: int(kv[0]))
            )
            + "."
        )
    else:
        out.append("No recommendation: no per-position acceptance figures.")
    out.append("")
    eq = report.get("equivalence") or {}
    out.append("## Output equivalence at temperature 0")
    out.append("")
    if eq.get("skipped"):
        out.append("Not compared: %s." % eq["skipped"])
    else:
        out.append("%d of %d completions identical." % (eq.get("identical", 0), eq.get("compared", 0)))
        for d in eq.get("differing") or []:
            out.append(
                "- %s run %s: baseline `%s` vs speculative `%s`"
                % (
                    md_escape(d["prompt_id"]),
                    d["run"],
                    md_escape(d["baseline"]),
                    md_escape(d["speculative"]),
                )
            )
    out.append("")
    return out


def _workload_text(wl):
    """The workload's name, prompts, requests per run, median token sizes and file, in one cell."""
    bits = [wl.get("name") or "unknown"]
    if wl.get("num_prompts") is not None:
        bits.append("%d prompts" % wl["num_prompts"])
    if wl.get("requests_per_run") is not None:
        bits.append("%d timed requests per run" % wl["requests_per_run"])
    for key, text in (("prompt_tokens_median", "prompt tokens"), ("output_tokens_median", "output tokens")):
        if wl.get(key) is not None:
            bits.append("%s median %s" % (text, fmt_value(wl[key], "%g")))
    if wl.get("file"):
        bits.append("file %s" % wl["file"])
    return "; ".join(bits)


def _md_context(report):
    """What was measured: hardware, model, runtime, request parameters, workload."""
    ctx = report.get("context") or {}
    out = ["## Context", ""]
    if report.get("context_missing"):
        out.append(
            "**Missing: %s.** Figures without their context are anecdotal."
            % ", ".join(report["context_missing"])
        )
        out.append("")
    hw = ctx.get("hardware") or {}
    model = ctx.get("model") or {}
    rt = ctx.get("runtime") or {}
    rp = ctx.get("request_params") or {}
    wl = ctx.get("workload") or {}
    rp_text = ", ".join(
        "%s=%s" % (k, json.dumps(v, sort_keys=True)) for k, v in sorted(rp.items()) if k not in ("levels",)
    )
    rows = [
        ("Hardware", md_escape(hw.get("summary") or "unknown")),
        ("Model and draft", md_escape(model.get("summary") or "unknown")),
        ("Runtime", md_escape(rt.get("summary") or "unknown")),
        ("Request parameters", md_escape(rp_text or "unknown")),
        ("Workload", md_escape(_workload_text(wl))),
    ]
    out += markdown_table(("field", "value"), rows)
    out.append("")
    return out


_SIDES = ("baseline", "speculative")
_RESULT_COLUMNS = (
    "level",
    "side",
    "ok/sent",
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "TPOT p99",
    "ITL p50",
    "E2E p50",
)
_RESULT_COLUMNS += ("E2E p99", "req tok/s p50", "output tok/s")
_THROUGHPUT_COLUMNS = (
    "level",
    "decision",
    "tok/s speedup (per request)",
    "system tok/s ratio",
    "acceptance rate",
)
_THROUGHPUT_COLUMNS += ("mean acceptance length (ceiling)", "headroom converted")


def _side_row(key, side, s):
    """One side's line of the results table (a side that did not run: its level, its name and '-')."""
    if not s:
        return (key, side, "-") + ("",) * 9
    return (
        key,
        side,
        "%d/%d" % (s.get("ok", 0), s.get("requests", 0)),
        fmt_value(_st(s, "ttft_ms", "p50")),
        fmt_value(_st(s, "ttft_ms", "p99")),
        fmt_value(_st(s, "tpot_ms", "p50")),
        fmt_value(_st(s, "tpot_ms", "p99")),
        fmt_value(_st(s, "itl_ms", "p50")),
        fmt_value(_st(s, "e2e_ms", "p50")),
        fmt_value(_st(s, "e2e_ms", "p99")),
        fmt_value(_st(s, "request_tok_s", "p50"), "%.1f"),
        fmt_value(s.get("output_throughput"), "%.1f"),
    )


def _throughput_row(lv):
    c = lv["comparison"]
    sp = c.get("speedups") or {}
    acc = lv.get("acceptance") or {}
    hr = c.get("headroom") or {}
    converted = (
        "n/a"
        if hr.get("converted") is None
        else "%.0f%% (%s of %s)" % (100 * hr["converted"], _x(hr.get("realised")), _x(hr.get("ceiling")))
    )
    return (
        lv["level"]["key"],
        "**%s**" % lv["decision"],
        _x(sp.get("request_tok_s")),
        _x(sp.get("output_throughput")),
        fmt_value(acc.get("draft_acceptance_rate"), "%.3f"),
        fmt_value(acc.get("mean_acceptance_length")),
        converted,
    )


def _md_results(report):
    """Latency and throughput per level, both sides."""
    out = [
        "## Results per level",
        "",
        "Medians (p50) and tails (p99) over every timed request; latencies in ms, throughput in tok/s. "
        "Speedup > 1 means speculative decoding is better.",
        "",
    ]
    rows = [_side_row(lv["level"]["key"], side, lv.get(side)) for lv in report["levels"] for side in _SIDES]
    out += markdown_table(_RESULT_COLUMNS, rows)
    out.append("")
    # issue 39: a second TTFT/TPOT speedup here (the ratio of the medians over every timed request) read 0.02x
    # beside the decision table's 0.81x for the same level; the decision table's, with its interval, is the one
    out.append(
        "TTFT and TPOT speedups: the decision table above (the ratios of record, with their intervals)."
    )
    out.append("")
    out += markdown_table(_THROUGHPUT_COLUMNS, [_throughput_row(lv) for lv in report["levels"]])
    out.append("")
    return out


def _md_acceptance(report):
    """The speculative side's acceptance per level."""
    out = [
        "## Acceptance (speculative side, /metrics deltas over the timed requests)",
        "",
    ]
    columns = ("level", "drafts", "draft tokens", "accepted", "acceptance rate", "mean acceptance length")
    columns += ("per-position acceptance", "reading")
    out += markdown_table(columns, [_acceptance_row(lv) for lv in report["levels"]])
    out.append("")
    return out


def _acceptance_row(lv):
    acc = lv.get("acceptance") or {}
    pos = acc.get("per_position_acceptance")
    hr = lv["comparison"].get("headroom") or {}
    return (
        lv["level"]["key"],
        fmt_value(acc.get("num_drafts"), "%d"),
        fmt_value(acc.get("num_draft_tokens"), "%d"),
        fmt_value(acc.get("num_accepted_tokens"), "%d"),
        fmt_value(acc.get("draft_acceptance_rate"), "%.3f"),
        fmt_value(acc.get("mean_acceptance_length")),
        " / ".join("%.2f" % p for p in pos if p is not None) if pos else "n/a",
        md_escape(hr.get("acceptance_band") or ""),
    )


def _md_tails(report):
    """P50 against P99 per level: the mixed-workload signal."""
    out = [
        "## P50 vs P99 (the mixed-workload signal)",
        "",
    ]
    rows = [
        _gap_row(lv["level"]["key"], metric, entry)
        for lv in report["levels"]
        for metric, entry in sorted((lv["comparison"].get("gaps") or {}).items())
    ]
    columns = ("level", "metric", "baseline p50 -> p99 (gap)", "speculative p50 -> p99 (gap)", "gap widened")
    out += markdown_table(columns, rows)
    out.append("")
    return out


def _gap_row(key, metric, entry):
    b, s = entry.get("baseline") or {}, entry.get("speculative") or {}
    return (
        key,
        metric.replace("_ms", "").upper(),
        "%s -> %s (%s)" % (fmt_value(b.get("p50")), fmt_value(b.get("p99")), fmt_value(b.get("gap"))),
        "%s -> %s (%s)" % (fmt_value(s.get("p50")), fmt_value(s.get("p99")), fmt_value(s.get("gap"))),
        {True: "yes", False: "no", None: "n/a"}[entry.get("widened")],
    )


def _md_per_prompt(report):
    """Per-prompt speedups at the target level, and the plots."""
    out = []
    tgt = (report.get("target") or {}).get("level") or {}
    tl = next((lv for lv in report["levels"] if lv["level"]["key"] == tgt.get("key")), None)
    if tl and tl["comparison"].get("per_prompt"):
        out.append("## Per prompt at %s (medians over the runs of each prompt)" % tgt["key"])
        out.append("")
        rows = [
            (
                md_escape(p["prompt_id"]),
                "/".join(str(r) for r in p["runs"]),
                _x(p["ttft_speedup"]),
                _x(p["tpot_speedup"]),
                _x(p["tok_s_speedup"]),
            )
            for p in tl["comparison"]["per_prompt"]
        ]
        columns = ("prompt", "runs (base/spec)", "TTFT speedup", "TPOT speedup", "tok/s speedup")
        out += markdown_table(columns, rows)
        out.append("")

    if report.get("plots"):
        out += ["## Plots", ""] + plot_links(report)
    return out


def _md_thresholds(report):
    """The thresholds the verdict used."""
    th = report.get("thresholds") or {}
    out = ["## Thresholds", ""]
    out.append(", ".join("%s=%s" % (k, json.dumps(v)) for k, v in sorted(th.items())))
    out.append("")
    return out


def render_markdown(report):
    """The report as Markdown (plots linked by their file names, next to the .md file)."""
    sections = (
        _md_verdict,
        _md_decision,
        _md_context,
        _md_results,
        _md_temperature,
        _md_acceptance,
        _md_tails,
        _md_per_prompt,
        _md_thresholds,
    )
    return "\n".join(line for section in sections for line in section(report))


# --------------------------------------------------------------------------- plots


def _series(levels, side, metric, key):
    return [(_st(lv.get(side), metric, key) if lv.get(side) else None) for lv in levels]


def _plot_lines(ax, xs, ys, **kw):
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", **kw)


_COLOURS = {"baseline": "#4c72b0", "speculative": "#dd8452"}


def _level_axis(ax, xs, labels):
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=20)
    ax.set_xlabel("load level")


def _latency_plot(plt, report, levels, xs, labels, out_dir):
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, (metric, title) in zip(
        axes, (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2e_ms", "End-to-end latency (ms)"))
    ):
        for side in ("baseline", "speculative"):
            _plot_lines(
                ax, xs, _series(levels, side, metric, "p50"), color=_COLOURS[side], label="%s p50" % side
            )
            _plot_lines(
                ax,
                xs,
                _series(levels, side, metric, "p99"),
                color=_COLOURS[side],
                linestyle="--",
                label="%s p99" % side,
            )
        ax.set_title(title)
        _level_axis(ax, xs, labels)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Latency vs load: %s" % (report.get("service") or ""))
    return saved(fig, out_dir, "latency.png", "Latency vs load (p50 solid, p99 dashed)")


def _throughput_plot(plt, levels, xs, labels, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    width = 0.38
    for i, side in enumerate(("baseline", "speculative")):
        req = _series(levels, side, "request_tok_s", "p50")
        sysr = [(lv.get(side) or {}).get("output_throughput") for lv in levels]
        axes[0].bar(
            [x + (i - 0.5) * width for x in xs],
            [v or 0 for v in req],
            width,
            color=_COLOURS[side],
            label=side,
        )
        axes[1].bar(
            [x + (i - 0.5) * width for x in xs],
            [v or 0 for v in sysr],
            width,
            color=_COLOURS[side],
            label=side,
        )
    axes[0].set_title("Per-request output tok/s (p50)")
    axes[1].set_title("System output tok/s (all requests / wall time)")
    for ax in axes:
        _level_axis(ax, xs, labels)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return saved(fig, out_dir, "throughput.png", "Throughput vs load")


def _acceptance_plot(plt, levels, out_dir):
    """The per-position acceptance of each level that has it; None when none has."""
    acc = [(lv["level"]["key"], (lv.get("acceptance") or {}).get("per_position_acceptance")) for lv in levels]
    acc = [(k, [p or 0.0 for p in pos]) for k, pos in acc if pos]
    if not acc:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    k = max(len(pos) for _unused, pos in acc)
    width = 0.8 / len(acc)
    for i, (key, pos) in enumerate(acc):
        ax.bar([p + 1 + (i - (len(acc) - 1) / 2.0) * width for p in range(len(pos))], pos, width, label=key)
    ax.set_xticks(list(range(1, k + 1)))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance (accepted at position / drafts)")
    ax.set_ylim(0, 1.05)
    ax.set_title("Per-position acceptance")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return saved(fig, out_dir, "acceptance.png", "Per-position acceptance")


def render_plots(report, out_dir):
    """latency.png, throughput.png and (with acceptance data) acceptance.png under out_dir.
    Returns [{file, title, path}]; empty without matplotlib."""
    plt = pyplot()[0]
    if plt is None:
        return []
    levels = report["levels"]
    labels = [_plot_label(lv) for lv in levels]
    xs = list(range(len(levels)))
    made = [
        _latency_plot(plt, report, levels, xs, labels, out_dir),
        _throughput_plot(plt, levels, xs, labels, out_dir),
    ]
    acceptance = _acceptance_plot(plt, levels, out_dir)
    if acceptance is not None:
        made.append(acceptance)
    made.extend(_plot_speedups(plt, report, out_dir))
    made.extend(_plot_temperature(report, out_dir))
    return made


def _plot_label(lv):
    """A level's tick label; an invalid level says so (issue 39: the plots did not mark them)."""
    return lv["level"]["key"] + ("" if lv.get("valid", True) else "\n(invalid)")


_SPEEDUP_FIGURES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E"), ("throughput", "tok/s"))


def _plot_speedups(plt, report, out_dir):
    """speedup.png: per level, each figure's ratio (> 1: speculative better) with its 95% interval as a bar;
    an invalid level greyed out and labelled, with no ratio drawn (its figures are not evidence)."""
    levels = report["levels"]
    if not levels:
        return []
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(_SPEEDUP_FIGURES)
    for i, (fig_key, name) in enumerate(_SPEEDUP_FIGURES):
        xs, ys, err = [], [], [[], []]
        for x, lv in enumerate(levels):
            entry = (lv.get("ratios") or {}).get(fig_key) or {}
            if not lv.get("valid", True) or entry.get("value") is None:
                continue
            lo, hi = entry.get("ci95") or (entry["value"], entry["value"])
            xs.append(x + (i - (len(_SPEEDUP_FIGURES) - 1) / 2.0) * width)
            ys.append(entry["value"])
            err[0].append(max(0.0, entry["value"] - lo))
            err[1].append(max(0.0, hi - entry["value"]))
        if xs:
            ax.bar(xs, ys, width, yerr=err, capsize=3, label=name)
    for x, lv in enumerate(levels):
        if not lv.get("valid", True):
            ax.axvspan(x - 0.45, x + 0.45, color="#bbbbbb", alpha=0.4, hatch="//")
            ax.text(x, 1.0, "invalid", ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(range(len(levels))))
    ax.set_xticklabels([_plot_label(lv) for lv in levels], rotation=20)
    ax.set_xlabel("load level")
    ax.set_ylabel("speculative vs baseline (> 1 better)")
    ax.set_title("Speedups with 95%% intervals: %s" % (report.get("service") or ""))
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return [saved(fig, out_dir, "speedup.png", "Speedups with their 95% intervals (invalid levels greyed)")]


def _plot_temperature(report, out_dir):
    """acceptance_temperature.png: acceptance rate against temperature, with the 0.5 / 0.65 bands."""
    rows = [r for r in report.get("temperature_sweep") or [] if r.get("acceptance_rate") is not None]
    plt = pyplot()[0]
    if not rows or plt is None:
        return []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.axhspan(0, 0.5, color="#f4cccc", alpha=0.5, label="< 0.5: off")
    ax.axhspan(0.5, 0.65, color="#fff2cc", alpha=0.6, label="0.5-0.65: measure P99")
    ax.axhspan(0.65, 1.0, color="#d9ead3", alpha=0.5, label="> 0.65: likely helps")
    ax.plot(
        [r["temperature"] for r in rows], [r["acceptance_rate"] for r in rows], marker="o", color="#333333"
    )
    for r in rows:
        if r["production"]:
            ax.scatter(
                [r["temperature"]],
                [r["acceptance_rate"]],
                s=120,
                facecolors="none",
                edgecolors="#cc0000",
                label="production temperature",
            )
    ax.set_xlabel("temperature")
    ax.set_ylabel("draft acceptance rate")
    ax.set_ylim(0, 1.0)
    ax.set_title("Acceptance by temperature: %s" % (report.get("service") or ""))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return [saved(fig, out_dir, "acceptance_temperature.png", "Acceptance by temperature")]


def write_report(report, out_dir, plots=True, basename="report"):
    """Write <basename>.json, <basename>.md and the plots under out_dir. Returns the paths."""
    return report_files.write_report(out_dir, basename, report, render_markdown, render_plots, plots)[0]
