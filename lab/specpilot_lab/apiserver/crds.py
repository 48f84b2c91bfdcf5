"""CustomResourceDefinitions: defaulting, validation, status, and the resource types they serve."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Callable

from .errors import FieldErr
from .resources import ResourceType, version_priority

CRD_GR = ("apiextensions.k8s.io", "customresourcedefinitions")
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_KIND = re.compile(r"^[A-Za-z]([-A-Za-z0-9]*[A-Za-z0-9])?$")


def apply_defaults(crd: dict) -> None:
    spec = crd.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    names = spec.setdefault("names", {})
    if isinstance(names, dict) and names.get("kind"):
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", f"{names['kind']}List")
    conv = spec.setdefault("conversion", {})
    if isinstance(conv, dict):
        conv.setdefault("strategy", "None")
    if "preserveUnknownFields" in spec and spec["preserveUnknownFields"] is None:
        del spec["preserveUnknownFields"]


def validate(crd: dict, old: dict | None, compile_schema: Callable[[dict], Any]) -> list[FieldErr]:
    errs: list[FieldErr] = []
    md = crd.get("metadata") or {}
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [FieldErr("Required", "spec")]
    group = spec.get("group") or ""
    names = spec.get("names") or {}
    plural = names.get("plural") or ""
    if not group:
        errs.append(FieldErr("Required", "spec.group"))
    elif "." not in group:
        errs.append(
            FieldErr("Invalid", "spec.group", "should be a domain with at least one dot", group, True)
        )
    elif not _DNS_SUBDOMAIN.match(group):
        errs.append(
            FieldErr(
                "Invalid",
                "spec.group",
                "a lowercase RFC 1123 subdomain must consist of lower "
                "case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
                group,
                True,
            )
        )
    if md.get("name") and plural and group and md["name"] != f"{plural}.{group}":
        errs.append(
            FieldErr("Invalid", "metadata.name", 'must be spec.names.plural+"."+spec.group', md["name"], True)
        )
    if not plural:
        errs.append(FieldErr("Required", "spec.names.plural"))
    elif not _DNS_1035.match(plural):
        errs.append(
            FieldErr(
                "Invalid",
                "spec.names.plural",
                "a DNS-1035 label must consist of lower case "
                "alphanumeric characters or '-', start with an alphabetic character, and end "
                "with an alphanumeric character",
                plural,
                True,
            )
        )
    for key in ("singular",):
        v = names.get(key)
        if v and not _DNS_1035.match(v):
            errs.append(
                FieldErr(
                    "Invalid",
                    f"spec.names.{key}",
                    "a DNS-1035 label must consist of lower "
                    "case alphanumeric characters or '-', start with an alphabetic character, and "
                    "end with an alphanumeric character",
                    v,
                    True,
                )
            )
    kind = names.get("kind") or ""
    if not kind:
        errs.append(FieldErr("Required", "spec.names.kind"))
    elif not _KIND.match(kind):
        errs.append(
            FieldErr(
                "Invalid",
                "spec.names.kind",
                "may have mixed case, but should otherwise " "match: [a-z]([-a-z0-9]*[a-z0-9])?",
                kind,
                True,
            )
        )
    for i, sn in enumerate(names.get("shortNames") or []):
        if not isinstance(sn, str) or not _DNS_1035.match(sn):
            errs.append(
                FieldErr(
                    "Invalid",
                    f"spec.names.shortNames[{i}]",
                    "a DNS-1035 label must consist of " "lower case alphanumeric characters or '-'",
                    sn,
                    True,
                )
            )
    scope = spec.get("scope")
    if not scope:
        errs.append(FieldErr("Required", "spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        errs.append(
            FieldErr("NotSupported", "spec.scope", 'supported values: "Cluster", "Namespaced"', scope, True)
        )
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        errs.append(
            FieldErr(
                "Invalid",
                "spec.versions",
                "must have exactly one version marked as storage " "version",
                versions,
                True,
            )
        )
        versions = []
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if versions and len(storage) != 1:
        errs.append(
            FieldErr(
                "Invalid",
                "spec.versions",
                "must have exactly one version marked as storage " "version",
                [v.get("name") for v in storage],
                True,
            )
        )
    if versions and not any(isinstance(v, dict) and v.get("served") for v in versions):
        errs.append(
            FieldErr(
                "Invalid",
                "spec.versions",
                "must have at least one served version",
                [v.get("name") for v in versions if isinstance(v, dict)],
                True,
            )
        )
    seen: set[str] = set()
    for i, v in enumerate(versions):
        p = f"spec.versions[{i}]"
        if not isinstance(v, dict):
            errs.append(FieldErr("Invalid", p, "must be an object", v, True))
            continue
        name = v.get("name") or ""
        if not name:
            errs.append(FieldErr("Required", f"{p}.name"))
        elif name in seen:
            errs.append(FieldErr("Invalid", "spec.versions", "must contain unique version names", name, True))
        seen.add(name)
        for flag in ("served", "storage"):
            if flag not in v:
                errs.append(FieldErr("Required", f"{p}.{flag}"))
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            errs.append(FieldErr("Required", f"{p}.schema.openAPIV3Schema", "schemas are required"))
        elif not isinstance(schema, dict):
            errs.append(FieldErr("Invalid", f"{p}.schema.openAPIV3Schema", "must be an object", schema, True))
        else:
            if schema.get("type") != "object":
                errs.append(
                    FieldErr("Required", f"{p}.schema.openAPIV3Schema.type", "must not be empty at the root")
                )
            try:
                compile_schema(schema)
            except Exception as exc:  # the schema compiler's own message says what is wrong
                errs.append(FieldErr("Invalid", f"{p}.schema.openAPIV3Schema", str(exc), None, False))
        for j, c in enumerate(v.get("additionalPrinterColumns") or []):
            cp = f"{p}.additionalPrinterColumns[{j}]"
            if not isinstance(c, dict):
                continue
            for req in ("name", "type", "jsonPath"):
                if not c.get(req):
                    errs.append(FieldErr("Required", f"{cp}.{req}"))
            if c.get("type") and c["type"] not in ("integer", "number", "string", "boolean", "date"):
                errs.append(
                    FieldErr(
                        "NotSupported",
                        f"{cp}.type",
                        'supported values: "boolean", "date", ' '"integer", "number", "string"',
                        c["type"],
                        True,
                    )
                )
    if old is not None:
        ospec = old.get("spec") or {}
        if group and group != ospec.get("group"):
            errs.append(FieldErr("Invalid", "spec.group", "field is immutable", group, True))
        if scope and scope != ospec.get("scope"):
            errs.append(FieldErr("Invalid", "spec.scope", "field is immutable", scope, True))
    return errs


def accepted_names(crd: dict) -> dict:
    names = dict((crd.get("spec") or {}).get("names") or {})
    return {
        k: names[k]
        for k in ("categories", "kind", "listKind", "plural", "shortNames", "singular")
        if k in names
    }


def condition(ctype: str, status: str, reason: str, message: str, when: str) -> dict:
    return {"lastTransitionTime": when, "message": message, "reason": reason, "status": status, "type": ctype}


def established_status(crd: dict, old_status: dict | None, when: str) -> dict:
    """What the CRD controllers (naming, establishing) write into status."""
    old_status = old_status or {}
    spec = crd.get("spec") or {}
    storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), None)
    stored = list(old_status.get("storedVersions") or [])
    if storage and storage not in stored:
        stored.append(storage)
    old_conds = {c.get("type"): c for c in old_status.get("conditions") or []}

    def keep(c: dict) -> dict:
        prev = old_conds.get(c["type"])
        if prev and prev.get("status") == c["status"]:
            c["lastTransitionTime"] = prev.get("lastTransitionTime", when)
        return c

    conds = [
        keep(condition("NamesAccepted", "True", "NoConflicts", "no conflicts found", when)),
        keep(
            condition(
                "Established", "True", "InitialNamesAccepted", "the initial names have been accepted", when
            )
        ),
    ]
    return {"acceptedNames": accepted_names(crd), "conditions": conds, "storedVersions": stored}


def terminating_status(status: dict | None, when: str) -> dict:
    st = dict(status or {})
    conds = [c for c in st.get("conditions") or [] if c.get("type") != "Terminating"]
    conds.append(
        condition(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            when,
        )
    )
    st["conditions"] = conds
    return st


def schema_key(schema: dict) -> str:
    return hashlib.sha256(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def resource_types(crd: dict, compile_schema: Callable[[dict], Any]) -> list[ResourceType]:
    """One ResourceType per served version, preferred version first."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for v in spec.get("versions") or []:
        if not v.get("served"):
            continue
        schema_doc = (v.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"}
        subs: dict[str, list[str]] = {}
        sr = v.get("subresources") or {}
        if "status" in sr:
            subs["status"] = ["get", "patch", "update"]
        if "scale" in sr:
            subs["scale"] = ["get", "patch", "update"]
        rt = ResourceType(
            group=spec.get("group", ""),
            version=v["name"],
            plural=names.get("plural", ""),
            kind=names.get("kind", ""),
            namespaced=spec.get("scope") == "Namespaced",
            singular=names.get("singular") or str(names.get("kind", "")).lower(),
            short_names=list(names.get("shortNames") or []),
            categories=list(names.get("categories") or []),
            subresources=subs,
            has_generation=True,
            return_deleted_object=True,
            crd_name=(crd.get("metadata") or {}).get("name"),
            schema=compile_schema(schema_doc),
            printer_columns=v.get("additionalPrinterColumns"),
            preserve_unknown_root=bool(schema_doc.get("x-kubernetes-preserve-unknown-fields")),
            served=True,
            storage=bool(v.get("storage")),
            deprecated=bool(v.get("deprecated")),
            deprecation_warning=v.get("deprecationWarning"),
        )
        if "scale" in sr:
            sc = sr["scale"] or {}
            rt.scale_paths = {
                "spec": (sc.get("specReplicasPath") or ".spec.replicas").lstrip("."),
                "status": (sc.get("statusReplicasPath") or ".status.replicas").lstrip("."),
            }
        out.append(rt)
    out.sort(key=lambda r: version_priority(r.version), reverse=True)
    return out
