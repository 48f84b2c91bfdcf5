# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Plan of a PVC staging run (option C): what to stage, whether a Job is needed, and the
manifests of that Job.

How a re-run knows that nothing needs doing, without reading the PVC (on a real cluster the
Ansible controller cannot): every successful staging Job prints a result line that the role
records in a *status ConfigMap* (``specpilot-stage-<pvc>``, one key per destination directory),
together with the PVC's uid. A later run compares, per artifact, the recorded request digest
(source, revision, include/exclude, checksums, destination, program format) and PVC uid with
the current ones: equal means staged, so no Job is created and nothing changes. The staging
program also writes a marker file next to the files on the PVC; whenever a Job does run
(status missing, request changed, PVC recreated, ``recheck``/``force``), it verifies the files
against that marker first, so a lost status ConfigMap costs one verifying Job, never a copy.
The Job itself needs no Kubernetes API access (no ServiceAccount permissions).
"""

from __future__ import absolute_import, division, print_function

import copy
import hashlib
import json
import re

from ansible_collections.specpilot.core.plugins.module_utils import common
from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_retry
from ansible_collections.specpilot.core.plugins.module_utils.staging import data_safety, stager

__metaclass__ = type

DEST_MOUNT = "/specpilot/dest"
SRC_MOUNT = "/specpilot/src"
PROGRAM_MOUNT = "/specpilot/program"
CONTAINER = "stage"
HEAD_METHODS = ("eagle", "eagle3", "medusa", "mlp_speculator", "dflash", "hydra")
ENV_PREFIX = "SPECPILOT_SRC_%s_"
MANAGED_BY = {"app.kubernetes.io/managed-by": "specpilot", "app.kubernetes.io/name": "specpilot-stage"}
ARTIFACT_OPTION_KEYS = ("checksums", "checksum_manifest", "files", "archive_sha256", "unpack", "insecure_tls")


class PlanError(ValueError):
    pass


def program_source():
    """The staging program's source text (stager.py), as shipped in the ConfigMap."""
    return common.module_source(stager)


def program_files():
    """The staging program's files by name, as shipped in the ConfigMap and run from its mount: stager.py and
    the retry policy it imports beside it when it runs as a program (deploy_retry.py, standard library only).
    """
    return {"stager.py": program_source(), "deploy_retry.py": common.module_source(deploy_retry)}


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def dns_name(*parts, **kw):
    """A DNS-1123 name from parts, at most ``limit`` characters (63 by default)."""
    limit = kw.get("limit", 63)
    name = "-".join(p for p in parts if p)
    name = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)
    return name[:limit].rstrip("-")


def status_configmap_name(pvc_name):
    return dns_name("specpilot-stage", pvc_name, limit=253)


def status_key(dest):
    """ConfigMap key of a destination directory (path on the PVC)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", dest.replace("/", "__")) + ".json"


def artifact_kind(role, method):
    if role == "target":
        return "model"
    return "head" if (method or "") in HEAD_METHODS else "model"


def parse_pvc_uri(uri):
    m = re.match(r"^pvc://([a-z0-9]([-a-z0-9]*[a-z0-9])?)(/.*)?$", uri or "")
    if not m:
        raise PlanError("bad pvc:// source %r: expected pvc://<claim>[/path]" % uri)
    return m.group(1), (m.group(3) or "").strip("/")


def artifact_request(art, pvc_path, method, options):
    """The staging program's request entry of one artifact (no secrets), with its digest."""
    role = art["role"]
    uri = art.get("uri")
    if not uri:
        raise PlanError("%s has no uri: nothing to stage" % role)
    dest = "/".join(p for p in ((pvc_path or "").strip("/"), art["subdir"].strip("/")) if p)
    entry = {
        "role": role,
        "kind": art.get("kind") or artifact_kind(role, method),
        "uri": uri,
        "revision": art.get("revision"),
        "include": list(art.get("include") or []),
        "exclude": list(art.get("exclude") or []),
        "dest": dest,
    }
    opts = (options or {}).get(role) or {}
    unknown = sorted(set(opts) - set(ARTIFACT_OPTION_KEYS))
    if unknown:
        raise PlanError(
            "artifact options of %s: unknown key(s) %s (known: %s)"
            % (role, ", ".join(unknown), ", ".join(ARTIFACT_OPTION_KEYS))
        )
    for key in ARTIFACT_OPTION_KEYS:
        if opts.get(key) not in (None, "", [], {}):
            entry[key] = opts[key]
    if uri.startswith("pvc://"):
        claim, _sub = parse_pvc_uri(uri)
        entry["src_root"] = "%s/%s" % (SRC_MOUNT, claim)
    entry["request_digest"] = request_digest(entry)
    if art.get("secret_name"):
        entry["env_prefix"] = ENV_PREFIX % re.sub(r"[^A-Z0-9]", "_", role.upper())
    return entry


