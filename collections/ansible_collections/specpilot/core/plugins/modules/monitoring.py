#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: monitoring

short_description: Render a PrometheusRule and a Grafana dashboard for a speculative-decoding service

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Renders, for one vLLM InferenceService, a C(monitoring.coreos.com/v1) PrometheusRule and a Grafana
    dashboard (JSON model) built on the metric names that the service's vLLM version exports.
  - "Alerts (when speculative decoding is planned): C(SpecDecodeLowAcceptance) (draft acceptance over
    O(window) below O(min_acceptance_rate) while at least O(min_draft_tokens) tokens were drafted),
    C(SpecDecodeBorderlineAcceptance) (between O(min_acceptance_rate) and O(warn_acceptance_rate), severity
    info), C(SpecDecodeMetricsMissing) (the engine is scraped but has no C(vllm:spec_decode_*) series), and
    C(SpecDecodePositionCollapse) (a draft position after the first is accepted in less than
    O(collapse_threshold) of the drafts)."
  - "Dashboard panels: draft acceptance rate, mean acceptance length, per-position acceptance, drafted and
    accepted tokens per second, time to first token and inter-token latency (p50, p95, mean)."
  - Every expression sums over the data-parallel C(engine) label and groups by the labels of O(selector).
  - Also renders a PodMonitor and a ServiceMonitor (RV(pod_monitor), RV(service_monitor)), so that Prometheus
    scrapes the engine without a hand-written scrape config.
  - Pure rendering on the controller; nothing is contacted, never reports C(changed). Supports check mode.

