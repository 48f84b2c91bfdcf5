#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: benchmark_report

short_description: Compare baseline and speculative benchmark runs, decide keep, rollback, inconclusive or invalid beyond the noise, write the report

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Takes the runs of M(specpilot.core.vllm_load) for both sides (speculative decoding off, V(baseline),
    and on, V(speculative)) at one or more load levels and computes, per level, p50/p90/p99 of TTFT,
    TPOT, inter-token and end-to-end latency, per-request and system throughput, the speedups
    (baseline / speculative for latencies, speculative / baseline for throughput), the P50 vs P99 gap
    of both sides, and the acceptance ceiling (mean acceptance length) next to the realised speedup
    (the share of the headroom converted).
  - "Validity first: a level whose measurement measured nothing is V(invalid) and is not judged - a side
    without successful requests, a failing baseline, no warm-up, a stream that arrived in bursts (TPOT or
    ITL p50 under 0.05 ms, or outputs in one or two chunks), a saturated client (CPU or late sends), no
    acceptance counters on the speculative side, or a realised speedup above 1.1x the acceptance ceiling."
  - "Then every ratio (TTFT, TPOT, E2E, per-request tok/s; p50 and p99) gets a 95% confidence interval from a
    paired bootstrap over prompts and runs, and the service's policy (O(policy), the spec's C(workload.slo))
    decides - V(keep) only when the figure the service is bound by improves beyond the noise and no other
    figure regresses beyond its allowance beyond the noise; V(rollback) only when a regression is beyond the
    noise; V(inconclusive) otherwise, with the runs that would likely decide it. The overall verdict is the
    target level's; V(invalid) when that level is invalid."
  - Also reports acceptance by temperature (from O(sweep)), the recommended C(num_speculative_tokens) from the
    per-position acceptance curve, and output equivalence at temperature 0.
  - Writes C(report.json), C(report.md) and PNG plots (latency vs load for both sides, throughput,
    per-position acceptance) under O(output_dir), with the five context fields - hardware, model
    and draft, runtime version, request parameters, workload.
  - C(changed) is true when a report file was written or rewritten with new content. In check mode
    nothing is written.

