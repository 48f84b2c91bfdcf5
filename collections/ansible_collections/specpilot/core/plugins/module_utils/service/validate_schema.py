# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The JSON Schema phase of validate(): the schemas (built in, or exported files for the schema_dir option)
and each schema error as a finding with the variable path and a fix."""

from __future__ import annotations

import difflib
import json
import os

from ansible_collections.specpilot.core.plugins.module_utils.report.findings import path_join

try:
    from jsonschema import Draft202012Validator

    HAS_JSONSCHEMA = True
except ImportError:  # pragma: no cover
    Draft202012Validator = None
    HAS_JSONSCHEMA = False

_SERVICE_VALIDATORS = {}


def load_schemas(schema_dir):
    """(service schema, profile index, loader) from exported files, for the schema_dir option."""
    with open(os.path.join(schema_dir, "service.schema.json")) as handle:
        service = json.load(handle)
    spec_dir = os.path.join(schema_dir, "speculative")
    with open(os.path.join(spec_dir, "index.json")) as handle:
        index = json.load(handle)
    cache = {}

    def loader(name):
        if name not in cache:
            with open(os.path.join(spec_dir, name)) as handle:
                cache[name] = json.load(handle)
        return cache[name]

    return service, index, loader


def _service_validator(schema):
    key = id(schema)
    validator = _SERVICE_VALIDATORS.get(key)
    if validator is None:
        validator = Draft202012Validator(schema)
        _SERVICE_VALIDATORS[key] = (validator, schema)
        return validator
    return validator[0]


def _unknown_keys(error, path, schema, findings):
    parent = _schema_at(schema, list(error.absolute_schema_path)[:-1])
    known = sorted((parent or {}).get("properties", {}))
    extra = [k for k in error.instance if k not in known] if isinstance(error.instance, dict) else []
    for key in extra:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        findings.error(
            path_join(path, key),
            "unknown key '%s'%s" % (key, " in " + path if path else ""),
            ("did you mean '%s'?" % close[0]) if close else "known keys: %s" % ", ".join(known),
            "unknown-spec-key",
        )
    return True


def _required_keys(error, path, schema, findings):
    props = schema.get("properties", {})
    missing = [k for k in error.validator_value if k not in (error.instance or {})]
    for key in missing:
        desc = (props.get(key, {}) if not path else {}).get("description", "")
        findings.error(
            path_join(path, key),
            "%s is required" % path_join(path, key),
            desc.split(".")[0] if desc else "set it",
            "required",
        )
    return True


def _pattern_mismatch(error, path, schema, findings):
    if not isinstance(error.instance, str):
        return False
    findings.error(
        path,
        "%s=%r does not match %s" % (path, error.instance, error.validator_value),
        _pattern_hint(path),
        "pattern",
    )
    return True


def _version_number(error, path, schema, findings):
    if not (isinstance(error.instance, float) and path.endswith("_version")):
        return False
    findings.error(
        path,
        "%s=%r is a number: YAML reads an unquoted 0.20 as 0.2" % (path, error.instance),
        'quote the version, e.g. "0.20"',
        "version-not-string",
    )
    return True


def _draft_alternatives(error, path, schema, findings):
    """The draft is an object or null: report what is wrong with the object, not that it is not null."""
    if path != "draft":
        return False
    for sub in sorted(error.context or [], key=lambda e: list(e.absolute_path)):
        if sub.validator == "type" and sub.validator_value == "null":
            continue
        _schema_errors_single(sub, path, findings)
    return True


# validator -> the report of its errors that says more than the generic one (False: not this error)
_SCHEMA_REPORTS = {
    "additionalProperties": _unknown_keys,
    "required": _required_keys,
    "pattern": _pattern_mismatch,
    "type": _version_number,
    "anyOf": _draft_alternatives,
}


def _schema_errors(spec, schema, findings):
    for error in sorted(_service_validator(schema).iter_errors(spec), key=lambda e: list(e.absolute_path)):
        path = path_join("", *list(error.absolute_path))
        report = _SCHEMA_REPORTS.get(error.validator)
        if report is None or not report(error, path, schema, findings):
            _schema_errors_single(error, "", findings)


def _schema_errors_single(error, base, findings):
    path = path_join(base, *list(error.relative_path)) if base else path_join("", *list(error.absolute_path))
    if error.validator == "additionalProperties":
        for key in error.instance if isinstance(error.instance, dict) else []:
            if key not in error.schema.get("properties", {}):
                findings.error(
                    path_join(path, key),
                    "unknown key '%s' in %s" % (key, path),
                    "known keys: %s" % ", ".join(sorted(error.schema.get("properties", {}))),
                    "unknown-spec-key",
                )
        return
    findings.error(
        path,
        "%s: %s" % (path or "spec", error.message),
        "see schemas/service.schema.json (%s)" % (path or "spec"),
        "schema-" + str(error.validator),
    )


def _schema_at(schema, parts):
    node = schema
    for part in parts:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int):
            node = node[part]
    return node if isinstance(node, dict) else None


def _pattern_hint(path):
    if path in ("name", "namespace") or path.endswith("name"):
        return (
            "a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit"
        )
    if path.endswith("_version"):
        return 'a version string such as "0.20" or "0.19.1"'
    if path.endswith("image_digest"):
        return "sha256: followed by 64 lower-case hex digits (stage.yml prints it)"
    return "fix the value"
