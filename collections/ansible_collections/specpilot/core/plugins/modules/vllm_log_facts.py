#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


DOCUMENTATION = r"""
module: vllm_log_facts

short_description: Read speculative-decoding facts from a vLLM engine log

version_added: 0.1.0

author:
  - specpilot maintainers (@specpilot)

description:
  - Parses a vLLM server log (vLLM 0.5.5 to 0.33.0, V0 and V1 engines) and returns the facts a
    speculative-decoding smoke check needs - the vLLM version, the engine (V0/V1), readiness, the
    resolved C(speculative_config) of the engine-init line, every C(SpecDecoding metrics:) /
    C(Speculative metrics:) window with its values exactly as printed, a draft-weighted summary,
    and the warnings and start errors that matter for speculative decoding
    (RV(log_warnings), RV(log_errors)).
  - The log is streamed (constant memory on multi-GB logs). Lines are the physical lines split
    on newline only (what C(grep -n) numbers).
  - Tolerates process prefixes such as C((APIServer pid=N)) and C((EngineCore_DP0 pid=N)), ANSI
    colour codes, C([file.py:NN]) and C(file.py:NN]) headers, several log records collapsed onto
    one physical line, uvicorn access lines, blank lines, the C(tokens tokens) typo of old builds,
    unknown extra key/value pairs and C(nan) values (returned as null).
  - Read-only; never reports C(changed). Supports check mode.
  - Returns its facts as module results (use C(register)); it does not set C(ansible_facts).

options:
  path:
    description:
      - Path of the log file on the target host.
      - Mutually exclusive with O(content).
    type: path
  content:
    description:
      - The log text itself, for example the C(log) returned by M(kubernetes.core.k8s_log).
      - Mutually exclusive with O(path).
    type: str
  since:
    description:
      - A marker string. Windows, the summary, warnings, errors and level counts cover only the
        lines after the B(last) physical line that contains it (each occurrence starts them anew).
      - Startup facts (RV(vllm_version), RV(engine), RV(speculative_config), RV(ready), model
        names) are always taken from the whole log.
      - When the marker never occurs the whole log counts and RV(since_found) is V(false). A
        typical marker is the last line read before probe requests were sent, or a
        C(MM-DD HH:MM:SS) timestamp prefix.
    type: str
  max_windows:
    description:
      - How many windows to return; the most recent ones are kept. The summary always covers every
        window in scope. V(0) returns all of them (memory then grows with the log).
    type: int
    default: 1000
  max_issues:
    description:
      - Most distinct warnings and errors to return (repeats of one message only raise its
        C(count)).
    type: int
    default: 100

notes:
  - V1 windows are per logging interval (about 10 s under C(vllm serve)); V0 lines are cumulative since
    startup, so the V0 summary is the last line.
  - The summary is draft-weighted - acceptance is sum(accepted)/sum(drafted); mean acceptance
    length and per-position acceptance are averaged with each window's drafted tokens as weight
    (equal to weighting by drafts when every draft has C(num_speculative_tokens) tokens).
  - vLLM 0.8.5 printed the mean acceptance length without the bonus token; when the log names
    that version the summary adds 1 (windows keep the printed value).

seealso:
  - module: specpilot.core.vllm_metrics_facts
  - module: kubernetes.core.k8s_log

requirements:
  - python >= 3.9
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
- name: Read the engine log of the predictor pod
  kubernetes.core.k8s_log:
    namespace: llm
    name: "{{ predictor_pod }}"
    container: kserve-container
  register: engine_log

- name: Parse it
  specpilot.core.vllm_log_facts:
    content: "{{ engine_log.log }}"
  register: facts

- name: Speculative decoding must be configured as planned and the engine clean
  ansible.builtin.assert:
    that:
      - facts.speculative_config is not none
      - facts.speculative_config.method == 'ngram'
      - facts.speculative_config.num_spec_tokens == 3
      - facts.log_errors | length == 0

- name: Only the windows logged after the probes started
  specpilot.core.vllm_log_facts:
    content: "{{ engine_log_after.log }}"
    since: "{{ engine_log.log_lines | select | last }}"
  register: probe_facts

- name: Parse a saved log file
  specpilot.core.vllm_log_facts:
    path: /var/log/vllm/server.log
    max_windows: 50
"""

