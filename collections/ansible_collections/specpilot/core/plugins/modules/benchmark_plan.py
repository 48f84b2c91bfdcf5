#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: benchmark_plan

short_description: Plan a benchmark of speculative decoding against its baseline

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Works out, from a validated plan (M(specpilot.core.spec_validate)) and the benchmark's settings, what the
    C(specpilot_benchmark) role measures and how - the load levels and their labels, the report directory, the
    workload, the baseline twin (the plan's InferenceService without the speculative config), the temperature
    sweep, the report's thresholds and SLO policy, and the arguments of the in-cluster clients (the load
    generator's Job, C(vllm bench serve)).
  - Pure computation; it reads the workload file (for C(vllm bench serve)'s dataset) and never contacts the
    cluster. Never reports C(changed). Supports check mode.
  - A setting that cannot be used fails the module with a message naming the variable and the fix.

options:
  plan:
    description: The C(plan) of M(specpilot.core.spec_validate) (C(name), C(namespace), C(args_without_speculative),
      C(spec_digest), C(inferenceservice)).
    type: dict
    required: true
  client:
    description: Where the load runs (C(specpilot_benchmark_client)).
    type: str
    choices: [controller, job, vllm_bench]
    default: controller
  api:
    description: C(completions) or C(chat).
    type: str
    choices: [completions, chat]
    default: completions
  qps_levels:
    description: Request rates (null - unpaced), each capped at O(concurrency) requests in flight.
    type: list
    elements: raw
    default: []
  concurrency_levels:
    description: Concurrency levels (closed loop, unpaced).
    type: list
    elements: int
    default: []
  concurrency:
    description: Requests in flight of the rate levels (null - no limit; an unpaced rate level needs it).
    type: raw
  workload:
    description: A bundled workload (C(code-edit), C(chat)) or the path of a JSONL file (relative - from O(cwd)).
    type: str
    default: code-edit
  workload_name:
    description: The workload's name in the report.
    type: str
    default: code-edit
  prompts:
    description: The spec's prompts (C(specpilot_benchmark.prompts)); they win over O(workload).
    type: list
    elements: raw
  bundled_dir:
    description: The directory of the bundled workloads (C(<role>/files/workloads)).
    type: path
    required: true
  cwd:
    description: The directory ansible-playbook runs in (relative paths start there).
    type: str
    required: true
  report_root:
    description: The report root; the report directory is C(<report_root>/<plan name>).
    type: str
    required: true
  runs_per_prompt:
    description: Times the prompt list is sent per level.
    type: int
    default: 5
  max_requests:
    description: At most this many timed requests per level (null or 0 - no limit).
    type: raw
  warmup_requests:
    description: Discarded warm-up requests per level.
    type: raw
    default: 3
  arrival:
    description: Arrival process of the rate levels (C(poisson), C(constant)).
    type: str
    default: poisson
  seed:
    description: Seed of the arrivals and the sampling.
    type: raw
    default: 42
  temperature:
    description: Sampling temperature of the runs.
    type: raw
    default: 0
  max_tokens:
    description: Output tokens per request.
    type: raw
    default: 256
  ignore_eos:
    description: Ask the engine to ignore the end of sequence.
    type: bool
    default: false
  request_params:
    description: More request parameters.
    type: dict
    default: {}
  request_timeout:
    description: Seconds a request may take.
    type: float
    default: 600
  validate_certs:
    description: Verify TLS certificates of the engines.
    type: bool
    default: true
  headers:
    description: Request headers (refused with O(client=vllm_bench)).
    type: dict
    default: {}
  min_speedup:
    description: C(specpilot_benchmark.min_speedup) of the spec - sets the gains of the thresholds and the policy.
    type: float
  thresholds:
    description: Thresholds of M(specpilot.core.benchmark_report) (they win over those derived here).
    type: dict
    default: {}
  slo:
    description: The SLO policy of M(specpilot.core.benchmark_report) (it wins over the derived C(min_gain)).
    type: dict
    default: {}
  sweep_enabled:
    description: Run the temperature sweep (client C(controller) only).
    type: bool
    default: true
  temperatures:
    description: Temperatures of the sweep.
    type: list
    elements: raw
    default: []
  production_temperature:
    description: The production sampling temperature, swept too (null or empty - not given).
    type: raw
  twin_suffix:
    description: Suffix of the baseline twin's name.
    type: str
    default: -baseline
  vllm_bench:
    description: The settings of C(vllm bench serve) (O(client=vllm_bench)).
    type: dict
    default: {}
    suboptions:
      dataset:
        description: C(workload) (the prompts, ShareGPT JSON) or C(random).
        type: str
        default: workload
      image:
        description: The image that runs it.
        type: str
        default: ""
      command:
        description: The command that runs C(vllm bench serve).
        type: list
        elements: str
        default: [vllm, bench, serve]
      save_detailed:
        description:
          - Save the result with its per-request detail (C(--save-result --save-detailed)) and print it after
            the output, so the report gets per-request samples and confidence intervals. The container then
            runs O(vllm_bench.command) under C(sh -c) (the image needs C(sh)); C(false) - the command as given
            and vLLM's aggregates only (a vLLM without C(--save-detailed)).
        type: bool
        default: true
      model:
        description: C(--model) (empty - the served name).
        type: str
        default: ""
      tokenizer:
        description: C(--tokenizer) (empty - not passed).
        type: str
        default: ""
      random_input_len:
        description: C(--random-input-len) of the random dataset.
        type: raw
        default: 256
      extra_args:
        description: More arguments, appended.
        type: list
        elements: raw
        default: []
      api_key_secret:
        description: C({name, key}) of the Secret holding OPENAI_API_KEY.
        type: dict
        default: {}
      hf_token_secret:
        description: C({name, key}) of the Secret holding HF_TOKEN.
        type: dict
        default: {}

seealso:
  - module: specpilot.core.spec_validate
  - module: specpilot.core.vllm_load
  - module: specpilot.core.benchmark_report
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
- name: Plan the benchmark
  specpilot.core.benchmark_plan:
    plan: "{{ validation.plan }}"
    qps_levels: [1, 4]
    bundled_dir: "{{ role_path }}/files/workloads"
    cwd: "{{ lookup('ansible.builtin.env', 'PWD') }}"
    report_root: .reports/benchmark
  register: bench
"""

RETURN = r"""
levels:
  description: The load levels in the order measured, each C({qps, concurrency}).
  type: list
  elements: dict
  returned: always
level_labels:
  description: A label per level, e.g. V(qps=4) or V(qps=inf concurrency=2).
  type: list
  elements: str
  returned: always
dir:
  description: The report directory (absolute).
  type: str
  returned: always
workload:
  description: C(name) (for the report), C(file) (the JSONL file; null with prompts) and C(prompts) (the spec's, or null).
  type: dict
  returned: always
twin:
  description: The baseline twin - C(name), C(args) (the plan's arguments without the speculative config), C(digest),
    C(manifest) (the InferenceService).
  type: dict
  returned: always
sweep:
  description: C(temperatures) (floats, each once), C(skipped) (why the sweep does not run, or null) and
    C(request_params) (without a temperature).
  type: dict
  returned: always
report:
  description: C(thresholds) and C(policy) of M(specpilot.core.benchmark_report).
  type: dict
  returned: always
job:
  description: With O(client=job) - C(names) (the Job per side) and C(runs) (the load generator's run per level, without
    C(base_url) and C(label)); else null.
  type: dict
  returned: always
vllm_bench:
  description: With O(client=vllm_bench) - C(jobs) (per side, a Job name per level), C(command) (the container's
    command), C(args) (per level, all but C(--base-url)), C(env), C(num_prompts), C(dataset) (ShareGPT records, or
    null for the random dataset); else null.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_plan import (
    BenchPlanError,
    build_plan,
)

VLLM_BENCH_OPTIONS = dict(
    dataset=dict(type="str", default="workload"),
    image=dict(type="str", default=""),
    command=dict(type="list", elements="str", default=["vllm", "bench", "serve"]),
    save_detailed=dict(type="bool", default=True),
    model=dict(type="str", default=""),
    tokenizer=dict(type="str", default="", no_log=False),  # a model name, not a credential
    random_input_len=dict(type="raw", default=256),
    extra_args=dict(type="list", elements="raw", default=[]),
    # {name, key} of a Secret (its data never passes through the module)
    api_key_secret=dict(type="dict", default={}, no_log=False),
    hf_token_secret=dict(type="dict", default={}, no_log=False),
)


ARGUMENT_SPEC = dict(
    plan=dict(type="dict", required=True),
    client=dict(type="str", choices=["controller", "job", "vllm_bench"], default="controller"),
    api=dict(type="str", choices=["completions", "chat"], default="completions"),
    qps_levels=dict(type="list", elements="raw", default=[]),
    concurrency_levels=dict(type="list", elements="int", default=[]),
    concurrency=dict(type="raw"),
    workload=dict(type="str", default="code-edit"),
    workload_name=dict(type="str", default="code-edit"),
    prompts=dict(type="list", elements="raw"),
    bundled_dir=dict(type="path", required=True),
    cwd=dict(type="str", required=True),
    report_root=dict(type="str", required=True),
    runs_per_prompt=dict(type="int", default=5),
    max_requests=dict(type="raw"),
    warmup_requests=dict(type="raw", default=3),
    arrival=dict(type="str", default="poisson"),
    seed=dict(type="raw", default=42),
    temperature=dict(type="raw", default=0),
    max_tokens=dict(type="raw", default=256, no_log=False),  # a count, not a credential
    ignore_eos=dict(type="bool", default=False),
    request_params=dict(type="dict", default={}),
    request_timeout=dict(type="float", default=600),
    validate_certs=dict(type="bool", default=True),
    headers=dict(type="dict", default={}),
    min_speedup=dict(type="float"),
    thresholds=dict(type="dict", default={}),
    slo=dict(type="dict", default={}),
    sweep_enabled=dict(type="bool", default=True),
    temperatures=dict(type="list", elements="raw", default=[]),
    production_temperature=dict(type="raw"),
    twin_suffix=dict(type="str", default="-baseline"),
    vllm_bench=dict(type="dict", default={}, options=VLLM_BENCH_OPTIONS),
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    try:
        result = build_plan(module.params)
    except BenchPlanError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
