#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hold one canary step on live traffic and decide it (module_utils/operate/canary.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: canary_step
short_description: Hold one step of a canary on live traffic and decide promote-step, abort, extend or inconclusive
description:
  - Scrapes every pod of both arms (the stable predictor, the baseline; the canary, speculative) at the start of
    the step, holds the step until O(window) seconds passed or both arms served O(min_requests) requests, scrapes
    again, and decides from the deltas of vLLM's histograms and counters (TTFT, TPOT, E2E quantiles from the
    buckets; requests and aborted requests; the canary's acceptance rate).
  - The decision uses the benchmark verdict's noise rules and the service's SLO policy (O(policy), the spec's
    C(workload.slo)), plus the acceptance floor O(min_acceptance) for the canary. Too few requests, or a
    difference within the noise, extends the window up to O(max_extensions) times, then the step is
    V(inconclusive). Only V(promote-step) and V(abort) are meant to be acted on.
  - With O(prometheus_url) both arms are read from Prometheus instead of their pods - per read, instant queries of
    C(increase()) over the step's window (from the step's start to the query's evaluation time) of the same histograms
    and counters, selected by each arm's pods and O(namespace) (O(prometheus_labels)) - the same figures, fed to the
    same decision; an extension re-queries the longer window. An arm Prometheus has no series of (or a single sample
    of each) is named first in RV(reasons), never read as a window of zero requests. An unreachable Prometheus, or
    one refusing a query, fails the task with its URL and the error.
  - Reads only (GET /metrics, or Prometheus' query API); never changes anything, but for renewing the service's lock it
    holds (O(lock)).
version_added: "0.2.0"
author: specpilot maintainers (@specpilot)
options:
  arms:
    description: "The pods of each arm as C({baseline: [{pod, url}], canary: [{pod, url}]}); C(url) is the pod's /metrics URL."
    type: dict
    required: true
  window:
    description: Seconds a step is held at most (before an extension).
    type: float
    required: true
  min_requests:
    description: Requests each arm must have served in the window for a decision; the window ends early once both have.
    type: int
    default: 100
  max_extensions:
    description: Times an undecided step is held another O(window).
    type: int
    default: 2
  warmup_requests:
    description:
      - Requests the canary arm serves at the step before its window starts, left out of the figures (a new engine's
        first batches and one-time compiles, such as vLLM's n-gram proposer, are not the config's latency). The
        warm-up lasts at most O(window) seconds; C(0) starts the window at once.
    type: int
    default: 0
  policy:
    description: The service's SLO policy (the spec's C(workload.slo); defaults as the benchmark's).
    type: dict
    default: {}
  min_acceptance:
    description: The canary's draft acceptance rate below which the canary is aborted.
    type: float
    default: 0.5
  change:
    description:
      - A change of a service that already speculates (the baseline arm has spec-decode counters) - the canary's
        acceptance is compared with the baseline's at each draft position both draft, and its latency may be worse by
        an allowance (no gain required).
    type: dict
    default: {}
    suboptions:
      acceptance_margin:
        description:
          - The canary is aborted, the position named, when the whole 95% interval (Newcombe's, each draft a trial) of
            its acceptance rate minus the baseline's at a shared position lies below minus this.
        type: float
        default: 0.02
      allowance:
        description: How much slower the canary may be on the SLO's bound figure (0.05 is 5%); the other figures keep the
          policy's allowance, at least this.
        type: float
        default: 0.05
  reference:
    description:
      - The baseline's window of an earlier step (its RV(baseline_window)), compared with instead of the baseline's pods,
        as at 100% the stable predictor serves no traffic. The C(baseline) pods of O(arms) are not read then.
    type: dict
  poll:
    description:
      - Seconds between scrapes while the step is held.
      - Each scrape interval is one batch of a figure judged on its mean (see RV(unresolved)); such a figure needs 10
        non-empty batches in each arm, so the step then ends early no sooner than that.
    type: float
    default: 2
  headers:
    description: HTTP headers of the scrapes (a bearer token).
    type: dict
    default: {}
  timeout:
    description: Seconds one scrape may take.
    type: float
    default: 10
  metrics_validate_certs:
    description: Verify the TLS certificates of the pods' /metrics endpoints.
    type: bool
    default: true
  prometheus_url:
    description:
      - Base URL of a Prometheus (or Thanos querier) HTTP API to read both arms from instead of their pods' /metrics;
        empty reads the pods. O(timeout) applies to each query.
    type: str
    default: ""
  prometheus_headers:
    description: Extra HTTP headers for O(prometheus_url), e.g. C(Authorization). Values are not logged.
    type: dict
    default: {}
  prometheus_validate_certs:
    description: Verify the TLS certificate of an C(https) O(prometheus_url).
    type: bool
    default: true
  prometheus_scrape_interval:
    description:
      - Seconds between two scrapes of the pods by that Prometheus. O(window) must span at least two (C(increase()) needs
        two samples of each series inside the window); a shorter one fails the task before anything is read.
    type: float
    default: 30
  prometheus_labels:
    description: The labels naming each series' pod and namespace in that Prometheus.
    type: dict
    default: {}
    suboptions:
      pod:
        description: The label of the pod's name (a PodMonitor's or ServiceMonitor's target label).
        type: str
        default: pod
      namespace:
        description: The label of the pod's namespace.
        type: str
        default: namespace
  prometheus_selector:
    description: More labels every series of the service carries in that Prometheus, matched exactly (e.g. a C(cluster)).
    type: dict
    default: {}
  namespace:
    description: The namespace of the arms' pods; required with O(prometheus_url).
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.actiongroups
  - specpilot.core.held_lock
  - kubernetes.core.k8s_auth_options
  - specpilot.core.k8s_auth
  - specpilot.core.k8s_read
notes:
  - With O(lock), the lock is renewed while the step is held (give O(lock.name) and O(lock.namespace)); a lost lock
    stops the step and fails the task. Only the action plugin (a playbook task) renews it; the module alone refuses
    O(lock).
requirements:
  - prometheus-client
attributes:
  check_mode:
    support: full
    details: The step reads the arms and judges them; it writes nothing itself.
  diff_mode:
    support: none
  platform:
    platforms: posix
  action_group:
    support: full
    membership:
      - specpilot.core.k8s
"""

EXAMPLES = r"""
- name: Hold the step and decide it
  specpilot.core.canary_step:
    arms:
      baseline: [{pod: lab-ngram-predictor-abc12, url: "http://10.0.0.5:8080/metrics"}]
      canary: [{pod: lab-ngram-s1a2b3c4-predictor-def34, url: "http://10.0.0.6:8080/metrics"}]
    window: 600
    min_requests: 100
    policy: {bound_by: tpot}
    min_acceptance: 0.5
  register: step

- name: Or read both arms from Prometheus over the step's window
  specpilot.core.canary_step:
    arms:
      baseline: [{pod: lab-ngram-predictor-abc12, url: "http://10.0.0.5:8080/metrics"}]
      canary: [{pod: lab-ngram-s1a2b3c4-predictor-def34, url: "http://10.0.0.6:8080/metrics"}]
    window: 600
    namespace: ml
    prometheus_url: http://prometheus-operated.monitoring.svc:9090
    prometheus_scrape_interval: 30
  register: step
"""

RETURN = r"""
decision:
  description: V(promote-step), V(abort), V(extend) (never returned in the end) or V(inconclusive).
  returned: always
  type: str
reasons:
  description: Why, in words (the verdict's reasons, the acceptance floor, too few requests).
  returned: always
  type: list
  elements: str
arms:
  description: Per arm C(requests), C(failed), C(figures) (C(ttft), C(tpot), C(e2e) with C(p50_ms), C(p99_ms), C(count)) and C(acceptance).
  returned: always
  type: dict
ratios:
  description: The benchmark verdict's speedup ratios (baseline / canary) with 95% intervals; null when not judged.
  returned: always
  type: dict
verdict:
  description: The benchmark verdict's result (keep, rollback, inconclusive); null when not judged.
  returned: always
  type: dict
positions:
  description:
    - A change of a service that already speculates - both arms' acceptance per draft position they share (C(stable_k),
      C(canary_k), C(shared), C(margin), C(missing), C(positions) - each C(position), C(stable) and C(canary) with
      C(accepted), C(drafts), C(rate), the C(difference) with its C(ci95), and the C(verdict) holds, drop or
      too-few-drafts).
  returned: when the baseline arm speculates and the step got that far
  type: dict
unresolved:
  description:
    - The figures whose p50 falls in one and the same histogram bucket on both arms (the bucket in ms); each is
      judged on its mean from vLLM's C(_sum)/C(_count) (its ratio's C(statistic) is V(mean)), or not at all without a
      sum.
    - Read from the pods, the mean's interval comes from the batch means of the step's scrape intervals (the ratio's
      C(method) V(batch-means), with C(batches) per arm, C(batch_s) and C(df)); fewer than 10 non-empty batches in an
      arm leave the figure undecided (its C(problem) says why, the step is held or stops inconclusive). Read from
      Prometheus (no batches), from the buckets' spread (C(method) V(histogram-means)).
  returned: when the step got that far
  type: dict
methods:
  description: How each latency figure was judged, in words (C(ttft), C(tpot), C(e2e)) - the histograms' p50, the
    batch means of C(_sum)/C(_count), or the histogram method - and why; the report shows them per step.
  returned: when the step got that far
  type: dict
judged_by:
  description: The figure that decides for the SLO's bound figure (another one when the bound figure cannot be judged).
  returned: when the step got that far
  type: str
window_s:
  description: Seconds the step was held.
  returned: always
  type: float
extensions:
  description: Extensions used.
  returned: always
  type: int
warmup:
  description: The warm-up before the window (O(warmup_requests)) - the canary's requests it waited for, the seconds
    it took and the requests asked; null without one.
  returned: always
  type: dict
baseline_window:
  description: The baseline arm's window (requests, histogram buckets, acceptance), the O(reference) of a later step.
  returned: always
  type: dict
source:
  description: Where the figures come from, V(pods) (their /metrics) or V(prometheus).
  returned: always
  type: str
prometheus:
  description:
    - With O(prometheus_url), the last read - C(url) (without credentials), C(range) (the window, a PromQL
      range), C(evaluated_at) (UTC) and C(selectors) (each arm's label matchers).
  returned: when O(prometheus_url) is given
  type: dict
notes:
  description: Caveats of the scrapes (engine restarts; with Prometheus, an arm's pods without series).
  returned: always
  type: list
  elements: str
lock:
  description: The lock after the step (C(holder), C(resource_version), C(renewals)), with O(lock).
  returned: when O(lock) is given
  type: dict
"""

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks


def main():
    fact_tasks.run_module(fact_tasks.canary_step, fact_tasks.CANARY_STEP_ARGS)


if __name__ == "__main__":
    main()