RETURN = r"""
vllm_version:
  description: vLLM version from the logo/version line, else from the engine-init line C((vX.Y.Z)).
  returned: always
  type: str
  sample: 0.32.0
engine:
  description: Engine generation, V(v0) or V(v1) (engine-init line; else the metrics line format; else V1 for versions >= 0.10).
  returned: always
  type: str
  sample: v1
ready:
  description: C(Application startup complete.) was seen after the last engine start.
  returned: always
  type: bool
shutdown:
  description: A server shutdown was logged after the last start.
  returned: always
  type: bool
speculative_config:
  description:
    - The resolved speculative config of the last engine-init line; null when it printed
      C(speculative_config=None) or no engine-init line was seen (see RV(speculative_config_found)).
    - For the old C(SpeculativeConfig(draft_model=...)) repr (<= 0.8.2) C(method) is V(ngram) for
      C([ngram]) and null otherwise (V0 derives it from the draft checkpoint).
  returned: always
  type: dict
  contains:
    method:
      description: Resolved method (deprecated C(*_mtp) names print as V(mtp)).
      type: str
      sample: ngram
    model:
      description: Draft model / head path; null for ngram and suffix.
      type: str
    num_spec_tokens:
      description: Speculative tokens per step.
      type: int
      sample: 3
    repr:
      description: The repr as printed.
      type: str
      sample: SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3)
speculative_config_found:
  description: An engine-init line with C(speculative_config=) was seen, so a null RV(speculative_config) means "off".
  returned: always
  type: bool
requested_speculative_config:
  description: The C(speculative_config) of the API server's C(non-default args) line (the config as requested).
  returned: always
  type: dict
  sample: {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
model:
  description: C(model=) of the engine-init line.
  returned: always
  type: str
served_model_name:
  description: C(served_model_name=) of the engine-init line (the C(model_name) label in /metrics).
  returned: always
  type: str
tensor_parallel_size:
  description: From the engine-init line.
  returned: always
  type: int
data_parallel_size:
  description: From the engine-init line.
  returned: always
  type: int
async_scheduling:
  description: From C(Asynchronous scheduling is enabled/disabled.) (0.14.1-0.26.0); null when not logged.
  returned: always
  type: bool
engine_init_line:
  description: Line number of the last engine-init line.
  returned: always
  type: int
windows:
  description:
    - One entry per speculative metrics line in scope, in log order (the last O(max_windows)).
    - Values are exactly as printed; percentages are converted to fractions; fields a format does
      not print are null; C(nan) is null.
  returned: always
  type: list
  elements: dict
  contains:
    line:
      description: 1-based line number.
      type: int
    timestamp:
      description: C(MM-DD HH:MM:SS) as printed (vLLM logs no year).
      type: str
    process:
      description: Process name of the C((Name pid=N)) prefix, e.g. C(APIServer).
      type: str
    engine:
      description:
        - Data-parallel engine index - from an C(EngineCore_DPn) prefix, else from the nearest
          preceding C(Engine NNN:) line of the same process within 64 KiB (the stat logger
          prints it right before the metrics line); null for V0 or when none is found.
      type: int
    format:
      description: V(v1) (C(SpecDecoding metrics:), per interval) or V(v0) (C(Speculative metrics:), cumulative).
      type: str
    cumulative:
      description: True for V0 lines.
      type: bool
    mean_acceptance_length:
      description: As printed (0.8.5 printed it without the +1).
      type: float
    draft_acceptance_rate:
      description: Fraction 0..1 (V1 prints a percentage).
      type: float
    accepted_tokens:
      description: Accepted draft tokens.
      type: int
    drafted_tokens:
      description: Drafted tokens.
      type: int
    accepted_throughput:
      description: Tokens/s (0.10.2+).
      type: float
    drafted_throughput:
      description: Tokens/s (0.10.2+).
      type: float
    per_position_acceptance:
      description: Acceptance per draft position (0.8.5+).
      type: list
      elements: float
    system_efficiency:
      description: V0 only.
      type: float
    num_spec_tokens:
      description: V0 only.
      type: int
    emitted_tokens:
      description: V0 only.
      type: int
    extra:
      description: Unknown key/value pairs of the line, raw text.
      type: dict
windows_total:
  description: Windows in scope (including those not returned because of O(max_windows)).
  returned: always
  type: int
windows_dropped:
  description: Windows in scope that were not returned.
  returned: always
  type: int
summary:
  description: Figures over every window in scope.
  returned: always
  type: dict
  contains:
    windows:
      description: Number of windows summarised.
      type: int
    format:
      description: V(v1) (draft-weighted over V1 windows) or V(v0) (last cumulative line); null without windows.
      type: str
    weighting:
      description: V(drafted_tokens) or V(last_cumulative).
      type: str
    accepted_tokens:
      description: Sum of accepted tokens (V0 - the last cumulative value).
      type: int
    drafted_tokens:
      description: Sum of drafted tokens (V0 - the last cumulative value).
      type: int
    draft_acceptance_rate:
      description: accepted / drafted (V0 - the printed rate of the last line).
      type: float
    mean_acceptance_length:
      description: Draft-weighted mean acceptance length; V0 - emitted / (drafted / num_spec_tokens).
      type: float
    per_position_acceptance:
      description: Draft-weighted per-position acceptance (V1).
      type: list
      elements: float
    system_efficiency:
      description: V0 - last line.
      type: float
    num_spec_tokens:
      description: V0 - last line.
      type: int
    emitted_tokens:
      description: V0 - last line.
      type: int
    first_line:
      description: Line of the first window summarised.
      type: int
    last_line:
      description: Line of the last window summarised.
      type: int
    first_timestamp:
      description: Timestamp of the first window.
      type: str
    last_timestamp:
      description: Timestamp of the last window.
      type: str
    notes:
      description: How the figures were normalised.
      type: list
      elements: str
summary_by_engine:
  description: The V1 summary per data-parallel engine index (keys are the index as a string).
  returned: always
  type: dict
engines:
  description: Engine indices seen on V1 windows.
  returned: always
  type: list
  elements: int
log_warnings:
  description:
    - Known speculative-decoding warnings in scope, first occurrence of each message.
    - Named C(log_warnings) because C(warnings) is reserved in Ansible module results.
    - Codes - V(ASYNC_SCHEDULING_DISABLED), V(SAMPLING_PARAM_IGNORED) (min_p/logit_bias),
      V(MTP_MULTI_STEP), V(DEPRECATED_METHOD), V(DEPRECATED_SPEC_FLAGS), V(V0_FALLBACK),
      V(ASYNC_OUTPUT_DISABLED), V(DRAFT_TP_FORCED), V(SUFFIX_DEFAULT_TOKENS),
      V(SCHEDULED_TOKENS_CAPPED); error codes logged after a shutdown appear here with C(after_shutdown).
  returned: always
  type: list
  elements: dict
  contains:
    code:
      description: Stable identifier.
      type: str
      sample: ASYNC_SCHEDULING_DISABLED
    message:
      description: The vLLM message as logged (header and prefix removed).
      type: str
      sample: Async scheduling not supported with ngram-based speculative decoding and will be disabled.
    line:
      description: 1-based line number of the first occurrence.
      type: int
    text:
      description: The whole record (prefix and header included, ANSI removed, at most 1000 characters).
      type: str
    count:
      description: Occurrences of this code and message.
      type: int
    after_shutdown:
      description: Present (true) on errors logged after a shutdown started.
      type: bool
    key:
      description: V(UNKNOWN_SPEC_KEY) and pydantic validation errors - the offending key/field.
      type: str
    package:
      description: V(MISSING_PACKAGE) - the package named by the error, when it names one.
      type: str
      sample: arctic_inference
    exception:
      description: V(EXCEPTION) and generic V(CONFIG_VALIDATION_ERROR) lines - the exception class.
      type: str
      sample: ValueError
log_errors:
  description:
    - Start errors in scope (same entries as RV(log_warnings)). Codes - V(UNKNOWN_SPEC_KEY) (with C(key)),
      V(CONFIG_VALIDATION_ERROR), V(UNSUPPORTED_METHOD), V(DRAFT_MODEL_UNSUPPORTED),
      V(ASYNC_SCHEDULING_CONFLICT), V(MISSING_PACKAGE) (with C(package) when named),
      V(CUDA_OOM), V(CLI_ARGUMENT_ERROR), V(ENGINE_START_FAILED), V(ENGINE_DEAD), V(EXCEPTION)
      (any other C(XxxError:) line, with C(exception)).
  returned: always
  type: list
  elements: dict
issues_dropped:
  description: Distinct warnings/errors not returned because of O(max_issues).
  returned: always
  type: int
log_levels:
  description: Number of C(WARNING) and C(ERROR) records in scope.
  returned: always
  type: dict
  sample: {"WARNING": 3, "ERROR": 0}
lines:
  description: Physical lines read.
  returned: always
  type: int
since:
  description: The O(since) marker.
  returned: always
  type: str
since_found:
  description: The marker occurred.
  returned: always
  type: bool
since_line:
  description: Line number of its last occurrence.
  returned: always
  type: int
"""

from ansible_collections.specpilot.core.plugins.module_utils.fact_tasks import (
    LOG_FACTS_ARGS,
    LOG_FACTS_RULES,
    log_facts,
    run_module,
)


def main():
    # the work is fact_tasks.log_facts; playbooks run it in the worker (plugins/action/vllm_log_facts.py)
    run_module(log_facts, LOG_FACTS_ARGS, LOG_FACTS_RULES)


if __name__ == "__main__":
    main()
