# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the acceptance record (ConfigMap <service>-specpilot-acceptance): the data a measurement adds, and the
live acceptance against the record of the same vLLM release. The logic lives in
module_utils/engine/acceptance_record.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.engine import acceptance_record as ar


def acceptance_record_data(data, figures, plan, source="smoke", temperature=None, workload=None, at=None):
    """record data | acceptance_record_data(figures, plan, source, temperature, workload, at) -> the ConfigMap data
    with this measurement as its vLLM release's record (unchanged when it measured no acceptance)."""
    if not isinstance(plan, dict):
        raise AnsibleFilterError("acceptance_record_data expects the validated plan")
    new = ar.entry(source, plan.get("vllm_version"), plan.get("speculative_config"),
                   figures if isinstance(figures, dict) else {}, temperature, workload or None, at, plan.get("spec_digest"))
    return ar.merged(data if isinstance(data, dict) else {}, new)


def acceptance_record_compare(data, version, rate=None, per_position=None, tolerance=0.1):
    """record data | acceptance_record_compare(version, rate, per_position, tolerance) -> {recorded, differences,
    lower, text}, or {} when nothing is recorded for that release."""
    record = ar.recorded_for(data if isinstance(data, dict) else {}, version)
    return ar.compare(rate, per_position, record, float(tolerance)) or {}


def acceptance_record_summary(data, version):
    """record data | acceptance_record_summary(version) -> one line on the record of that release."""
    return ar.summary(ar.recorded_for(data if isinstance(data, dict) else {}, version))


class FilterModule(object):
    """specpilot acceptance record filters."""

    def filters(self):
        return {
            "acceptance_record_compare": acceptance_record_compare,
            "acceptance_record_data": acceptance_record_data,
            "acceptance_record_summary": acceptance_record_summary,
        }