options:
  runs:
    description:
      - The C(runs) of M(specpilot.core.vllm_load) for both sides, concatenated. Each needs C(side),
        C(level) and C(summary); C(acceptance) is used on the speculative side.
    type: list
    elements: dict
    required: true
  target_qps:
    description:
      - The request rate the service really serves; the overall verdict is the verdict of this level.
        When it was not measured, the nearest level above it is used (and the report says so).
        Unset (and no O(target_concurrency)) - the highest measured level.
    type: float
  target_concurrency:
    description:
      - The concurrency of the target level (for concurrency levels).
    type: int
  thresholds:
    description:
      - Verdict thresholds. C(ttft_min_gain), C(tpot_min_gain), C(throughput_min_gain) (relative
        gains the speculative side must exceed; default 0, negative tolerates that much regression),
        C(throughput_metric) (V(request) - median per-request tok/s, default; V(system) - all output
        tokens / wall time), C(statistic) (V(p50) default, V(p90), V(p99), V(mean)), C(max_error_rate)
        (default 0), C(p99_max_regression) (default null - off), C(gap_widening_warn) (default 0.25).
    type: dict
    default: {}
  policy:
    description:
      - "The service's SLO policy (the spec's C(workload.slo)): C(policy) (V(slo) default, or V(strict) - TTFT,
        TPOT and throughput must all improve beyond their O(thresholds) gains), C(bound_by) (V(tpot) default,
        V(ttft), V(e2e), V(throughput)), C(ttft_max_regression) (0.10), C(e2e_max_regression) (0.10),
        C(tpot_max_regression) (0), C(throughput_max_regression) (0), C(p99_ms) (absolute limits -
        C(ttft), C(tpot), C(e2e)), C(min_gain) (0; the bound figure's gain must exceed it),
        C(confidence) (0.95), C(resamples) (1000), C(seed) (0)."
    type: dict
    default: {}
  sweep:
    description:
      - "The temperature sweep - C(runs) (runs of M(specpilot.core.vllm_load) on the speculative side with
        C(tag.temperature)) and C(skipped) (why it did not run)."
    type: dict
    default: {}
  production_temperature:
    description:
      - The service's production temperature; its acceptance band enters the verdict's reasons.
    type: float
  service:
    description:
      - Service name for the report title.
    type: str
  hardware:
    description:
      - The hardware context field as given; or leave it out and give O(node).
    type: dict
  node:
    description:
      - The Node object the predictor runs on (from M(kubernetes.core.k8s_info)); GPU product from the
        C(nvidia.com/gpu.product) label, count from C(nvidia.com/gpu) capacity or the
        C(nvidia.com/gpu.count) label.
    type: dict
  pod:
    description:
      - The predictor Pod object (its GPU request is the per-replica GPU count).
    type: dict
  model:
    description:
      - Model context - C(target), C(draft), C(speculative_config), C(served_model_name).
    type: dict
  runtime:
    description:
      - Runtime context - C(image), C(engine_args). C(vllm_version) is taken from what the engine
        reported during the runs (C(/version)) unless given here.
    type: dict
  request_params:
    description:
      - Request parameters context. Default - built from the runs' configuration (API, sampling,
        warm-ups, runs per prompt, arrival, levels).
    type: dict
  workload:
    description:
      - Workload context - C(name) (required for a complete context), C(file), C(description).
        Sizes are added from the workload file and the runs.
    type: dict
  output_dir:
    description:
      - Directory for C(report.json), C(report.md) and the plots (created when missing).
    type: path
    required: true
  plots:
    description:
      - Write the PNG plots (needs matplotlib).
    type: bool
    default: true
  fail_on_incomplete_context:
    description:
      - Fail when one of the five context fields could not be filled.
    type: bool
    default: false

notes:
  - Speedups use the statistic in O(thresholds) (median by default) over every timed request of a
    level; per-prompt medians are in the report too.
  - The headroom converted is realised speedup / mean acceptance length, where the realised speedup is
    the per-request tok/s ratio (the TPOT ratio when that is missing).

seealso:
  - module: specpilot.core.vllm_load

requirements:
  - python >= 3.9
  - matplotlib (plots)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode the verdict is computed and nothing is written.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Decide and write the report
  specpilot.core.benchmark_report:
    runs: "{{ baseline_runs.runs + spec_runs.runs }}"
    target_qps: 8
    policy:
      bound_by: tpot
      ttft_max_regression: 0.1
    service: chat
    node: "{{ node_info.resources[0] }}"
    pod: "{{ pod_info.resources[0] }}"
    model:
      target: hf://meta-llama/Llama-3.1-8B-Instruct
      draft: hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B
      speculative_config: {method: eagle3, num_speculative_tokens: 3}
    runtime:
      image: vllm/vllm-openai:v0.32.0
    workload:
      name: code-edit
      file: "{{ role_path }}/files/workloads/code-edit.jsonl"
    output_dir: reports/benchmark/chat
  register: report

- name: Show the verdict
  ansible.builtin.debug:
    msg: "{{ report.decision }}: {{ report.summary }}"
"""

RETURN = r"""
verdict:
  description: "C({decision, level, reasons, policy}) at the target level; C(decision) is V(keep), V(rollback),
    V(inconclusive) or V(invalid). Only V(rollback) may trigger an automatic rollback."
  returned: always
  type: dict
decision:
  description: C(verdict.decision).
  returned: always
  type: str
action:
  description: What to do, in one sentence.
  returned: always
  type: str
summary:
  description: The report's opening paragraph in plain language.
  returned: always
  type: str
recommendation:
  description: "C({num_speculative_tokens, expected_tokens_per_step, reason}) from the per-position acceptance
    curve; null without acceptance figures."
  returned: always
  type: dict
