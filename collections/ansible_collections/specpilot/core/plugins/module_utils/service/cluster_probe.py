# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
"""A short-lived probe Job in the cluster: the vLLM release inside the runtime image, and the model
facts of a PVC as the predictor will see them.  Pure: the plan (ConfigMap + Job), the parser of the
Job's log line, the caches.  The action specpilot.core.cluster_probe creates, waits, reads and deletes.

What the Job is
    The service's runtime image (``specpilot_runtime.image``: what the InferenceService will run) with
    the program ``model_dir.py`` (stdlib only, shipped in a ConfigMap from its source, as
    pvc_staging.program_source ships stager.py), run as ``python3 model_dir.py --probe request.json``.
    It prints one line ``SPECPILOT-PROBE {json}``: ``vllm.__version__`` (an import failure is reported,
    not fatal) and, per requested directory, the facts ``compat.read_local_facts`` computes from
    config.json and the tokenizer files (the same function: model_dir.py is that code).  Weights are never
    read.  With delivery pvc the service's claim is mounted READ-ONLY at /mnt/models with the spec's
    ``pvc.path`` as subPath, as KServe mounts a pvc:// storageUri into the kserve-container (kserve
    pkg/webhook/admission/pod/storage_initializer_injector.go, InjectStorageInitializer: utils.ParsePvcURI
    splits claim and path; with direct PVC mounts the claim is mounted at DefaultModelLocalMountPath
    /mnt/models, SubPath the path, ReadOnly), so the directories are render.mount_paths' (/mnt/models/<subdir>).
    Restricted: non-root, no privilege escalation, ALL capabilities dropped, seccomp RuntimeDefault, a
    read-only root filesystem (an emptyDir at /tmp, HOME=/tmp), no ServiceAccount token; bounded by
    activeDeadlineSeconds and ttlSecondsAfterFinished; small requests.

Caches
    The version, by image: an image pinned by digest (``...@sha256:...``) is keyed by the digest and kept
    for good; a tag is keyed by the reference and kept for ``ttl`` seconds (default one day), since a tag
    can move.  In the cluster: ConfigMap ``specpilot-probe-cache`` in the service's namespace, one key per
    image; on the controller: a file per image under ``$SPECPILOT_PROBE_CACHE`` (default
    ``$XDG_CACHE_HOME/specpilot/probe``), which validate-only runs (no cluster) read for
    ``vllm_version: auto``.
    PVC facts are NOT cached: the claim's content changes whenever anyone writes to it (the staging
    status ConfigMap records only what specpilot staged), and reading them costs a few small files in a
    Job that the deploy runs anyway when the version is not cached.  So they are read on every probe.
"""

from __future__ import absolute_import, division, print_function

import hashlib
import json
import os
import re
import time

from ansible_collections.specpilot.core.plugins.module_utils import common
from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_args
from ansible_collections.specpilot.core.plugins.module_utils.staging import model_dir
from ansible_collections.specpilot.core.plugins.module_utils.service import model_facts
from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.staging.pvc_staging import dns_name, sha256_text
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import MOUNT_ROOT, normalise
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import (
    VersionError,
    parse_version,
)

__metaclass__ = type

CACHE_CONFIGMAP = "specpilot-probe-cache"
PROGRAM_MOUNT = "/specpilot/probe"
CONTAINER = "probe"
LABELS = {"app.kubernetes.io/managed-by": "specpilot", "app.kubernetes.io/name": "specpilot-probe"}
ENV_CACHE = "SPECPILOT_PROBE_CACHE"
ENV_TTL = "SPECPILOT_PROBE_TTL"
DEFAULT_TTL = 86400
DEADLINE_MAX = 1800
TTL_AFTER_MAX = 3600
RUN_AS_USER = 1000
ISVC_LABEL = "serving.kserve.io/inferenceservice"  # KServe's label on the predictor pods
RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


