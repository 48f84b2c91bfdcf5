# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""How one service's artifacts reach the pod, as validate() plans it: the delivery (storage_uri, storage_uris,
Modelcar, PVC), which artifacts are delivered, their mount paths, and the staging they need."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.report.findings import path_join
from ansible_collections.specpilot.core.plugins.module_utils.service import kserve_rules
from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.service import vllm_profiles as vp
from ansible_collections.specpilot.core.plugins.module_utils.service.validate_images import _has_tag
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import MOUNT_ROOT

PENDING_DIGEST = "sha256:" + "0" * 64


def _unused_mount_paths(spec, findings):
    """A mount_path is only read with delivery storage_uris."""
    delivery = spec["delivery"]
    for role, artifact in (("target", spec["target"]), ("draft", spec.get("draft"))):
        if artifact and artifact.get("mount_path") and delivery != "storage_uris":
            findings.error(
                path_join(role, "mount_path"),
                "%s.mount_path is only used with delivery storage_uris (delivery is %s)" % (role, delivery),
                "remove it; the path is /mnt/models/<subdir>",
                "mount-path-unused",
            )


def _storage_uri_checks(spec, draft_artifact, findings):
    """With a KServe storage URI delivery every delivered artifact has a uri of a scheme KServe knows."""
    delivery = spec["delivery"]
    for role, artifact in (
        ("target", spec["target"]),
        ("draft", spec.get("draft") if draft_artifact else None),
    ):
        if artifact is None:
            continue
        uri = artifact.get("uri")
        if not uri:
            findings.error(
                path_join(role, "uri"),
                "%s.uri is required with delivery %s" % (role, delivery),
                "give the KServe storage URI (hf://, s3://, gs://, https://, pvc://, oci://)",
                "uri-required",
            )
        elif kserve_rules.uri_scheme(uri) not in kserve_rules.KSERVE_STORAGE_SCHEMES:
            findings.error(
                path_join(role, "uri"),
                "%s.uri %r has no storage scheme KServe knows" % (role, uri),
                "use one of: %s" % ", ".join(s + "://" for s in kserve_rules.KSERVE_STORAGE_SCHEMES),
                "storage-scheme",
            )


def _staging_scheme_checks(spec, findings):
    """Staging (Modelcar, PVC) copies from the schemes it has a client for."""
    for role, artifact in (("target", spec["target"]), ("draft", spec.get("draft"))):
        uri = (artifact or {}).get("uri")
        if uri and kserve_rules.uri_scheme(uri) not in kserve_rules.STAGING_SCHEMES:
            findings.error(
                path_join(role, "uri"),
                "%s.uri %r: staging copies from %s only"
                % (role, uri, ", ".join(s + "://" for s in kserve_rules.STAGING_SCHEMES)),
                "use one of those sources",
                "staging-scheme",
            )


# Each delivery fills the plan's delivery dict; it answers False when its own settings are missing (nothing
# more can be checked).


def _deliver_storage_uri(spec, draft_artifact, options, findings, out):
    if draft_artifact and spec.get("draft"):
        findings.error(
            "delivery",
            "delivery storage_uri carries one artifact, but the %s method needs the draft "
            "in the same pod" % spec["speculative"].get("method"),
            "use delivery storage_uris (KServe >= 0.16), modelcar or pvc",
            "delivery-single-artifact",
        )
    out["storage_uri"] = spec["target"].get("uri")
    return True


def _deliver_storage_uris(spec, draft_artifact, options, findings, out):
    mounts = render.mount_paths(spec, draft_artifact)
    entries = [{"uri": spec["target"].get("uri") or "", "mountPath": mounts["target"]}]
    draft = spec.get("draft")
    if draft_artifact and draft:
        entries.append({"uri": draft.get("uri") or "", "mountPath": mounts["draft"]})
    out["storage_uris"] = entries
    return True


def _untagged(image):
    return image.rsplit(":", 1)[0] if _has_tag(image) else image


def _modelcar_ref(image, digest, options, findings):
    """The Modelcar image by digest (a placeholder digest while allowed to be missing), or None."""
    if "@sha256:" in image:
        return image
    if digest:
        return "%s@%s" % (_untagged(image), digest)
    if options.get("allow_missing_digest"):
        findings.warning(
            "modelcar.image_digest",
            "modelcar.image_digest is not set yet; the manifests carry a "
            "placeholder digest and must not be applied",
            "run playbooks/stage.yml first; deploy fills the digest in",
            "digest-pending",
        )
        return "%s@%s" % (_untagged(image), PENDING_DIGEST)
    findings.error(
        "modelcar.image_digest",
        "delivery modelcar references the image by digest, and modelcar.image_digest is not set",
        "run playbooks/stage.yml (it builds, pushes and "
        "prints the digest) or set specpilot_modelcar.image_digest: sha256:<64 hex>",
        "digest-missing",
    )
    return None


