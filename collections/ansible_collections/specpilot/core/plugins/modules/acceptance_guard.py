#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: acceptance_guard

short_description: Judge a speculative-decoding service from its latest acceptance reading and its history

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - One step of the specpilot acceptance guard for one InferenceService. Takes the live InferenceService, a
    reading of the last window (O(metrics), the result of M(specpilot.core.vllm_metrics_facts) called with
    C(previous); or, with O(prometheus_url), the same PromQL as the PrometheusRule of
    M(specpilot.core.monitoring) over O(prometheus_window)) and the stored guard history.
  - "Returns the status of the reading: C(off) (no speculative flags on the InferenceService), C(absent),
    C(missing) (flags set but no C(vllm:spec_decode_*) series), C(idle) (fewer than O(min_draft_tokens)
    drafted), C(no-window) (V0 cumulative gauge only), C(low), C(borderline) or C(healthy); the new history
    (the last O(history_size) readings); the streak of low readings taken with the current speculative
    config; and the action: C(none), C(watch) (low, streak shorter than O(consecutive_readings)), C(report)
    (O(consecutive_readings) low readings in a row without O(auto_rollback), or C(missing)) or C(rollback)."
  - Idle, missing and V0 readings neither count towards the streak nor break it; healthy and borderline
    readings break it, and so does a change of the speculative config.
  - Does not write anything (the role stores C(history_json) and runs the rollback); never reports
    C(changed). Supports check mode.

options:
  name:
    description:
      - Service name, for the messages.
    type: str
    required: true
  isvc:
    description:
      - The InferenceService as read from the cluster (C(resources[0]) of M(kubernetes.core.k8s_info)); null
        or empty when it does not exist.
    type: dict
  metrics:
    description:
      - Result of M(specpilot.core.vllm_metrics_facts) for the second scrape of the window (called with
        C(previous) set to the first).
      - Ignored with O(prometheus_url).
    type: dict
  prometheus_url:
    description:
      - Base URL of a Prometheus (or Thanos querier) HTTP API; the reading is then taken from it with
        instant queries of C(increase()) over O(prometheus_window).
    type: str
  prometheus_window:
    description:
      - Range of the Prometheus reading (a Prometheus duration).
    type: str
    default: 15m
  prometheus_headers:
    description:
      - Extra HTTP headers for O(prometheus_url), e.g. C(Authorization). Values are not logged.
    type: dict
  selector:
    description:
      - "Prometheus labels selecting the service's series; default C({namespace: <ns>, model_name: <name>})."
    type: dict
  namespace:
    description:
      - Namespace of the service (for the default O(selector)).
    type: str
  vllm_version:
    description:
      - vLLM version of the engine, to pick the metric names of the Prometheus queries.
    type: str
    default: 0.32.0
  validate_certs:
    description:
      - Verify the TLS certificate of an C(https) O(prometheus_url).
    type: bool
    default: true
  timeout:
    description:
      - Seconds to wait for each Prometheus query.
    type: float
    default: 10
  history:
    description:
      - The stored history (a JSON list as stored, or a list). Unreadable content starts a new history.
    type: raw
  min_acceptance_rate:
    description:
      - A reading below this draft acceptance rate is C(low).
    type: float
    default: 0.5
  warn_acceptance_rate:
    description:
      - A reading below this rate (and not low) is C(borderline).
    type: float
    default: 0.65
  min_draft_tokens:
    description:
      - Fewer drafted tokens in the window make the reading C(idle) (no verdict).
    type: int
    default: 100
  consecutive_readings:
    description:
      - Low readings in a row (K) before the action becomes C(report) or C(rollback).
    type: int
    default: 3
  history_size:
    description:
      - Readings kept in the history (N, at least O(consecutive_readings)).
    type: int
    default: 10
  collapse_threshold:
    description:
      - Per-position acceptance under which a draft position is reported as collapsed.
    type: float
    default: 0.05
  auto_rollback:
    description:
      - Make the action C(rollback) instead of C(report) after O(consecutive_readings) low readings.
    type: bool
    default: false
  production_temperature:
    description:
      - The service's production sampling temperature (C(specpilot_workload.temperature)), for C(acceptance_band) - the
        guard reads live traffic, at whatever temperature the clients send, and says so next to the production
        temperature. Null - not given.
    type: float
  verdict_reports:
    description:
      - The service's benchmark and canary reports (C(report.json) paths on the controller). The newest of those that
        exist is returned as RV(latest_verdict) and named at the end of RV(message) - the guard judges acceptance only;
        whether speculation pays off is those reports' verdict.
    type: list
    elements: path
    default: []

