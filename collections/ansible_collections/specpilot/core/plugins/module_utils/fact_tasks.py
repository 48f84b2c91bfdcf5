# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The work of the modules that only read, compute and write reports (vllm_log_facts,
vllm_metrics_facts, smoke_probe, smoke_verdict, acceptance_guard, report_write, canary_report and
canary_step), as functions of the task's parameters.

Each is run two ways, with the same argument spec and the same results:
* by its action plugin (plugins/action/<name>.py), in the Ansible worker process - what a playbook
  does: no module payload, no new Python process (the smoke role calls these six times a service,
  each module run cost about a quarter of a second of CPU before it did anything);
* by its module (plugins/modules/<name>.py), where a module is what is run: ``ansible -m``, or a
  tool that executes module files.

A task function takes the validated parameters and check mode, and returns the result or raises
:class:`TaskFailure` (the message, and any result fields a failed task still returns).
"""

from __future__ import annotations

import io
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import HELD_LOCK, K8S_AUTH, POD_LOG
from ansible_collections.specpilot.core.plugins.module_utils.staging import http_get
from ansible_collections.specpilot.core.plugins.module_utils.operate import (
    acceptance_guard as guard,
    canary,
    canary_change,
    canary_prometheus,
    fleet,
    monitoring,
    prometheus_api,
    reports,
)
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import VersionError
from ansible_collections.specpilot.core.plugins.module_utils.report.files import write_report
from ansible_collections.specpilot.core.plugins.module_utils.verify import (
    smoke,
    smoke_probe as probe,
    smoke_report,
)
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import (
    DEFAULT_MAX_ISSUES,
    DEFAULT_MAX_WINDOWS,
    parse_log_file,
    parse_log_text,
)
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import (
    HAS_PROMETHEUS_CLIENT,
    MetricsParseError,
    parse_metrics_file,
    parse_metrics_stream,
    parse_metrics_text,
)


class TaskFailure(Exception):
    """The task fails with ``msg``; ``fields`` are returned with it."""

    def __init__(self, msg, **fields):
        super().__init__(msg)
        self.msg = msg
        self.fields = fields


def exit_module(module, task):
    """Runs ``task`` (a function of this file) as the AnsibleModule ``module``: exit_json or fail_json."""
    try:
        result = task(module.params, module.check_mode)
    except TaskFailure as exc:
        module.fail_json(msg=exc.msg, **exc.fields)
    module.exit_json(**result)


def run_module(task, argument_spec, rules=None):
    """main() of ``task``'s module: its AnsibleModule (``argument_spec``, and ``rules``: mutually_exclusive,
    required_one_of, ... as its action plugin's VALIDATION) runs the task (exit_module)."""
    exit_module(AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, **(rules or {})), task)


# ---------------------------------------------------------------- vllm_log_facts

LOG_FACTS_ARGS = dict(
    path=dict(type="path"),
    content=dict(type="str"),
    since=dict(type="str"),
    max_windows=dict(type="int", default=DEFAULT_MAX_WINDOWS),
    max_issues=dict(type="int", default=DEFAULT_MAX_ISSUES),
)
LOG_FACTS_RULES = dict(mutually_exclusive=[("path", "content")], required_one_of=[("path", "content")])


def log_facts(p, check_mode=False):
    """specpilot.core.vllm_log_facts: the facts of a log file or text (vllm_logs)."""
    del check_mode  # reads only
    if p["max_windows"] < 0 or p["max_issues"] < 0:
        raise TaskFailure("max_windows and max_issues must be >= 0")
    kwargs = dict(since=p["since"], max_windows=p["max_windows"], max_issues=p["max_issues"])
    if p["path"] is None:
        return dict(parse_log_text(p["content"], **kwargs), changed=False)
    if not os.path.isfile(p["path"]):
        raise TaskFailure("log file not found: %s" % p["path"])
    try:
        return dict(parse_log_file(p["path"], **kwargs), changed=False)
    except (IOError, OSError) as exc:
        raise TaskFailure("cannot read %s: %s" % (p["path"], exc)) from exc


# specpilot.core.pod_log's vllm_facts: the log parsed where it is read, as vllm_log_facts parses it. The smoke role
# keeps only these facts and the last line of a log; holding every service's whole engine log (and its windows) in
# ansible-playbook's variables made each forked worker copy a bigger process (issue 40: smoke over 200 services).
POD_LOG_FACTS_ARGS = {k: LOG_FACTS_ARGS[k] for k in ("since", "max_windows", "max_issues")}
POD_LOG_ARGS = dict(POD_LOG, vllm_facts=dict(type="dict", options=POD_LOG_FACTS_ARGS))


