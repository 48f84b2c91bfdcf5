#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a rollback, guard or canary report as JSON and Markdown (module_utils/fact_tasks.py report_write)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: report_write
short_description: Write a rollback, guard or canary report as JSON and Markdown
description:
  - Writes O(basename)C(.json) and O(basename)C(.md) into O(output_dir) (created when missing) - the report as
    given, and its Markdown rendered by the collection (the same renderer for every run, so the Markdown of a
    report never depends on a template copied into a playbook).
  - Each file is rewritten only when its bytes change. Writing a report never counts as a change (RV(written)
    says whether a file changed); in check mode nothing is written unless the task sets C(check_mode=false).
  - The smoke and benchmark reports are written by M(specpilot.core.smoke_verdict) and
    M(specpilot.core.benchmark_report), with their verdicts.
  - Playbooks run it in the Ansible worker (its action plugin), with no module payload.
version_added: "0.2.0"
author: specpilot maintainers (@specpilot)
options:
  kind:
    description:
      - C(rollback) the result of the rollback role (C(specpilot_rollback_result)) of one service;
        C(guard) the guard's report over the services of a play (C(specpilot_guard_report));
        C(canary) a canary run's steps (what M(specpilot.core.canary_report) writes);
        C(fleet) the fleet summary of C(playbooks/fleet_report.yml) (the filter C(specpilot.core.fleet_summary)).
    type: str
    required: true
    choices: [canary, fleet, guard, rollback]
  report:
    description: The report. A report the kind's renderer cannot read fails the task naming the missing key.
    type: dict
    required: true
  output_dir:
    description: Where the files go.
    type: path
    required: true
  basename:
    description: The files' name without C(.json)/C(.md); a plain name, no C(/).
    type: str
    default: report
  plots:
    description:
      - Draw the kind's plots beside the report (C(canary) - C(latency.png), both arms' p50 and p99 of TTFT, TPOT and
        E2E per step; C(fleet) - C(fleet.png), each service's acceptance by risk), linked from the Markdown. Without
        matplotlib the report's notes say why there is none.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Nothing is written unless the task sets C(check_mode=false).
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Write the rollback report of the service
  specpilot.core.report_write:
    kind: rollback
    report: "{{ specpilot_rollback_result }}"
    output_dir: /srv/reports/rollback
    basename: lab-ngram
  check_mode: false
"""

RETURN = r"""
paths:
  description: C(json) and C(markdown) paths written, and C(plots) (a list); empty in check mode.
  returned: always
  type: dict
written:
  description: Whether either file's bytes changed.
  returned: always
  type: bool
"""

from ansible_collections.specpilot.core.plugins.module_utils.fact_tasks import (
    REPORT_WRITE_ARGS,
    report_write,
    run_module,
)


def main():
    # the work is fact_tasks.report_write; playbooks run it in the worker (plugins/action/report_write.py)
    run_module(report_write, REPORT_WRITE_ARGS)


if __name__ == "__main__":
    main()