class ProbeError(ValueError):
    """The probe cannot be planned, or its log holds no usable result; the message says why."""


def program_source():
    """model_dir.py's source text: the program the Job runs."""
    return common.module_source(model_dir)


# ---------------------------------------------------------------- what to read
def image_digest(image):
    """The digest an image reference is pinned by, or None."""
    match = _DIGEST.search(image or "")
    return match.group(1) if match else None


def models_to_read(spec):
    """[{role, path, uri}]: the artifacts delivered on the service's PVC, where the predictor sees them.
    Names and paths come from model_facts.source_for (the pvc:// URI) and render.mount_paths (the path)."""
    if spec.get("delivery") != "pvc" or not (spec.get("pvc") or {}).get("name"):
        return []
    mounts = render.mount_paths(spec, True)
    out = []
    for role in ("target", "draft"):
        artifact = spec.get(role)
        source = model_facts.source_for(role, artifact, spec, read_local=False) if artifact else None
        if source and source["kind"] == "pvc" and mounts.get(role):
            out.append({"role": role, "path": mounts[role], "uri": source["uri"]})
    return out


def wanted(spec, mode="auto"):
    """{version, models}: what a probe Job must read.  always: both (the version unless cached, the PVC's
    directories when the service reads its models from one); auto: the version when vllm_version is auto
    (or unset with a runtime image), and the PVC's directories whenever the service reads its models from
    one, facts typed in the spec or not: a directory that is not there is an error before any change
    (model_facts), where the predictor would crash-loop on it.  In auto, a declared version is still
    checked against the image's release when a probe cached it."""
    spec = _normalised(spec)
    models = bool(models_to_read(spec))
    if mode == "always":
        return {"version": True, "models": models}
    return {"version": spec.get("vllm_version") in (None, "auto"), "models": models}


def _normalised(spec):
    for key in ("name", "namespace"):
        if not isinstance((spec or {}).get(key), str):
            raise ProbeError(
                "%s is not set: the probe runs in the service's namespace (set specpilot_%s)" % (key, key)
            )
    try:
        return normalise(spec)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ProbeError(
            "the spec is malformed (%s: %s): specpilot.core.spec_validate says why"
            % (type(exc).__name__, exc)
        )


def plan(spec, version_needed=True, options=None):
    """The probe of a service spec (its specpilot_* variables): {image, namespace, models, request,
    job_name, configmap_name, needed, manifests: {configmap, job}}.  needed is false when there is nothing
    to ask (the version known, no PVC model)."""
    options = options or {}
    spec = _normalised(spec)
    image = (spec.get("runtime") or {}).get("image")
    if not image:
        raise ProbeError("runtime.image is not set: there is no image to probe (set specpilot_runtime.image)")
    models = models_to_read(spec) if options.get("read_models", True) else []
    request = {
        "format": model_dir.PROBE_FORMAT,
        "version": bool(version_needed),
        "models": [{"role": m["role"], "path": m["path"]} for m in models],
    }
    program = program_source()
    request_json = json.dumps(request, sort_keys=True) + "\n"
    digest = sha256_text(image + "\n" + sha256_text(program) + request_json)[:10]
    name = dns_name("specpilot-probe", spec["name"][:30], digest, options.get("suffix"))
    labels = dict(LABELS, **{"specpilot.io/service": dns_name(spec["name"])})
    namespace = spec["namespace"]
    out = {
        "image": image,
        "namespace": namespace,
        "models": models,
        "request": request,
        "job_name": name,
        "configmap_name": name,
        "needed": bool(version_needed or models),
        "manifests": {
            "configmap": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "data": {"model_dir.py": program, "request.json": request_json},
            },
            "job": job_manifest(spec, name, labels, image, options),
        },
    }
    return out


def _bounded(value, default, ceiling, field):
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= ceiling:
        raise ProbeError("%s=%r: give whole seconds from 1 to %d" % (field, value, ceiling))
    return value


