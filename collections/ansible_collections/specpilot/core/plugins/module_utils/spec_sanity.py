# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see galaxy.yml)
"""What JSON Schema cannot say about a spec, checked before it: every finding names its field.

- NaN and infinity anywhere (JSON Schema's ``minimum``/``maximum`` let NaN through: every
  comparison with it is false), and numbers beyond any real setting (``10**400`` overflows each
  float computation after the schema);
- ``min_replicas`` above ``max_replicas``;
- annotations over Kubernetes' 256 KiB in all (k8s.io/apimachinery pkg/api/validation/objectmeta.go,
  ``ValidateAnnotations``: ``TotalAnnotationSizeLimitB``, keys and values counted).

Pure standard library.
"""

from __future__ import annotations

import math

from ansible_collections.specpilot.core.plugins.module_utils.findings import path_join

__all__ = ["check", "MAX_MAGNITUDE", "ANNOTATIONS_LIMIT"]

MAX_MAGNITUDE = 1e15
ANNOTATIONS_LIMIT = 256 * 1024


def check(raw, findings):
    """Add the errors of ``raw`` (the spec as given, a dict) to ``findings``."""
    _numbers(raw, "", findings)
    _replicas(raw, findings)
    _annotations(raw.get("annotations"), findings)


def _numbers(value, path, findings):
    if isinstance(value, dict):
        for key, item in value.items():
            _numbers(item, path_join(path, str(key)), findings)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _numbers(item, path_join(path, i), findings)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    elif isinstance(value, float) and not math.isfinite(value):
        findings.error(
            path, "%s=%r is not a finite number" % (path, value), "write a number", "number-not-finite"
        )
    elif abs(value) > MAX_MAGNITUDE:
        findings.error(
            path,
            "%s=%s is out of range (more than %g)" % (path, _short(value), MAX_MAGNITUDE),
            "write the value meant (see schemas/service.schema.json for its bounds)",
            "number-out-of-range",
        )


def _short(value):
    text = str(value) if isinstance(value, float) else "%d" % value
    return text if len(text) <= 24 else "%s...(%d digits)" % (text[:12], len(text))


def _replicas(raw, findings):
    low, high = raw.get("min_replicas"), raw.get("max_replicas")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)) and low > high:
        findings.error(
            "max_replicas",
            "max_replicas=%d is below min_replicas=%d" % (high, low),
            "raise max_replicas to at least %d, or lower min_replicas" % low,
            "replicas-range",
        )


def _annotations(annotations, findings):
    if not isinstance(annotations, dict):
        return
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > ANNOTATIONS_LIMIT:
        findings.error(
            "annotations",
            "annotations take %d bytes; Kubernetes accepts %d in all" % (size, ANNOTATIONS_LIMIT),
            "keep large data out of annotations (a ConfigMap, a volume)",
            "annotations-too-large",
        )
