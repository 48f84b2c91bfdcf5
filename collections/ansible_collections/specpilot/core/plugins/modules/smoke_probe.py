#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: smoke_probe
short_description: Send probe requests to a vLLM OpenAI server and read /metrics before and after
version_added: 0.1.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Reads C(/metrics), sends I(count) completion (or chat) requests one after the other, cycling through
    I(prompts), and reads C(/metrics) again. The two pages are returned as text for
    M(specpilot.core.vllm_metrics_facts) (the second one with the first as C(previous)).
  - A failed request does not fail the task; it is reported in C(results) and C(ok) is false, so that the
    caller can still write its report. Only invalid parameters fail.
  - The same code runs inside a predictor pod when the smoke role reaches the engine with
    C(specpilot.core.pod_exec) (see the filter C(specpilot.core.smoke_exec_command)); both ways return the
    same result.
  - Inference requests change nothing that check mode protects, so the module sends them in check mode too.
    It never reports C(changed).
options:
  url:
    description:
      - Base URL of the engine, e.g. the C(status.address.url) of the InferenceService
        (C(http://chat.llm.svc.cluster.local)) or C(http://127.0.0.1:8080).
    type: str
    required: true
  model:
    description: The served model name (the C(model) field of each request).
    type: str
    required: true
  prompts:
    description: Probe prompts; request I(i) uses prompt I(i) modulo their number.
    type: list
    elements: str
    required: true
  count:
    description: Number of requests.
    type: int
    default: 8
  max_tokens:
    description: C(max_tokens) of each request.
    type: int
    default: 128
  temperature:
    description: Sampling temperature (0 gives repeatable acceptance).
    type: float
    default: 0.0
  request_params:
    description: Extra fields merged into every request body (e.g. C(ignore_eos), C(seed), C(top_p)).
    type: dict
    default: {}
  endpoint:
    description: C(completions) (C(/v1/completions)) or C(chat) (C(/v1/chat/completions)).
    type: str
    choices: [completions, chat]
    default: completions
  metrics:
    description: Read C(/metrics) before and after the requests.
    type: bool
    default: true
  metrics_facts:
    description:
      - Return the facts of the two C(/metrics) pages (I(metrics_before_facts), I(metrics_after_facts), as
        M(specpilot.core.vllm_metrics_facts) returns them for the served I(model), the second with its deltas against
        the first) instead of their text. The smoke role sets it, so that a fleet's play keeps no page.
      - A page that does not parse is reported in I(metrics_error), as a page that could not be read is.
    type: bool
    default: false
  reach:
    description:
      - First ask the engine for C(GET /v1/models) (at most 10 s). When that does not answer HTTP 200, or I(url) is
        empty, send nothing else and return I(reached) false with the reason (I(reach_error), also I(msg)), without
        failing, so that the caller can pick another route. The smoke role sets it to reach an engine from the controller when
        it can, and through the pod when it cannot.
    type: bool
    default: false
  headers:
    description: Extra HTTP headers, e.g. C(Authorization). Values are not logged.
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for each HTTP answer.
    type: float
    default: 120
  validate_certs:
    description: Verify the TLS certificate of an C(https) I(url).
    type: bool
    default: true
notes:
  - Supports check mode (requests are sent; nothing is changed).
seealso:
  - module: specpilot.core.vllm_metrics_facts
  - module: specpilot.core.smoke_verdict
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Inference requests change nothing that check mode protects, so they are sent in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Probe the engine through the InferenceService URL
  specpilot.core.smoke_probe:
    url: "{{ isvc.status.address.url }}"
    model: chat
    prompts:
      - "Repeat this list exactly: alpha, beta, gamma, delta. Again: alpha, beta, gamma, delta."
    count: 8
    max_tokens: 128
    temperature: 0
  register: probe

- name: Parse the page read before the probes
  specpilot.core.vllm_metrics_facts:
    content: "{{ probe.metrics_before }}"
    model_name: chat
  register: before

- name: Acceptance over the probes (deltas against the first page)
  specpilot.core.vllm_metrics_facts:
    content: "{{ probe.metrics_after }}"
    previous: "{{ before }}"
    model_name: chat
  register: after
"""

RETURN = r"""
reached:
  description:
    - With I(reach), whether C(GET /v1/models) answered. When false nothing else was sent, and only I(url), I(ok)
      (false), I(reached) and I(reach_error) are returned.
  returned: when I(reach) is true
  type: bool
reach_error:
  description: With I(reach), why the engine could not be reached (no URL, no answer, an HTTP status other than 200).
  returned: when I(reached) is false
  type: str
ok:
  description: Every request succeeded (HTTP 200 with generated text).
  returned: always
  type: bool
url:
  description: The base URL used.
  returned: always
  type: str
metrics_before:
  description: The C(/metrics) page before the requests (text); null when it could not be read, or with I(metrics_facts).
  returned: always
  type: str
metrics_after:
  description: The C(/metrics) page after the requests (text); null when it could not be read, or with I(metrics_facts).
  returned: always
  type: str
metrics_before_facts:
  description: With I(metrics_facts), the facts of the page read before the requests; null when it was not read.
  returned: when I(metrics_facts) is true
  type: dict
metrics_after_facts:
  description: With I(metrics_facts), the facts of the page read after the requests, with deltas against the first.
  returned: when I(metrics_facts) is true
  type: dict
metrics_error:
  description: Why a C(/metrics) page could not be read (or, with I(metrics_facts), parsed); null otherwise.
  returned: always
  type: str
running_samples:
  description:
    - C(/metrics) read every 0.1 s while the requests ran, keeping only the lines of
      C(vllm:num_requests_running) (the batch size the engine's batch-size schedule of k is looked up by).
    - The smoke verdict's C(probe_running) check reads them.
  returned: when the metrics are read
  type: list
  elements: dict
  contains:
    t:
      description: Seconds since the first read.
      type: float
    text:
      description: The page's C(vllm:num_requests_running) lines.
      type: str
results:
  description: One entry per request.
  returned: always
  type: list
  elements: dict
  contains:
    status:
      description: HTTP status; null when no answer came back.
      type: int
    ok:
      description: The request succeeded.
      type: bool
    latency_s:
      description: Seconds from sending to the complete answer.
      type: float
    completion_tokens:
      description: C(usage.completion_tokens) of the answer.
      type: int
    prompt_tokens:
      description: C(usage.prompt_tokens) of the answer.
      type: int
    finish_reason:
      description: C(finish_reason) of the first choice.
      type: str
    text:
      description: The first 200 characters generated.
      type: str
    error:
      description: What went wrong; null on success.
      type: str
requests:
  description: Requests sent.
  returned: always
  type: int
succeeded:
  description: Requests that succeeded.
  returned: always
  type: int
failed:
  description: Requests that failed.
  returned: always
  type: int
completion_tokens:
  description: Tokens generated by the successful requests.
  returned: always
  type: int
latency_mean_s:
  description: Mean latency of the successful requests (seconds).
  returned: always
  type: float
elapsed_s:
  description: Seconds for the whole run, scrapes included.
  returned: always
  type: float
"""

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks


def main():
    fact_tasks.run_module(fact_tasks.smoke_probe, fact_tasks.SMOKE_PROBE_ARGS)


if __name__ == "__main__":
    main()