def job_manifest(spec, name, labels, image, options):
    deadline = _bounded(options.get("deadline_seconds"), 300, DEADLINE_MAX, "deadline_seconds")
    ttl_after = _bounded(
        options.get("ttl_seconds_after_finished"), 300, TTL_AFTER_MAX, "ttl_seconds_after_finished"
    )
    mounts = [
        {"name": "program", "mountPath": PROGRAM_MOUNT, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes = [
        {"name": "program", "configMap": {"name": name}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
    ]
    pvc = spec.get("pvc") or {}
    if spec.get("delivery") == "pvc" and pvc.get("name") and options.get("read_models", True):
        mount = {"name": "models", "mountPath": MOUNT_ROOT, "readOnly": True}
        sub = (pvc.get("path") or "").strip("/")
        if sub:
            mount["subPath"] = sub
        mounts.append(mount)
        volumes.append(
            {"name": "models", "persistentVolumeClaim": {"claimName": pvc["name"], "readOnly": True}}
        )
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": (spec.get("runtime") or {}).get("image_pull_policy") or "IfNotPresent",
        "command": [
            options.get("python") or "python3",
            "%s/model_dir.py" % PROGRAM_MOUNT,
            "--probe",
            "%s/request.json" % PROGRAM_MOUNT,
        ],
        "env": [
            {"name": "HOME", "value": "/tmp"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        ],
        "volumeMounts": mounts,
        "resources": json.loads(json.dumps(RESOURCES)),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": int(options.get("run_as_user") or RUN_AS_USER),
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": volumes,
        # near the service's running pods: a ReadWriteOnce claim attaches to one node only, and the image is
        # already there
        "affinity": {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {ISVC_LABEL: spec["name"]}},
                        },
                    }
                ]
            }
        },
    }
    for key, value in (
        ("nodeSelector", (spec.get("gpu") or {}).get("node_selector")),
        ("tolerations", (spec.get("gpu") or {}).get("tolerations")),
        ("imagePullSecrets", options.get("image_pull_secrets")),
    ):
        if value:
            pod_spec[key] = json.loads(json.dumps(value))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": spec["namespace"], "labels": dict(labels)},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": ttl_after,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


# ---------------------------------------------------------------- the result
def parse_log(text):
    """The probe's result from its pod log: the last ``SPECPILOT-PROBE {json}`` line.  ProbeError when
    there is none or it is not a result of this format (the message quotes the log's end)."""
    lines = (text or "").splitlines()
    for line in reversed(lines):
        if not line.startswith(model_dir.PROBE_MARKER):
            continue
        try:
            data = json.loads(line[len(model_dir.PROBE_MARKER) :])
        except ValueError as exc:
            raise ProbeError("the probe's result line is not JSON (%s): %s" % (exc, _short(line)))
        if not isinstance(data, dict) or data.get("format") != model_dir.PROBE_FORMAT:
            raise ProbeError(
                "the probe's result line is not of format %d: %s" % (model_dir.PROBE_FORMAT, _short(line))
            )
        if not isinstance(data.get("models"), dict):
            raise ProbeError("the probe's result line has no models: %s" % _short(line))
        return data
    tail = " | ".join(lines[-5:]) or "(empty)"
    raise ProbeError("the probe printed no %sline; its log ends: %s" % (model_dir.PROBE_MARKER, _short(tail)))


def _short(text, limit=400):
    return text if len(text) <= limit else text[: limit - 3] + "..."