def request_digest(entry):
    core = {k: v for k, v in entry.items() if k not in ("request_digest", "env_prefix", "src_root")}
    core["format"] = stager.FORMAT
    return "sha256:" + hashlib.sha256(stager.canonical_json(core).encode()).hexdigest()


def recorded_status(status_data, entry):
    raw = (status_data or {}).get(status_key(entry["dest"]))
    if not raw:
        return None
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def decide(entry, recorded, pvc_uid, force, recheck):
    """(up_to_date, reason) of one artifact."""
    if force:
        return False, "force: true"
    if recheck:
        return False, "recheck: true"
    if recorded is None:
        return False, "no staging recorded for %s" % entry["dest"]
    if recorded.get("format") != stager.FORMAT:
        return False, "recorded by another staging format"
    if pvc_uid and recorded.get("pvc_uid") and recorded["pvc_uid"] != pvc_uid:
        return False, "the PVC was recreated since it was staged"
    if recorded.get("request_digest") != entry["request_digest"]:
        return False, "the request changed (source, revision, include/exclude, checksums or destination)"
    return True, "staged %s (%s files, %s bytes)" % (
        recorded.get("staged_at"),
        recorded.get("files"),
        recorded.get("bytes"),
    )


def _decisions(p, entries, pvc_uid):
    """(what was decided for each artifact, the entries still to stage)."""
    decisions = []
    todo = []
    for entry in entries:
        recorded = recorded_status(p.get("status_data"), entry)
        ok, reason = decide(entry, recorded, pvc_uid, p.get("force"), p.get("recheck"))
        decisions.append(
            {
                "role": entry["role"],
                "dest": entry["dest"],
                "uri": stager.redact_uri(entry["uri"]),
                "request_digest": entry["request_digest"],
                "up_to_date": ok,
                "reason": reason,
                "status_key": status_key(entry["dest"]),
                "recorded": recorded,
            }
        )
        if not ok:
            todo.append(entry)
    return decisions, todo