measured_acceptance:
  description:
    - "C({acceptance_rate, mean_acceptance_length, per_position_acceptance, num_drafts, num_draft_tokens, temperature,
      where}) - the speculative side's acceptance the benchmark records on the cluster (the smoke role's entry point
      C(record), C(source: benchmark)) and recommends k from: the sweep at the production temperature, else the target
      level (C(where) says which); null without acceptance figures."
  returned: always
  type: dict
temperature_sweep:
  description: "C([{temperature, acceptance_rate, mean_acceptance_length, per_position, band, production}]); band
    V(off) below 0.5, V(measure_p99) 0.5-0.65, V(likely_helps) above."
  returned: always
  type: list
  elements: dict
equivalence:
  description: C({compared, identical, differing, skipped}) - completions of both sides at temperature 0.
  returned: always
  type: dict
reasons:
  description: Why, one line per finding at the target level.
  returned: always
  type: list
  elements: str
notes:
  description: Caveats (missing context, per-position collapse, P50 vs P99 gap widening, levels
    that disagree).
  returned: always
  type: list
  elements: str
per_level:
  description: Verdict per level key.
  sample: {"qps=1": "keep", "qps=8": "rollback"}
  returned: always
  type: dict
target:
  description: C({requested, level}) - the requested target and the level the verdict uses.
  returned: always
  type: dict
levels:
  description: "Per level - C(level), C(decision), C(valid), C(invalid_reasons), C(ratios) (ttft, tpot,
    throughput, e2e - each C({value, ci95}) at p50), C(runs_needed), C(speedups) (ttft, tpot, request_tok_s,
    output_throughput, e2e; point estimates), C(headroom) (ceiling, realised, converted), C(acceptance)."
  returned: always
  type: list
  elements: dict
context:
  description: The five context fields (hardware, model, runtime, request_params, workload).
  returned: always
  type: dict
context_missing:
  description: Context fields that could not be filled.
  returned: always
  type: list
  elements: str
paths:
  description: C({json, markdown, plots}) written under O(output_dir) (null in check mode).
  returned: always
  type: dict