def probed(result, plan_, image, digest=None, source="probe"):
    """What spec_validate's option ``probed`` takes: {image, digest, source, vllm_version or vllm_error,
    models: {role: {uri, facts, problem, read}}}."""
    out = {"image": image, "digest": digest, "source": source, "models": {}}
    vllm = (result or {}).get("vllm")
    if isinstance(vllm, dict) and vllm.get("version"):
        out["vllm_version"] = str(vllm["version"])
    elif isinstance(vllm, dict):
        out["vllm_error"] = str(vllm.get("error") or "the probe gave no version")
    by_role = {m["role"]: m for m in plan_.get("models") or []}
    for role, entry in ((result or {}).get("models") or {}).items():
        if role in by_role and isinstance(entry, dict):
            out["models"][role] = {
                "uri": by_role[role]["uri"],
                "facts": entry.get("facts") or {},
                "problem": entry.get("problem"),
                "read": True,  # the Job looked at the directory (not check mode, not an unreadable claim)
            }
    return out


# ---------------------------------------------------------------- the version caches
def cache_key(image, digest=None):
    digest = image_digest(image) or digest
    return "digest:" + digest if digest else "ref:" + image


def configmap_key(key):
    """A ConfigMap data key for a cache key (keys allow [-._a-zA-Z0-9] only)."""
    return "image-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:40] + ".json"


def version_entry(image, version, digest=None, now=None):
    return {
        "key": cache_key(image, digest),
        "image": image,
        "digest": image_digest(image) or digest,
        "vllm_version": version,
        "probed_at": float(time.time() if now is None else now),
        "immutable": bool(image_digest(image)),
    }


def cached_version(data, image, now=None, ttl=DEFAULT_TTL):
    """The cache entry of ``image`` in a cache ConfigMap's data, or None (absent, malformed, or a tag's
    entry older than ttl)."""
    key = cache_key(image)
    raw = (data or {}).get(configmap_key(key))
    try:
        entry = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("key") != key or not entry.get("vllm_version"):
        return None
    age = (time.time() if now is None else now) - float(entry.get("probed_at") or 0)
    if not entry.get("immutable") and not 0 <= age < ttl:
        return None
    return entry


def configmap_patch(entries):
    """The data of the cache ConfigMap that records ``entries`` (merged into it by a merge patch, so that
    services probing at once do not overwrite each other's images)."""
    return {configmap_key(e["key"]): json.dumps(e, sort_keys=True) for e in entries}


def cache_configmap(namespace, data):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CACHE_CONFIGMAP,
            "namespace": namespace,
            "labels": dict(LABELS, **{"app.kubernetes.io/name": CACHE_CONFIGMAP}),
        },
        "data": data,
    }


def local_cache(environ=None):
    """The controller's cache of image versions (model_facts.Cache: one JSON file per key)."""
    environ = os.environ if environ is None else environ
    directory = environ.get(ENV_CACHE)
    if not directory:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        directory = os.path.join(base, "specpilot", "probe")
    try:
        ttl = float(environ.get(ENV_TTL) or DEFAULT_TTL)
    except ValueError:
        ttl = DEFAULT_TTL
    return model_facts.Cache(directory, ttl)


def local_version(image, environ=None, now=None):
    """The version the last probe of ``image`` read, from the controller's cache, or None."""
    if not image:
        return None
    entry = local_cache(environ).get(cache_key(image), now)
    return entry if entry and entry.get("vllm_version") else None


def remember_version(entry, environ=None):
    local_cache(environ).put(entry["key"], dict(entry, read_at=entry["probed_at"]))


# ---------------------------------------------------------------- vllm_version auto, into the validation
def default_version(raw):
    """vllm_version auto where it is unset and runtime.image is given; returns the image (or None)."""
    runtime = raw.get("runtime") if isinstance(raw.get("runtime"), dict) else {}
    image = runtime.get("image") if isinstance(runtime.get("image"), str) else None
    if raw.get("vllm_version") is None and image:
        raw["vllm_version"] = "auto"
    return image


