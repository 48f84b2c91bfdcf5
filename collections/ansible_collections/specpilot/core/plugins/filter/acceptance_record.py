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
from ansible_collections.specpilot.core.plugins.module_utils.service import live


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


def acceptance_record_change(obj, plan, data=None, runtime=None):
    """live serving object | acceptance_record_change(plan, record data, runtime) -> the lines validate.yml shows: the
    change of the vLLM release or image (live.changes), the acceptance recorded for the running release, and that
    the new one is unmeasured until smoke or canary.yml measures it."""
    if not isinstance(plan, dict):
        raise AnsibleFilterError("acceptance_record_change expects the validated plan")
    if not isinstance(obj, dict) or not obj:
        return ["%s/%s is not deployed: no running vLLM release to compare with" % (plan.get("namespace"), plan.get("name"))]
    changes = live.changes(obj, plan, runtime if isinstance(runtime, dict) else None)
    return ar.change_lines(changes, data if isinstance(data, dict) else {}, live.view(obj).vllm_version,
                           plan.get("vllm_version"))


class FilterModule(object):
    """specpilot acceptance record filters."""

    def filters(self):
        return {
            "acceptance_record_change": acceptance_record_change,
            "acceptance_record_compare": acceptance_record_compare,
            "acceptance_record_data": acceptance_record_data,
            "acceptance_record_summary": acceptance_record_summary,
        }
