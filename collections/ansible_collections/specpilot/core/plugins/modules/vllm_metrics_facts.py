#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: vllm_metrics_facts

short_description: Read speculative-decoding counters and latency from a vLLM /metrics page

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Scrapes (O(url)) or reads (O(path), O(content)) a vLLM Prometheus C(/metrics) page and returns
    the speculative-decoding counters summed over data-parallel engines, figures derived from them
    (acceptance rate, mean acceptance length, per-position acceptance), the V0 gauges, and mean
    latencies from the histograms the running vLLM version exports.
  - With O(previous) (an earlier result of this module, as registered) every derived figure and
    latency mean covers only the interval between the two scrapes. Engine restarts between them
    (a counter went down, or a C(_created) timestamp changed) are detected.
  - The page is parsed with prometheus_client's text parser (OpenMetrics when the page ends with
    C(# EOF)); label order does not matter and C(_total)/C(_created) companions are understood.
  - Read-only; never reports C(changed). Supports check mode.
  - Returns its facts as module results (use C(register)); it does not set C(ansible_facts).

options:
  url:
    description:
      - URL of the metrics endpoint, e.g. C(http://127.0.0.1:8080/metrics).
      - Exactly one of O(url), O(path), O(content).
    type: str
  path:
    description:
      - A saved C(/metrics) page on the target host.
    type: path
  content:
    description:
      - The C(/metrics) text itself (for example the stdout of a C(curl) run with
        M(specpilot.core.pod_exec) inside the predictor pod).
    type: str
  previous:
    description:
      - An earlier result of this module (the registered variable). Derived figures then use the
        counter deltas since that scrape.
    type: dict
  model_name:
    description:
      - Only use series whose C(model_name) label equals this (the served model name). Series
        without a C(model_name) label are always used.
    type: str
  headers:
    description:
      - Extra HTTP headers for O(url), e.g. C(Authorization). Values are not logged.
    type: dict
  timeout:
    description:
      - Seconds to wait for O(url).
    type: float
    default: 10
  validate_certs:
    description:
      - Verify the TLS certificate of an C(https) O(url).
    type: bool
    default: true

notes:
  - V1 counters are cumulative since the engine started; without O(previous) the derived figures
    cover the whole engine lifetime.
  - V0 (vLLM <= 0.9.2 V0 engine) C(_total) spec counters over-count (every logging interval adds the
    cumulative total), so the V0 acceptance rate comes from the C(vllm:spec_decode_draft_acceptance_rate) gauge.
  - Mean acceptance length is C(1 + accepted / drafts), as logged by vLLM >= 0.9.0 and as
    C(vllm bench serve) computes it.

seealso:
  - module: specpilot.core.vllm_log_facts

requirements:
  - python >= 3.9
  - prometheus-client
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
- name: Scrape before the probe requests
  specpilot.core.vllm_metrics_facts:
    url: "{{ predictor_url }}/metrics"
    model_name: "{{ served_model_name }}"
  register: before

- name: Send probe requests
  ansible.builtin.uri:
    url: "{{ predictor_url }}/v1/completions"
    method: POST
    body_format: json
    body: {model: "{{ served_model_name }}", prompt: "{{ item }}", max_tokens: 64, temperature: 0}
  loop: "{{ probe_prompts }}"

- name: Scrape after, with deltas against the first scrape
  specpilot.core.vllm_metrics_facts:
    url: "{{ predictor_url }}/metrics"
    model_name: "{{ served_model_name }}"
    previous: "{{ before }}"
    headers:
      Authorization: "Bearer {{ token }}"
  register: after

- name: Acceptance of the probes
  ansible.builtin.assert:
    that:
      - after.spec_decode_enabled
      - after.derived.draft_acceptance_rate >= 0.5
    fail_msg: "acceptance {{ after.derived.draft_acceptance_rate }} is below 0.5: speculative decoding adds latency"

- name: Parse a page read inside the pod
  specpilot.core.vllm_metrics_facts:
    content: "{{ exec_result.stdout }}"
"""

RETURN = r"""
source:
  description: The URL, the path, or V(content).
  returned: always
  type: str
scraped_at:
  description: When the page was read (UTC, ISO 8601).
  returned: always
  type: str
  sample: "2026-11-21T05:08:12.345Z"
scraped_at_epoch:
  description: The same as Unix seconds (used for C(derived.interval_seconds) of a later call).
  returned: always
  type: float
model_name:
  description: The O(model_name) filter.
  returned: always
  type: str
model_names:
  description: Every C(model_name) label value on vLLM series (before filtering).
  returned: always
  type: list
  elements: str
spec_decode_enabled:
  description: Any C(vllm:spec_decode_*) series is present (V1 registers them only with a speculative config; they may be zero).
  returned: always
  type: bool
spec_decode_active:
  description: Drafts happened in the window (the interval since O(previous), else since start); null without spec series.
  returned: always
  type: bool
spec_metric_names:
  description: The C(vllm:spec_decode_*) sample names present.
  returned: always
  type: list
  elements: str
engine_era:
  description: V(v1) (per-engine counters, C(num_drafts)), V(v0) (gauges / emitted-tokens counter), V(mixed) or null.
  returned: always
  type: str
engines:
  description: Values of the C(engine) label on spec series.
  returned: always
  type: list
  elements: str
counters:
  description: Raw counter totals, summed over C(engine) (and other labels); null when absent.
  returned: always
  type: dict
  contains:
    num_drafts:
      description: C(vllm:spec_decode_num_drafts_total) (0.8.5+).
      type: int
    num_draft_tokens:
      description: C(vllm:spec_decode_num_draft_tokens_total).
      type: int
    num_accepted_tokens:
      description: C(vllm:spec_decode_num_accepted_tokens_total).
      type: int
    num_emitted_tokens:
      description: C(vllm:spec_decode_num_emitted_tokens_total) (V0 only).
      type: int
    generation_tokens:
      description: C(vllm:generation_tokens_total).
      type: int
    prompt_tokens:
      description: C(vllm:prompt_tokens_total).
      type: int
    request_success:
      description: C(vllm:request_success_total) over every C(finished_reason).
      type: int
    accepted_per_position:
      description: C(vllm:spec_decode_num_accepted_tokens_per_pos_total) by C(position), index = position.
      type: list
      elements: int
finished:
  description: C(vllm:request_success_total) by C(finished_reason) (V(stop), V(length), V(abort), ...), raw totals.
  returned: always
  type: dict
created:
  description: Latest C(_created) timestamp per counter key (restart detection).
  returned: always
  type: dict
gauges:
  description: V0 gauges; null when absent.
  returned: always
  type: dict
  contains:
    draft_acceptance_rate:
      description: C(vllm:spec_decode_draft_acceptance_rate), cumulative since start.
      type: float
    efficiency:
      description: C(vllm:spec_decode_efficiency).
      type: float
running:
  description: C(vllm:num_requests_running) at the scrape (requests in the running batch, summed over engines);
    null when the page has none.
  returned: always
  type: float
derived:
  description: Figures for the window (deltas against O(previous), else cumulative).
  returned: always
  type: dict
  contains:
    window:
      description: V(delta), V(cumulative) or V(since_restart) (O(previous) was older than an engine restart).
      type: str
    interval_seconds:
      description: Seconds since the O(previous) scrape.
      type: float
    num_drafts:
      description: Drafts in the window.
      type: int
    num_draft_tokens:
      description: Draft tokens in the window.
      type: int
    num_accepted_tokens:
      description: Accepted tokens in the window.
      type: int
    accepted_per_position:
      description: Accepted tokens per position in the window.
      type: list
      elements: int
    draft_acceptance_rate:
      description: accepted / draft tokens (V0 - the gauge); null without drafts.
      type: float
    mean_acceptance_length:
      description: 1 + accepted / drafts; null without drafts or before 0.8.5.
      type: float
    per_position_acceptance:
      description: accepted at position i / drafts.
      type: list
      elements: float
    draft_tokens_per_draft:
      description: draft tokens / drafts (k for fixed-length methods).
      type: float
    source:
      description: V(counters) or V(v0_gauges); null without spec metrics.
      type: str
latency:
  description:
    - Latency histograms present on the page, keyed V(ttft) (time to first token), V(itl)
      (inter-token latency, 0.10.2+), V(tpot) (time per output token, older versions),
      V(request_tpot) (per-request TPOT, 0.11.0+), V(e2e); null when absent.
  returned: always
  type: dict
  contains:
    metric:
      description: Histogram name.
      type: str
    count:
      description: Total observations (raw, for a later O(previous)).
      type: int
    sum:
      description: Total seconds (raw).
      type: float
    window_count:
      description: Observations in the window.
      type: int
    window_sum:
      description: Seconds in the window.
      type: float
    mean:
      description: window_sum / window_count in seconds; null without observations.
      type: float
    buckets:
      description: The finite buckets as C([le, cumulative count]), le ascending (raw, for a later O(previous)).
      type: list
      elements: list
    window_buckets:
      description: The buckets' cumulative counts in the window (C(specpilot.core) canary quantiles).
      type: list
      elements: list
families:
  description: Metric families on the page.
  returned: always
  type: int
samples:
  description: Samples on the page.
  returned: always
  type: int
notes:
  description: Caveats that apply to these figures (V0 over-counting, restarts, missing counters).
  returned: always
  type: list
  elements: str
"""

from ansible_collections.specpilot.core.plugins.module_utils.fact_tasks import (
    METRICS_FACTS_ARGS,
    METRICS_FACTS_RULES,
    metrics_facts,
    run_module,
)


def main():
    # the work is fact_tasks.metrics_facts; playbooks run it in the worker (plugins/action/vllm_metrics_facts.py)
    run_module(metrics_facts, METRICS_FACTS_ARGS, METRICS_FACTS_RULES)


if __name__ == "__main__":
    main()
