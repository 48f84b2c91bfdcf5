# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the benchmark role, for the decisions of one step (the rest is planned once by
specpilot.core.benchmark_plan): a tuning candidate's twin, how long the twin's lock lasts, where an
InferenceService answers, and why the deployed service cannot be measured.  The logic lives in module_utils/benchmark/bench_plan.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_plan, bench_verdict


def _mapping(value, filter_name, what):
    if not isinstance(value, Mapping):
        raise AnsibleFilterError("%s expects %s, got %s" % (filter_name, what, type(value).__name__))
    return value


def benchmark_twin(plan, variant):
    """plan | benchmark_twin({plan, suffix}) -> the twin of a tuning candidate: {name, args, digest,
    manifest} (see bench_plan.render_twin; the baseline twin is benchmark_plan's)."""
    _mapping(plan, "benchmark_twin", "the validated plan")
    _mapping(variant, "benchmark_twin", "the candidate as {plan, suffix}")
    try:
        return bench_plan.render_twin(
            plan, str(variant["suffix"]), _mapping(variant["plan"], "benchmark_twin", "variant.plan")
        )
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(
            "benchmark_twin: %s is missing (give the plans of specpilot.core.spec_validate and the twin's suffix)"
            % exc
        )


def benchmark_url(isvc, client, override=""):
    """InferenceService | benchmark_url(client, override) -> the URL the load is sent to."""
    if isvc is not None:
        _mapping(isvc, "benchmark_url", "an InferenceService")
    return bench_plan.service_url(isvc, client, override or "")


def benchmark_target_problem(resources, planned_args):
    """k8s_info resources | benchmark_target_problem(plan.args) -> why it cannot be measured, or ''."""
    if not isinstance(resources, (list, tuple)):
        raise AnsibleFilterError(
            "benchmark_target_problem expects the resources of k8s_info, got %s" % type(resources).__name__
        )
    return bench_plan.target_problem(list(resources), list(planned_args or []))


def benchmark_twin_lock_seconds(api_timeout, requested=0):
    """specpilot_benchmark_api_timeout | benchmark_twin_lock_seconds(specpilot_benchmark_twin_lock_seconds) -> s."""
    try:
        return bench_plan.twin_lock_seconds(api_timeout, requested or 0)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("benchmark_twin_lock_seconds: %s" % exc)


def benchmark_engine_restarts(runs, before, after):
    """runs | benchmark_engine_restarts(pods before, pods after) -> the runs, each one's summary with
    ``engine_restarts`` when the side's engine restarted while that level was measured (the level is then
    invalid, bench_verdict.level_validity, with the reason; bench_verdict.restarts_of_level)."""
    if not isinstance(runs, (list, tuple)):
        raise AnsibleFilterError("benchmark_engine_restarts expects a list of runs, got %s" % type(runs).__name__)
    restarted = bench_verdict.engine_restarts(list(before or []), list(after or []))
    if not restarted:
        return list(runs)
    out = []
    for run in runs:
        hit = bench_verdict.restarts_of_level(restarted, run)
        out.append(dict(run, summary=dict(run.get("summary") or {}, engine_restarts=hit)) if hit else run)
    return out


class FilterModule(object):
    """specpilot benchmark filters."""

    def filters(self):
        return {
            "benchmark_twin": benchmark_twin,
            "benchmark_twin_lock_seconds": benchmark_twin_lock_seconds,
            "benchmark_url": benchmark_url,
            "benchmark_target_problem": benchmark_target_problem,
            "benchmark_engine_restarts": benchmark_engine_restarts,
        }