def build_plan(p, served_of=None):
    """Everything the role needs, from the module's parameters (a dict)."""
    name = p["name"]
    namespace = p["namespace"]
    pvc = p["pvc"] or {}
    if not pvc.get("name"):
        raise PlanError("pvc.name is required")
    pvc_obj = p.get("pvc_object") or {}
    pvc_uid = (pvc_obj.get("metadata") or {}).get("uid")
    artifacts = [a for a in (p.get("artifacts") or []) if a.get("uri")]
    entries = [
        artifact_request(a, pvc.get("path"), p.get("speculative_method"), p.get("artifact_options"))
        for a in artifacts
    ]
    dests = [e["dest"] for e in entries]
    if len(set(dests)) != len(dests):
        raise PlanError("target and draft would be staged into the same directory %r" % dests[0])
    decisions, todo = _decisions(p, entries, pvc_uid)
    refuse_forced_overwrite(p, pvc["name"], todo, served_of)
    for entry in todo:
        if entry["uri"].startswith("pvc://") and parse_pvc_uri(entry["uri"])[0] == pvc["name"]:
            entry["src_root"] = DEST_MOUNT  # the source lives on the destination PVC
    files = program_files()
    program = "".join(files[name] for name in sorted(files))
    request = {
        "format": stager.FORMAT,
        "dest_root": DEST_MOUNT,
        "force": bool(p.get("force")),
        "recheck": bool(p.get("recheck")),
        "verify": p.get("verify") or "sha256",
        "layout_check": bool(p.get("layout_check", True)),
        "progress_interval": float(p.get("progress_interval") or 2.0),
        "pvc": {"name": pvc["name"], "uid": pvc_uid},
        "artifacts": todo,
    }
    request_json = json.dumps(request, indent=1, sort_keys=True) + "\n"
    job_digest = hashlib.sha256((sha256_text(program) + request_json).encode()).hexdigest()[:10]
    job_name = dns_name("specpilot-stage", name[:30], job_digest)
    out = {
        "needed": bool(todo),
        "artifacts": decisions,
        "pvc_uid": pvc_uid,
        "job_name": job_name,
        "configmap_name": job_name,
        "status_configmap_name": p.get("status_configmap_name") or status_configmap_name(pvc["name"]),
        "program_sha256": sha256_text(program),
        "request": request,
        "manifests": {},
    }
    out["manifests"]["pvc"] = pvc_manifest(name, namespace, pvc, p.get("labels"))
    if todo:
        labels = dict(
            MANAGED_BY, **{"specpilot.io/service": dns_name(name), "specpilot.io/stage-request": job_digest}
        )
        labels.update(p.get("labels") or {})
        out["manifests"]["configmap"] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": job_name, "namespace": namespace, "labels": labels},
            "data": dict(files, **{"request.json": request_json}),
        }
        out["manifests"]["job"] = job_manifest(p, job_name, namespace, labels, pvc["name"], todo)
    return out


def refuse_forced_overwrite(p, claim, todo, served_of=None):
    """``force`` overwrites files that differ: never in what the live service serves from this claim
    (``p["live_inferenceservice"]``; data_safety.delete_refusal: equals, contains or lies inside).
    ``served_of(isvc)`` reads what a live InferenceService serves from its PVC (``(claim, {what:
    sub-path})``: operate/rollback.py ``pvc_served``); the caller passes it, so that staging, below the
    packages that read a live service, imports none of them (tests/unit/test_layers.py)."""
    if not p.get("force") or not p.get("live_inferenceservice"):
        return
    if served_of is None:
        raise ValueError(
            "build_plan: force with a live_inferenceservice needs served_of (rollback.pvc_served)"
        )
    live_claim, served = served_of(p["live_inferenceservice"])
    if live_claim != claim:
        return
    for entry in todo:
        why = data_safety.delete_refusal(entry["dest"], served)
        if why:
            raise PlanError(
                "force: true would overwrite the %s directory %r on PVC %s while it %s. Nothing was changed: "
                "stage into another directory (specpilot_pvc.path), or without force"
                % (entry["role"], entry["dest"], claim, why)
            )


def pvc_manifest(name, namespace, pvc, labels=None):
    spec = {
        "accessModes": list(pvc.get("access_modes") or ["ReadWriteOnce"]),
        "resources": {"requests": {"storage": pvc.get("size") or "100Gi"}},
    }
    if pvc.get("storage_class"):
        spec["storageClassName"] = pvc["storage_class"]
    md_labels = dict(MANAGED_BY, **{"specpilot.io/service": dns_name(name)})
    md_labels["app.kubernetes.io/name"] = "specpilot-models"
    md_labels.update(labels or {})
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": pvc["name"], "namespace": namespace, "labels": md_labels},
        "spec": spec,
    }


def _mount_source_claims(todo, pvc_name, mounts, volumes):
    """Mount each pvc:// source's claim (once, read-only) under SRC_MOUNT."""
    seen = {pvc_name}
    for entry in todo:
        if not entry["uri"].startswith("pvc://"):
            continue
        claim, _sub = parse_pvc_uri(entry["uri"])
        if claim in seen:
            continue
        seen.add(claim)
        vol = "src-%d" % len(seen)
        mounts.append({"name": vol, "mountPath": "%s/%s" % (SRC_MOUNT, claim), "readOnly": True})
        volumes.append({"name": vol, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})