options:
  name:
    description:
      - InferenceService name. vLLM's C(model_name) label is the served model name, which KServe sets to it.
    type: str
    required: true
  namespace:
    description:
      - Namespace of the InferenceService (and of the PrometheusRule).
    type: str
    required: true
  vllm_version:
    description:
      - vLLM version inside the runtime image, e.g. C(0.32.0). It selects the metric names.
    type: str
    required: true
  scrape:
    description:
      - The scrape config to apply beside the rule (RV(apply)) - C(podmonitor) (any deployment mode), C(servicemonitor)
        (Standard mode, the predictor's Service) or C(none) (a scrape config of your own). One, never both - each
        would scrape the pods once more, doubling every sum.
    type: str
    choices: [podmonitor, servicemonitor, none]
    default: podmonitor
  deployment_mode:
    description:
      - The service's KServe deployment mode (C(specpilot_deployment_mode)); it names the engine's port the
        PodMonitor scrapes.
    type: str
    choices: [Standard, Knative]
    default: Standard
  kind:
    description:
      - The service's serving resource (C(specpilot_resource)). For C(LLMInferenceService) the PodMonitor selects its
        decode workload's pods (the ones that draft) on port 8000, and no ServiceMonitor is rendered (RV(service_monitor)
        is null; I(scrape=servicemonitor) is refused).
    type: str
    choices: [InferenceService, LLMInferenceService]
    default: InferenceService
  model_name:
    description:
      - The name vLLM serves when it is not I(name) (an LLMInferenceService's C(specpilot_llm.model_name)); the
        default selector's C(model_name).
    type: str
  speculative:
    description:
      - The service's speculative config (C(specpilot_speculative)). Empty or null means speculative decoding
        is not planned; then only the latency panels are rendered and the rule has no alerts.
    type: dict
  engine:
    description:
      - Metric family to use. C(auto) picks V1 counters from vLLM 0.8.3 and the V0 gauge before.
      - "Use C(v0) for a 0.8.3 to 0.9.2 service whose method still ran on the V0 engine."
    type: str
    choices: [auto, v0, v1]
    default: auto
  selector:
    description:
      - "Prometheus labels that select the service's series. The default
        C({namespace: <namespace>, model_name: <name>}) fits a PodMonitor/ServiceMonitor that adds the
        C(namespace) target label."
    type: dict
  window:
    description:
      - Range of the alert expressions (a Prometheus duration).
    type: str
    default: 15m
  for_duration:
    description:
      - How long a condition must hold before the alert fires (the rule's C(for)).
    type: str
    default: 5m
  min_acceptance_rate:
    description:
      - Fire C(SpecDecodeLowAcceptance) below this draft acceptance rate (0..1).
    type: float
    default: 0.5
  warn_acceptance_rate:
    description:
      - Fire C(SpecDecodeBorderlineAcceptance) below this rate (and above O(min_acceptance_rate)).
    type: float
    default: 0.65
  min_draft_tokens:
    description:
      - Judge acceptance only when at least this many tokens were drafted in O(window) (traffic).
    type: int
    default: 200
  collapse_threshold:
    description:
      - Per-position acceptance under which a draft position counts as collapsed.
    type: float
    default: 0.05
  severity:
    description:
      - C(severity) label of the acceptance and collapse alerts.
    type: str
    default: warning
  missing_severity:
    description:
      - C(severity) label of C(SpecDecodeMetricsMissing).
    type: str
    default: critical
  rule_labels:
    description:
      - Extra labels on the PrometheusRule, for example the C(release) label that the Prometheus operator's
        C(ruleSelector) matches.
    type: dict

seealso:
  - module: specpilot.core.vllm_metrics_facts

notes:
  - V0 exports no windowed acceptance counter (its C(_total) counters over-count); for V0 the low-acceptance
    alert reads the cumulative gauge C(vllm:spec_decode_draft_acceptance_rate) and uses generated tokens as
    the traffic condition.
  - "Alert annotations hold Prometheus templates (C({{ $value }})); ansible-core does not template module
    results, so they reach the files and the cluster unchanged."
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
- name: Render the monitoring artifacts of a service
  specpilot.core.monitoring:
    name: "{{ specpilot_name | default(inventory_hostname) }}"
    namespace: "{{ specpilot_namespace }}"
    vllm_version: "{{ specpilot_vllm_version }}"
    speculative: "{{ specpilot_speculative | default(omit) }}"
    rule_labels:
      release: kube-prometheus-stack
  register: monitoring

- name: Apply the PrometheusRule
  kubernetes.core.k8s:
    definition: "{{ monitoring.prometheus_rule }}"
    apply: true

- name: Save the dashboard
  ansible.builtin.copy:
    content: "{{ monitoring.dashboard | to_nice_json }}"
    dest: "dashboards/{{ monitoring.dashboard.uid }}.json"
    mode: "0644"
"""

RETURN = r"""
prometheus_rule:
  description: The PrometheusRule manifest.
  returned: success
  type: dict
crossover:
  description:
    - The measured crossover the speculative config carries - C({concurrency, source}) - the last batch size of
      C(num_speculative_tokens_per_batch_size) with k > 0 (k = 0 above it), or C(disable_by_batch_size) - 1; null
      when it carries none. With it the rule has C(SpecDecodeAboveCrossover) and RV(expressions) an
      C(above_crossover_share).
  returned: success
  type: dict
pod_monitor:
  description: A C(monitoring.coreos.com/v1) PodMonitor that scrapes C(/metrics) of the service's pods (label
    C(serving.kserve.io/inferenceservice)) on the engine's port (C(http); C(user-port) in Knative mode), with
    O(rule_labels).
  returned: success
  type: dict
apply:
  description: What to apply, in order - C(objects) (the PrometheusRule, then the scrape config O(scrape) names) and
    C(crds), the CustomResourceDefinition each needs (the Prometheus operator's).
  returned: success
  type: dict
service_monitor:
  description: A C(monitoring.coreos.com/v1) ServiceMonitor of the predictor's Service (Standard mode), its
    endpoints on port 8080. Apply it or the PodMonitor, not both (the pods would be scraped twice). Null for an
    LLMInferenceService (I(kind)).
  returned: success
  type: dict
dashboard:
  description: The Grafana dashboard JSON model (C(uid), C(title), C(panels), a C(datasource) variable).
  returned: success
  type: dict
expressions:
  description: The PromQL of each figure over O(window) (acceptance_rate, mean_acceptance_length,
    per_position_acceptance, drafted_in_window, engine_up, spec_series, ttft_*, itl_*).
  returned: success
  type: dict
metrics:
  description: Every vLLM metric name the rule and the dashboard use.
  returned: success
  type: list
  elements: str
  sample: [vllm:spec_decode_num_draft_tokens_total, vllm:spec_decode_num_accepted_tokens_total]
planned:
  description: Whether speculative decoding is planned (O(speculative) is not empty).
  returned: success
  type: bool
profile:
  description: The metric names of O(vllm_version) (C(era), C(draft_tokens), C(accepted), C(drafts),
    C(per_position), C(acceptance_gauge), C(ttft), C(itl), C(running)).
  returned: success
  type: dict
selector:
  description: The label selector used.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specpilot.core.plugins.module_utils.operate.monitoring import (
    MonitoringError,
    render,
    to_apply,
)
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import VersionError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            namespace=dict(type="str", required=True),
            vllm_version=dict(type="str", required=True),
            speculative=dict(type="dict"),
            engine=dict(type="str", choices=["auto", "v0", "v1"], default="auto"),
            selector=dict(type="dict"),
            window=dict(type="str", default="15m"),
            for_duration=dict(type="str", default="5m"),
            min_acceptance_rate=dict(type="float", default=0.5),
            warn_acceptance_rate=dict(type="float", default=0.65),
            min_draft_tokens=dict(type="int", default=200, no_log=False),  # a count, not a credential
            collapse_threshold=dict(type="float", default=0.05),
            severity=dict(type="str", default="warning"),
            missing_severity=dict(type="str", default="critical"),
            rule_labels=dict(type="dict"),
            deployment_mode=dict(type="str", choices=["Standard", "Knative"], default="Standard"),
            kind=dict(type="str", choices=["InferenceService", "LLMInferenceService"], default="InferenceService"),
            model_name=dict(type="str"),
            scrape=dict(type="str", choices=["podmonitor", "servicemonitor", "none"], default="podmonitor"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    settings = {
        "window": p["window"],
        "for": p["for_duration"],
        "min_acceptance_rate": p["min_acceptance_rate"],
        "warn_acceptance_rate": p["warn_acceptance_rate"],
        "min_draft_tokens": p["min_draft_tokens"],
        "collapse_threshold": p["collapse_threshold"],
        "severity": p["severity"],
        "missing_severity": p["missing_severity"],
    }
    selector = dict((str(k), str(v)) for k, v in (p["selector"] or {}).items()) or None
    rule_labels = dict((str(k), str(v)) for k, v in (p["rule_labels"] or {}).items())
    try:
        result = render(p["name"], p["namespace"], p["vllm_version"], p["speculative"], selector, settings,
                        rule_labels, p["engine"], p["deployment_mode"], p["kind"], p["model_name"])
        result["apply"] = to_apply(result, p["scrape"])
    except (MonitoringError, VersionError) as exc:
        module.fail_json(msg="cannot render monitoring for %s/%s: %s" % (p["namespace"], p["name"], exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
