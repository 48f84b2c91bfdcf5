# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""What the benchmark role measures, worked out once from the validated plan and the role's
settings (the module specpilot.core.benchmark_plan; the filters of plugins/filter/benchmark.py):
the load levels, the report directory, the workload, the baseline twin, the temperature sweep,
the report's thresholds and policy, and the arguments of the in-cluster clients (the load
generator's Job, ``vllm bench serve``).  The role's YAML only wires these into its tasks.
Pure computation: it reads the workload file and nothing else."""

from __future__ import absolute_import, division, print_function

import hashlib
import json
import os
import re

from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_client import (
    RunConfigError,
    load_workload,
)
from ansible_collections.specpilot.core.plugins.module_utils.common import get_path
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import vllm_bench
from ansible_collections.specpilot.core.plugins.module_utils.service import live as live_view
from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service.render import deep_merge

__metaclass__ = type

BUNDLED_WORKLOADS = ("code-edit", "chat")
SIDES = ("baseline", "speculative")
# the ShareGPT file's place in the vllm bench serve container (the ConfigMap is mounted at /specpilot)
VLLM_BENCH_DATASET_PATH = "/specpilot/workload.json"
JOB_WORKLOAD_PATH = "/specpilot/workload.jsonl"


class BenchPlanError(ValueError):
    """A setting of the benchmark role cannot be used; the message names the variable and the fix."""


# --------------------------------------------------------------------------- levels, directory, workload


def load_levels(qps_levels, concurrency_levels, concurrency):
    """The levels in the order measured: every rate (capped at ``concurrency`` requests in flight),
    then every concurrency level (closed loop, unpaced)."""
    levels = [{"qps": q, "concurrency": concurrency} for q in qps_levels or []]
    levels += [{"qps": None, "concurrency": int(c)} for c in concurrency_levels or []]
    if not levels:
        raise BenchPlanError("at least one QPS or concurrency level is needed")
    if any(lv["qps"] is None and not lv["concurrency"] for lv in levels):
        raise BenchPlanError("a QPS level of null (unpaced) needs specpilot_benchmark_concurrency")
    return levels


def level_label(level):
    """``qps=4``, ``qps=inf concurrency=2``: the loop label of a level."""
    qps = "inf" if level["qps"] is None else level["qps"]
    conc = " concurrency=%s" % level["concurrency"] if level["concurrency"] else ""
    return "qps=%s%s" % (qps, conc)


def absolute(path, cwd):
    """``path``, relative ones taken from ``cwd`` (where ansible-playbook runs)."""
    return path if os.path.isabs(path) else cwd + "/" + path


def workload(name, display_name, prompts, bundled_dir, cwd):
    """{name, file, prompts}: the spec's prompts win (no file), else a bundled workload or a JSONL path."""
    if prompts is not None:
        return {"name": "spec-prompts", "file": None, "prompts": prompts}
    if name in BUNDLED_WORKLOADS:
        path = "%s/%s.jsonl" % (bundled_dir, name)
    else:
        path = absolute(name, cwd)
    return {"name": display_name, "file": path, "prompts": None}


def prompt_texts(wl):
    """The prompt texts in order: a string, ``prompt``, or the last user message of ``messages``
    (all messages joined when no user message)."""
    try:
        items = wl["prompts"] if wl["prompts"] is not None else load_workload(wl["file"])
    except (OSError, RunConfigError) as exc:
        raise BenchPlanError("specpilot_benchmark_workload: cannot read %s: %s" % (wl["file"], exc))
    return [_prompt_text(item) for item in items]


def _prompt_text(item):
    if isinstance(item, str):
        return item
    if "prompt" in item:
        return item["prompt"]
    messages = item.get("messages") or []
    users = [m.get("content") for m in messages if m.get("role") == "user"]
    return users[-1] if users else "\n".join(str(m.get("content")) for m in messages)


# --------------------------------------------------------------------------- the twin