def pod_log_facts(p, check_mode=False):
    """pod_log's vllm_facts: {facts: log_facts of ``p["content"]``, last_line: its last line that is not empty}
    (the marker that a later read of the probes' window starts after)."""
    facts = log_facts(dict(p, path=None), check_mode)
    del facts["changed"]
    last = next((line for line in reversed(p["content"].split("\n")) if line), "")
    return dict(facts=facts, last_line=last, changed=False)


# ---------------------------------------------------------------- vllm_metrics_facts

METRICS_FACTS_ARGS = dict(
    url=dict(type="str"),
    path=dict(type="path"),
    content=dict(type="str"),
    previous=dict(type="dict"),
    model_name=dict(type="str"),
    headers=dict(type="dict", no_log=True),
    timeout=dict(type="float", default=10),
    validate_certs=dict(type="bool", default=True),
)
METRICS_FACTS_RULES = dict(
    mutually_exclusive=[("url", "path", "content")], required_one_of=[("url", "path", "content")]
)
MISSING_PROMETHEUS_CLIENT = (
    "Failed to import the required Python library (prometheus-client) on the controller's Python: "
    "pip install prometheus-client (it is in requirements.txt)"
)


def metrics_facts(p, check_mode=False):
    """specpilot.core.vllm_metrics_facts: the facts of a /metrics page read from a URL, a file or text."""
    del check_mode  # reads only
    if not HAS_PROMETHEUS_CLIENT:
        raise TaskFailure(MISSING_PROMETHEUS_CLIENT)
    kwargs = dict(model_name=p["model_name"], previous=p["previous"])
    try:
        if p["url"] is not None:
            result = _scrape(p, kwargs)
        elif p["path"] is not None:
            result = parse_metrics_file(p["path"], **kwargs)
        else:
            result = parse_metrics_text(p["content"], now=p.get("now"), **kwargs)
    except MetricsParseError as exc:
        raise TaskFailure(str(exc)) from exc
    except (IOError, OSError) as exc:
        raise TaskFailure("cannot read %s: %s" % (p["path"], exc)) from exc
    return dict(result, changed=False)


def _scrape(p, kwargs):
    try:
        resp = http_get.get(p["url"], p["headers"], p["timeout"], p["validate_certs"])
    except Exception as exc:  # noqa: BLE001 - HTTPError, URLError, socket errors, SSL errors
        raise TaskFailure("cannot read %s: %s" % (p["url"], exc), url=p["url"]) from exc
    try:
        ctype = (resp.headers.get("Content-Type") or "").lower()
        text = io.TextIOWrapper(resp, encoding="utf-8", errors="replace")
        return parse_metrics_stream(text, source=p["url"], openmetrics="openmetrics" in ctype, **kwargs)
    finally:
        resp.close()


# ---------------------------------------------------------------- smoke_probe

SMOKE_PROBE_ARGS = dict(
    url=dict(type="str", required=True),
    model=dict(type="str", required=True),
    prompts=dict(type="list", elements="str", required=True),
    count=dict(type="int", default=8),
    max_tokens=dict(type="int", default=128, no_log=False),  # a count, not a credential
    temperature=dict(type="float", default=0.0),
    request_params=dict(type="dict", default={}),
    endpoint=dict(type="str", default="completions", choices=["completions", "chat"]),
    metrics=dict(type="bool", default=True),
    metrics_facts=dict(type="bool", default=False),
    reach=dict(type="bool", default=False),
    headers=dict(type="dict", default={}, no_log=True),
    timeout=dict(type="float", default=120),
    validate_certs=dict(type="bool", default=True),
)