def resolve_version(raw, probe, findings, environ=None):
    """vllm_version of a raw spec, as the image says: ``auto`` (the default when runtime.image is given)
    becomes the probed release, else the controller's cached probe of the image, else
    vllm_version_fallback; a declared release the probe contradicts is an error naming both.  Sets
    raw["vllm_version"]; returns {value, source (declared, image, cache, fallback or None), image, ...}."""
    image = default_version(raw)
    declared = raw.get("vllm_version")
    probe = probe if isinstance(probe, dict) else {}
    out = {"declared": declared, "value": declared, "source": "declared", "image": image}
    if probe.get("vllm_version"):
        out.update(read=probe["vllm_version"], read_from=probe.get("source") or "probe")
    if declared != "auto":
        if probe.get("vllm_error") and isinstance(declared, str):
            findings.warning(
                "vllm_version",
                "the runtime image's vLLM release could not be read (%s): vllm_version %s is not checked "
                "against it" % (probe["vllm_error"], declared),
                "use a runtime image in which python3 -c 'import vllm' works",
                "vllm-version-unread",
            )
        if out.get("read") and isinstance(declared, str) and _release(declared) != _release(out["read"]):
            findings.error(
                "vllm_version",
                "vllm_version is %s but the runtime image %s holds vLLM %s (read by the probe Job)"
                % (declared, image or probe.get("image"), out["read"]),
                'declare "%s" (or "auto"), or use an image with vLLM %s' % (out["read"], declared),
                "vllm-version-image",
            )
        return out
    return _auto(raw, probe, out, findings, environ)


def _auto(raw, probe, out, findings, environ):
    if not out.get("read"):
        cached = local_version(out["image"], environ)
        if cached:
            out.update(read=cached["vllm_version"], read_from="cache", probed_at=cached.get("probed_at"))
    if out.get("read"):
        out.update(value=out["read"], source="image" if out["read_from"] != "cache" else "cache")
        raw["vllm_version"] = out["read"]
        return out
    fallback = raw.get("vllm_version_fallback")
    why = (
        probe.get("vllm_error")
        or probe.get("unavailable")
        or (
            "no probe of the image ran (a validate-only or render-only run) and none of %s is cached on this "
            "controller" % out["image"]
            if out["image"]
            else "runtime.image is not set, so there is no image to read it from"
        )
    )
    if isinstance(fallback, str) and not probe.get("vllm_error"):
        out.update(value=fallback, source="fallback", why=why)
        raw["vllm_version"] = fallback
        findings.note(
            "vllm_version",
            "vllm_version auto: %s; checked as vLLM %s (vllm_version_fallback)" % (why, fallback),
            "playbooks/deploy.yml reads the release from the image before it writes anything",
            "vllm-version-fallback",
        )
        return out
    out.update(value=None, source=None, why=why)
    findings.error(
        "vllm_version",
        "vllm_version is auto but the image's vLLM release is unknown: %s" % why,
        (
            "declare specpilot_vllm_version, or set specpilot_vllm_version_fallback for runs without a cluster"
            if not probe.get("vllm_error")
            else "use a runtime image with vLLM installed (python3 -c 'import vllm' must work in it)"
        ),
        "vllm-version-unknown",
    )
    return out


def _release(text):
    try:
        return parse_version(str(text))[:3]
    except VersionError:
        return str(text)


# ---------------------------------------------------------------- the module's options
ARGUMENT_SPEC = dict(
    deploy_args.K8S_AUTH,
    spec={"type": "dict"},
    default_name={"type": "str"},
    mode={"type": "str", "default": "auto", "choices": ["auto", "always"]},
    read_version={"type": "bool", "default": True},
    read_models={"type": "bool", "default": True},
    use_cache={"type": "bool", "default": True},
    timeout={"type": "int", "default": 300},
    poll_interval={"type": "float", "default": 1.0},
    deadline_seconds={"type": "int", "default": 300},
    ttl_seconds_after_finished={"type": "int", "default": 300},
    run_as_user={"type": "int", "default": RUN_AS_USER},
    image_pull_secrets={"type": "list", "elements": "raw", "default": [], "no_log": False},  # Secret names
    python={"type": "str", "default": "python3"},
    auth={"type": "dict", "default": {}, "no_log": True},
)