def render_twin(plan, suffix, variant=None):
    """A twin InferenceService of the service: the rendered plan's InferenceService under the name
    ``<name><suffix>`` with other engine arguments.  Without ``variant`` the benchmark's baseline (the
    plan without the speculative config); with ``variant`` (a tuning candidate's validated plan) that
    plan's speculative arguments.  Returns {name, args, digest, manifest}."""
    source = variant or plan
    name = plan["name"] + suffix
    if variant:
        args, method = variant["args"], variant["speculative_config"]["method"]
        digest = hashlib.sha256(("%s as %s" % (variant["spec_digest"], name)).encode("utf-8")).hexdigest()
        purpose = "candidate of the specpilot tuning run"
    else:
        # the plan's own twin (service/plan.py Plan.twin): its args and digest
        baseline = service_plan.build(plan).twin
        args, method, digest, purpose = list(baseline.args), baseline.method, baseline.digest, baseline.purpose
    isvc = source.get("serving") or source["inferenceservice"]  # the plan's kind's object
    meta = isvc.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels.update({"specpilot.io/service": name, "specpilot.io/benchmark-twin-of": plan["name"]})
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k != "specpilot.io/spec-digest"
    }
    annotations.update(
        {
            "specpilot.io/speculative-method": method,
            "specpilot.io/spec-digest": digest,
            "specpilot.io/purpose": purpose + "; deleted when the run ends",
        }
    )
    patch = {
        "metadata": {
            "name": name,
            "namespace": plan["namespace"],
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"predictor": {"model": {"args": args}}},
    }
    if isvc.get("kind") == llmisvc.KIND:  # a second LLMInferenceService: the decode workload gets the args
        manifest = deep_merge(isvc, dict(patch, spec={}))
        for container in (manifest["spec"].get("template") or {}).get("containers") or []:
            if container.get("name") == llmisvc.CONTAINER:
                container["args"] = llmisvc.container_args(args)
        return {"name": name, "args": args, "digest": digest, "manifest": manifest}
    return {"name": name, "args": args, "digest": digest, "manifest": deep_merge(isvc, patch)}


# --------------------------------------------------------------------------- where a service answers, is it ready


# seconds the twin's removal waits for it to be gone (roles/specpilot_benchmark/tasks/twin_cleanup.yml)
TWIN_DELETE_WAIT = 300


def _seconds(value, name):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError("%s must be a whole number of seconds, not %r" % (name, value)) from None


def twin_lock_seconds(api_timeout, requested=0, delete_wait=TWIN_DELETE_WAIT):
    """How long the benchmark's twin lock lasts between renewals. It is renewed while the twin rolls out
    (rollout_wait), while every level's load runs (vllm_load), while every in-cluster Job is waited for
    (k8s_job_wait) and before the twin is removed, so it must outlast what runs without a renewal: the
    twin's removal (``delete_wait`` plus one API timeout), which is also longer than the removal of an
    earlier run's Job (120 s plus one API timeout). Default (``requested`` 0): that and 5 minutes to spare
    (the applies, reads and the report between two renewals); a ``requested`` duration must be longer
    than that wait. The same rule as the canary's lock (module_utils/operate/canary.py lock_seconds)."""
    api = _seconds(api_timeout, "specpilot_benchmark_api_timeout")
    requested = _seconds(requested, "specpilot_benchmark_twin_lock_seconds")
    if api <= 0:
        raise ValueError(
            "specpilot_benchmark_api_timeout must be a positive number of seconds, not %r" % api_timeout
        )
    wait = int(delete_wait) + api
    if not requested:
        return wait + 300
    if requested <= wait:
        raise ValueError(
            "specpilot_benchmark_twin_lock_seconds: a lock of %s s would expire while the run waits up to "
            "%s s for the twin to be removed (%s s and the API timeout %s s) without renewing it: give more than "
            "%s s (or 0, the default: %s s)" % (requested, wait, delete_wait, api, wait, wait + 300)
        )
    return requested


def service_url(isvc, client, override=""):
    """Where the load reaches an InferenceService: the override, else (in-cluster clients) the
    cluster-local address, else the external status URL, else the address."""
    status = (isvc or {}).get("status") or {}
    address = get_path(status, "address", "url") or ""
    in_cluster = address if client in ("job", "vllm_bench") else ""
    return override or in_cluster or status.get("url") or address