def smoke_probe(p, check_mode=False):
    """specpilot.core.smoke_probe: the probe requests from the controller, /metrics read before and after
    (verify/smoke_probe.py, the code that also runs inside the pod). Inference requests change nothing that
    check mode protects: sent in check mode too, never ``changed``."""
    del check_mode
    if p["max_tokens"] < 1:
        raise TaskFailure("max_tokens must be >= 1")
    if p["temperature"] < 0:
        raise TaskFailure("temperature must be >= 0")
    if p["reach"]:
        error = reach_error(p)
        if error:
            # not a failure: the caller picks another route (the smoke role: through the pod) or fails with msg
            return dict(changed=False, ok=False, reached=False, url=p["url"], reach_error=error, msg=error)
    try:
        bodies = probe.build_requests(
            p["model"],
            p["prompts"],
            p["count"],
            p["max_tokens"],
            p["temperature"],
            p["request_params"],
            p["endpoint"],
        )
    except ValueError as exc:
        raise TaskFailure(str(exc)) from exc
    job = {k: p[k] for k in ("url", "endpoint", "headers", "timeout", "validate_certs", "metrics")}
    result = probe.run(dict(job, requests=bodies))
    if p["metrics_facts"]:
        result = probe_metrics_facts(result, p["model"])
    return dict(result, changed=False, **({"reached": True} if p["reach"] else {}))


REACH_TIMEOUT = 10.0


def reach_error(p):
    """Why the engine at ``url`` cannot be probed from here ('' when GET /v1/models answers 200 within
    REACH_TIMEOUT seconds): smoke_probe's ``reach``, the smoke role's check of the controller's route (an
    InferenceService's status.address.url is often a cluster-internal name)."""
    if not p["url"]:
        return "no URL to probe"
    url = p["url"].rstrip("/") + "/v1/models"
    status, _text, error = probe.http(
        "GET", url, None, p["headers"], min(p["timeout"], REACH_TIMEOUT), p["validate_certs"]
    )
    if status == 200:
        return ""
    return "%s does not answer: %s" % (url, error or "HTTP %s" % status)


def probe_metrics_facts(result, model_name=None):
    """A probe's result (verify/smoke_probe.py ``run``, on the controller or in the pod) with its /metrics pages
    turned into their facts as specpilot.core.vllm_metrics_facts makes them (:func:`metrics_facts`; the page after
    the probes with its deltas against the page before): ``metrics_before_facts`` and ``metrics_after_facts`` (null
    for a page not read), the pages' text dropped (``metrics_before``, ``metrics_after`` null). ansible-playbook
    keeps every host's registered results until the play ends: the smoke role over a fleet kept both pages of every
    service twice, and parsed them in two more tasks a service (issue 40). A page that does not parse is the probe's
    ``metrics_error``, as a page that could not be read is."""
    out = dict(result, metrics_before=None, metrics_after=None, metrics_before_facts=None, metrics_after_facts=None)
    previous = None
    for key in ("metrics_before", "metrics_after"):
        text = result.get(key)
        if not isinstance(text, str):
            continue
        # parsed as of when it was read, so that the deltas' interval_seconds is the probes' own
        page = dict(url=None, path=None, content=text, model_name=model_name, previous=previous)
        page["now"] = result.get(key + "_at")
        try:
            facts = metrics_facts(page)
        except TaskFailure as exc:
            out["metrics_error"] = out.get("metrics_error") or "%s: %s" % (key, exc)
            break
        facts.pop("changed", None)
        out[key + "_facts"] = previous = facts
    return out


# ---------------------------------------------------------------- smoke_verdict

SMOKE_THRESHOLDS = dict(
    min_acceptance_rate=dict(type="float", default=0.5),
    warn_acceptance_rate=dict(type="float", default=0.65),
    min_mean_acceptance_length=dict(type="float"),
    collapse_position=dict(type="int", default=2),
    collapse_threshold=dict(type="float", default=0.05),
    cross_check_tolerance=dict(type="float", default=0.05),
)
# what smoke.evaluate reads: everything but the report options
SMOKE_INPUTS = dict(
    service=dict(type="str"),
    expect=dict(type="str", default="on", choices=["on", "off"]),
    plan=dict(type="dict", required=True),
    inferenceservice=dict(type="dict"),
    pod=dict(type="dict"),
    container=dict(type="str", default="kserve-container"),
    log_facts=dict(type="dict"),
    log_previous=dict(type="dict"),
    log_error=dict(type="str"),
    log_window=dict(type="dict"),
    metrics_before=dict(type="dict"),
    metrics_after=dict(type="dict"),
    probes=dict(type="dict"),
    skip_reason=dict(type="str"),
    path_aliases=dict(type="dict", default={}),
    access=dict(type="dict", default={}),
    request=dict(type="dict", default={}),
    production_temperature=dict(type="float"),
    thresholds=dict(type="dict", default={}, options=SMOKE_THRESHOLDS),
    inside_pod=dict(type="dict"),
    inside_pod_mode=dict(type="str", default="auto", choices=["auto", "required", "off"]),
)
SMOKE_VERDICT_ARGS = dict(
    SMOKE_INPUTS,
    report_dir=dict(type="path"),
    report_basename=dict(type="str", default="smoke"),
    plot=dict(type="bool", default=True),
    fail_on_verdict=dict(type="bool", default=False),
)


