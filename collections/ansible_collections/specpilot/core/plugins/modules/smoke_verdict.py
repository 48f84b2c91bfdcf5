#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: smoke_verdict
short_description: Decide whether speculative decoding runs as planned and pays off; write the report
version_added: 0.1.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Takes what the smoke role gathered for one service and returns a list of checks and a verdict
    (C(pass), C(warn) or C(fail)).
  - "With I(expect=on): the InferenceService and its running predictor pod carry the planned speculative
    arguments exactly (C(--speculative-config=...) or the V0 flags); the engine log shows a clean start and a
    resolved C(speculative_config) that matches the plan (method, draft path, number of speculative tokens);
    the API server received exactly the planned config; the probe requests succeeded; C(/metrics) has
    C(vllm:spec_decode_*) series and drafts during the probes; the draft acceptance rate over the probes (from
    the C(/metrics) deltas) is at least I(thresholds.min_acceptance_rate) (else C(fail)) and
    I(thresholds.warn_acceptance_rate) (else C(warn)); the per-position acceptance does not collapse at
    I(thresholds.collapse_position); and the log windows after the probes agree with C(/metrics)."
  - "With I(expect=off) (after a rollback): no speculative flag in the InferenceService or the pod, the engine
    logged C(speculative_config=None), the probes succeeded, and neither C(/metrics) nor the log shows any
    speculative-decoding figure."
  - The figures are read with the seed guide's decision framework (below about 0.5 acceptance
    speculative decoding adds latency, 0.5 to 0.65 is borderline, above 0.65 it likely helps; the mean
    acceptance length is the ceiling of the speedup; a per-position curve that collapses by the 2nd slot
    means the workload does not fit the proposer) and returned as C(interpretation).
  - With I(report_dir), writes C(<basename>.json), C(<basename>.md) and C(<basename>-acceptance.png)
    (per-position acceptance against the thresholds; needs matplotlib) there on the host that runs the
    module.
  - The task fails only when I(fail_on_verdict) is true and the verdict is C(fail), after the report is
    written.
