# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""specpilot.core.vllm_load: the load of one side at its levels (bench_client.py), or the runs a Job
printed (bench_client.py as a script, or vLLM's own ``vllm bench serve``), as the runs
module_utils/benchmark/bench_analysis.py and the report compare.

The module (plugins/modules/vllm_load.py) and its action plugin run :func:`run`; the action passes
``keep``, the renewal of the lock the load runs under (the benchmark's twin), while the load runs."""

from __future__ import annotations

import json
import traceback

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import vllm_bench
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import HELD_LOCK, K8S_CONNECTION
from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_analysis import (
    acceptance_from_scrapes,
    summarise_run,
)
from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_client import (
    AIOHTTP_IMPORT_ERROR,
    HAS_AIOHTTP,
    LoadStopped,
    RunConfigError,
    extract_job_output,
    level_key,
    run_many,
)

__all__ = [
    "ARGS",
    "LOCK_CONNECTION_KEYS",
    "LoadFailure",
    "VALIDATION",
    "configs",
    "finish",
    "run",
    "vllm_bench_run",
]

# what lock_connection may hold: kubernetes.core's connection options (group/specpilot.core.k8s) and the
# lock's API retries and request timeout
LOCK_CONNECTION_KEYS = tuple(K8S_CONNECTION) + ("retries", "request_timeout")

# the options of the module and its action plugin (DOCUMENTATION in plugins/modules/vllm_load.py)
ARGS = dict(
    url=dict(type="str"),
    model=dict(type="str"),
    api=dict(type="str", default="completions", choices=["completions", "chat"]),
    workload=dict(type="path"),
    prompts=dict(type="list", elements="raw"),
    runs_per_prompt=dict(type="int", default=5),
    max_requests=dict(type="int"),
    warmup_requests=dict(type="int", default=3),
    levels=dict(type="list", elements="dict"),
    arrival=dict(type="str", default="poisson", choices=["poisson", "constant"]),
    seed=dict(type="int", default=42),
    temperature=dict(type="float", default=0.0),
    max_tokens=dict(type="int", default=128, no_log=False),  # a count, not a credential
    ignore_eos=dict(type="bool", default=False),
    request_params=dict(type="dict", default={}),
    headers=dict(type="dict", default={}, no_log=True),
    timeout=dict(type="float", default=600),
    validate_certs=dict(type="bool", default=True),
    metrics_url=dict(type="str"),
    scrape_metrics=dict(type="bool", default=True),
    side=dict(type="str"),
    label=dict(type="str"),
    tag=dict(type="dict"),
    progress_file=dict(type="path"),
    progress_interval=dict(type="float", default=10),
    output_path=dict(type="path"),
    return_requests=dict(type="bool", default=False),
    job_output=dict(type="str"),
    vllm_bench_output=dict(type="str"),
    # the lock the load runs under (the twin's), renewed while it runs, and the API connection it is
    # renewed with (validate_certs above is the engine's, not the API's)
    lock=dict(type="dict", options=HELD_LOCK, required_together=[("name", "namespace")]),
    lock_connection=dict(type="dict", default={}, no_log=True),
)
VALIDATION = dict(
    mutually_exclusive=[
        ("workload", "prompts"),
        ("job_output", "url"),
        ("vllm_bench_output", "url"),
        ("vllm_bench_output", "job_output"),
    ],
    required_one_of=[("url", "job_output", "vllm_bench_output")],
)


class LoadFailure(Exception):
    """Why the task fails (``msg``), with the result fields it still returns (``fields``)."""

    def __init__(self, msg, **fields):
        super().__init__(msg)
        self.msg = msg
        self.fields = fields


def configs(p):
    sampling = {"temperature": p["temperature"], "max_tokens": p["max_tokens"], "seed": p["seed"]}
    if p["ignore_eos"]:
        sampling["ignore_eos"] = True
    sampling.update(p["request_params"] or {})
    base = {
        "base_url": p["url"],
        "model": p["model"],
        "api": p["api"],
        "workload": p["workload"],
        "prompts": p["prompts"],
        "runs_per_prompt": p["runs_per_prompt"],
        "max_requests": p["max_requests"],
        "warmup_requests": p["warmup_requests"],
        "arrival": p["arrival"],
        "seed": p["seed"],
        "sampling": sampling,
        "headers": dict((str(k), str(v)) for k, v in (p["headers"] or {}).items()),
        "timeout": p["timeout"],
        "verify_ssl": p["validate_certs"],
        "metrics_url": p["metrics_url"],
        "scrape_metrics": p["scrape_metrics"],
        "progress_interval": p["progress_interval"] if p["progress_file"] else 0,
    }
    out = []
    for level in p["levels"] or [{"qps": None, "concurrency": 1}]:
        if not isinstance(level, dict):
            raise RunConfigError("each level is a dict with qps and/or concurrency, not %r" % (level,))
        unknown = set(level) - {"qps", "concurrency"}
        if unknown:
            raise RunConfigError("unknown level keys: %s" % ", ".join(sorted(unknown)))
        cfg = dict(base, qps=level.get("qps"), concurrency=level.get("concurrency"))
        q = cfg["qps"]
        if (q is None or str(q).lower() in ("inf", "none", "")) and not cfg["concurrency"]:
            raise RunConfigError("level %r: an unpaced level (no qps) needs a concurrency" % (level,))
        label = "%s %s" % (
            p["label"] or p["side"] or "run",
            "qps=%s%s"
            % (
                "inf" if q in (None, "") else q,
                "" if not cfg["concurrency"] else ",c=%s" % cfg["concurrency"],
            ),
        )
        cfg["label"] = label
        out.append(cfg)
    return out


def _progress_writer(path):
    def write(info):
        with open(path, "a") as fh:
            fh.write(
                "%(label)s: %(done)d/%(total)d done, %(failed)d failed, %(in_flight)d in flight, "
                "%(elapsed).1fs\n" % info
            )

    return write


def finish(raw, p):
    runs = []
    for r in raw:
        model = (r.get("config") or {}).get("model")
        try:
            acceptance = acceptance_from_scrapes(
                r.get("metrics_before"), r.get("metrics_after"), model_name=model
            )
        except ValueError as exc:  # a malformed page: keep the latency figures
            acceptance = {"error": str(exc)}
        run = {
            "side": p["side"] or r.get("side"),
            "level": r.get("level"),
            "label": r.get("label"),
            "server": r.get("server"),
            "warmup": r.get("warmup"),
            "started_at": r.get("started_at"),
            "duration_s": r.get("duration_s"),
            "client_cpu_s": r.get("client_cpu_s"),
            "client_cpu_share": r.get("client_cpu_share"),
            "summary": summarise_run(r),
            "acceptance": acceptance,
            "config": r.get("config"),
            "metrics_errors": r.get("metrics_errors") or [],
            "tag": p["tag"],
        }
        if p["return_requests"]:
            run["requests"] = r.get("requests")
        runs.append(run)
    return runs


def vllm_bench_run(p):
    levels = p["levels"] or []
    if len(levels) != 1 or not isinstance(levels[0], dict):
        raise LoadFailure(
            "vllm_bench_output: give levels with exactly one level (the qps/concurrency it ran at)"
        )
    try:
        qps, conc = levels[0].get("qps"), levels[0].get("concurrency")
        qps = None if qps in (None, "", "inf", "none") else float(qps)
        conc = int(conc) if conc not in (None, "", 0) else None
    except (TypeError, ValueError):
        raise LoadFailure(
            "vllm_bench_output: levels[0] needs a numeric qps and/or concurrency, not %r" % levels[0]
        )
    level = {"qps": qps, "concurrency": conc}
    level["key"] = level_key(level["qps"], level["concurrency"])
    text = p["vllm_bench_output"]
    try:
        flat = vllm_bench.parse_any(text)
    except vllm_bench.BenchServeOutputError as exc:
        raise LoadFailure("cannot read the output of vllm bench serve: %s" % exc) from exc
    return {
        "side": p["side"],
        "level": level,
        "label": "%s %s" % (p["label"] or p["side"] or "run", level["key"]),
        "server": None,
        "warmup": None,
        "started_at": None,
        "duration_s": flat.get("duration"),
        "client_cpu_s": None,
        "client_cpu_share": None,
        "summary": vllm_bench.summarise(flat, level),
        "acceptance": vllm_bench.acceptance_from_flat(flat),
        # the temperature it ran at (the role passes its --temperature): the report compares the
        # outputs' hashes of both sides at 0 only
        "config": {"client": vllm_bench.CLIENT, "sampling": {"temperature": p["temperature"]}},
        "metrics_errors": [],
        "tag": p["tag"],
    }


def _measure(p, check_mode, keep):
    if not HAS_AIOHTTP:
        raise LoadFailure("aiohttp is missing: pip install aiohttp (%s)" % AIOHTTP_IMPORT_ERROR)
    if not p["workload"] and not p["prompts"]:
        raise LoadFailure("give a workload file or prompts")
    try:
        cfgs = configs(p)
    except RunConfigError as exc:
        raise LoadFailure(str(exc)) from exc
    if check_mode:
        return None, "check mode: %d level(s) not run" % len(cfgs)
    progress = _progress_writer(p["progress_file"]) if p["progress_file"] else (lambda info: None)
    try:
        return run_many(cfgs, progress=progress, keep=keep), None
    except LoadStopped as exc:
        raise LoadFailure("stopped the load, its lock: %s" % exc, stopped=True) from exc
    except RunConfigError as exc:
        raise LoadFailure(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - report, with the traceback
        raise LoadFailure("load generation failed: %s" % exc, exception=traceback.format_exc()) from exc


def lock_problem(p, keep):
    """Why ``lock`` / ``lock_connection`` cannot be used as given, or None."""
    if p["lock"] and keep is None:
        return "lock: the lock is renewed by the action plugin (a playbook task), not by the module"
    if p["lock"] and not p["lock"]["name"]:
        return "lock.name and lock.namespace: the service whose lock to renew (the twin's)"
    if p["lock"] and p["url"] is None:
        return "lock: only a load sent from here (url) runs long enough to renew a lock"
    unknown = sorted(set(p["lock_connection"] or {}) - set(LOCK_CONNECTION_KEYS))
    if unknown:
        return "lock_connection: unknown key(s) %s; it takes %s" % (
            ", ".join(unknown),
            ", ".join(LOCK_CONNECTION_KEYS),
        )
    return None


def run(p, check_mode=False, keep=None):
    """The result of specpilot.core.vllm_load for its validated parameters ``p``; raises LoadFailure.
    ``keep(now)``: called while the load runs (bench_client.run_many); a message stops it."""
    problem = lock_problem(p, keep)
    if problem:
        raise LoadFailure(problem)
    if p["vllm_bench_output"] is not None:
        return {"changed": False, "runs": [vllm_bench_run(p)]}
    if p["job_output"] is not None:
        try:
            raw = extract_job_output(p["job_output"])["runs"]
        except (RunConfigError, ValueError, KeyError, TypeError) as exc:
            raise LoadFailure("cannot read the load generator's output: %s" % exc) from exc
    else:
        raw, skipped = _measure(p, check_mode, keep)
        if raw is None:
            return {"changed": False, "runs": [], "msg": skipped}
    result = {"changed": False, "runs": finish(raw, p)}
    if p["output_path"]:
        try:
            with open(p["output_path"], "w") as fh:
                json.dump({"format": 1, "side": p["side"], "tag": p["tag"], "runs": raw}, fh)
        except (IOError, OSError) as exc:
            raise LoadFailure("cannot write %s: %s" % (p["output_path"], exc)) from exc
        result["output_path"] = p["output_path"]
    return result
