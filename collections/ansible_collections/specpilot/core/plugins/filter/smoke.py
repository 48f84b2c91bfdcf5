# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the smoke role: the in-pod probe command, the speculative metrics lines of a log
after a marker line, and the predictor pod to check."""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.module_utils.verify import pod_view, smoke_probe
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import parse_log_text

# Runs the source of module_utils/verify/smoke_probe.py (argv[1]) on the job (argv[2]), both base64,
# so that the command has no characters that need quoting beyond this one string.
_BOOTSTRAP = (
    "import base64,sys;g=dict(__name__='specpilot_smoke_probe');"
    "exec(base64.b64decode(sys.argv[1]).decode(),g);sys.exit(g['main'](sys.argv[2]))"
)

_PROBE_KEYS = {
    "url",
    "model",
    "prompts",
    "count",
    "max_tokens",
    "temperature",
    "request_params",
    "endpoint",
    "headers",
    "timeout",
    "metrics",
    "validate_certs",
}


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def probe_source():
    """The source of module_utils/verify/smoke_probe.py, as shipped to the pod."""
    with open(smoke_probe.__file__.replace(".pyc", ".py"), "rb") as fh:
        return fh.read()


def smoke_exec_command(settings, python="python3"):
    """{url, model, prompts, count, max_tokens, temperature, ...} | smoke_exec_command(python)
    -> the command line for specpilot.core.pod_exec (printed result: the JSON of smoke_probe)."""
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(
            "smoke_exec_command expects a mapping of probe settings, got %s" % type(settings).__name__
        )
    unknown = set(settings) - _PROBE_KEYS
    if unknown:
        raise AnsibleFilterError("smoke_exec_command: unknown setting(s) %s" % ", ".join(sorted(unknown)))
    for key in ("url", "model", "prompts"):
        if not settings.get(key):
            raise AnsibleFilterError("smoke_exec_command: %s is required" % key)
    if not python or not str(python).strip():
        raise AnsibleFilterError("smoke_exec_command: python must name the interpreter in the pod")
    endpoint = settings.get("endpoint") or "completions"
    try:
        bodies = smoke_probe.build_requests(
            str(settings["model"]),
            [str(p) for p in settings["prompts"]],
            int(settings.get("count", 8)),
            int(settings.get("max_tokens", 128)),
            float(settings.get("temperature", 0.0)),
            dict(settings.get("request_params") or {}),
            endpoint,
        )
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("smoke_exec_command: %s" % exc)
    job = {
        "url": str(settings["url"]),
        "requests": bodies,
        "endpoint": endpoint,
        "headers": dict(settings.get("headers") or {}),
        "timeout": float(settings.get("timeout", 120)),
        "metrics": bool(settings.get("metrics", True)),
        "validate_certs": bool(settings.get("validate_certs", True)),
    }
    job_b64 = _b64(json.dumps(job, sort_keys=True).encode("utf-8"))
    return " ".join([shlex.quote(str(python)), "-c", shlex.quote(_BOOTSTRAP), _b64(probe_source()), job_b64])


def smoke_inside_command(plan, python="python3", expect="on"):
    """plan | smoke_inside_command(python, expect) -> the command line for specpilot.core.pod_exec that
    prints, from inside the predictor pod, the vLLM release and the model paths the engine loads
    (module_utils/verify/pod_view.py)."""
    if not isinstance(plan, Mapping):
        raise AnsibleFilterError("smoke_inside_command expects the plan, got %s" % type(plan).__name__)
    if not python or not str(python).strip():
        raise AnsibleFilterError("smoke_inside_command: python must name the interpreter in the pod")
    if expect not in ("on", "off"):
        raise AnsibleFilterError("smoke_inside_command: expect must be on or off, got %r" % (expect,))
    return pod_view.command(plan, str(python), expect)


def smoke_log_window(text, since=None):
    """log text | smoke_log_window(marker) -> the speculative metrics lines after the last
    occurrence of the marker: {since_found, windows, format, drafted_tokens, accepted_tokens,
    draft_acceptance_rate}."""
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise AnsibleFilterError("smoke_log_window expects the log text, got %s" % type(text).__name__)
    facts = parse_log_text(text, since=since or None, max_windows=1)
    summary = facts.get("summary") or {}
    return {
        "since_found": facts.get("since_found"),
        "windows": summary.get("windows") or 0,
        "format": summary.get("format"),
        "drafted_tokens": summary.get("drafted_tokens") or 0,
        "accepted_tokens": summary.get("accepted_tokens") or 0,
        "draft_acceptance_rate": summary.get("draft_acceptance_rate"),
    }


def _pod_ready(pod):
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def smoke_pick_pod(pods):
    """pods | smoke_pick_pod -> {pod, ready}: the newest ready pod that is not being deleted,
    else the newest such pod (pod null when there is none)."""
    if pods is None:
        pods = []
    if not isinstance(pods, (list, tuple)):
        raise AnsibleFilterError("smoke_pick_pod expects a list of pods, got %s" % type(pods).__name__)
    live = [
        p for p in pods if isinstance(p, Mapping) and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    live.sort(
        key=lambda p: (
            (p.get("metadata") or {}).get("creationTimestamp") or "",
            (p.get("metadata") or {}).get("name") or "",
        )
    )
    ready = [p for p in live if _pod_ready(p)]
    if ready:
        return {"pod": ready[-1], "ready": True}
    return {"pod": live[-1] if live else None, "ready": False}


def _truncate(text, length, leeway=5, end="..."):
    """Jinja's truncate filter with its defaults (jinja2/filters.py do_truncate: the leeway of the
    default policies, cut at a word boundary)."""
    if len(text) <= length + leeway:
        return text
    return text[: length - len(end)].rsplit(" ", 1)[0] + end


def smoke_exec_result(result, pod_name, model=None):
    """pod_exec result | smoke_exec_result(pod name, model) -> what the probe printed (its JSON), or
    {error} saying that the exec failed, with its rc and message (at most 500 characters). With the served
    ``model``, its /metrics pages are turned into their facts as smoke_probe's metrics_facts turns them
    (fact_tasks.probe_metrics_facts)."""
    result = result or {}
    if not isinstance(result, Mapping):
        raise AnsibleFilterError(
            "smoke_exec_result expects the result of specpilot.core.pod_exec, got %s" % type(result).__name__
        )
    stdout = result.get("stdout") or ""
    if result.get("rc", -1) == 0 and re.match(r"\s*{", stdout):
        probed = json.loads(stdout)
        return probed if model is None else fact_tasks.probe_metrics_facts(probed, model)
    detail = str(result.get("msg", result.get("stderr", "")))
    rc = result.get("rc", "?")
    return {"error": "exec in pod %s failed (rc %s): %s" % (pod_name, rc, _truncate(detail, 500))}


def smoke_verdict_lines(result):
    """smoke_verdict result | smoke_verdict_lines -> what the role shows: the verdict's message, one
    ``STATUS | title | message`` line a check, the interpretation, and where the report is."""
    if not isinstance(result, Mapping):
        raise AnsibleFilterError(
            "smoke_verdict_lines expects the result of smoke_verdict, got %s" % type(result).__name__
        )
    checks = [
        "%s | %s | %s" % (str(c.get("status", "")).upper(), c.get("title", ""), c.get("message", ""))
        for c in result.get("checks") or []
    ]
    report = (result.get("report_files") or {}).get("markdown") or "not written"
    return (
        [result.get("message", "")]
        + checks
        + list(result.get("interpretation") or [])
        + ["report: " + report]
    )


class FilterModule(object):
    """specpilot smoke filters."""

    def filters(self):
        return {
            "smoke_exec_command": smoke_exec_command,
            "smoke_exec_result": smoke_exec_result,
            "smoke_inside_command": smoke_inside_command,
            "smoke_log_window": smoke_log_window,
            "smoke_pick_pod": smoke_pick_pod,
            "smoke_verdict_lines": smoke_verdict_lines,
        }
