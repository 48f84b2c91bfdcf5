# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the deploy role: the decision, the lock, the revision record, the diagnosis."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.specpilot.core.plugins.module_utils.deploy import (
    deploy_diagnose,
    deploy_kserve,
    deploy_rollout,
    deploy_state,
)
from ansible_collections.specpilot.core.plugins.module_utils.k8s import service_lock
from ansible_collections.specpilot.core.plugins.plugin_utils.filter_args import mapping_or_none as _mapping


def _now(now):
    return float(now) if now is not None else time.time()


def deploy_decision(
    plan, live, field_manager="specpilot", now=None, history_limit=deploy_state.HISTORY_LIMIT
):
    """plan | deploy_decision(live): what deploy must write (see module_utils/deploy/deploy_state.decide)."""
    plan = _mapping(plan, "deploy_decision")
    if not plan or not plan.get("spec_digest") or not plan.get("inferenceservice"):
        raise AnsibleFilterError("deploy_decision needs a validated plan (spec_validate's plan)")
    return deploy_state.decide(
        plan, _mapping(live, "deploy_decision (live)") or {}, field_manager, _now(now), int(history_limit)
    )


def lease_status(lease, holder, now=None):
    """lease | lease_status(holder): who holds a deploy Lease and until when."""
    return service_lock.lease_status(_mapping(lease, "lease_status"), holder, _now(now))


def lease_spec(holder, duration, now=None, transitions=0):
    """holder | lease_spec(duration): the spec of a Lease held by holder from now on."""
    return service_lock.lease_spec(holder, int(duration), _now(now), int(transitions or 0))


def deploy_diagnosis(context):
    """context | deploy_diagnosis: the readable diagnosis of a rollout that did not become ready."""
    return deploy_diagnose.diagnose(_mapping(context, "deploy_diagnosis") or {})


def pruned_fields(desired, stored):
    """desired | pruned_fields(stored): paths of desired that the API server dropped."""
    return deploy_kserve.pruned_paths(desired, stored)


def dry_run_pruned(results):
    """dry_run.results | dry_run_pruned: 'Kind/name: path' for every field a server-side dry run dropped.

    ``results`` are the loop results of a kubernetes.core.k8s task run in check mode (``item`` the
    manifest sent, ``result`` the object the API server returned); skipped ones are ignored."""
    out = []
    for entry in results or []:
        if not isinstance(entry, Mapping) or entry.get("skipped") or entry.get("failed"):
            continue
        sent, stored = entry.get("item"), entry.get("result")
        if not isinstance(sent, Mapping) or not isinstance(stored, Mapping):
            continue
        ref = "%s/%s" % (sent.get("kind"), (sent.get("metadata") or {}).get("name"))
        out.extend("%s: %s" % (ref, path) for path in deploy_kserve.pruned_paths(dict(sent), dict(stored)))
    return out


def runtime_manifest(snapshot):
    """previous_runtime | runtime_manifest: the manifest that re-applies a recorded runtime."""
    snapshot = _mapping(snapshot, "runtime_manifest")
    if not snapshot:
        raise AnsibleFilterError("runtime_manifest needs a recorded runtime")
    return deploy_state.runtime_manifest(snapshot)


def log_entry(result, pod, container="kserve-container"):
    """k8s_log loop result | log_entry(pod): {pod, container, previous, text, error} for deploy_diagnosis.

    The loop item is the ``previous`` flag the log was read with; ``error`` is why the read failed or
    timed out (the task's message), empty when it was read."""
    result = _mapping(result, "log_entry") or {}
    return {
        "pod": pod,
        "container": container,
        "previous": bool(result.get("item")),
        "text": result.get("log") or "",
        "error": str(result.get("msg") or "failed") if result.get("failed") else "",
    }


