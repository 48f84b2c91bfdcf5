#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the canary's report (module_utils/operate/canary.py report_markdown; fact_tasks.canary_report)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: canary_report
short_description: Write a canary's report as JSON and Markdown
description:
  - Writes C(report.json) and C(report.md) into O(output_dir) (created when missing) from the canary's steps as
    M(specpilot.core.canary_step) returned them, with both arms' p50/p99, acceptance, the decision and its reasons
    per step.
version_added: "0.2.0"
author: specpilot maintainers (@specpilot)
options:
  report:
    description: The report (service, namespace, outcome, summary, canary_name, steps_planned, window_s, min_requests, min_acceptance, steps).
    type: dict
    required: true
  output_dir:
    description: Where the files go.
    type: path
    required: true
  plots:
    description: Draw C(latency.png) (both arms' p50 and p99 of TTFT, TPOT and E2E per step), linked from the Markdown.
    type: bool
    default: true
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
- name: Write the report
  specpilot.core.canary_report:
    report: "{{ canary_report }}"
    output_dir: /srv/reports/canary/lab-ngram
"""

RETURN = r"""
paths:
  description: C(json) and C(markdown) paths written (nothing in check mode).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks


def main():
    # the work is fact_tasks.canary_report; playbooks run it in the worker (plugins/action/canary_report.py)
    module = AnsibleModule(argument_spec=fact_tasks.CANARY_REPORT_ARGS, supports_check_mode=True)
    fact_tasks.exit_module(module, fact_tasks.canary_report)


if __name__ == "__main__":
    main()