def smoke_verdict(p, check_mode=False):
    """specpilot.core.smoke_verdict: the verdict (smoke.evaluate) and the report, written unless in check mode."""
    data = {k: p[k] for k in SMOKE_INPUTS}
    try:
        result = smoke.evaluate(data)
    except ValueError as exc:
        raise TaskFailure(str(exc)) from exc
    report = smoke_report.build_report(result, data)
    files, changed = _smoke_report_files(p, report, check_mode)
    stats = smoke_report.stats(result, files)
    out = dict(result, report=report, report_files=files, stats=stats, changed=changed)
    if p["fail_on_verdict"] and result["verdict"] == "fail":
        raise TaskFailure(result["message"], **out)
    return out


def _smoke_report_files(p, report, check_mode):
    """(the report's files or None, changed): written, or in check mode only named."""
    if not p["report_dir"]:
        return None, False
    if check_mode:
        base = os.path.join(p["report_dir"], p["report_basename"])
        report["notes"].append("check mode: the report was not written")
        return {"json": base + ".json", "markdown": base + ".md", "plot": None}, False
    if "/" in p["report_basename"] or p["report_basename"] in ("", ".", ".."):
        raise TaskFailure("report_basename must be a plain file name stem")
    try:
        files = smoke_report.write_report(report, p["report_dir"], p["report_basename"], plot=p["plot"])
    except (IOError, OSError) as exc:
        raise TaskFailure("cannot write the report under %s: %s" % (p["report_dir"], exc)) from exc
    return files, files.pop("changed")


# ---------------------------------------------------------------- acceptance_guard

ACCEPTANCE_GUARD_ARGS = dict(
    name=dict(type="str", required=True),
    isvc=dict(type="dict"),
    metrics=dict(type="dict"),
    prometheus_url=dict(type="str"),
    prometheus_window=dict(type="str", default="15m"),
    prometheus_headers=dict(type="dict", no_log=True),
    selector=dict(type="dict"),
    namespace=dict(type="str"),
    vllm_version=dict(type="str", default="0.32.0"),
    validate_certs=dict(type="bool", default=True),
    timeout=dict(type="float", default=10),
    history=dict(type="raw"),
    min_acceptance_rate=dict(type="float", default=0.5),
    warn_acceptance_rate=dict(type="float", default=0.65),
    min_draft_tokens=dict(type="int", default=100, no_log=False),  # a count, not a credential
    consecutive_readings=dict(type="int", default=3),
    history_size=dict(type="int", default=10),
    collapse_threshold=dict(type="float", default=0.05),
    auto_rollback=dict(type="bool", default=False),
    production_temperature=dict(type="float"),
    verdict_reports=dict(type="list", elements="path", default=[]),
)
GUARD_SETTINGS = (
    "min_acceptance_rate",
    "warn_acceptance_rate",
    "min_draft_tokens",
    "consecutive_readings",
    "history_size",
    "collapse_threshold",
    "auto_rollback",
)


def _guard_reading(p, isvc):
    """The window's reading: from Prometheus, from the two scrapes' facts, or none (speculation off)."""
    if not guard.isvc_speculative(isvc)["on"]:
        return {}
    if p["prometheus_url"]:
        namespace = p["namespace"] or ((isvc.get("metadata") or {}).get("namespace"))
        selector = dict(
            (str(k), str(v)) for k, v in (p["selector"] or {}).items()
        ) or monitoring.default_selector(p["name"], namespace)
        # issue 37: the share of the window above the crossover the live schedule carries
        cross = monitoring.crossover_of(guard.isvc_speculative(isvc)["config"])
        return guard.prometheus_reading(
            p["prometheus_url"],
            selector,
            p["prometheus_window"],
            p["vllm_version"],
            p["prometheus_headers"],
            p["timeout"],
            p["validate_certs"],
            http_get.get_bytes,
            crossover=cross["concurrency"] if cross else None,
        )
    if not p["metrics"]:
        raise TaskFailure("%s: speculative decoding is on but no metrics reading was given" % p["name"])
    return guard.reading_from_facts(p["metrics"])


