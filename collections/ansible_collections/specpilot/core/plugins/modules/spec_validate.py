#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: spec_validate
short_description: Validate a specpilot service spec and render the KServe manifests it implies
version_added: 0.1.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Checks one assembled service spec (the C(specpilot_*) variables of a service, without the prefix) before
    anything touches a cluster, and returns the plan that deploy applies.
  - "Checks, in order: the service schema (C(schemas/service.schema.json)); the speculative config against the
    profile of the vLLM release in the runtime (C(schemas/speculative/)): methods, keys, types, bounds and
    combinations per release, including removed and renamed keys and how that release treats unknown keys;
    draft/target compatibility (the draft's kind against the method, tokenizer, vocabulary, EAGLE head vs
    target, EAGLE-3 target families, MTP layers, size ratio) from facts in the spec, completed from
    C(config.json) and the tokenizer files at each artifact's source (see I(model_facts)); the GPU memory
    budget; KServe version gates and admission-webhook rules on the final manifests, after the
    user's overrides."
  - Every problem is returned with the field path, a message naming the value and the vLLM/KServe version, and
    a hint with the fix. All problems are reported, not only the first.
  - The plan holds the exact vLLM argument list (V0 flags up to vLLM 0.8.1, C(--speculative-config=<compact
    JSON>) from 0.8.2), the ServingRuntime and InferenceService manifests, mount paths, the spec digest, and a
    baseline argument list without speculative decoding.
  - "Run-time overrides: the variables C(specpilot_override_method) and
    C(specpilot_override_num_speculative_tokens) (extra variables of one run, e.g. AWX survey answers) replace
    the method and C(num_speculative_tokens) of the spec's C(speculative) section before anything is checked.
    Every role that needs the spec (validate, deploy, smoke, benchmark, staging) calls this module, so all of
    them see the same effective spec and plan; the inventory is not changed. See I(override_method)."
  - The logic runs on the Ansible controller (an action plugin with the same name); nothing is executed on the
    managed host and no cluster is contacted. With I(model_facts=auto) it reads the model sources' small files
    (never weights). The version profiles ship inside the collection, so the module
    works wherever the collection is installed; I(schema_dir) can point it at exported schema files instead.