seealso:
  - module: specpilot.core.vllm_metrics_facts
  - module: specpilot.core.monitoring
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
- name: First scrape
  specpilot.core.vllm_metrics_facts:
    url: "{{ metrics_url }}"
  register: first

- name: Wait for the window
  ansible.builtin.pause:
    seconds: 60

- name: Second scrape
  specpilot.core.vllm_metrics_facts:
    url: "{{ metrics_url }}"
    previous: "{{ first }}"
  register: second

- name: Judge the window
  specpilot.core.acceptance_guard:
    name: chat-eagle3
    isvc: "{{ isvc_info.resources[0] | default(omit) }}"
    metrics: "{{ second }}"
    history: "{{ history_cm.resources[0].data.history | default(omit) }}"
    consecutive_readings: 3
  register: verdict

- name: Or read the window from Prometheus
  specpilot.core.acceptance_guard:
    name: chat-eagle3
    namespace: llm-serving
    isvc: "{{ isvc_info.resources[0] }}"
    prometheus_url: http://prometheus-operated.monitoring.svc:9090
    prometheus_window: 15m
    vllm_version: 0.32.0
  register: verdict
"""

RETURN = r"""
status:
  description: Status of this reading (off, absent, missing, idle, no-window, low, borderline, healthy).
  returned: success
  type: str
  sample: low
action:
  description: What to do (none, watch, report, rollback).
  returned: success
  type: str
  sample: watch
streak:
  description: Low readings in a row at the end of the history, for the current speculative config.
  returned: success
  type: int
consecutive_readings:
  description: The K the streak is compared with.
  returned: success
  type: int
message:
  description: One line for the report - what the guard judged (C(acceptance healthy), C(acceptance low)...), the
    reading, and the newest benchmark or canary verdict when O(verdict_reports) has one.
  returned: success
  type: str
latest_verdict:
  description: The newest report of O(verdict_reports) - C({kind, verdict, summary, at, path}) (C(kind) benchmark or
    canary; C(verdict) the benchmark's decision or the canary's outcome); null when none exists.
  returned: success
  type: dict
acceptance_band:
  description: "The band rule applied to a judged reading (status low, borderline, healthy or no-window; else null) -
    C({acceptance_rate, band (off, measure_p99, likely_helps), band_text, rule, production_temperature,
    read_at_temperature (null: live traffic), at_production (null), note, line})."
  returned: success
  type: dict
load:
  description:
    - How much of the time the service ran above the measured crossover its live speculative config carries (the
      last batch size of C(num_speculative_tokens_per_batch_size) with k > 0, or C(disable_by_batch_size) - 1), from
      C(vllm:num_requests_running) - C({crossover, source, share_above (0-1), basis, text}).
    - With O(prometheus_url) the share of the window (the same PromQL as the monitoring role's
      C(SpecDecodeAboveCrossover) alert); from scrapes the share of this config's readings in the history.
    - Null without a crossover or without a reading of the gauge. Also said at the end of RV(message).
  returned: success
  type: dict
findings:
  description: Interpretation (low acceptance, borderline, per-position collapse, metrics missing).
  returned: success
  type: list
  elements: str
notes:
  description: Problems with the stored history.
  returned: success
  type: list
  elements: str
state:
  description: What the InferenceService says (C(exists), C(on), C(config) parsed from
    C(--speculative-config), C(flags), C(digest) of the config).
  returned: success
  type: dict
reading:
  description: The window's figures (C(source), C(window), C(drafts), C(drafted), C(accepted),
    C(acceptance_rate), C(mean_acceptance_length), C(per_position), C(spec_series)).
  returned: success
  type: dict
record:
  description: Whether the history changed (every status but off and absent adds an entry).
  returned: success
  type: bool
entry:
  description: The history entry of this reading (C(at), C(status), C(cfg), C(rate), C(drafted),
    C(accepted), C(mal), C(pp), C(src)); null when nothing is recorded.
  returned: success
  type: dict
history:
  description: The history to store (oldest first, at most O(history_size) entries).
  returned: success
  type: list
  elements: dict
history_json:
  description: The same, as compact JSON (what the role stores).
  returned: success
  type: str
settings:
  description: The thresholds used.
  returned: success
  type: dict
"""

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks


def main():
    fact_tasks.run_module(fact_tasks.acceptance_guard, fact_tasks.ACCEPTANCE_GUARD_ARGS)


if __name__ == "__main__":
    main()