def failure_summary(message, limit=400):
    """ansible_failed_result.msg | failure_summary: one line - the first line of the message, and the
    first numbered problem when it is a validation report."""
    lines = [line.strip() for line in str(message or "").splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    out = lines[0]
    first = next((line for line in lines[1:] if re.match(r"^1\. ", line)), None)
    if first:
        out += " - " + first[3:]
    return out[: int(limit)]


def deploy_result(result, rollout=None, kserve=None, vllm=None, check_mode=False):
    """The decision's result | deploy_result(rollout_wait's result, KServe summary, vLLM version,
    ansible_check_mode) -> specpilot_deploy_result after a change: the rollout's outcome (``not waited
    for`` when the wait did not run; in check mode, that nothing was applied) and the service's URL as
    the wait last read it."""
    result = dict(_mapping(result, "deploy_result") or {})
    if check_mode:
        result["check_mode"] = True
    rollout = _mapping(rollout, "deploy_result (rollout)") or {}
    status = (rollout.get("status") or {}) if isinstance(rollout.get("status"), Mapping) else {}
    url = (((rollout.get("inferenceservice") or {}).get("status") or {}).get("url")) or result.get("url")
    result.update(
        kserve=kserve,
        vllm=vllm,
        rollout={
            "done": bool(rollout.get("done", False)),
            "elapsed": rollout.get("elapsed", 0),
            "message": status.get("message")
            or ("check mode: nothing applied, no rollout" if check_mode else "not waited for"),
        },
        url=url,
    )
    return result


def predictor_deployment(isvc, name):
    """live InferenceService | predictor_deployment(name) -> the name of its predictor's Deployment:
    {name}-predictor, or {name}-{predictor.name}-predictor (KServe 0.20, a promoted canary)."""
    return deploy_rollout.predictor_deployment_name(name, _mapping(isvc, "predictor_deployment"))


def _truncate(text, length=200, end="...", leeway=5):
    """Jinja's truncate (killwords false, its default leeway of 5)."""
    if len(text) <= length + leeway:
        return text
    return text[: length - len(end)].rsplit(" ", 1)[0] + end


def _deploy_state(r):
    """What deploy did and where the rollout stands; in check mode, what it would do (a dry run
    applies nothing and waits for no rollout)."""
    if r.get("check_mode") and r.get("applied"):
        return "would deploy (check mode: server-side dry run, nothing applied)"
    return "%s, %s" % (
        "deployed" if r.get("applied") else "unchanged",
        "ready" if (r.get("rollout") or {}).get("done") else "not ready",
    )


def _deploy_line(r):
    kserve = r.get("kserve") or {}
    return "%s (digest %s%s%s%s)%s" % (
        _deploy_state(r),
        (r.get("spec_digest") or "")[:12],
        ", previous " + r["previous_digest"][:12] if r.get("previous_digest") else "",
        ", KServe %s" % kserve["version"] if kserve.get("version") else "",
        _vllm_part(r.get("vllm") or {}),
        "; note: %s" % kserve["note"] if kserve.get("note") else "",
    )


def _vllm_part(vllm):
    """The summary's words for spec_validate's vllm_version result (", vLLM 0.32.0 read from the image")."""
    if not vllm.get("value"):
        return ""
    if vllm.get("source") in ("image", "cache"):
        how = "read from the image"
    elif vllm.get("read"):
        how = "declared, as the image holds"
    else:
        how = {"fallback": "assumed (vllm_version_fallback)"}.get(vllm.get("source"), "declared")
    return ", vLLM %s %s" % (vllm["value"], how)


def _rollback_line(r):
    if r.get("skipped"):
        return "skipped (no InferenceService)"
    if r.get("check_mode") and r.get("changed"):
        # a dry run applies nothing: there is no rollout to be ready or not
        what = "would change (check mode: nothing applied)"
    else:
        what = "%s, %s" % (
            "rolled back" if r.get("changed") else "unchanged",
            "ready" if (r.get("rollout") or {}).get("done") else "not ready",
        )
    removed = r.get("removed_args")
    return "%s, %s%s" % (
        r.get("mode"),
        what,
        ", removed " + _truncate(" ".join(removed)) if removed else "",
    )


_SUMMARY_LINES = {"deploy": _deploy_line, "rollback": _rollback_line}


def services_summary(hosts, hostvars, operation):
    """ansible_play_hosts_all | services_summary(hostvars, 'deploy'|'rollback'): one line per service,
    sorted: FAILED at its task with the reason, what the role did, or not run."""
    if operation not in _SUMMARY_LINES:
        raise AnsibleFilterError(
            "services_summary: operation must be one of %s" % ", ".join(sorted(_SUMMARY_LINES))
        )
    lines = []
    for host in sorted(hosts):
        hv = hostvars[host]
        failed = hv.get("specpilot_%s_failed" % operation)
        result = hv.get("specpilot_%s_result" % operation)
        if failed:
            lines.append(
                '%s: FAILED at "%s": %s'
                % (
                    host,
                    hv.get("specpilot_%s_failure_task" % operation),
                    hv.get("specpilot_%s_failure_reason" % operation),
                )
            )
        elif result is not None:
            lines.append("%s: %s" % (host, _SUMMARY_LINES[operation](result)))
        else:
            lines.append("%s: not run (unreachable or stopped earlier)" % host)
    return lines


def kserve_version(detection, declared=None, given=None):
    """detection | kserve_version(declared): the KServe release to validate against."""
    return deploy_kserve.effective_version(_mapping(detection, "kserve_version"), declared, given)


def revision_history(configmap):
    """history_configmap | revision_history: the recorded revisions, oldest first."""
    return deploy_state.history_revisions(_mapping(configmap, "revision_history"))


class FilterModule(object):
    """specpilot deploy filters."""

    def filters(self):
        return {
            "deploy_decision": deploy_decision,
            "deploy_result": deploy_result,
            "predictor_deployment": predictor_deployment,
            "lease_status": lease_status,
            "lease_spec": lease_spec,
            "deploy_diagnosis": deploy_diagnosis,
            "pruned_fields": pruned_fields,
            "dry_run_pruned": dry_run_pruned,
            "runtime_manifest": runtime_manifest,
            "log_entry": log_entry,
            "failure_summary": failure_summary,
            "kserve_version": kserve_version,
            "revision_history": revision_history,
            "services_summary": services_summary,
        }
