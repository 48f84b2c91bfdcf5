# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The readable report of validate(): every finding with the variable path users write, and its fix."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.service.spec import VAR_PREFIX


def _display_path(path, prefix):
    if not path:
        return "(spec)"
    if path.startswith(("inferenceservice.", "servingruntime.")):
        return path
    return prefix + path


_VERSION_SOURCES = {
    "image": " read from the image",
    "cache": " read from the image by an earlier probe",
    "fallback": " assumed: vllm_version_fallback",
}


def format_report(result, prefix=VAR_PREFIX, strict=False):
    """Readable block of every finding, with the variable paths users write."""
    spec = result.get("spec") or {}
    head = "specpilot validate: %s" % (spec.get("name") or result.get("service") or "?")
    if spec:
        head += " (namespace %s, vLLM %s%s, KServe %s, %s)" % (
            spec.get("namespace"),
            spec.get("vllm_version"),
            _VERSION_SOURCES.get((result.get("vllm_version") or {}).get("source"), ""),
            spec.get("kserve_version", "?"),
            spec.get("deployment_mode"),
        )
    verdict = "OK" if result["ok"] else "FAILED"
    lines = [
        "%s: %s; %d error(s), %d warning(s)%s"
        % (
            head,
            verdict,
            len(result["errors"]),
            len(result["warnings"]),
            " (strict: warnings fail)" if strict and result["warnings"] else "",
        )
    ]
    for title, bucket in (
        ("ERRORS", result["errors"]),
        ("WARNINGS", result["warnings"]),
        ("NOTES", result["notes"]),
    ):
        if not bucket:
            continue
        lines.append("%s:" % title)
        for i, item in enumerate(bucket, 1):
            lines.append("  %d. %s: %s" % (i, _display_path(item["path"], prefix), item["message"]))
            if item.get("hint"):
                lines.append("     fix: %s  [%s]" % (item["hint"], item["code"]))
    return "\n".join(lines)
