# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The images a service runs, as validate() checks them: the runtime image pinned by tag or digest (or by the
image_pins option), the upstream image's root user, and a digest's form."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.service import cluster_probe
from ansible_collections.specpilot.core.plugins.module_utils.report.findings import path_join


def _has_tag(image):
    last = image.rsplit("/", 1)[-1]
    return ":" in last


def _repository(image):
    """registry/repo of an image reference, without its digest and tag (a registry's :port stays)."""
    image = image.split("@", 1)[0]
    return image.rsplit(":", 1)[0] if _has_tag(image) else image


def _image_pinned(image):
    if "@sha256:" in image:
        return True
    return _has_tag(image) and not image.endswith(":latest")


def _check_runtime_image(spec, findings, image_pins=None):
    """The runtime image: required when specpilot creates the runtime, pinned by tag or digest; with
    image_pins "digest" (a production inventory's specpilot_image_pins), by digest."""
    if spec["runtime"]["create"] and not spec["runtime"].get("image"):
        findings.error(
            "runtime.image",
            "runtime.image is required when specpilot creates the runtime",
            "set specpilot_runtime.image (a vLLM OpenAI server image), or runtime.create: false with "
            "the name of an existing runtime",
            "runtime-image",
        )
    elif spec["runtime"].get("image") and not _image_pinned(spec["runtime"]["image"]):
        findings.warning(
            "runtime.image",
            "runtime image %r is not pinned (no tag, or 'latest'): the vLLM version "
            "inside can drift from vllm_version %s" % (spec["runtime"]["image"], spec["vllm_version"]),
            "pin the image by tag or digest",
            "runtime-image-unpinned",
        )
    elif spec["runtime"].get("image") and image_pins == "digest":
        _check_image_digest("runtime.image", spec["runtime"]["image"], findings)
    base = (spec.get("modelcar") or {}).get("base_image")
    if image_pins == "digest" and isinstance(base, str) and base and not base.startswith("oci:"):
        _check_image_digest("modelcar.base_image", base, findings)  # oci:PATH is a local layout, not pulled


UPSTREAM_ROOT_IMAGES = ("vllm/vllm-openai", "docker.io/vllm/vllm-openai")


def _check_runtime_security(runtime, findings):
    """The runtime container's securityContext (spec.RUNTIME_SECURITY_CONTEXT is the default)."""
    if not runtime.get("create"):
        return
    sc = runtime.get("security_context")
    path = "runtime.security_context"
    if not isinstance(sc, dict) or not sc:
        findings.warning(
            path,
            "the runtime container runs without a securityContext",
            "leave runtime.security_context unset for the default (no privilege escalation, no capabilities, "
            "RuntimeDefault seccomp)",
            "runtime-security-context-none",
        )
        return
    if sc.get("privileged") is True or sc.get("allowPrivilegeEscalation") is True:
        findings.warning(
            path,
            "the runtime container may run privileged or escalate privileges; vLLM needs neither",
            "drop privileged and set allowPrivilegeEscalation: false",
            "runtime-privileged",
        )
    image = _repository(str(runtime.get("image") or ""))
    if sc.get("runAsNonRoot") is True and sc.get("runAsUser") in (None, 0) and image in UPSTREAM_ROOT_IMAGES:
        findings.error(
            path_join(path, "runAsNonRoot"),
            "runAsNonRoot with the upstream image %s, which runs as root: the kubelet refuses to start it "
            "('container has runAsNonRoot and image will run as root')" % runtime["image"],
            "set runAsUser (and fsGroup on the pod) to a non-root id, or use an image built to run as non-root",
            "runtime-nonroot-root-image",
        )


def _check_image_digest(path, image, findings):
    """A tag can be moved to other bytes than were validated and benchmarked; a digest cannot."""
    if cluster_probe.image_digest(image):
        return
    findings.warning(
        path,
        "image %r is pinned by tag only: the registry can move the tag, and the cluster then pulls other "
        "bytes than were validated and benchmarked" % image,
        "pin it as repo:tag@sha256:<digest> (the digest: skopeo inspect --format '{{.Digest}}' "
        "docker://repo:tag), or acknowledge image-tag-only",
        "image-tag-only",
    )
