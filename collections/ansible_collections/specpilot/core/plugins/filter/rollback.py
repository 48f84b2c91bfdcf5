# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the rollback role: the decision and the verification (module_utils/operate/rollback)."""

from __future__ import annotations

import time

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.operate import rollback
from ansible_collections.specpilot.core.plugins.plugin_utils.filter_args import mapping_or_none as _mapping


def rollback_decision(live, mode="off", options=None, now=None):
    """live | rollback_decision(mode, options): what an off/restore rollback must write."""
    if mode not in ("off", "restore"):
        raise AnsibleFilterError("rollback_decision: mode must be off or restore, not %r" % (mode,))
    return rollback.decide(
        _mapping(live, "rollback_decision") or {},
        mode,
        float(now) if now is not None else time.time(),
        _mapping(options, "options") or {},
    )


def rollback_verify(live, decision):
    """live | rollback_verify(decision): no speculative flags left, stored predictor as decided."""
    return rollback.verify(_mapping(live, "rollback_verify") or {}, _mapping(decision, "decision") or {})


def rollback_smoke_plan(plan, decision):
    """plan | rollback_smoke_plan(decision): the plan the rollback's smoke check judges by (a restore:
    the restored revision's)."""
    return rollback.smoke_plan(
        _mapping(plan, "rollback_smoke_plan") or {}, _mapping(decision, "decision") or {}
    )


def rollback_reclaim_summary(reclaim, delete=False):
    """decision.reclaim | rollback_reclaim_summary(delete): one line on what the draft reclaim does."""
    return rollback.reclaim_summary(_mapping(reclaim, "rollback_reclaim_summary") or {}, bool(delete))


def rollback_decision_summary(decision, mode="off"):
    """decision | rollback_decision_summary(mode): one line on what the rollback writes."""
    return rollback.decision_summary(_mapping(decision, "rollback_decision_summary") or {}, mode)


class FilterModule(object):
    """specpilot rollback filters."""

    def filters(self):
        return {
            "rollback_decision": rollback_decision,
            "rollback_decision_summary": rollback_decision_summary,
            "rollback_reclaim_summary": rollback_reclaim_summary,
            "rollback_smoke_plan": rollback_smoke_plan,
            "rollback_verify": rollback_verify,
        }