def acceptance_guard(p, check_mode=False):
    """specpilot.core.acceptance_guard: one reading of a service judged against its history
    (operate/acceptance_guard.py ``evaluate``), with the newest benchmark or canary verdict named."""
    del check_mode  # reads only; the role writes the history
    isvc = p["isvc"] or None
    try:
        reading = _guard_reading(p, isvc)
        result = guard.evaluate(
            isvc,
            reading,
            p["history"],
            {k: p[k] for k in GUARD_SETTINGS},
            name=p["name"],
            production_temperature=p["production_temperature"],
        )
        # what judged the speed: the newest benchmark or canary verdict of the service, when there is one
        result["latest_verdict"] = guard.latest_verdict(p["verdict_reports"])
        result["message"] += guard.verdict_pointer(result["latest_verdict"])
    except (guard.GuardError, monitoring.MonitoringError, VersionError) as exc:
        raise TaskFailure("%s: %s" % (p["name"], exc)) from exc
    return dict(result, changed=False)


# ---------------------------------------------------------------- report_write (and canary_report)

# the reports rendered from a result a role assembled; smoke and benchmark write theirs with their verdicts
REPORT_KINDS = {
    "rollback": reports.rollback_markdown,
    "guard": reports.guard_markdown,
    "canary": canary.report_markdown,
    "fleet": fleet.fleet_markdown,
}
# ... and the plots a kind draws beside its Markdown (render(report, out_dir) -> [{file, title, path}])
REPORT_PLOTS = {"canary": canary.render_plots, "fleet": fleet.render_plots}
REPORT_WRITE_ARGS = dict(
    kind=dict(type="str", required=True, choices=sorted(REPORT_KINDS)),
    report=dict(type="dict", required=True),
    output_dir=dict(type="path", required=True),
    basename=dict(type="str", default="report"),
    plots=dict(type="bool", default=True),
)
CANARY_REPORT_ARGS = dict(
    report=dict(type="dict", required=True),
    output_dir=dict(type="path", required=True),
    plots=dict(type="bool", default=True),
)