options:
  service:
    description: Service name (the report title); default the plan's C(name).
    type: str
  expect:
    description: C(on) - speculative decoding must run as planned; C(off) - it must be off (after a rollback).
    type: str
    choices: ["on", "off"]
    default: "on"
  plan:
    description: The C(plan) of M(specpilot.core.spec_validate) (C(speculative_config), C(speculative_args),
      C(args), C(name), C(namespace), C(vllm_version)).
    type: dict
    required: true
  inferenceservice:
    description: The InferenceService as read from the cluster; null when it does not exist.
    type: dict
  pod:
    description: The predictor pod the probes went to (or the newest one when none is ready); null when none.
    type: dict
  container:
    description: Name of the engine container.
    type: str
    default: kserve-container
  log_facts:
    description: M(specpilot.core.vllm_log_facts) of the whole engine log (start-up facts, start errors).
    type: dict
  log_previous:
    description: M(specpilot.core.vllm_log_facts) of the previous container instance's log, when it restarted.
    type: dict
  log_error:
    description:
      - Why the engine log could not be read (the API's answer, e.g. C(pods/log) forbidden), when I(log_facts)
        is missing; the failed check names it.
    type: str
  log_window:
    description: M(specpilot.core.vllm_log_facts) of the log lines after the probes started (its C(since)
      was the last line read before them).
    type: dict
  metrics_before:
    description: M(specpilot.core.vllm_metrics_facts) before the probes.
    type: dict
  metrics_after:
    description: M(specpilot.core.vllm_metrics_facts) after the probes, with I(metrics_before) as C(previous).
    type: dict
  probes:
    description: The result of M(specpilot.core.smoke_probe) (or of the same code run in the pod).
    type: dict
  skip_reason:
    description: Why no probes were sent (shown in the failed check).
    type: str
  path_aliases:
    description:
      - "Path prefixes the engine sees differently from the pod spec, as C({seen prefix: path in the pod}); the
        draft path of the engine log is mapped back through them before it is compared with the plan."
      - Empty wherever the engine runs in the pod's own filesystem (any KServe cluster, and the lab, whose engines
        see the pod's volumeMounts); for runtimes whose entry point moves the models before vLLM starts.
    type: dict
    default: {}
  access:
    description: How the engine was reached (C({mode, url})), for the report.
    type: dict
    default: {}
  request:
    description: The probe settings (C({prompts, count, max_tokens, temperature, request_params})), for the
      report.
    type: dict
    default: {}
  production_temperature:
    description:
      - The service's production sampling temperature (C(specpilot_workload.temperature)). The report states the
        acceptance band of the reading (below 0.5 off, 0.5-0.65 measure P99 under load, above 0.65 likely helps) and
        says when the probes ran at another temperature (C(request.temperature), 0 by default), since acceptance
        changes with the temperature. Null - not given (the report says so).
    type: float
  inside_pod:
    description:
      - The registered result of C(specpilot.core.pod_exec) running the command of the
        C(specpilot.core.smoke_inside_command) filter in the predictor pod. The checks C(pod_vllm_version) (the
        release the image holds against the spec's) and C(pod_models) (the target and the draft are directories
        with a config.json as the pod sees them) read it.
      - Null - nothing was run (no pod); the check C(pod_view) says so.
    type: dict
  inside_pod_mode:
    description:
      - V(auto) - a look inside that could not be taken (exec forbidden, no such pod) is a skipped check saying why.
      - V(required) - it is a failure.
      - V(off) - not looked at; the check C(pod_view) says so.
    type: str
    default: auto
    choices: [auto, required, "off"]
  thresholds:
    description: Verdict thresholds; missing keys take their default.
    type: dict
    default: {}
    suboptions:
      min_acceptance_rate:
        description: Fail below this draft acceptance rate (0..1).
        type: float
        default: 0.5
      warn_acceptance_rate:
        description: Warn below this draft acceptance rate (0..1, at least I(min_acceptance_rate)).
        type: float
        default: 0.65
      min_mean_acceptance_length:
        description: Fail below this mean acceptance length (>= 1); null checks nothing.
        type: float
      collapse_position:
        description: Draft position (1-based) whose acceptance shows a collapse.
        type: int
        default: 2
      collapse_threshold:
        description: Acceptance at I(collapse_position) below this is reported as a collapse (a warning).
        type: float
        default: 0.05
      cross_check_tolerance:
        description: Largest difference between the log and C(/metrics) acceptance that still agrees.
        type: float
        default: 0.05
  report_dir:
    description: Directory for the report files; nothing is written when unset.
    type: path
  report_basename:
    description: File name stem of the report files.
    type: str
    default: smoke
  plot:
    description: Draw the per-position acceptance PNG (needs matplotlib).
    type: bool
    default: true
  fail_on_verdict:
    description: Fail the task when the verdict is C(fail) (after writing the report).
    type: bool
    default: false
notes:
  - Supports check mode. The report is the only thing written; in check mode it is not written unless the task
    sets C(check_mode=false) (the smoke role does, since the report is its output, not managed state).
seealso:
  - module: specpilot.core.smoke_probe
  - module: specpilot.core.vllm_log_facts
  - module: specpilot.core.vllm_metrics_facts
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Verdict and report of one service
  specpilot.core.smoke_verdict:
    expect: "on"
    plan: "{{ validation.plan }}"
    inferenceservice: "{{ isvc_info.resources | first | default(omit) }}"
    pod: "{{ predictor_pod }}"
    log_facts: "{{ engine_log_facts }}"
    log_window: "{{ engine_log_window }}"
    metrics_before: "{{ metrics_before }}"
    metrics_after: "{{ metrics_after }}"
    probes: "{{ probe }}"
    thresholds:
      min_acceptance_rate: 0.5
      warn_acceptance_rate: 0.65
    report_dir: "/var/lib/specpilot/reports/{{ inventory_hostname }}"
  register: smoke

- name: Show the figures in AWX
  ansible.builtin.set_stats:
    data:
      specpilot_smoke_results: "{{ {inventory_hostname: smoke.stats} }}"
"""

RETURN = r"""
verdict:
  description: C(pass), C(warn) or C(fail) (the worst check).
  returned: always
  type: str
  sample: pass
ok:
  description: The verdict is not C(fail).
  returned: always
  type: bool
message:
  description: One line - the service, the verdict and, unless it passed, what failed or warned.
  returned: always
  type: str
  sample: "lab-draft: FAIL - Acceptance rate: draft acceptance rate 0.02 (from /metrics) is below the minimum
    0.50: speculative decoding adds latency on this workload"
checks:
  description: The checks in order, each C({id, status, title, message, details}); C(status) is C(pass),
    C(warn), C(fail), C(info) or C(skip). Ids - C(plan), C(inferenceservice), C(isvc_args), C(pod),
    C(pod_args), C(engine_start), C(engine_previous), C(engine_config), C(engine_requested_config),
    C(engine_version), C(engine_warnings), C(probes), C(spec_metrics), C(acceptance),
    C(mean_acceptance_length), C(per_position), C(log_cross_check), C(log_window).
  returned: always
  type: list
  elements: dict
figures:
  description: Acceptance figures - C(acceptance_rate), C(mean_acceptance_length), C(per_position_acceptance)
    and their C(source) (C(metrics) or C(log)), the C(metrics) and C(log) figures side by side, and the mean
    latencies of the probe window (C(latency)).
  returned: always
  type: dict
interpretation:
  description: The seed guide's reading of the figures, as sentences.
  returned: always
  type: list
  elements: str
acceptance_band:
  description: "The band rule applied to the acceptance read - C({acceptance_rate, band (off, measure_p99,
    likely_helps), band_text, rule, production_temperature, read_at_temperature, at_production, note, line});
    C(at_production) is false when the probes ran at another temperature than O(production_temperature). Null
    when speculative decoding is expected off."
  returned: always
  type: dict
thresholds:
  description: The thresholds applied.
  returned: always
  type: dict
report_files:
  description: C({json, markdown, plot}) paths written (C(plot) null without per-position data or matplotlib);
    null without I(report_dir).
  returned: always
  type: dict
report:
  description: The report as written to the JSON file.
  returned: always
  type: dict
stats:
  description: Compact figures for C(ansible.builtin.set_stats) (verdict, acceptance rate from /metrics and
    from the log, mean acceptance length, per-position acceptance, token counts, failed and warned checks,
    report paths).
  returned: always
  type: dict
"""

from ansible_collections.specpilot.core.plugins.module_utils.fact_tasks import (
    SMOKE_VERDICT_ARGS,
    smoke_verdict,
    run_module,
)


def main():
    # the work is fact_tasks.smoke_verdict; playbooks run it in the worker (plugins/action/smoke_verdict.py)
    run_module(smoke_verdict, SMOKE_VERDICT_ARGS)


if __name__ == "__main__":
    main()