def _deliver_modelcar(spec, draft_artifact, options, findings, out):
    modelcar = spec.get("modelcar")
    if not modelcar:
        findings.error(
            "modelcar",
            "delivery modelcar needs specpilot_modelcar (image, image_digest)",
            "set specpilot_modelcar.image (and the digest printed by stage.yml)",
            "modelcar-missing",
        )
        return False
    image = modelcar["image"]
    for prefix in ("oci://", "docker://"):
        if image.startswith(prefix):
            image = image[len(prefix) :]
    ref = _modelcar_ref(image, modelcar.get("image_digest"), options, findings)
    if not _has_tag(image) and "@" not in image:
        findings.warning(
            "modelcar.image",
            "modelcar.image %r has no tag" % image,
            "tag it (e.g. :v1); 'latest' means imagePullPolicy Always",
            "image-untagged",
        )
    out["storage_uri"] = "oci://%s" % ref if ref else None
    out["image"] = ref
    out["staging"] = "modelcar"
    return True


def _deliver_pvc(spec, draft_artifact, options, findings, out):
    pvc = spec.get("pvc")
    if not pvc:
        findings.error(
            "pvc", "delivery pvc needs specpilot_pvc (name)", "set specpilot_pvc.name", "pvc-missing"
        )
        return False
    sub = (pvc.get("path") or "").strip("/")
    out["storage_uri"] = "pvc://%s/%s" % (pvc["name"], (sub + "/") if sub else "")
    out["pvc"] = pvc["name"]
    out["staging"] = "pvc" if (spec["target"].get("uri") or (spec.get("draft") or {}).get("uri")) else None
    return True


_DELIVERIES = {
    "storage_uri": _deliver_storage_uri,
    "storage_uris": _deliver_storage_uris,
    "modelcar": _deliver_modelcar,
    "pvc": _deliver_pvc,
}


def _delivery(spec, draft_artifact, options, findings):
    """Resolve how artifacts reach the pod.  Returns the plan's delivery dict."""
    delivery = spec["delivery"]
    out = {"type": delivery, "storage_uri": None, "storage_uris": None, "staging": None}
    _unused_mount_paths(spec, findings)
    if delivery in ("storage_uri", "storage_uris"):
        _storage_uri_checks(spec, draft_artifact, findings)
    deliver = _DELIVERIES.get(delivery)
    if deliver is not None and not deliver(spec, draft_artifact, options, findings, out):
        return out
    if delivery in ("modelcar", "pvc"):
        _staging_scheme_checks(spec, findings)
    return out


def _draft_artifact(spec, x, findings):
    """(the method's profile entry, whether a draft artifact is delivered); warns about a draft no method uses."""
    raw_cfg = spec.get("speculative")
    method = raw_cfg.get("method") if isinstance(raw_cfg, dict) else None
    minfo = (x["methods"].get(method) if isinstance(method, str) else None) or vp.method_info(
        method if isinstance(method, str) else ""
    )
    draft_artifact = bool(raw_cfg) and minfo["model"] != "none" and bool(spec.get("draft"))
    if spec.get("draft") and not draft_artifact:
        findings.warning(
            "draft",
            "specpilot_draft is given but %s"
            % ("speculative decoding is off" if not raw_cfg else "method '%s' uses no draft" % method),
            "remove specpilot_draft (it would be delivered for nothing)",
            "draft-unused",
        )
    return minfo, draft_artifact


def _mounts(spec, draft_artifact):
    """(the artifacts' mount paths, the paths the speculative config is resolved against)."""
    mounts = render.mount_paths(spec, draft_artifact)
    if not draft_artifact:
        mounts["draft"] = None
    resolve_mounts = dict(mounts)
    if draft_artifact and mounts["draft"] is None:
        # delivery storage_uri cannot carry the draft (reported above): resolve the config as if it
        # could, so that the error is not repeated as a missing model.
        resolve_mounts["draft"] = "%s/%s" % (MOUNT_ROOT, spec["draft"]["subdir"])
    return mounts, resolve_mounts


def _staging(spec, delivery, draft_artifact):
    kind = delivery.get("staging")
    if kind is None:
        return None
    items = []
    for role in ("target", "draft"):
        artifact = spec.get(role)
        if not artifact or (role == "draft" and not draft_artifact):
            continue
        items.append(
            {
                "role": role,
                "uri": artifact.get("uri"),
                "subdir": artifact["subdir"],
                "revision": artifact.get("revision"),
                "include": artifact.get("include"),
                "exclude": artifact.get("exclude"),
                "secret_name": artifact.get("secret_name"),
            }
        )
    return {"kind": kind, "artifacts": items}