"""

import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specpilot.core.plugins.module_utils.common import read_files
from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_analysis import analyse
from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_client import (
    RunConfigError,
    load_workload,
)
from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_report import (
    build_context,
    build_report,
    hardware_from_node,
    workload_context,
    write_report,
)


def request_params_from_runs(runs):
    cfgs = [r.get("config") or {} for r in runs]
    if not cfgs:
        return None
    c = cfgs[0]
    levels = []
    for r in runs:
        key = (r.get("level") or {}).get("key")
        if key and key not in levels:
            levels.append(key)
    out = {
        "api": c.get("api"),
        "sampling": c.get("sampling"),
        "stream": True,
        "include_usage": c.get("include_usage", True),
        "warmup_requests": c.get("warmup_requests"),
        "runs_per_prompt": c.get("runs_per_prompt"),
        "arrival": c.get("arrival"),
        "arrival_seed": c.get("seed"),
        "levels": levels,
    }
    differs = [
        k
        for k in ("sampling", "api", "runs_per_prompt", "warmup_requests", "arrival", "seed", "prompt_ids")
        if any(json.dumps(x.get(k), sort_keys=True) != json.dumps(c.get(k), sort_keys=True) for x in cfgs)
    ]
    if differs:
        out["differs_between_runs"] = differs
    return out


def _runtime(given, runs, notes):
    """The runtime context: as given, with the vLLM version the engines reported."""
    runtime = dict(given or {})
    versions = sorted(
        {(r.get("server") or {}).get("version") for r in runs if (r.get("server") or {}).get("version")}
    )
    if not runtime.get("vllm_version") and versions:
        runtime["vllm_version"] = versions[0] if len(versions) == 1 else ", ".join(versions)
    if len(versions) > 1:
        notes.append("the two sides report different vLLM versions: %s" % ", ".join(versions))
    runtime["reported_by_engine"] = versions
    return runtime


def _workload(given, runs, notes):
    """The workload context (None without a name), sizes from the file and the runs."""
    wl_in = dict(given or {})
    prompts = None
    if wl_in.get("file") and os.path.exists(wl_in["file"]):
        try:
            prompts = load_workload(wl_in["file"])
        except (RunConfigError, ValueError, OSError) as exc:
            notes.append("cannot read the workload file: %s" % exc)
    if not wl_in.get("name"):
        return None
    return workload_context(
        wl_in["name"], wl_in.get("file"), prompts, [r.get("summary") for r in runs], wl_in.get("description")
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            runs=dict(type="list", elements="dict", required=True),
            target_qps=dict(type="float"),
            target_concurrency=dict(type="int"),
            thresholds=dict(type="dict", default={}),
            policy=dict(type="dict", default={}),
            sweep=dict(type="dict", default={}),
            production_temperature=dict(type="float"),
            service=dict(type="str"),
            hardware=dict(type="dict"),
            node=dict(type="dict"),
            pod=dict(type="dict"),
            model=dict(type="dict"),
            runtime=dict(type="dict"),
            request_params=dict(type="dict"),
            workload=dict(type="dict"),
            output_dir=dict(type="path", required=True),
            plots=dict(type="bool", default=True),
            fail_on_incomplete_context=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    runs = p["runs"]
    target = None
    if p["target_qps"] is not None or p["target_concurrency"] is not None:
        target = {"qps": p["target_qps"], "concurrency": p["target_concurrency"]}
    try:
        analysis = analyse(
            runs,
            target=target,
            thresholds=p["thresholds"],
            policy=p["policy"],
            sweep=p["sweep"],
            method=((p["model"] or {}).get("speculative_config") or {}).get("method"),
            production_temperature=p["production_temperature"],
        )
    except (ValueError, KeyError, TypeError) as exc:
        module.fail_json(msg="cannot analyse the runs: %s" % exc, exception=traceback.format_exc())

    hardware = p["hardware"] or hardware_from_node(p["node"], p["pod"])
    runtime = _runtime(p["runtime"], runs, analysis["notes"])
    workload = _workload(p["workload"], runs, analysis["notes"])
    context, missing = build_context(
        hardware, p["model"], runtime or None, p["request_params"] or request_params_from_runs(runs), workload
    )
    report = build_report(analysis, context, missing, service=p["service"])
    if missing and p["fail_on_incomplete_context"]:
        module.fail_json(msg="context incomplete: %s" % ", ".join(missing), context_missing=missing)

    levels = [
        {
            "level": lv["level"],
            "decision": lv["decision"],
            "valid": lv["valid"],
            "invalid_reasons": lv["invalid_reasons"],
            "ratios": lv["ratios"],
            "runs_needed": lv["runs_needed"],
            "speedups": lv["comparison"].get("speedups"),
            "headroom": lv["comparison"].get("headroom"),
            "acceptance": lv.get("acceptance"),
        }
        for lv in analysis["levels"]
    ]
    result = dict(changed=False, levels=levels, context=context, context_missing=missing, paths=None)
    for key in (
        "verdict",
        "decision",
        "action",
        "summary",
        "recommendation",
        "measured_acceptance",
        "temperature_sweep",
        "equivalence",
        "reasons",
        "notes",
        "per_level",
        "target",
    ):
        result[key] = report[key]
    if not module.check_mode:
        out_dir = p["output_dir"]
        names = [
            os.path.join(out_dir, n)
            for n in (
                "report.json",
                "report.md",
                "latency.png",
                "throughput.png",
                "acceptance.png",
                "acceptance_temperature.png",
            )
        ]
        before = read_files(names)
        try:
            paths = write_report(report, out_dir, plots=p["plots"])
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot write the report under %s: %s" % (out_dir, exc))
        after = read_files(names)
        # the report carries its generation time, so a re-run always rewrites it
        result["changed"] = before != after
        result["paths"] = paths
        result["notes"] = report["notes"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
