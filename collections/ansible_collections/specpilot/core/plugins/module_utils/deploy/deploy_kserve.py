# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""What the cluster's KServe can do, read from its CRDs; strict validation against them.

KServe publishes no version object, but every release that matters to specpilot left a mark
in the schema of its CRDs (``git show vX:config/crd/full/...`` of kserve/kserve):

======== ==================================================================================
0.14     InferenceService ``spec.predictor.workerSpec``
0.15     ``spec.predictor.autoScaling`` / ``scaleMetricType``; 0.15.2 ``status.deploymentMode``
0.16     ``spec.predictor.storageUris``
0.17     ``spec.predictor.hostnameOverride``, ``spec.predictor.model.restartPolicyRules``;
         LLMInferenceService ``v1alpha2``
0.18     LLMInferenceService ``spec.router.gateway.refs[].sectionName``
0.19     LLMInferenceService ``spec.model.lora.maxAdapters``
0.20     ``spec.canary``, ``spec.predictor.name``, ``spec.predictor.storageContainerName``
======== ==================================================================================

:func:`detect` turns the CRDs into a range: the release of the newest marker present is the
lower bound, and the first newer release whose markers are all absent is the (exclusive) upper
bound.  Markers older than the lower bound are ignored, so a trimmed CRD (the lab's own) that
declares ``storageUris`` and ``predictor.name`` but not ``workerSpec`` still reads as 0.20.
Without the LLMInferenceService CRD, 0.17 to 0.19 cannot be told apart: the range says so, and
:func:`effective_version` then uses the release the spec declares when it lies in the range.

Pure standard library; :func:`strict_errors` needs ``jsonschema`` (in requirements.txt).
"""

from __future__ import annotations

import copy
import json

from ansible_collections.specpilot.core.plugins.module_utils.common import key_paths
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import (
    VersionError,
    format_version,
    parse_version,
)

__all__ = [
    "ISVC_CRD",
    "LLMISVC_CRD",
    "SR_CRD",
    "CSR_CRD",
    "MARKERS",
    "DetectError",
    "crd_version_schema",
    "schema_has_path",
    "detect",
    "effective_version",
    "strictify",
    "strict_errors",
    "pruned_paths",
]

ISVC_CRD = "inferenceservices.serving.kserve.io"
LLMISVC_CRD = "llminferenceservices.serving.kserve.io"
SR_CRD = "servingruntimes.serving.kserve.io"
CSR_CRD = "clusterservingruntimes.serving.kserve.io"

# (release, CRD, served version or None for any, schema path, what it is)
MARKERS = (
    ((0, 14, 0), ISVC_CRD, "v1beta1", "spec.predictor.workerSpec", "multi-node workerSpec"),
    ((0, 15, 0), ISVC_CRD, "v1beta1", "spec.predictor.autoScaling", "autoScaling"),
    ((0, 15, 0), ISVC_CRD, "v1beta1", "spec.predictor.scaleMetricType", "scaleMetricType"),
    ((0, 15, 2), ISVC_CRD, "v1beta1", "status.deploymentMode", "status.deploymentMode"),
    ((0, 16, 0), ISVC_CRD, "v1beta1", "spec.predictor.storageUris", "storageUris"),
    ((0, 17, 0), ISVC_CRD, "v1beta1", "spec.predictor.hostnameOverride", "hostnameOverride"),
    ((0, 17, 0), ISVC_CRD, "v1beta1", "spec.predictor.model.restartPolicyRules", "restartPolicyRules"),
    ((0, 17, 0), LLMISVC_CRD, "v1alpha2", "spec", "LLMInferenceService v1alpha2"),
    ((0, 18, 0), LLMISVC_CRD, None, "spec.router.gateway.refs[].sectionName", "gateway sectionName"),
    ((0, 19, 0), LLMISVC_CRD, None, "spec.model.lora.maxAdapters", "LoRA maxAdapters"),
    ((0, 20, 0), ISVC_CRD, "v1beta1", "spec.canary", "canary"),
    ((0, 20, 0), ISVC_CRD, "v1beta1", "spec.predictor.name", "predictor.name"),
    ((0, 20, 0), ISVC_CRD, "v1beta1", "spec.predictor.storageContainerName", "storageContainerName"),
)


# the lower bound when no marker is present: "older than 0.14"
FLOOR = (0, 13, 0)


class DetectError(ValueError):
    """The CRDs say nothing usable (KServe missing)."""


def crd_version_schema(crd, version=None):
    """The openAPIV3Schema of ``version`` (default: the storage version) of a CRD, or None."""
    if not isinstance(crd, dict):
        return None
    versions = (crd.get("spec") or {}).get("versions") or []
    chosen = None
    for item in versions:
        if version is not None and item.get("name") == version:
            chosen = item
            break
        if version is None and item.get("storage"):
            chosen = item
    if chosen is None and version is None and versions:
        chosen = versions[0]
    if chosen is None:
        return None
    return ((chosen.get("schema") or {}).get("openAPIV3Schema")) or None


def _served_schemas(crd, version):
    if not isinstance(crd, dict):
        return []
    out = []
    for item in (crd.get("spec") or {}).get("versions") or []:
        if item.get("served") is False:
            continue
        if version is not None and item.get("name") != version:
            continue
        schema = (item.get("schema") or {}).get("openAPIV3Schema")
        if isinstance(schema, dict):
            out.append(schema)
    return out


def schema_has_path(schema, path):
    """True when ``path`` (``a.b[].c``) is declared in a structural schema."""
    node = schema
    for part in path.split("."):
        is_list = part.endswith("[]")
        key = part[:-2] if is_list else part
        if not isinstance(node, dict):
            return False
        props = node.get("properties")
        if not isinstance(props, dict) or key not in props:
            return False
        node = props[key]
        if is_list:
            node = node.get("items") if isinstance(node, dict) else None
    return isinstance(node, dict)


def detect(crds):
    """Range of KServe releases that fits the CRDs.

    ``crds``: mapping of CRD name to the CRD object (None or missing when absent).
    Returns ``{min, max, exact, range, markers, crds}``: ``min`` and ``max`` as version strings
    (``max`` exclusive, None when open), ``exact`` true when the range holds one minor release,
    ``markers`` the evidence (``{release, crd, path, present}``), ``crds`` which CRDs were seen.
    Raises DetectError without an InferenceService CRD.
    """
    crds = crds or {}
    if not isinstance(crds.get(ISVC_CRD), dict):
        raise DetectError(
            "KServe is not installed on this cluster: there is no CustomResourceDefinition %s" % ISVC_CRD
        )
    evidence = []
    present_by_release = {}
    for release, crd_name, version, path, what in MARKERS:
        crd = crds.get(crd_name)
        if not isinstance(crd, dict):
            continue  # unknown: this CRD is not installed (LLMInferenceService is optional)
        schemas = _served_schemas(crd, version)
        if path == "spec":
            present = bool(schemas)
        else:
            present = any(schema_has_path(s, path) for s in schemas)
        evidence.append(
            {
                "release": format_version(release),
                "crd": crd_name,
                "path": path,
                "what": what,
                "present": present,
            }
        )
        present_by_release[release] = present_by_release.get(release, False) or present
    lower = max([r for r, p in present_by_release.items() if p] or [FLOOR])
    upper = None
    for release in sorted(r for r in present_by_release if r > lower):
        if not present_by_release[release]:
            upper = release
            break
    exact = upper is not None and upper[:2] <= (lower[0], lower[1] + 1)
    return {
        "min": format_version(lower),
        "max": format_version(upper) if upper else None,
        "exact": exact,
        "range": _range_text(lower, upper),
        "markers": evidence,
        "crds": {name: isinstance(crds.get(name), dict) for name in (ISVC_CRD, LLMISVC_CRD, SR_CRD, CSR_CRD)},
    }


def _minor(version):
    return "%d.%d" % (version[0], version[1])


def _range_text(lower, upper):
    if lower == FLOOR:
        return "KServe <= %s" % _minor(FLOOR)
    if upper is None:
        return "KServe >= %s" % _minor(lower) if lower[2] == 0 else "KServe >= %s" % format_version(lower)
    if upper[:2] <= (lower[0], lower[1] + 1):
        return "KServe %s" % (_minor(lower) if lower[2] == 0 else format_version(lower))
    return "KServe %s to %s" % (_minor(lower), _previous_minor(upper))


def _previous_minor(version):
    return "%d.%d" % (version[0], max(0, version[1] - 1))


def effective_version(detection=None, declared=None, given=None):
    """The KServe release the validation gates use, and why.

    ``given`` (the deploy role's ``specpilot_deploy_kserve_version``) wins without question.
    Otherwise the detected range decides: the release the spec declares
    (``specpilot_kserve_version``) when it lies in the range (more precise than the range),
    else the range's lower bound, with a note saying that the declaration is wrong.
    Returns ``{version, source, note}``; ``version`` is None when nothing is known.
    """
    if given:
        return {"version": _norm(given), "source": "given", "note": None}
    declared_v = None
    bad_declared = None
    if declared:
        try:
            declared_v = parse_version(str(declared))[:3]
        except VersionError:
            bad_declared = str(declared)
    if not detection:
        if declared_v is not None:
            return {
                "version": format_version(declared_v),
                "source": "declared",
                "note": "KServe version not detected from the cluster; using specpilot_kserve_version %s"
                % declared,
            }
        return {
            "version": None,
            "source": None,
            "note": "KServe version unknown: set specpilot_kserve_version",
        }
    lower = parse_version(detection["min"])[:3]
    upper = parse_version(detection["max"])[:3] if detection.get("max") else None
    if declared_v is not None and declared_v[:2] >= lower[:2] and (upper is None or declared_v < upper):
        version = max(declared_v, lower)
        return {"version": format_version(version), "source": "declared", "note": None}
    note = None
    if declared_v is not None or bad_declared:
        note = (
            "specpilot_kserve_version %s does not match the cluster, whose CRDs say %s; "
            "checking against %s" % (declared, detection["range"], format_version(lower))
        )
    return {"version": format_version(lower), "source": "detected", "note": note}


def _norm(value):
    try:
        return format_version(parse_version(str(value))[:3])
    except VersionError:
        return str(value)


# ---------------------------------------------------------------- strict CRD validation
def strictify(schema):
    """A copy of a structural schema with ``additionalProperties: false`` wherever properties are
    declared and unknown fields are not preserved: what ``kubectl --validate=strict`` enforces.
    ``metadata`` stays open (the apiserver validates it, not the CRD)."""
    out = copy.deepcopy(schema)
    _strictify(out, top=True)
    return out


def _strictify(node, top=False):
    if isinstance(node, dict):
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for key, value in node.items():
            if top and key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    if name != "metadata":
                        _strictify(sub)
                continue
            _strictify(value)
    elif isinstance(node, list):
        for item in node:
            _strictify(item)


def _path_text(parts):
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += "[%d]" % part
        else:
            out += ("." if out else "") + str(part)
    return out


def strict_errors(schema, manifest, limit=50):
    """Problems of ``manifest`` against the strictified ``schema``: ``[{path, message}]``."""
    from jsonschema import Draft7Validator  # requirements.txt; imported here to keep import cheap

    validator = Draft7Validator(strictify(schema))
    document = json.loads(json.dumps(manifest))
    errors = []
    for error in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path))):
        errors.append({"path": _path_text(error.absolute_path), "message": error.message})
        if len(errors) >= limit:
            break
    return errors


def pruned_paths(desired, stored, path=""):
    """Paths set in ``desired`` that the apiserver's answer (``stored``, e.g. a server-side dry
    run) no longer holds: fields its CRD schema does not declare, pruned silently.  Values that
    differ are not reported (defaulting and normalisation change values, never drop keys)."""
    if isinstance(desired, dict):
        if not isinstance(stored, dict):
            return [path or "."] if desired else []
        return key_paths(desired, stored, path, pruned_paths)
    out = []
    if isinstance(desired, list) and isinstance(stored, list):
        for index, value in enumerate(desired):
            if index < len(stored):
                out.extend(pruned_paths(value, stored[index], "%s[%d]" % (path, index)))
            else:
                out.append("%s[%d]" % (path, index))
    return out
