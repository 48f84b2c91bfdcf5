"""ObjectMeta validation (names, labels, annotations, finalizers, ownerReferences)."""

from __future__ import annotations

import re

from .errors import FieldErr
from .resources import ResourceType
from .selection import label_key_error, label_value_error

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)

TOTAL_ANNOTATION_SIZE_LIMIT = 262144
MAX_GENERATED_NAME_BASE = 58  # 63 - 5 random characters


def name_kind(rt: ResourceType) -> str:
    gr = rt.group_resource
    if gr == ("", "namespaces"):
        return "label"
    if gr == ("", "services"):
        return "dns1035"
    if rt.group == "rbac.authorization.k8s.io":
        return "path"
    return "subdomain"


def name_errors(rt: ResourceType, name: str, field: str = "metadata.name") -> list[FieldErr]:
    kind = name_kind(rt)
    if kind == "path":
        for bad in ("/", "%"):
            if bad in name:
                return [FieldErr("Invalid", field, f"may not contain '{bad}'", name, True)]
        if name in (".", ".."):
            return [FieldErr("Invalid", field, f"may not be '{name}'", name, True)]
        return []
    if kind == "label":
        msgs = []
        if len(name) > 63:
            msgs.append("must be no more than 63 characters")
        if not _DNS_LABEL.match(name):
            msgs.append(LABEL_MSG)
    elif kind == "dns1035":
        msgs = []
        if len(name) > 63:
            msgs.append("must be no more than 63 characters")
        if not _DNS_1035.match(name):
            msgs.append(DNS1035_MSG)
    else:
        msgs = []
        if len(name) > 253:
            msgs.append("must be no more than 253 characters")
        if not _DNS_SUBDOMAIN.match(name):
            msgs.append(SUBDOMAIN_MSG)
    return [FieldErr("Invalid", field, m, name, True) for m in msgs]


def generated_name(base: str, suffix: str) -> str:
    return base[:MAX_GENERATED_NAME_BASE] + suffix


def validate_metadata(rt: ResourceType, obj: dict, old: dict | None) -> tuple[list[FieldErr], list[str]]:
    """(errors, warnings) for an object's metadata."""
    errs: list[FieldErr] = []
    warnings: list[str] = []
    md = obj.get("metadata") or {}
    name = md.get("name") or ""
    if not name:
        if md.get("generateName"):
            errs.append(FieldErr("Required", "metadata.name", "name or generateName is required"))
        else:
            errs.append(FieldErr("Required", "metadata.name", "name or generateName is required"))
    else:
        errs.extend(name_errors(rt, name))
    labels = md.get("labels") or {}
    if not isinstance(labels, dict):
        errs.append(FieldErr("Invalid", "metadata.labels", "must be a map", labels, True))
        labels = {}
    for k, v in labels.items():
        e = label_key_error(k)
        if e:
            errs.append(FieldErr("Invalid", "metadata.labels", e, k, True))
        if not isinstance(v, str):
            errs.append(FieldErr("Invalid", f"metadata.labels[{k}]", "must be a string", v, True))
            continue
        e = label_value_error(v)
        if e:
            errs.append(FieldErr("Invalid", "metadata.labels", e, v, True))
    annotations = md.get("annotations") or {}
    if not isinstance(annotations, dict):
        errs.append(FieldErr("Invalid", "metadata.annotations", "must be a map", annotations, True))
        annotations = {}
    total = 0
    for k, v in annotations.items():
        e = label_key_error(k.lower())
        if e:
            errs.append(FieldErr("Invalid", "metadata.annotations", e, k, True))
        total += len(k.encode()) + len(str(v).encode())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(
            FieldErr(
                "TooLong", "metadata.annotations", f"must have at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"
            )
        )
    finalizers = md.get("finalizers") or []
    for i, f in enumerate(finalizers):
        if not isinstance(f, str):
            errs.append(FieldErr("Invalid", f"metadata.finalizers[{i}]", "must be a string", f, True))
            continue
        e = label_key_error(f)
        if e:
            errs.append(FieldErr("Invalid", f"metadata.finalizers[{i}]", e, f, True))
        elif "/" not in f and f not in ("kubernetes", "orphan", "foregroundDeletion"):
            warnings.append(
                f'metadata.finalizers: "{f}": prefer a domain-qualified finalizer name '
                "including a path (/) to avoid accidental conflicts with other finalizer writers"
            )
    if len(set(f for f in finalizers if isinstance(f, str))) != len(finalizers):
        seen: set = set()
        for i, f in enumerate(finalizers):
            if f in seen:
                errs.append(FieldErr("Duplicate", f"metadata.finalizers[{i}]", "", f, True))
            seen.add(f)
    if old is not None and (old.get("metadata") or {}).get("deletionTimestamp"):
        old_f = set((old.get("metadata") or {}).get("finalizers") or [])
        new_f = [f for f in finalizers if f not in old_f]
        if new_f:
            errs.append(
                FieldErr(
                    "Forbidden",
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, found new "
                    "finalizers []string{" + ", ".join(f'"{f}"' for f in new_f) + "}",
                )
            )
    controllers = 0
    for i, ref in enumerate(md.get("ownerReferences") or []):
        p = "metadata.ownerReferences"
        if not isinstance(ref, dict):
            errs.append(FieldErr("Invalid", f"{p}[{i}]", "must be an object", ref, True))
            continue
        api_version = ref.get("apiVersion") or ""
        if not api_version:
            errs.append(FieldErr("Invalid", f"{p}.apiVersion", "version must not be empty", "", True))
        if not ref.get("kind"):
            errs.append(FieldErr("Invalid", f"{p}.kind", "kind must not be empty", "", True))
        if not ref.get("name"):
            errs.append(FieldErr("Invalid", f"{p}.name", "name must not be empty", "", True))
        if not ref.get("uid"):
            errs.append(FieldErr("Invalid", f"{p}.uid", "uid must not be empty", "", True))
        if ref.get("controller") is True:
            controllers += 1
    if controllers > 1:
        errs.append(
            FieldErr(
                "Invalid",
                "metadata.ownerReferences",
                "Only one reference can have Controller " "set to true",
                md.get("ownerReferences"),
                True,
            )
        )
    return errs, warnings