options:
  spec:
    description:
      - The assembled service spec, e.g. C({name, namespace, kserve_version, deployment_mode, vllm_version,
        runtime, target, draft, delivery, pvc, modelcar, speculative, vllm_args, gpu, ...}).
      - When omitted, the spec is assembled on the controller from the host's C(specpilot_<key>) variables
        (inventory, play and extra variables; role variables such as C(specpilot_validate_*) are not spec
        keys), and I(variable_names) is filled in from the same variables.
      - The filter C(specpilot.core.spec_from_vars) does the same assembly (both call C(assemble_from_vars) of
        module_utils/service/spec.py, the one assembly of a spec from variables).
    type: dict
  spec_patch:
    description:
      - Merged into the spec (given or assembled) before anything is checked; mappings merge key by key,
        anything else replaces.
      - "For example C({modelcar: {image_digest: sha256:...}}) validates the spec again with the image pinned by the
        digest the staging role pushed, without assembling the spec in a template."
    type: dict
  default_name:
    description:
      - Service name when the spec is assembled from the host's variables and C(specpilot_name) is not set.
      - Default is the inventory host name.
    type: str
  strict:
    description:
      - Warnings fail validation too (C(ok) is false when there is any warning).
      - Warnings listed in the spec's C(acknowledged_warnings) are reported as notes and do not count.
    type: bool
    default: false
  kserve_version:
    description:
      - KServe release of the cluster (e.g. C("0.20")); overrides the spec's C(kserve_version). The deploy
        role passes the version it detected.
    type: str
  schema_dir:
    description:
      - Directory with C(service.schema.json) and C(speculative/index.json) plus the profiles (the layout of
        the project's C(schemas/) directory). When unset the schemas built into the collection are used.
    type: path
  fail_on_error:
    description:
      - Fail the task when the spec is not valid. The failure message (C(msg)) lists every problem; a failed
        result holds only C(msg) and C(ok).
      - Set it to false to inspect C(findings), C(report) and C(plan) yourself.
    type: bool
    default: true
  allow_missing_digest:
    description:
      - For delivery C(modelcar) without C(modelcar.image_digest), render a placeholder digest and report a
        warning instead of an error (render-only runs before staging).
    type: bool
    default: false
  read_local_files:
    description:
      - Read C(config.json) and tokenizer files under C(target.local_path) and C(draft.local_path).
    type: bool
    default: true
  model_facts:
    description:
      - "C(auto) reads C(config.json) and the tokenizer (C(tokenizer.json) or C(tokenizer.model), fingerprinted
        by sha256), never weights, at the source of the target and the draft: C(hf://) through the Hub API
        (C(HF_ENDPOINT), C(HF_TOKEN)), C(s3://) (boto3 on the controller, the C(AWS_*) variables), C(oci://)
        through the registry API (tar headers and the small members of the model's layer, by Range requests),
        or C(local_path). A C(pvc://) source (also the PVC of delivery C(pvc)) is read in the cluster by
        M(specpilot.core.cluster_probe) (option O(probed)); the controller cannot read it in a validate-only run.
        The results are cached by source and revision under
        C(~/.cache/specpilot/model-facts) (C(SPECPILOT_MODEL_FACTS_CACHE); moving references for
        C(SPECPILOT_MODEL_FACTS_TTL) seconds, default one day), shared by every host of a run and by later runs."
      - "C(HF_HUB_OFFLINE) (or C(TRANSFORMERS_OFFLINE)) set as huggingface_hub reads it: C(hf://) facts come from
        the cache only, the Hub is not asked. An endpoint that does not answer (no connection, a timeout, a 5xx) is
        not asked again for C(SPECPILOT_MODEL_FACTS_UNREACHABLE_TTL) seconds (default 300, C(0) turns this off), by
        any host of the run; the findings of each name the checks that could not run. A read tries twice, a quarter
        second apart, 10 s at most each."
      - Facts typed in the spec win; a typed fact that contradicts the source is an error naming both values.
        When facts cannot be read, the findings name the checks that could not run and why.
      - C(off) reads nothing over the network (C(local_path) is still read); the findings say which checks
        were skipped.
      - When the option is not given, the action plugin takes the host's variable C(specpilot_model_facts),
        else the environment variable C(SPECPILOT_MODEL_FACTS), else C(auto).
      - "Values: C(auto) or C(off) (an unquoted YAML C(off), read as false, means C(off)); any other value is an
        error."
    type: raw
  image_pins:
    description:
      - How the images the spec names (C(runtime.image), C(modelcar.base_image) unless a local C(oci:) layout)
        must be pinned. C(tag) - a tag other than C(latest) (else the warning C(runtime-image-unpinned)).
        C(digest) - C(repo:tag@sha256:<digest>); a tag alone is the warning C(image-tag-only), which
        C(acknowledged_warnings) can acknowledge. Set C(specpilot_image_pins=digest) in a production inventory.
      - When the option is not given, the action plugin takes the host's variable C(specpilot_image_pins).
    type: str
    choices: [tag, digest]
    default: tag
  probed:
    description:
      - What M(specpilot.core.cluster_probe) read in the cluster (its RV(specpilot.core.cluster_probe#module:probed)).
      - Its C(vllm_version) resolves C(vllm_version=auto) (the default when C(runtime.image) is given); a declared
        C(vllm_version) that differs is an error naming both. Without it, C(auto) takes the last probe of the image
        cached on the controller, else C(vllm_version_fallback), else it is an error at C(vllm_version).
      - Its C(models) are the facts of the C(pvc://) directories (delivery C(pvc)) as read from the source;
        typed facts still win, and a typed fact they contradict is an error.
    type: dict
  var_prefix:
    description:
      - Prefix shown before the field paths in C(report) (the inventory variables are C(specpilot_<key>)).
    type: str
    default: specpilot_
  render_dir:
    description:
      - When the spec is valid, write C(<render_dir>/<name>/inferenceservice.yaml), C(servingruntime.yaml)
        (unless an existing runtime is used) and C(plan.yaml) on the controller. Unchanged files are not
        rewritten; check mode writes nothing. C(changed) reports whether a file was (or would be) written.
    type: path
  display_warnings:
    description:
      - When the spec is valid but has warnings, return the readable report as an Ansible warning so that it
        is displayed (the structured list is always in C(findings.warnings)).
    type: bool
    default: true
  variable_names:
    description:
      - Names of the C(specpilot_*) variables defined for the service (C(query('ansible.builtin.varnames',
        '^specpilot_'))). A name that no playbook reads but is close to one that does (C(specpilot_speculatve),
        C(specpilot_deploy_wiat)) is an error with the name it is close to (it would otherwise be ignored and
        the run go on with the default); a name close to none is a warning. Without O(known_variables) only
        the names close to a spec key are checked.
    type: list
    elements: str
    default: []
  known_variables:
    description:
      - Every C(specpilot_*) name the project's roles and playbooks use, for the check of O(variable_names). The
        action plugin reads them from the YAML of the playbook's folder and the roles beside it when the spec is
        assembled from the variables.
    type: list
    elements: str
    default: []
  override_method:
    description:
      - Speculative method for this run instead of the spec's C(speculative.method) (e.g. C(eagle3), C(ngram),
        C(mtp)), checked against the vLLM release of the runtime like the spec's own.
      - C("") or C(spec) keeps the spec's method (C(spec) is the keep choice of an AWX multiple-choice survey
        question, which cannot be empty).
      - When the method changes, the keys that belong only to the old method are dropped so that a valid spec
        stays valid; which keys those are comes from the profile of the vLLM release (keys whose effect it
        limits to some methods, such as C(prompt_lookup_min)/C(prompt_lookup_max) for ngram or
        C(suffix_decoding_*) for suffix, and keys it allows only with some methods, such as
        C(use_heterogeneous_vocab) for draft_model), plus C(speculative.model), which names the old method's
        draft (it is filled in again from C(specpilot_draft)). Keys common to all methods stay. The dropped
        keys are listed in the result (C(speculative_overrides.dropped_keys)).
      - The spec's C(specpilot_draft) serves the new method when that method needs a separate draft (eagle,
        eagle3, draft_model ...; the compatibility checks judge it) or when both methods take optional weights
        of the same kind (MTP to MTP). Otherwise (ngram, suffix, or MTP after an EAGLE head or draft model) it
        is dropped from the effective spec, neither loaded nor delivered
        (C(speculative_overrides.dropped_draft)).
      - A method that needs a draft model (eagle, eagle3, draft_model ...) needs C(specpilot_draft) in the
        spec; a method that needs C(num_speculative_tokens) needs it in the spec or in
        I(override_num_speculative_tokens). A service whose spec has speculative decoding off cannot be
        overridden. Each of these is an error that names the variable, its value and the fix.
      - When the option is not given, the action plugin takes the variable C(specpilot_override_method) of the
        host (also when I(spec) is given), so that every role of a run applies the same override.
    type: raw
  override_num_speculative_tokens:
    description:
      - C(num_speculative_tokens) for this run instead of the spec's; C(0) (or empty) keeps the spec's value.
      - Checked against the vLLM profile like the spec's own value (errors then end with the override in use).
      - When the option is not given, the action plugin takes the variable
        C(specpilot_override_num_speculative_tokens) of the host.
    type: raw
notes:
  - Supports check mode. The only thing it ever changes is the files under I(render_dir).
  - Ansible reserves the top-level C(warnings) result key for display strings, so the structured warnings are
    returned in C(findings.warnings).
  - An applied override is always announced with an Ansible warning line (whatever I(display_warnings) says)
    and a note in C(report); the errors and warnings about the speculative config then end with the override
    in use. The plan's C(spec_digest) is computed from the rendered objects, so an override that changes the
    deployment changes the digest, and deploy applies it.
requirements:
  - jsonschema >= 4.18 on the controller
seealso:
  - name: Service spec schema
    description: The reference of every spec field (generated from the collection).
    link: https://example.invalid/specpilot/schemas/service.schema.json
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Nothing is written (no rendered manifests).
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Validate the spec of this service (its specpilot_* variables) and keep the plan
  specpilot.core.spec_validate:
    fail_on_error: false
  register: validation

- name: The same, assembling the spec in a template
  specpilot.core.spec_validate:
    spec: >-
      {{ dict(names | zip(query('ansible.builtin.vars', *names)))
         | specpilot.core.spec_from_vars(inventory_hostname) }}
    variable_names: "{{ names }}"
  vars:
    names: "{{ query('ansible.builtin.varnames', '^specpilot_') }}"

- name: Validate an explicit spec against the KServe release detected on the cluster
  specpilot.core.spec_validate:
    kserve_version: "0.20"
    strict: true
    spec:
      name: chat
      namespace: ml
      vllm_version: "0.32.0"
      runtime:
        image: vllm/vllm-openai:v0.32.0
      target:
        uri: hf://meta-llama/Llama-3.1-8B-Instruct
      speculative:
        method: ngram
        num_speculative_tokens: 4
        prompt_lookup_max: 4
      acknowledged_warnings:
        - async-scheduling-disabled

- name: Validate this service with another method and k for this run (the inventory is unchanged)
  specpilot.core.spec_validate:
    override_method: mtp
    override_num_speculative_tokens: 1
  register: validation

- name: Apply exactly what was validated
  kubernetes.core.k8s:
    state: present
    apply: true
    definition: "{{ validation.plan.inferenceservice }}"
  when: validation.ok
"""

RETURN = r"""
ok:
  description: True when there is no error (and, with I(strict), no warning).
  returned: always
  type: bool
  sample: true
errors:
  description: The errors, each C({path, message, hint, code}). C(path) is relative to the spec
    (C(speculative.model)).
  returned: unless the task fails (see I(fail_on_error))
  type: list
  elements: dict
  sample:
    - path: speculative.num_speculative_tokens
      message: "num_speculative_tokens=0 is out of range for vLLM 0.32.0: it must be >= 1"
      hint: use a value >= 1
      code: out-of-range
findings:
  description: All findings by severity.
  returned: unless the task fails (see I(fail_on_error))
  type: dict
  contains:
    errors:
      description: Same as the top-level C(errors).
      type: list
      elements: dict
    warnings:
      description: Problems that do not block (fail with I(strict)), same shape as C(errors).
      type: list
      elements: dict
    notes:
      description: Caveats worth knowing that never fail (e.g. min_p/logit_bias ignored under speculative
        decoding).
      type: list
      elements: dict
report:
  description: A readable block of every finding, with the inventory variable names.
  returned: unless the task fails (see I(fail_on_error))
  type: str
rendered_files:
  description: The files under I(render_dir) (written, or already up to date).
  returned: when I(render_dir) is set and the spec is valid
  type: list
  elements: str
vllm_version:
  description: The vLLM release validated against and where it came from (C(value); C(source) C(declared),
    C(image), C(cache) or C(fallback); C(declared); C(read) and C(read_from) when the image's was read; C(image)).
  returned: unless the task fails (see I(fail_on_error))
  type: dict
model_facts:
  description: Where each artifact's facts came from (C(mode); per role C(source), C(path), C(kind), C(typed),
    the facts read C(keys), C(resolved_revision), C(cached), C(problem) when they could not be read).
  returned: unless the task fails (see I(fail_on_error)) and the spec passed the schema
  type: dict
speculative_overrides:
  description: What the run-time overrides (I(override_method), I(override_num_speculative_tokens)) did.
  returned: unless the task fails (see I(fail_on_error))
  type: dict
  contains:
    applied:
      description: True when the effective speculative config differs from the spec's.
      type: bool
    method:
      description: C({variable, value, spec}) of the method override (C(spec) is the spec's method), or null.
      type: dict
    num_speculative_tokens:
      description: C({variable, value, spec}) of the num_speculative_tokens override, or null.
      type: dict
    dropped_keys:
      description: Keys of the spec's speculative config dropped because they belong to its method only.
      type: list
      elements: str
    dropped_draft:
      description: True when the spec's draft is not used by the new method (and not delivered).
      type: bool
  sample:
    applied: true
    method: {variable: specpilot_override_method, value: suffix, spec: ngram}
    num_speculative_tokens: null
    dropped_keys: [prompt_lookup_max, prompt_lookup_min]
    dropped_draft: false
spec:
  description: The normalised spec (defaults applied), with the run-time overrides applied. Null when the spec
    does not match the schema.
  returned: unless the task fails (see I(fail_on_error))
  type: dict
plan:
  description: What deploy applies. Null when the spec could not be rendered.
  returned: unless the task fails (see I(fail_on_error))
  type: dict
  contains:
    delivery:
      description: C({type, storage_uri, storage_uris, staging, image|pvc}) of the resolved delivery.
      type: dict
    mount_paths:
      description: C({root, target, draft}) paths inside the kserve-container.
      type: dict
    speculative_config:
      description: The validated speculative config (C(model) filled in), or null when speculative decoding is
        off.
      type: dict
    speculative_args:
      description: The arguments that carry the speculative config (one C(--speculative-config=...) or V0
        flags).
      type: list
      elements: str
    args:
      description:
        - The exact vLLM arguments of the InferenceService (appended to the runtime's). The first is the
          model path, the positional argument of C(vllm serve), the runtime's command.
        - A runtime you bring (C(runtime.create=false) in the spec) must run C(vllm serve) too.
      type: list
      elements: str
      sample:
        - /mnt/models/target
        - '--speculative-config={"method":"ngram","num_speculative_tokens":4}'
    args_without_speculative:
      description: The same arguments without speculative decoding (baseline for rollback and benchmarks).
      type: list
      elements: str
    servingruntime:
      description: The ServingRuntime/ClusterServingRuntime manifest, or null with an existing runtime.
      type: dict
    inferenceservice:
      description: The InferenceService manifest.
      type: dict
    spec_digest:
      description: sha256 of the normalised spec, also the C(specpilot.io/spec-digest) annotation.
      type: str
    profile:
      description: The vLLM profile used (C(id), C(basis) release, C(era), C(render)).
      type: dict
    staging:
      description: What the staging role must copy (delivery pvc/modelcar), or null.
      type: dict
    gpu_budget:
      description: GPU memory figures per GPU in GiB, or null when not computable.
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.specpilot.core.plugins.module_utils.service import validator


def main():
    module = AnsibleModule(argument_spec=validator.ARGUMENT_SPEC, supports_check_mode=True)
    if not validator.HAS_JSONSCHEMA:
        module.fail_json(msg=missing_required_lib("jsonschema"))
    if module.params["spec"] is None:
        module.fail_json(msg="spec is required when the module runs without its action plugin")
    result, failed = validator.module_result(module.params, check_mode=module.check_mode)
    if failed:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
