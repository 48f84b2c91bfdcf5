#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: vllm_load

short_description: Run a streaming benchmark load against a vLLM OpenAI server and measure it

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Sends a fixed list of prompts (a JSONL workload file or O(prompts)), in the same order every
    time, O(runs_per_prompt) times, at one or more load O(levels) (a request rate with Poisson or
    constant arrivals from a seeded generator, and/or a concurrency limit), after
    O(warmup_requests) sequential warm-up requests that are discarded.
  - Every request streams (C(stream=true), C(stream_options.include_usage=true)) and records time
    to first token, the gaps between streamed chunks (inter-token latency), time per output token
    (C((e2e - ttft) / (tokens - 1))), end-to-end latency and output tokens (from the usage chunk,
    else logprobs, else one per chunk), and the SHA-256 and first 80 characters of its output text
    (to compare the outputs of two servers without keeping the texts).
  - Each level also records the CPU time the load generator used while it ran, so that a client
    that was CPU-bound (its own queueing in the latencies) can be told apart.
  - Reads the engine's C(/version) and C(/v1/models) once, and C(/metrics) right after the warm-ups
    and right after the last request of each level; the speculative-decoding counter deltas
    between the two scrapes (parsed by the same code as M(specpilot.core.vllm_metrics_facts)) give
    the acceptance of exactly the timed requests.
  - The load generator is C(plugins/module_utils/benchmark/bench_client.py), which needs only Python and
    aiohttp; the same file runs as a script in an in-cluster Job. Give that Job's log to
    O(job_output) to get the same result without sending anything from the controller.
  - Never changes anything on the server (it only sends requests); C(changed) is always false.
    In check mode nothing is sent.

