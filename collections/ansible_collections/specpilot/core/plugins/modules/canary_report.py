#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the canary's report (module_utils/canary.py report_markdown)."""

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

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specpilot.core.plugins.module_utils import canary


def main():
    module = AnsibleModule(
        argument_spec=dict(
            report=dict(type="dict", required=True), output_dir=dict(type="path", required=True)
        ),
        supports_check_mode=True,
    )
    report, out = module.params["report"], module.params["output_dir"]
    paths = {"json": os.path.join(out, "report.json"), "markdown": os.path.join(out, "report.md")}
    if module.check_mode:
        module.exit_json(changed=False, paths={})
    try:
        text = canary.report_markdown(report)
    except (KeyError, TypeError) as exc:
        module.fail_json(msg="report: %s is missing or malformed" % exc)
    try:
        os.makedirs(out, exist_ok=True)
        with open(paths["json"], "w") as fh:
            json.dump(report, fh, indent=2, sort_keys=True)
        with open(paths["markdown"], "w") as fh:
            fh.write(text)
    except OSError as exc:
        module.fail_json(msg="cannot write the report in %s: %s" % (out, exc))
    # a report is an output of the run, not managed state
    module.exit_json(changed=False, paths=paths)


if __name__ == "__main__":
    main()
