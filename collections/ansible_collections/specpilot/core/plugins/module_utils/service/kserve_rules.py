# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""KServe rules that the CRD schema cannot express: version gates and webhook checks.

They run on the *final* InferenceService (after the user's overrides), so a manifest
that KServe's admission webhook would reject, or that the API server would silently
prune (``spec.predictor.model.storageUris``), can never be produced.
"""

from __future__ import annotations

import posixpath

from ansible_collections.specpilot.core.plugins.module_utils.service.plan import LEGACY_MODES
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import format_version
from ansible_collections.specpilot.core.plugins.module_utils.common import get_path

__all__ = [
    "check_inferenceservice",
    "check_servingruntime",
    "check_llminferenceservice",
    "llmisvc_version",
    "LLMISVC_FIELDS",
    "uri_scheme",
    "common_parent",
    "KSERVE_STORAGE_SCHEMES",
    "STAGING_SCHEMES",
]

KSERVE_STORAGE_SCHEMES = (
    "s3",
    "gs",
    "hf",
    "https",
    "http",
    "pvc",
    "oci",
    "oci+modelcar",
    "oci+native",
    "oci+fetch",
    "hdfs",
    "webhdfs",
)
STAGING_SCHEMES = ("hf", "s3", "https", "http", "pvc")
MAX_OCI_SOURCES = 10


def uri_scheme(uri):
    if not isinstance(uri, str) or "://" not in uri:
        return None
    return uri.split("://", 1)[0].lower()


def _is_oci(uri):
    return (uri_scheme(uri) or "").startswith("oci")


def _is_pvc(uri):
    return uri_scheme(uri) == "pvc"


def pvc_sub_path(uri):
    """'pvc://claim/a/b' -> 'a/b' ('' for the root)."""
    rest = uri.split("://", 1)[1]
    parts = rest.split("/", 1)
    return parts[1].strip("/") if len(parts) > 1 else ""


def common_parent(paths):
    """KServe's FindCommonParentPath: the deepest directory shared by all paths."""
    split = [[p for p in posixpath.normpath(path).split("/") if p] for path in paths]
    if not split:
        return "/"
    common = []
    for parts in zip(*split):
        if all(p == parts[0] for p in parts):
            common.append(parts[0])
        else:
            break
    # a path is not its own parent
    shortest = min(len(s) for s in split)
    if len(common) == shortest:
        common = common[:-1]
    return "/" + "/".join(common)


def _v(ctx):
    return ctx["kserve_version"]


def _vl(ctx):
    return format_version(ctx["kserve_version"])


def _check_storage_uris(entries, ctx, findings, where):
    if _v(ctx) < (0, 16, 0):
        findings.error(
            where("spec.predictor.storageUris"),
            "spec.predictor.storageUris needs KServe >= 0.16 (cluster: %s)" % _vl(ctx),
            "use delivery modelcar or pvc, or upgrade KServe",
            "kserve-storageuris-version",
        )
        return
    if not isinstance(entries, list) or not entries:
        findings.error(
            where("spec.predictor.storageUris"),
            "storageUris must be a non-empty list",
            "give one entry per artifact",
            "storageuris-empty",
        )
        return
    kinds = {"oci": [], "non_pvc": [], "pvc": []}
    for i, entry in enumerate(entries):
        _check_storage_uri_entry(i, entry, ctx, findings, where, kinds)
    _check_oci_sources(kinds["oci"], len(entries), ctx, findings, where)
    _check_mount_parents(kinds, findings, where)
    if ctx["deployment_mode"] == "Knative":
        findings.warning(
            where("spec.predictor.storageUris"),
            "Knative renders storageUris into the Knative Service: the Knative feature flag "
            "kubernetes.podspec-init-containers must be on%s"
            % (
                " (and kubernetes.podspec-persistent-volume-claim for the PVC entries)"
                if kinds["pvc"]
                else ""
            ),
            "check the config-features ConfigMap of Knative Serving",
            "knative-storageuris-flags",
        )


def _storage_uri_entry_fields(i, entry, ctx, findings, where):
    """The entry's uri and mountPath, or None when the entry cannot be read further."""
    base = "spec.predictor.storageUris[%d]" % i
    if not isinstance(entry, dict):
        findings.error(
            where(base),
            "each storageUris entry must be {uri, mountPath}",
            "fix the entry",
            "storageuris-entry",
        )
        return None
    uri = entry.get("uri")
    if not isinstance(uri, str) or not uri:
        findings.error(
            where(base + ".uri"),
            "storageUris[%d].uri must be a non-empty URI" % i,
            "set the artifact's uri",
            "storageuris-uri",
        )
        return None
    if uri_scheme(uri) not in KSERVE_STORAGE_SCHEMES:
        findings.error(
            where(base + ".uri"),
            "storageUris[%d].uri %r has no storage scheme KServe %s knows" % (i, uri, _vl(ctx)),
            "use one of: %s://" % ", ".join(KSERVE_STORAGE_SCHEMES),
            "storage-scheme",
        )
    extra = set(entry) - {"uri", "mountPath"}
    if extra:
        findings.error(
            where(base),
            "storageUris[%d] has unknown field(s) %s; the API server would drop them"
            % (i, ", ".join(sorted(extra))),
            "an entry has only uri and mountPath (older docs called it 'path')",
            "storageuris-field",
        )
    mount = entry.get("mountPath", "/mnt/models")
    if not _mount_path_ok(i, mount, findings, where):
        return None
    return uri, mount


def _mount_path_ok(i, mount, findings, where):
    path = where("spec.predictor.storageUris[%d].mountPath" % i)
    if not isinstance(mount, str) or not mount.startswith("/"):
        findings.error(
            path,
            "storageUris[%d].mountPath %r must be an absolute path" % (i, mount),
            "start it with / (e.g. /mnt/models/target)",
            "mountpath-relative",
        )
        return False
    if posixpath.normpath(mount) == "/":
        findings.error(
            path,
            "storageUris[%d].mountPath must not be '/'" % i,
            "mount under a directory such as /mnt/models/<name>",
            "mountpath-root",
        )
        return False
    if ".." in mount.split("/"):
        findings.error(
            path,
            "storageUris[%d].mountPath %r must not contain '..'" % (i, mount),
            "write the normalised absolute path",
            "mountpath-dotdot",
        )
        return False
    return True


def _check_storage_uri_entry(i, entry, ctx, findings, where, kinds):
    """One entry's own rules; files it under kinds (pvc, non_pvc, oci) for the rules across entries."""
    fields = _storage_uri_entry_fields(i, entry, ctx, findings, where)
    if fields is None:
        return
    uri, mount = fields
    base = "spec.predictor.storageUris[%d]" % i
    if _is_pvc(uri):
        sub = pvc_sub_path(uri)
        if sub:
            findings.error(
                where(base + ".uri"),
                "storageUris[%d].uri %r: KServe %s ignores the sub-path '%s' inside storageUris and "
                "mounts the whole PVC at %s" % (i, uri, _vl(ctx), sub, mount),
                "use pvc://<claim> here and address the sub-directory in the engine paths, or use "
                "delivery pvc (storageUri: pvc://<claim>/<dir>/)",
                "pvc-subpath-in-storageuris",
            )
        kinds["pvc"].append((i, mount))
    else:
        kinds["non_pvc"].append((i, mount))
        if _v(ctx) < (0, 17, 0):
            findings.error(
                where(base + ".uri"),
                "non-PVC storageUris entries (%s://) fail in KServe %s (fixed in 0.17)"
                % (uri_scheme(uri), _vl(ctx)),
                "upgrade KServe to >= 0.17, or use delivery modelcar or pvc",
                "kserve-storageuris-nonpvc",
            )
    if _is_oci(uri):
        kinds["oci"].append((i, uri, mount))
        if "@sha256:" not in uri:
            findings.warning(
                where(base + ".uri"),
                "OCI source %r is not pinned by digest" % uri,
                "reference the image as oci://repo@sha256:<digest>",
                "oci-not-pinned",
            )


def _check_oci_sources(oci, n_entries, ctx, findings, where):
    version = _v(ctx)
    if oci and version < (0, 19, 0):
        findings.error(
            where("spec.predictor.storageUris[%d].uri" % oci[0][0]),
            "oci:// inside storageUris needs KServe >= 0.19 (cluster: %s)" % _vl(ctx),
            "use delivery modelcar (one image with both artifacts) or upgrade KServe",
            "kserve-oci-storageuris",
        )
    elif oci and (len(oci) > 1 or len(oci) < n_entries) and version < (0, 20, 0):
        findings.error(
            where("spec.predictor.storageUris"),
            "several oci:// entries, or oci:// mixed with other entries, need KServe >= 0.20 (cluster: %s)"
            % _vl(ctx),
            "bake both artifacts into one Modelcar image (delivery modelcar) or upgrade KServe",
            "kserve-multi-oci",
        )
    if len(oci) > MAX_OCI_SOURCES:
        findings.error(
            where("spec.predictor.storageUris"),
            "at most %d OCI sources per pod (got %d)" % (MAX_OCI_SOURCES, len(oci)),
            "use fewer images",
            "too-many-oci",
        )
    parents = {}
    for i, _uri, mount in oci:
        parent = posixpath.dirname(posixpath.normpath(mount))
        if parent in parents:
            findings.error(
                where("spec.predictor.storageUris[%d].mountPath" % i),
                "OCI entries %d and %d share the parent directory %s; each Modelcar mounts an emptyDir "
                "at the parent, so KServe rejects this" % (parents[parent], i, parent),
                "give each OCI entry its own parent, e.g. /mnt/target/model and /mnt/draft/model",
                "oci-shared-parent",
            )
        parents.setdefault(parent, i)


def _check_mount_parents(kinds, findings, where):
    non_pvc = kinds["non_pvc"]
    if len(non_pvc) <= 1:
        return
    if common_parent([m for _i, m in non_pvc]) == "/":
        findings.error(
            where("spec.predictor.storageUris"),
            "the mountPaths of non-PVC entries (%s) must share a parent directory other than '/'"
            % ", ".join(m for _i, m in non_pvc),
            "mount them under one directory, e.g. /mnt/models/target and /mnt/models/draft",
            "mountpath-no-common-parent",
        )
    seen = {}
    for i, mount in kinds["pvc"]:
        if mount in seen:
            findings.error(
                where("spec.predictor.storageUris[%d].mountPath" % i),
                "PVC entries %d and %d use the same mountPath %s" % (seen[mount], i, mount),
                "give each PVC entry its own mountPath",
                "pvc-mountpath-duplicate",
            )
        seen.setdefault(mount, i)


def check_inferenceservice(isvc, ctx, findings, where):
    """Webhook rules and version gates on the final InferenceService.

    ctx: kserve_version (tuple), deployment_mode ('Standard'|'Knative').
    where(manifest_path) -> finding path (tells rendered fields from user overrides).
    """
    predictor = get_path(isvc, "spec", "predictor")
    if not isinstance(predictor, dict):
        findings.error(
            where("spec.predictor"),
            "the InferenceService has no spec.predictor",
            "keep the predictor",
            "isvc-no-predictor",
        )
        return
    _check_isvc_storage(predictor, ctx, findings, where)
    _check_isvc_annotations(isvc, ctx, findings, where)
    _check_isvc_mode_fields(predictor, ctx, findings, where)
    _check_isvc_version_gates(isvc, predictor, ctx, findings, where)


def _check_isvc_storage(predictor, ctx, findings, where):
    """storageUri / storageUris: where they sit, one or the other, schemes, Modelcar pinning."""
    model = predictor.get("model") or {}
    if isinstance(model, dict) and "storageUris" in model:
        findings.error(
            where("spec.predictor.model.storageUris"),
            "storageUris under spec.predictor.model is not a KServe field: the API server prunes it and "
            "the pod starts without its models",
            "storageUris belongs at spec.predictor.storageUris (delivery storage_uris renders it there)",
            "storageuris-under-model",
        )
    storage_uri = model.get("storageUri") if isinstance(model, dict) else None
    storage_uris = predictor.get("storageUris")
    if storage_uri and storage_uris is not None:
        findings.error(
            where("spec.predictor.storageUris"),
            "spec.predictor.model.storageUri and spec.predictor.storageUris are both set; KServe accepts "
            "one or the other",
            "keep storageUris for several artifacts, storageUri for one",
            "storageuri-xor-storageuris",
        )
    if storage_uris is not None:
        _check_storage_uris(storage_uris, ctx, findings, where)
    if storage_uri:
        scheme = uri_scheme(storage_uri)
        if scheme not in KSERVE_STORAGE_SCHEMES:
            findings.error(
                where("spec.predictor.model.storageUri"),
                "storageUri %r has no storage scheme KServe knows" % storage_uri,
                "use one of: %s://" % ", ".join(KSERVE_STORAGE_SCHEMES),
                "storage-scheme",
            )
        if _is_oci(storage_uri):
            if "@sha256:" not in storage_uri:
                findings.warning(
                    where("spec.predictor.model.storageUri"),
                    "Modelcar image %r is not pinned by digest" % storage_uri,
                    "reference it as oci://repo@sha256:<digest>",
                    "oci-not-pinned",
                )
            if _v(ctx) < (0, 15, 2):
                findings.warning(
                    where("spec.predictor.model.storageUri"),
                    "KServe %s ships storageInitializer.enableModelcar=false: oci:// needs it turned on"
                    % _vl(ctx),
                    "set enableModelcar: true in the inferenceservice-config ConfigMap",
                    "modelcar-disabled-by-default",
                )


def _check_isvc_annotations(isvc, ctx, findings, where):
    """The deploymentMode annotation, explicit and named for the version; no Knative annotation in
    Standard mode."""
    mode = ctx["deployment_mode"]
    annotations = get_path(isvc, "metadata", "annotations") or {}
    mode_value = annotations.get("serving.kserve.io/deploymentMode")
    expected = [mode] + [legacy for legacy, name in LEGACY_MODES.items() if name == mode]
    if mode_value not in expected:
        findings.error(
            where("metadata.annotations"),
            "the serving.kserve.io/deploymentMode annotation must be set explicitly (%s); got %r"
            % (expected[0], mode_value),
            "do not override it: set specpilot_deployment_mode",
            "deployment-mode-annotation",
        )
    elif _v(ctx) < (0, 16, 0) and mode_value in ("Standard", "Knative"):
        findings.error(
            where("metadata.annotations"),
            "KServe %s does not know deploymentMode %r (the names Standard/Knative arrived in 0.16)"
            % (_vl(ctx), mode_value),
            "use %s" % expected[1],
            "deployment-mode-name",
        )
    if mode == "Standard" and "serving.knative.dev/progress-deadline" in annotations:
        findings.error(
            where("metadata.annotations.serving.knative.dev/progress-deadline"),
            "serving.knative.dev/progress-deadline is ignored in Standard mode (the Deployment keeps "
            "progressDeadlineSeconds 600)",
            "remove it; in Standard mode the deploy role owns the rollout timeout "
            "(startup_timeout_seconds sizes the startupProbe)",
            "progress-deadline-standard",
        )


def _check_isvc_mode_fields(predictor, ctx, findings, where):
    """Fields that only one deployment mode honours."""
    mode = ctx["deployment_mode"]
    if mode == "Knative" and predictor.get("deploymentStrategy") is not None:
        findings.error(
            where("spec.predictor.deploymentStrategy"),
            "deploymentStrategy applies only in Standard mode",
            "remove it in Knative mode",
            "strategy-knative",
        )
    if mode == "Standard" and predictor.get("canaryTrafficPercent") is not None:
        findings.error(
            where("spec.predictor.canaryTrafficPercent"),
            "canaryTrafficPercent works only in Knative mode",
            "use spec.canary (KServe 0.20) or Knative",
            "canary-standard",
        )
    if mode == "Standard" and predictor.get("minReplicas") == 0:
        findings.error(
            where("spec.predictor.minReplicas"),
            "minReplicas 0 (scale to zero) is not supported in Standard mode",
            "use minReplicas >= 1, or Knative mode",
            "scale-to-zero-standard",
        )


def _check_isvc_version_gates(isvc, predictor, ctx, findings, where):
    """Fields that need KServe >= 0.20."""
    version = _v(ctx)
    mode = ctx["deployment_mode"]
    canary = get_path(isvc, "spec", "canary")
    if canary is not None:
        if version < (0, 20, 0):
            findings.error(
                where("spec.canary"),
                "spec.canary needs KServe >= 0.20 (cluster: %s)" % _vl(ctx),
                "remove it",
                "canary-version",
            )
        if mode != "Standard":
            findings.error(
                where("spec.canary"),
                "spec.canary is only allowed in Standard mode",
                "remove it",
                "canary-mode",
            )
    if predictor.get("name") is not None and version < (0, 20, 0):
        findings.error(
            where("spec.predictor.name"),
            "spec.predictor.name needs KServe >= 0.20 (cluster: %s)" % _vl(ctx),
            "remove it",
            "predictor-name-version",
        )
    if predictor.get("storageContainerName") is not None and version < (0, 20, 0):
        findings.error(
            where("spec.predictor.storageContainerName"),
            "spec.predictor.storageContainerName needs KServe >= 0.20 (cluster: %s)" % _vl(ctx),
            "remove it",
            "storage-container-version",
        )


def check_servingruntime(runtime, findings, where):
    containers = get_path(runtime, "spec", "containers")
    if not isinstance(containers, list) or not containers:
        findings.error(
            where("spec.containers"),
            "the ServingRuntime needs a container",
            "keep kserve-container",
            "runtime-no-container",
        )
        return
    main = containers[0]
    if main.get("name") != "kserve-container":
        findings.error(
            where("spec.containers[0].name"),
            "the runtime's container must be named kserve-container",
            "do not rename it",
            "runtime-container-name",
        )


# KServe's LLMInferenceService (serving.kserve.io): the API version a release serves and stores, and the
# spec fields each release's CRD has (config/crd/full/llmisvc/serving.kserve.io_llminferenceservices.yaml at
# v0.16.0, v0.17.0 and v0.20.0): v1alpha1 only on 0.16; v1alpha2, served and stored, from 0.17 (v1alpha1
# still served, converted).  A release between two rows has the fields of the row below it.
LLMISVC_FIELDS = (
    ((0, 16, 0), "v1alpha1", ("baseRefs", "model", "parallelism", "prefill", "replicas", "router", "template", "worker")),
    ((0, 17, 0), "v1alpha2", ("annotations", "labels", "scaling", "storageInitializer")),
    ((0, 20, 0), "v1alpha2", ("tracing", "kvCacheOffloading")),
)
LLMISVC_MODEL_FIELDS = {"v1alpha1": ("uri", "name", "lora", "criticality"), "v1alpha2": ("uri", "name", "lora", "confidential")}
# a field of v1alpha2 alone (v0.20.0's v1alpha1 has no kvCacheOffloading)
_LLMISVC_V2_ONLY = ("kvCacheOffloading",)


def llmisvc_version(kserve_version):
    """The LLMInferenceService API version a KServe release stores (None before 0.16: it has none)."""
    found = None
    for since, version, _fields in LLMISVC_FIELDS:
        if kserve_version is not None and tuple(kserve_version) >= since:
            found = version
    return found


def llmisvc_spec_fields(kserve_version, api_version):
    fields = []
    for since, _version, added in LLMISVC_FIELDS:
        if tuple(kserve_version) >= since:
            fields += [f for f in added if api_version == "v1alpha2" or f not in _LLMISVC_V2_ONLY]
    return fields


def check_llminferenceservice(obj, ctx, findings, where):
    """The final LLMInferenceService against the cluster's release: its API version, the spec fields its CRD
    has (the API server would prune the others), the model's fields, replicas and scaling not both."""
    version = _v(ctx)
    api = llmisvc_version(version)
    if api is None:
        findings.error(
            where("apiVersion"),
            "LLMInferenceService needs KServe >= 0.16 (cluster: %s)" % _vl(ctx),
            "use resource InferenceService, or upgrade KServe",
            "llmisvc-version",
        )
        return
    spec = obj.get("spec") or {}
    known = llmisvc_spec_fields(version, api)
    for key in sorted(set(spec) - set(known)):
        findings.error(
            where("spec." + key),
            "spec.%s is not a field of LLMInferenceService %s in KServe %s" % (key, api, _vl(ctx)),
            "remove it (the API server would drop it), or upgrade KServe",
            "llmisvc-field-version",
        )
    for key in sorted(set(spec.get("model") or {}) - set(LLMISVC_MODEL_FIELDS[api])):
        findings.error(
            where("spec.model." + key),
            "spec.model.%s is not a field of LLMInferenceService %s" % (key, api),
            "remove it",
            "llmisvc-field-version",
        )
    if "replicas" in spec and "scaling" in spec:
        # the CRD's x-kubernetes-validations rule "!(has(self.replicas) && has(self.scaling))"
        findings.error(
            where("spec.scaling"),
            "replicas and scaling are mutually exclusive on an LLMInferenceService",
            "keep one",
            "llmisvc-replicas-scaling",
        )