options:
  url:
    description:
      - Base URL of the OpenAI-compatible server, without C(/v1), e.g. C(http://chat.llm.svc:8080)
        or the InferenceService's C(status.url).
      - Required unless O(job_output) is given.
    type: str
  model:
    description:
      - The served model name sent with each request. Default the first model of C(/v1/models).
    type: str
  api:
    description:
      - V(completions) (C(/v1/completions), prompts are text) or V(chat) (C(/v1/chat/completions);
        a text prompt is sent as one user message, or give C(messages) in the workload).
    type: str
    choices: [completions, chat]
    default: completions
  workload:
    description:
      - JSONL file, one object per line with C(prompt) (text) or C(messages) (chat), and optional
        C(id), C(max_tokens) and C(category). Lines starting with C(#) are comments.
      - Exactly one of O(workload) and O(prompts) (unless O(job_output)).
    type: path
  prompts:
    description:
      - The prompts themselves (strings, or objects like the workload lines).
    type: list
    elements: raw
  runs_per_prompt:
    description:
      - How many times the whole prompt list is sent per level (the method asks for 5 to 10).
    type: int
    default: 5
  max_requests:
    description:
      - Send at most this many timed requests per level (the prompt list in order, repeated).
    type: int
  warmup_requests:
    description:
      - Sequential requests sent before each level and discarded (the method asks for 3).
    type: int
    default: 3
  levels:
    description:
      - Load levels, measured one after the other. Each is a dict with C(qps) (requests per second;
        null or V(inf) for unpaced) and/or C(concurrency) (most requests in flight; null for no limit).
      - An unpaced level needs a concurrency.
      - Default one level, unpaced with concurrency 1 (one request at a time).
    type: list
    elements: dict
  arrival:
    description:
      - Arrival process of paced levels. V(poisson) draws exponential gaps from O(seed); V(constant)
        sends every C(1/qps) seconds.
    type: str
    choices: [poisson, constant]
    default: poisson
  seed:
    description:
      - Seed of the arrival times, and the C(seed) request parameter unless O(request_params) sets one.
    type: int
    default: 42
  temperature:
    description:
      - Sampling temperature (0 unless production differs).
    type: float
    default: 0.0
  max_tokens:
    description:
      - C(max_tokens) of each request (a workload line's own C(max_tokens) wins).
    type: int
    default: 128
  ignore_eos:
    description:
      - Send C(ignore_eos=true) (vLLM), so that every request generates O(max_tokens) tokens.
    type: bool
    default: false
  request_params:
    description:
      - Extra request parameters (C(top_p), C(top_k), C(stop), C(chat_template_kwargs), ...), merged last.
    type: dict
    default: {}
  headers:
    description:
      - Extra HTTP headers (e.g. C(Authorization)). Never returned.
    type: dict
    default: {}
  timeout:
    description:
      - Seconds one request may take.
    type: float
    default: 600
  validate_certs:
    description:
      - Verify TLS certificates of an C(https) O(url).
    type: bool
    default: true
  metrics_url:
    description:
      - Where to scrape C(/metrics). Default O(url) + C(/metrics).
    type: str
  scrape_metrics:
    description:
      - Scrape C(/metrics) around each level (acceptance figures). Set false for servers without it.
    type: bool
    default: true
  side:
    description:
      - Which side this is (V(baseline) or V(speculative)); carried into each run for
        M(specpilot.core.benchmark_report).
    type: str
  label:
    description:
      - Prefix of the progress lines.
    type: str
  tag:
    description:
      - "Any mapping, copied unchanged into every returned run as RV(runs[].tag) (and into the
        O(output_path) file), e.g. C({sweep: temperature, temperature: 0.4}) to mark the runs of a sweep."
    type: dict
  progress_file:
    description:
      - Append a progress line every O(progress_interval) seconds to this file (C(tail -f) it
        during long runs).
    type: path
  progress_interval:
    description:
      - Seconds between progress lines.
    type: float
    default: 10
  output_path:
    description:
      - Write the raw result (every request, the raw C(/metrics) pages) as JSON to this file.
    type: path
  return_requests:
    description:
      - Also return every request record (large).
    type: bool
    default: false
  job_output:
    description:
      - The output (e.g. the pod log) of C(bench_client.py) run as a script. The result block between
        its markers is analysed as if the runs had been made here; nothing is sent.
    type: str
  vllm_bench_output:
    description:
      - The output (e.g. the pod log) of vLLM's own C(vllm bench serve), or its C(--save-result) JSON.
        It becomes one run of O(side) at the single level of O(levels) (the level that run was made at);
        nothing is sent. The result JSON that the role's Job prints after the output, below its marker
        line (C(specpilot_benchmark_vllm_bench_save_detailed)), wins over the last
        C(Serving Benchmark Result) block.
      - With the per-request detail of C(--save-detailed) (C(ttfts), C(itls), C(latencies),
        C(output_lens), C(generated_texts), C(errors)), RV(runs[].summary) has per-request C(samples)
        (TTFT, TPOT, E2E, tok/s, output hashes) as for the built-in client, so the report gives
        confidence intervals, and the error messages of failed requests.
      - Without it C(vllm bench serve) reports aggregates only; what it does not give (per-request tok/s,
        min/max, per-prompt figures...) is null in RV(runs[].summary) and named in its C(unavailable)
        list.
      - Give O(temperature) the C(--temperature) it ran at; at 0 the report compares the outputs of both
        sides (their hashes, from C(generated_texts)).
      - Mutually exclusive with O(url) and O(job_output).
    type: str
  lock_connection:
    description:
      - The API connection of O(lock)'s renewal - any of kubernetes.core's connection options (its doc fragment
        C(kubernetes.core.k8s_auth_options) - C(kubeconfig), C(context), C(host), C(api_key), C(client_cert),
        C(proxy), C(impersonate_user) ...), and C(retries) and C(request_timeout) of the Lease writes. Unset,
        kubernetes.core's defaults apply (C(K8S_AUTH_*), C(KUBECONFIG)).
      - This module is not in the action group C(specpilot.core.k8s) (its O(validate_certs) is the engine's);
        the project's playbooks set this option with C(module_defaults) from the same C(specpilot_k8s_*)
        variables as the group's.
    type: dict
    default: {}

extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - specpilot.core.held_lock

notes:
  - With O(lock) the load is sent from the controller (the action plugin runs it in the Ansible worker, which
    renews the lock every third of its duration while the load runs, warm-ups and scrapes included; a lost
    lock stops the load and fails the task with RV(stopped)). Only with O(url).
  - Runs on the host the task runs on (in specpilot's inventories, the controller with
    C(ansible_connection=local)); that host must reach O(url).
  - Acceptance deltas assume nothing else sends traffic to the engine during a level.
  - For long runs, use O(progress_file), or loop over the levels one task at a time.

seealso:
  - module: specpilot.core.benchmark_report
  - module: specpilot.core.vllm_metrics_facts

requirements:
  - python >= 3.9
  - aiohttp
  - prometheus-client (acceptance figures)
attributes:
  check_mode:
    support: partial
    details: In check mode nothing is sent; the result says so.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Measure the speculative service at two request rates
  specpilot.core.vllm_load:
    url: "{{ isvc.status.url }}"
    workload: "{{ role_path }}/files/workloads/code-edit.jsonl"
    side: speculative
    levels:
      - qps: 1
      - qps: 8
    runs_per_prompt: 5
    temperature: 0
    seed: 42
    max_tokens: 256
    progress_file: /tmp/bench-progress.log
  register: spec_runs

- name: Closed-loop load with 4 requests in flight, chat API
  specpilot.core.vllm_load:
    url: http://127.0.0.1:8080
    api: chat
    prompts:
      - Explain speculative decoding in three paragraphs.
    levels:
      - concurrency: 4
    request_params:
      top_p: 1.0

- name: One run of a temperature sweep, marked as such, with every request (text hashes included)
  specpilot.core.vllm_load:
    url: "{{ isvc.status.url }}"
    workload: "{{ role_path }}/files/workloads/code-edit.jsonl"
    side: speculative
    levels:
      - concurrency: 2
    runs_per_prompt: 1
    warmup_requests: 1
    temperature: 0.4
    tag:
      sweep: temperature
      temperature: 0.4
    return_requests: true
  register: sweep_run

- name: Analyse what the in-cluster Job printed
  specpilot.core.vllm_load:
    job_output: "{{ job_log.log }}"
    side: baseline

- name: Analyse what vllm bench serve printed in a Job (one run at 4 requests/s)
  specpilot.core.vllm_load:
    vllm_bench_output: "{{ bench_log.log }}"
    side: speculative
    levels:
      - qps: 4
"""

RETURN = r"""
stopped:
  description: True when the load was stopped because its lock was lost (the task fails).
  returned: when the load was stopped
  type: bool
lock:
  description: The lock after the load (C(holder), C(resource_version), C(renewals)), with O(lock).
  type: dict
  returned: when O(lock) is given
runs:
  description: One entry per level, in the order measured.
  returned: always
  type: list
  elements: dict
  contains:
    side:
      description: O(side).
      type: str
    level:
      description: C({qps, concurrency, key}); C(key) names the level, e.g. V(qps=2) or V(qps=inf,c=4).
      type: dict
    label:
      description: Progress label.
      type: str
    server:
      description: C({version, models, max_model_len, errors}) as the server reported them.
      type: dict
    warmup:
      description: C({requests, ok, errors}) of the discarded warm-ups.
      type: dict
    duration_s:
      description: Wall time from the first timed request to the last response.
      type: float
    client_cpu_s:
      description:
        - CPU time (user + system, Python's C(time.process_time)) the load generator used over the window of
          RV(runs[].duration_s). Null for O(vllm_bench_output).
      type: float
    client_cpu_share:
      description:
        - RV(runs[].client_cpu_s) / RV(runs[].duration_s). Near 1, the client was CPU-bound and its
          latencies include its own delays. Null without a duration or for O(vllm_bench_output).
      type: float
    tag:
      description: O(tag) as given; null without it.
      type: dict
    summary:
      description:
        - Statistics of the timed requests - C(requests), C(ok), C(failed), C(error_rate), C(errors),
          C(output_tokens_total), C(output_throughput) (tok/s), C(request_throughput) (req/s),
          C(metrics) (C(ttft_ms), C(tpot_ms), C(itl_ms), C(e2e_ms), C(queue_ms), C(output_tokens),
          C(prompt_tokens), C(request_tok_s), each C({count, mean, min, p50, p90, p99, max})),
          C(gaps) (P50 vs P99), C(per_prompt) (medians over the runs of each prompt).
      type: dict
    acceptance:
      description:
        - Speculative-decoding figures of the timed requests from C(/metrics) deltas - C(spec_decode_enabled),
          C(num_drafts), C(num_draft_tokens), C(num_accepted_tokens), C(draft_acceptance_rate),
          C(mean_acceptance_length), C(per_position_acceptance), C(server_latency_means); null without
          scrapes.
      type: dict
    config:
      description: The run configuration without headers and prompt texts.
      type: dict
    requests:
      description:
        - Every request record (with O(return_requests)) - C(index), C(prompt_id), C(run), C(ok), C(error),
          C(status), C(arrival_s), C(start_s), C(queue_s), and for a successful request C(ttft_s),
          C(e2e_s), C(itl_s), C(tpot_s), C(chunks), C(finish_reason), C(output_tokens), C(prompt_tokens),
          C(token_source), C(text_sha256) (hex SHA-256 of the whole UTF-8 output text, streamed pieces
          concatenated in order) and C(text_head) (its first 80 characters).
      type: list
      elements: dict
    metrics_errors:
      description: Why a C(/metrics) scrape failed, if it did.
      type: list
      elements: str
output_path:
  description: The raw result file (with O(output_path)).
  returned: when O(output_path) is set
  type: str
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_load
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import HAS_PROMETHEUS_CLIENT


def main():
    module = AnsibleModule(argument_spec=bench_load.ARGS, supports_check_mode=True, **bench_load.VALIDATION)
    if not HAS_PROMETHEUS_CLIENT:
        module.warn(
            "prometheus-client is missing: no acceptance figures (%s)"
            % missing_required_lib("prometheus-client")
        )
    try:
        module.exit_json(**bench_load.run(module.params, module.check_mode))
    except bench_load.LoadFailure as exc:
        module.fail_json(msg=exc.msg, **exc.fields)


if __name__ == "__main__":
    main()
