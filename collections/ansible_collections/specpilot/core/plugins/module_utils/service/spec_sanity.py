# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""What JSON Schema cannot say about a spec, checked before it: every finding names its field.

- NaN and infinity anywhere (JSON Schema's ``minimum``/``maximum`` let NaN through: every
  comparison with it is false), and numbers beyond any real setting (``10**400`` overflows each
  float computation after the schema);
- ``min_replicas`` above ``max_replicas``;
- annotations over Kubernetes' 256 KiB in all (k8s.io/apimachinery pkg/api/validation/objectmeta.go,
  ``ValidateAnnotations``: ``TotalAnnotationSizeLimitB``, keys and values counted);
- secrets written in the spec: a literal ``value`` of an env variable named like a secret (TOKEN,
  SECRET, PASSWORD, ...KEY), and any string shaped like a known credential (a Hugging Face, GitHub,
  AWS or OpenAI-style key, a JWT, a private key).  The spec is rendered into the InferenceService,
  its history ConfigMap and the previous-revision annotation, so a secret belongs in a Secret,
  referenced (``valueFrom.secretKeyRef``).  The messages never repeat the value.

Pure standard library.
"""

from __future__ import annotations

import math

from ansible_collections.specpilot.core.plugins.module_utils.common import CREDENTIAL_SHAPES, SECRET_NAME
from ansible_collections.specpilot.core.plugins.module_utils.report.findings import path_join

__all__ = ["check", "MAX_MAGNITUDE", "ANNOTATIONS_LIMIT"]

MAX_MAGNITUDE = 1e15
ANNOTATIONS_LIMIT = 256 * 1024
_SECRET_HINT = (
    "keep it in a Secret and reference it: specpilot_env: [{name: ..., valueFrom: {secretKeyRef: "
    "{name: <secret>, key: <key>}}}] (rotate the value if it was committed)"
)


def check(raw, findings):
    """Add the errors of ``raw`` (the spec as given, a dict) to ``findings``."""
    _numbers(raw, findings)
    _replicas(raw, findings)
    _annotations(raw.get("annotations"), findings)
    _secret_env(raw.get("env"), findings)
    _credentials(raw, findings)


def _leaves(value, path=""):
    """(path, value) of every scalar of a spec, depth first."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, path_join(path, str(key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, path_join(path, i))
    else:
        yield path, value


def _numbers(raw, findings):
    for path, value in _leaves(raw):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
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


def _secret_env(env, findings):
    for i, entry in enumerate(env if isinstance(env, list) else []):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        value = entry.get("value")
        if isinstance(value, str) and value and SECRET_NAME.search(entry["name"]):
            findings.error(
                path_join("env", i, "value"),
                "env %s carries a literal value (not shown): a secret would be written into the "
                "InferenceService, its history and the run's output" % entry["name"],
                _SECRET_HINT,
                "secret-literal",
            )


def _credentials(raw, findings):
    for path, value in _leaves(raw):
        if not isinstance(value, str):
            continue
        for what, shape in CREDENTIAL_SHAPES:
            if shape.search(value):
                findings.error(
                    path,
                    "%s holds what looks like %s (not shown)" % (path, what),
                    _SECRET_HINT,
                    "secret-literal",
                )
                break