def target_problem(resources, planned_args):
    """Why the deployed InferenceService (the ``resources`` of k8s_info) cannot be measured, or ''."""
    if not resources:
        return "the InferenceService does not exist: deploy it first (playbooks/deploy.yml)"
    obj = resources[0]
    conditions = get_path(obj, "status", "conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return "it is not Ready: wait for the rollout (or fix it) before measuring"
    live = live_view.view(obj).args
    if live != planned_args:
        return (
            "its arguments differ from the validated plan, so the baseline would not be its twin: re-run "
            "playbooks/deploy.yml. Deployed: %s Planned: %s" % (json.dumps(live), json.dumps(planned_args))
        )
    return ""


# --------------------------------------------------------------------------- sweep, report


def sweep(p):
    """{temperatures, skipped, request_params}: the listed temperatures and the production one
    (floats, each once, in order), why the sweep does not run (None when it does), and the request
    parameters without a temperature (the sweep sets it)."""
    temps = [float(t) for t in p["temperatures"] or []]
    if p["production_temperature"] not in (None, ""):
        temps.append(float(p["production_temperature"]))
    temps = list(dict.fromkeys(temps))
    reasons = [
        (
            not p["sweep_enabled"],
            "The temperature sweep is turned off (specpilot_benchmark_sweep_enabled: false).",
        ),
        (
            p["client"] != "controller",
            "The temperature sweep runs only with specpilot_benchmark_client: controller, and this benchmark "
            "used %s." % p["client"],
        ),
        (
            not temps,
            "The temperature sweep has no temperatures: specpilot_benchmark_temperatures is empty and no "
            "production temperature is set.",
        ),
    ]
    params = {k: v for k, v in (p["request_params"] or {}).items() if k != "temperature"}
    return {
        "temperatures": temps,
        "skipped": next((why for hit, why in reasons if hit), None),
        "request_params": params,
    }


def report_inputs(p):
    """{thresholds, policy} of benchmark_report: specpilot_benchmark.min_speedup sets the gains
    (min_speedup - 1), vllm bench serve (no per-request tok/s without its --save-detailed JSON, e.g. an
    older vLLM) compares the system output throughput;
    the role's thresholds and SLO win."""
    gain = None if p["min_speedup"] is None else float(p["min_speedup"]) - 1
    thresholds = {} if gain is None else {"tpot_min_gain": gain, "throughput_min_gain": gain}
    if p["client"] == "vllm_bench":
        thresholds["throughput_metric"] = "system"
    thresholds.update(p["thresholds"] or {})
    policy = {} if gain is None else {"min_gain": gain}
    policy.update(p["slo"] or {})
    return {"thresholds": thresholds, "policy": policy}


# --------------------------------------------------------------------------- the in-cluster clients


def _max_requests(p):
    return int(p["max_requests"]) if p["max_requests"] else None


def job_client(p, name, levels, wl):
    """The load generator's Job (client: job): its name per side and the runs it makes (per level;
    the role adds base_url and label per side)."""
    sampling = {
        "temperature": float(p["temperature"]),
        "max_tokens": int(p["max_tokens"]),
        "seed": int(p["seed"]),
    }
    if p["ignore_eos"]:
        sampling["ignore_eos"] = True
    sampling.update(p["request_params"] or {})
    base = {
        "api": p["api"],
        "workload": JOB_WORKLOAD_PATH if wl["prompts"] is None else None,
        "prompts": wl["prompts"],
        "runs_per_prompt": int(p["runs_per_prompt"]),
        "max_requests": _max_requests(p),
        "warmup_requests": int(p["warmup_requests"]),
        "arrival": p["arrival"],
        "seed": int(p["seed"]),
        "sampling": sampling,
        "timeout": float(p["request_timeout"]),
        "verify_ssl": bool(p["validate_certs"]),
        "progress_interval": 10,
    }
    runs = [dict(base, qps=lv["qps"], concurrency=lv["concurrency"]) for lv in levels]
    names = {side: ("%s-bench-%s" % (name, side))[:63].rstrip("-") for side in SIDES}
    return {"names": names, "runs": runs}


def check_vllm_bench(p):
    """The vllm bench serve settings, every problem in one message."""
    vb = p["vllm_bench"]
    problems = [
        why
        for hit, why in (
            (
                vb["dataset"] not in ("workload", "random"),
                "specpilot_benchmark_vllm_bench_dataset must be workload or random. ",
            ),
            (
                bool(p["headers"]),
                "specpilot_benchmark_headers are not passed to vllm bench serve (they would stand in the Job spec): "
                "put a Bearer token in a Secret and set specpilot_benchmark_vllm_bench_api_key_secret {name, key}. ",
            ),
            (
                not vb["image"],
                "specpilot_benchmark_vllm_bench_image is empty: set it, or runtime.image in the service spec. ",
            ),
            (
                not vb["command"],
                "specpilot_benchmark_vllm_bench_command is empty: give the command that runs vllm bench serve "
                "(e.g. [vllm, bench, serve]).",
            ),
        )
        if hit
    ]
    if problems:
        raise BenchPlanError("specpilot_benchmark_client=vllm_bench: " + "".join(problems).strip())


def vllm_bench_args(p, name, num_prompts, level):
    """The arguments of ``vllm bench serve`` at one level, all but --base-url (the side's URL).
    Flags as vLLM 0.32 defines them: vllm/benchmarks/serve.py add_cli_args (--max-concurrency,
    --num-warmups, --percentile-metrics, --served-model-name) and vllm/benchmarks/datasets/datasets.py
    add_dataset_parser (--sharegpt-output-len; --disable-shuffle keeps the prompts in file order)."""
    vb = p["vllm_bench"]
    chat = p["api"] == "chat"
    args = ["--backend", "openai-chat" if chat else "openai"]
    args += ["--endpoint", "/v1/chat/completions" if chat else "/v1/completions"]
    args += ["--model", vb["model"] or name, "--served-model-name", name, "--num-prompts", str(num_prompts)]
    args += ["--seed", str(p["seed"]), "--temperature", str(p["temperature"])]
    args += ["--num-warmups", str(p["warmup_requests"])]
    args += [
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--disable-tqdm",
    ]
    if vb.get("save_detailed", True):
        # the result JSON with one entry per request, printed after the output (vllm_bench.JOB_SCRIPT)
        args += vllm_bench.SAVE_ARGS
    if vb["dataset"] == "workload":
        args += ["--dataset-name", "sharegpt", "--dataset-path", VLLM_BENCH_DATASET_PATH]
        args += ["--sharegpt-output-len", str(p["max_tokens"]), "--disable-shuffle"]
    else:
        args += ["--dataset-name", "random", "--random-input-len", str(vb["random_input_len"])]
        args += ["--random-output-len", str(p["max_tokens"])]
    if level["qps"] is not None:
        args += ["--request-rate", str(level["qps"])]
    if level["concurrency"]:
        args += ["--max-concurrency", str(level["concurrency"])]
    if vb["tokenizer"]:
        args += ["--tokenizer", vb["tokenizer"]]
    if p["ignore_eos"]:
        args.append("--ignore-eos")
    return args + [str(a) for a in vb["extra_args"] or []]


def vllm_bench_env(vb):
    """The container's env: tokens only from Secrets (OPENAI_API_KEY: the Bearer token vllm bench
    serve sends; HF_TOKEN: gated tokenizers), never in the arguments."""
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    for env_name, ref in (("OPENAI_API_KEY", vb["api_key_secret"]), ("HF_TOKEN", vb["hf_token_secret"])):
        if ref:
            key = ref.get("key") or env_name
            env.append({"name": env_name, "valueFrom": {"secretKeyRef": {"name": ref["name"], "key": key}}})
    return env


def vllm_bench_job_name(name, side, idx):
    """``<name>-vbench-<side[:4]>-<idx>``, its last 63 characters, starting with a letter or digit."""
    return re.sub(r"^[^a-z0-9]+", "", ("%s-vbench-%s-%d" % (name, side[:4], idx))[-63:])


def vllm_bench_client(p, name, levels, wl):
    """{jobs (per side, one per level), command (the container's: the settings' command, wrapped in
    sh -c with save_detailed so the per-request JSON follows the output), args (per level), env,
    num_prompts, dataset}: the ShareGPT
    dataset (plain JSON: vLLM's custom JSONL dataset needs pandas) repeats the prompts in order up to
    num_prompts (max_requests, else every prompt runs_per_prompt times)."""
    check_vllm_bench(p)
    texts = prompt_texts(wl)
    num = _max_requests(p) or len(texts) * int(p["runs_per_prompt"])
    dataset = None
    if p["vllm_bench"]["dataset"] == "workload":
        dataset = [
            {
                "conversations": [
                    {"from": "human", "value": texts[i % len(texts)]},
                    {"from": "gpt", "value": "-"},
                ]
            }
            for i in range(num)
        ]
    return {
        "jobs": {side: [vllm_bench_job_name(name, side, i) for i in range(len(levels))] for side in SIDES},
        "command": vllm_bench.job_command(
            p["vllm_bench"]["command"], p["vllm_bench"].get("save_detailed", True)
        ),
        "args": [vllm_bench_args(p, name, num, lv) for lv in levels],
        "env": vllm_bench_env(p["vllm_bench"]),
        "num_prompts": num,
        "dataset": dataset,
    }


# --------------------------------------------------------------------------- the whole plan


def build_plan(p):
    """The module's result from its parameters (see modules/benchmark_plan.py)."""
    plan = p["plan"]
    name = plan["name"]
    levels = load_levels(p["qps_levels"], p["concurrency_levels"], p["concurrency"])
    wl = workload(p["workload"], p["workload_name"], p["prompts"], p["bundled_dir"], p["cwd"])
    twin = render_twin(plan, p["twin_suffix"])
    out = {
        "levels": levels,
        "level_labels": [level_label(lv) for lv in levels],
        "dir": absolute(p["report_root"], p["cwd"]) + "/" + name,
        "workload": wl,
        "twin": twin,
        "sweep": sweep(p),
        "report": report_inputs(p),
        "job": job_client(p, name, levels, wl) if p["client"] == "job" else None,
        "vllm_bench": vllm_bench_client(p, name, levels, wl) if p["client"] == "vllm_bench" else None,
    }
    return out
