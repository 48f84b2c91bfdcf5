#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: benchmark_tune

short_description: Choose the best speculative config of a tuning run under the service's SLO and write the table and plot

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - The last step of the tuning run (C(playbooks/tune.yml), the C(tune) entry point of the role
    C(specpilot_benchmark)). Each candidate - a C(num_speculative_tokens) and a method - ran as a speculative twin
    of the service and was measured the way the benchmark measures, against one baseline, and judged by
    M(specpilot.core.benchmark_report) (keep, rollback, inconclusive or invalid, by the service's SLO, with the
    ratios and their 95% confidence intervals). This module only reads those verdicts; it measures and decides
    nothing else.
  - "The recommendation is the candidate the verdict keeps with the largest gain on the figure the service is
    bound by (C(workload.slo.bound_by), e.g. TPOT), read at the verdict's level; a tie goes to the smaller
    C(num_speculative_tokens). There is none when no candidate is a keep."
  - Writes C(tune.json), C(tune.md) (the table of candidates, their reasons, links to each candidate's own
    benchmark report) and C(tune.png) (the bound figure per candidate with its interval, and the acceptance)
    under O(output_dir).
  - C(changed) is true when a report file was written with new content. In check mode nothing is written.

options:
  candidates:
    description:
      - "One entry per candidate - C(id), C(method), C(num_speculative_tokens), C(configured) (true for the
        service's own setting), and C(result) (what M(specpilot.core.benchmark_report) returned for it) or
        C(error) (why it was not measured)."
    type: list
    elements: dict
    required: true
  configured:
    description:
      - The service's configured C({method, num_speculative_tokens}), for the report.
    type: dict
    default: {}
  service:
    description:
      - Service name for the report title.
    type: str
  notes:
    description:
      - Lines added to the report's notes.
    type: list
    elements: str
    default: []
  schedule:
    description:
      - "The schedule sweep (C(specpilot_benchmark_tune_schedule)): the candidates were measured at concurrency
        levels; decide per level the best k (0 where nothing beats the baseline beyond the noise), the batch-size
        schedule C([[start, end, k], ...]) from batch 1 to O(max_num_seqs), and the crossover. Adds C(schedule),
        C(crossover) and C(sweep) to C(tune.json), the schedule section and the spec snippet to C(tune.md), and
        C(tune_schedule.png) (the heatmap)."
    type: bool
    default: false
  max_num_seqs:
    description:
      - The engine's C(--max-num-seqs), where the schedule ends (unset - vLLM's default, 256, with a note).
    type: int
  vllm_version:
    description:
      - The service's vLLM release, for the form of the advice (per-batch-size schedule, C(disable_by_batch_size),
        or one k).
    type: str
  data_parallel_size:
    description:
      - The engine's data parallel size (vLLM drops the schedule above 1).
    type: int
    default: 1
  output_dir:
    description:
      - Directory for C(tune.json), C(tune.md) and C(tune.png) (created when missing).
    type: path
    required: true
  plots:
    description:
      - Write C(tune.png) (needs matplotlib).
    type: bool
    default: true

seealso:
  - module: specpilot.core.benchmark_report

requirements:
  - python >= 3.9
  - matplotlib (plot)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Choose among the candidates and write the tuning report
  specpilot.core.benchmark_tune:
    service: chat
    configured: {method: eagle3, num_speculative_tokens: 3}
    candidates:
      - id: k2
        method: eagle3
        num_speculative_tokens: 2
        configured: false
        result: "{{ report_k2 }}"
      - id: k3
        method: eagle3
        num_speculative_tokens: 3
        configured: true
        result: "{{ report_k3 }}"
    output_dir: .reports/tune/chat
  register: tune

- name: Show the recommendation
  ansible.builtin.debug:
    msg: "{{ tune.summary }}"
"""

RETURN = r"""
recommendation:
  description: "C({id, method, num_speculative_tokens, decision, gain: {figure, value, ci95}, change, reason});
    every field but C(reason) is null when no candidate is a keep. C(change) is true when the recommended
    candidate is not the configured one."
  returned: always
  type: dict
candidates:
  description: "The table, one row per candidate - C(id), C(method), C(num_speculative_tokens), C(configured),
    C(decision) (keep, rollback, inconclusive, invalid, or error), C(level), C(bound) (C({figure, value, ci95})),
    C(ratios) (ttft, tpot, e2e, throughput - each C({value, ci95})), C(acceptance_rate),
    C(mean_acceptance_length), C(per_position), C(runs_needed), C(reasons), C(report)."
  returned: always
  type: list
  elements: dict
bound_by:
  description: The figure the service is bound by (from the verdicts' policy).
  returned: always
  type: str
lines:
  description: One line per candidate (id, method, k, decision, the bound figure's ratio and interval), for display.
  returned: always
  type: list
  elements: str
schedule:
  description: "With O(schedule): C([[start, end, k], ...]) from batch 1 to O(max_num_seqs), contiguous."
  returned: when schedule is true
  type: list
  elements: list
crossover:
  description: "With O(schedule): C({status, concurrency, interval, k, bound, text}) - status found, above_range,
    none or undecided."
  returned: when schedule is true
  type: dict
advice:
  description: "With O(schedule): C({form, speculative, notes}) - what to put in C(specpilot_speculative) for the
    service's vLLM."
  returned: when schedule is true
  type: dict
summary:
  description: The recommendation in one sentence.
  returned: always
  type: str
paths:
  description: C({json, markdown, plots}) written under O(output_dir) (null in check mode).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specpilot.core.plugins.module_utils.common import read_files
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import VersionError, parse_version
from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_tune import (
    build_tune_report,
    row_line,
    write_tune_report,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            candidates=dict(type="list", elements="dict", required=True),
            configured=dict(type="dict", default={}),
            service=dict(type="str"),
            notes=dict(type="list", elements="str", default=[]),
            output_dir=dict(type="path", required=True),
            plots=dict(type="bool", default=True),
            schedule=dict(type="bool", default=False),
            max_num_seqs=dict(type="int"),
            vllm_version=dict(type="str"),
            data_parallel_size=dict(type="int", default=1),
        ),
        supports_check_mode=True,
    )
    p = module.params
    sweep = None
    if p["schedule"]:
        try:
            version = parse_version(p["vllm_version"]) if p["vllm_version"] else None
        except VersionError as exc:
            module.fail_json(msg="%s: vllm_version %r: %s" % (p["service"], p["vllm_version"], exc))
        sweep = dict(max_num_seqs=p["max_num_seqs"], version=version, data_parallel_size=p["data_parallel_size"])
    report = build_tune_report(
        p["candidates"], service=p["service"], configured=p["configured"], notes=p["notes"], sweep=sweep
    )
    result = dict(
        changed=False,
        recommendation=report["recommendation"],
        candidates=report["candidates"],
        bound_by=report["bound_by"],
        summary=report["summary"],
        lines=[row_line(r) for r in report["candidates"]],
        paths=None,
    )
    if sweep is not None:
        result.update(schedule=report["schedule"], crossover=report["crossover"], advice=report["sweep"]["advice"])
    if not module.check_mode:
        names = [os.path.join(p["output_dir"], n) for n in ("tune.json", "tune.md", "tune.png", "tune_schedule.png")]
        before = read_files(names)
        try:
            result["paths"] = write_tune_report(report, p["output_dir"], plots=p["plots"])
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot write the tuning report under %s: %s" % (p["output_dir"], exc))
        result["changed"] = before != read_files(names)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