def _secret_env_from(p, todo):
    """The envFrom of each artifact's Secret, under the artifact's variable prefix."""
    env_from = []
    by_role = {a["role"]: a for a in (p.get("artifacts") or [])}
    for entry in todo:
        secret = (by_role.get(entry["role"]) or {}).get("secret_name")
        if secret:
            env_from.append({"prefix": entry["env_prefix"], "secretRef": {"name": secret, "optional": False}})
    return env_from


def job_manifest(p, job_name, namespace, labels, pvc_name, todo):
    command = list(p.get("command") or ["python3"])
    command += ["%s/stager.py" % PROGRAM_MOUNT, "--request", "%s/request.json" % PROGRAM_MOUNT]
    # /tmp: an emptyDir, so that the container's root filesystem can be read-only
    mounts = [
        {"name": "program", "mountPath": PROGRAM_MOUNT, "readOnly": True},
        {"name": "dest", "mountPath": DEST_MOUNT},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes = [
        {"name": "program", "configMap": {"name": job_name}},
        {"name": "dest", "persistentVolumeClaim": {"claimName": pvc_name}},
        {"name": "tmp", "emptyDir": {}},
    ]
    _mount_source_claims(todo, pvc_name, mounts, volumes)
    env = [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        {"name": "HOME", "value": "/tmp"},
    ]
    env += copy.deepcopy(p.get("extra_env") or [])
    env_from = _secret_env_from(p, todo)
    container = {
        "name": CONTAINER,
        "image": p["image"],
        "imagePullPolicy": p.get("image_pull_policy") or "IfNotPresent",
        "command": command,
        "env": env,
        "volumeMounts": mounts + copy.deepcopy(p.get("extra_volume_mounts") or []),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if env_from:
        container["envFrom"] = env_from
    if p.get("resources"):
        container["resources"] = copy.deepcopy(p["resources"])
    if p.get("security_context"):
        container["securityContext"] = copy.deepcopy(p["security_context"])
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": volumes + copy.deepcopy(p.get("extra_volumes") or []),
    }
    for key, src in (
        ("serviceAccountName", "service_account"),
        ("nodeSelector", "node_selector"),
        ("tolerations", "tolerations"),
        ("securityContext", "pod_security_context"),
        ("priorityClassName", "priority_class_name"),
        ("imagePullSecrets", "image_pull_secrets"),
    ):
        if p.get(src):
            pod_spec[key] = copy.deepcopy(p[src])
    if pod_spec.get("imagePullSecrets"):
        pod_spec["imagePullSecrets"] = [
            s if isinstance(s, dict) else {"name": s} for s in pod_spec["imagePullSecrets"]
        ]
    spec = {
        "backoffLimit": int(p.get("backoff_limit", 2)),
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": CONTAINER,
                        "operator": "In",
                        "values": [stager.EXIT_PERMANENT],
                    },
                }
            ]
        },
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if p.get("active_deadline_seconds"):
        spec["activeDeadlineSeconds"] = int(p["active_deadline_seconds"])
    if p.get("ttl_seconds_after_finished") is not None:
        spec["ttlSecondsAfterFinished"] = int(p["ttl_seconds_after_finished"])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name, "namespace": namespace, "labels": dict(labels)},
        "spec": spec,
    }


def status_data(plan, result, job_name=None):
    """The status ConfigMap's data after a successful Job: one key per staged artifact (the
    program's result line), with the PVC uid, for the next run's comparison."""
    out = {}
    by_role = {d["role"]: d for d in plan.get("artifacts") or []}
    for art in (result or {}).get("artifacts") or []:
        decision = by_role.get(art.get("role"))
        if decision is None:
            continue
        st = dict(art.get("status") or {})
        st.update(
            {
                "role": art.get("role"),
                "dest": decision["dest"],
                "pvc_uid": plan.get("pvc_uid"),
                "job": job_name or plan.get("job_name"),
            }
        )
        if st.get("request_digest") != decision["request_digest"]:
            raise PlanError(
                "the Job's result for %s carries request digest %s, the plan %s"
                % (art.get("role"), st.get("request_digest"), decision["request_digest"])
            )
        out[decision["status_key"]] = json.dumps(st, sort_keys=True, separators=(",", ":"))
    return out