def report_write(p, check_mode=False):
    """specpilot.core.report_write: <basename>.json and .md of a report under output_dir.

    A report is an output of the run, not managed state: never ``changed`` (``written`` says whether
    a file's bytes changed). In check mode nothing is written; a task that wants the report of a check
    run anyway sets ``check_mode: false``, as the rollback role does."""
    base = p["basename"]
    if "/" in base or base in ("", ".", ".."):
        raise TaskFailure("basename must be a plain file name stem, not %r" % base)
    kind, report, out_dir = p["kind"], p["report"], p["output_dir"]
    try:
        if check_mode:  # rendered all the same: a report the renderer cannot read fails in check mode too
            REPORT_KINDS[kind](report)
            return dict(changed=False, written=False, paths={}, msg="check mode: the report was not written")
        paths, written = write_report(
            out_dir, base, report, REPORT_KINDS[kind], REPORT_PLOTS.get(kind), p["plots"]
        )
    except (KeyError, TypeError, AttributeError) as exc:
        what = repr(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        raise TaskFailure("report: %s is missing or malformed for a %s report" % (what, kind)) from exc
    except OSError as exc:
        raise TaskFailure("cannot write the report in %s: %s" % (out_dir, exc)) from exc
    return dict(changed=False, written=written, paths=paths)


def canary_report(p, check_mode=False):
    """specpilot.core.canary_report: report_write of kind canary, as report.json and report.md."""
    return report_write(dict(p, kind="canary", basename="report"), check_mode)


# ---------------------------------------------------------------- canary_step

CANARY_STEP_ARGS = dict(
    K8S_AUTH,  # the service lock's API (lock); module_defaults of group/specpilot.core.k8s set them
    arms=dict(type="dict", required=True),
    window=dict(type="float", required=True),
    min_requests=dict(type="int", default=100),
    max_extensions=dict(type="int", default=2),
    warmup_requests=dict(type="int", default=0),
    policy=dict(type="dict", default={}),
    min_acceptance=dict(type="float", default=canary.DEFAULT_MIN_ACCEPTANCE),
    change=dict(
        type="dict",
        default={},
        options=dict(
            acceptance_margin=dict(type="float", default=canary_change.DEFAULT_ACCEPTANCE_MARGIN),
            allowance=dict(type="float", default=canary_change.DEFAULT_CHANGE_ALLOWANCE),
        ),
    ),
    poll=dict(type="float", default=2.0),
    reference=dict(type="dict"),
    headers=dict(type="dict", default={}, no_log=True),
    timeout=dict(type="float", default=10.0),
    metrics_validate_certs=dict(type="bool", default=True),
    # the arms from Prometheus instead of their pods (canary_prometheus), the guard's options
    prometheus_url=dict(type="str", default=""),
    prometheus_headers=dict(type="dict", default={}, no_log=True),
    prometheus_validate_certs=dict(type="bool", default=True),
    prometheus_labels=dict(
        type="dict",
        default={},
        options=dict(
            pod=dict(type="str", default=canary_prometheus.DEFAULT_LABELS["pod"]),
            namespace=dict(type="str", default=canary_prometheus.DEFAULT_LABELS["namespace"]),
        ),
    ),
    prometheus_selector=dict(type="dict", default={}),
    prometheus_scrape_interval=dict(type="float", default=canary_prometheus.DEFAULT_SCRAPE_INTERVAL),
    namespace=dict(type="str"),
    # the service's lock, renewed at every scrape (with its name and namespace)
    lock=dict(type="dict", options=HELD_LOCK, required_together=[("name", "namespace")]),
)


def canary_step(p, check_mode=False, keep=None):
    """specpilot.core.canary_step: hold one step on live traffic and decide it (canary.run_step).
    ``keep``: the action's renewal of the service lock (``lock``) at every scrape."""
    del check_mode  # reads only
    if not HAS_PROMETHEUS_CLIENT:
        raise TaskFailure(MISSING_PROMETHEUS_CLIENT)
    if p["lock"] and keep is None:
        raise TaskFailure(
            "lock: the lock is renewed by the action plugin (a playbook task), not by the module"
        )
    if p["lock"] and not p["lock"]["name"]:
        raise TaskFailure("lock.name and lock.namespace: the service whose lock to renew")
    for arm in ("baseline", "canary") if p["reference"] is None else ("canary",):
        if not p["arms"].get(arm):
            raise TaskFailure("arms.%s: no pod of the %s arm to read (is it Running?)" % (arm, arm))
    source = _canary_source(p)
    try:
        result = canary.run_step(
            lambda url: _page(p, url),
            p["arms"],
            p["window"],
            p["min_requests"],
            p["max_extensions"],
            p["policy"],
            p["min_acceptance"],
            poll_s=p["poll"],
            reference=p["reference"],
            keep=keep,
            source=source,
            change=p["change"],
            warmup_requests=p["warmup_requests"],
        )
    except MetricsParseError as exc:
        raise TaskFailure(str(exc)) from exc
    except prometheus_api.PrometheusError as exc:
        raise TaskFailure(
            "prometheus_url: the arms could not be read: %s" % exc,
            url=prometheus_api.public_url(p["prometheus_url"]),
        ) from exc
    except canary.StepStopped as exc:
        raise TaskFailure("the step was stopped: %s" % exc) from exc
    except ValueError as exc:  # a bad policy key or value (bench_verdict.policy_with_defaults)
        raise TaskFailure("policy: %s" % exc) from exc
    return dict(result, changed=False)


def _canary_source(p):
    """What reads the arms: their pods (canary.PodPages, the default) or Prometheus, once its settings
    are checked (before anything is read)."""
    if not p["prometheus_url"]:
        return None
    problem = canary_prometheus.settings_problem(
        p["prometheus_url"],
        p["window"],
        p["prometheus_scrape_interval"],
        p["prometheus_labels"],
        p["prometheus_selector"],
    )
    if not problem and not p["namespace"]:
        problem = "namespace: the namespace of the arms' pods is needed to select their series in Prometheus"
    if problem:
        raise TaskFailure(problem)
    return canary_prometheus.PrometheusArms(
        http_get.get_bytes,
        p["prometheus_url"],
        p["namespace"],
        p["prometheus_labels"],
        p["prometheus_selector"],
        p["prometheus_headers"],
        p["timeout"],
        p["prometheus_validate_certs"],
    )


def _page(p, url):
    try:
        raw = http_get.get_bytes(url, p["headers"], p["timeout"], p["metrics_validate_certs"])
    except Exception as exc:  # noqa: BLE001 - HTTPError, URLError, socket and SSL errors
        raise TaskFailure("cannot read %s: %s" % (url, exc), url=url) from exc
    return raw.decode("utf-8", "replace")
