"""OpenAPI documents: /openapi/v2 (JSON or gnostic protobuf) and /openapi/v3.

The emulator publishes paths, not schemas: every served kind gets its PATCH operation with
the ``x-kubernetes-group-version-kind`` extension and the dryRun/fieldManager/fieldValidation
query parameters, as a real server does.  kubectl reads these to decide that server-side
dry-run and field validation are supported; with no ``definitions`` kubectl's client-side
validation and OpenAPI-driven patching skip every kind (it falls back to its compiled-in
types for strategic merge, and to JSON merge patch for custom resources).
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable

from . import KUBE_VERSION
from .resources import ResourceType

QUERY_PARAMS = [
    (
        "dryRun",
        "When present, indicates that modifications should not be persisted. An invalid or "
        "unrecognized dryRun directive will result in an error response and no further processing "
        "of the request. Valid values are: - All: all dry run stages will be processed",
    ),
    (
        "fieldManager",
        "fieldManager is a name associated with the actor or entity that is making these " "changes.",
    ),
    (
        "fieldValidation",
        "fieldValidation instructs the server on how to handle objects in the request "
        "(POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, "
        "Warn, Strict.",
    ),
    ("force", 'Force is going to "force" Apply requests.'),
    ("pretty", "If 'true', then the output is pretty printed."),
]


def _path_for(rt: ResourceType) -> str:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    if rt.namespaced:
        return f"{prefix}/namespaces/{{namespace}}/{rt.plural}/{{name}}"
    return f"{prefix}/{rt.plural}/{{name}}"


def _gvk(rt: ResourceType) -> dict:
    return {"group": rt.group, "kind": rt.kind, "version": rt.version}


# ----------------------------------------------------------------------------- protobuf wire format
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint((field << 3) | 2) + _varint(len(payload)) + payload


def _str(field: int, value: str) -> bytes:
    return _ld(field, value.encode("utf-8"))


def _bool(field: int, value: bool) -> bytes:
    return _varint(field << 3) + _varint(1 if value else 0)


def _query_param(name: str, description: str) -> bytes:
    # QueryParameterSubSchema: required=1 in=2 description=3 name=4 type=6 unique_items=20
    sub = _str(2, "query") + _str(3, description) + _str(4, name) + _str(6, "string")
    if name == "dryRun":
        sub += _bool(20, True)
    non_body = _ld(3, sub)  # NonBodyParameter.query_parameter_sub_schema = 3
    parameter = _ld(2, non_body)  # Parameter.non_body_parameter = 2
    return _ld(1, parameter)  # ParametersItem.parameter = 1


def _named_any_yaml(name: str, yaml_text: str) -> bytes:
    any_msg = _str(2, yaml_text)  # Any.yaml = 2
    return _str(1, name) + _ld(2, any_msg)


def _operation(rt: ResourceType, action: str, op_id: str) -> bytes:
    # Operation: tags=1 description=3 operation_id=5 produces=6 consumes=7 parameters=8
    # vendor_extension=13
    op = _str(1, (rt.group or "core").replace(".", "_") + "_" + rt.version)
    op += _str(3, f"{action} the specified {rt.kind}")
    op += _str(5, op_id)
    for p in ("application/json", "application/yaml"):
        op += _str(6, p)
    if action == "partially update":
        consumes = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
        if not rt.is_custom:
            consumes.insert(2, "application/strategic-merge-patch+json")
        for c in consumes:
            op += _str(7, c)
    for name, desc in QUERY_PARAMS:
        op += _ld(8, _query_param(name, desc))
    gvk_yaml = f"group: {json.dumps(rt.group)}\nkind: {rt.kind}\nversion: {rt.version}\n"
    op += _ld(
        13, _named_any_yaml("x-kubernetes-action", "patch\n" if action == "partially update" else "put\n")
    )
    op += _ld(13, _named_any_yaml("x-kubernetes-group-version-kind", gvk_yaml))
    return op


def openapi_v2_protobuf(resources: Iterable[ResourceType]) -> bytes:
    info = _str(1, "Kubernetes") + _str(2, KUBE_VERSION)
    paths = b""
    for rt in resources:
        item = _ld(3, _operation(rt, "replace", f"replace{rt.kind}"))  # PathItem.put = 3
        item += _ld(8, _operation(rt, "partially update", f"patch{rt.kind}"))  # PathItem.patch = 8
        named = _str(1, _path_for(rt)) + _ld(2, item)  # NamedPathItem
        paths += _ld(2, named)  # Paths.path = 2
    doc = _str(1, "2.0") + _ld(2, info) + _ld(8, paths)  # Document
    return doc


def _json_params() -> list[dict]:
    return [
        {"uniqueItems": True, "type": "string", "description": d, "name": n, "in": "query"}
        for n, d in QUERY_PARAMS
    ]


def openapi_v2_json(resources: Iterable[ResourceType]) -> dict:
    paths = {}
    for rt in resources:
        gvk = _gvk(rt)
        patch_consumes = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
        if not rt.is_custom:
            patch_consumes.insert(2, "application/strategic-merge-patch+json")
        paths[_path_for(rt)] = {
            "put": {
                "description": f"replace the specified {rt.kind}",
                "operationId": f"replace{rt.kind}",
                "consumes": ["*/*"],
                "produces": ["application/json", "application/yaml"],
                "parameters": _json_params(),
                "x-kubernetes-action": "put",
                "x-kubernetes-group-version-kind": gvk,
                "responses": {"200": {"description": "OK"}},
            },
            "patch": {
                "description": f"partially update the specified {rt.kind}",
                "operationId": f"patch{rt.kind}",
                "consumes": patch_consumes,
                "produces": ["application/json", "application/yaml"],
                "parameters": _json_params(),
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "responses": {"200": {"description": "OK"}},
            },
        }
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": KUBE_VERSION},
        "paths": paths,
        "definitions": {},
    }


# ----------------------------------------------------------------------------- v3
def gv_key(rt: ResourceType) -> str:
    return f"apis/{rt.group}/{rt.version}" if rt.group else f"api/{rt.version}"


def openapi_v3_docs(resources: Iterable[ResourceType]) -> dict[str, bytes]:
    """Serialised OpenAPI v3 document per group-version key ("api/v1", "apis/apps/v1")."""
    by_gv: dict[str, dict] = {}
    for rt in resources:
        doc = by_gv.setdefault(
            gv_key(rt),
            {
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": KUBE_VERSION},
                "paths": {},
                "components": {"schemas": {}},
            },
        )
        params = [
            {"name": n, "in": "query", "description": d, "schema": {"type": "string", "uniqueItems": True}}
            for n, d in QUERY_PARAMS
        ]
        # No strategic-merge-patch+json here on purpose: kubectl then computes its apply patch the
        # classic way (compiled-in types, JSON merge patch for custom resources).
        content = {
            t: {"schema": {"type": "object"}}
            for t in (
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            )
        }
        doc["paths"][_path_for(rt)] = {
            "put": {
                "description": f"replace the specified {rt.kind}",
                "operationId": f"replace{rt.kind}",
                "parameters": params,
                "requestBody": {"content": {"*/*": {"schema": {"type": "object"}}}, "required": True},
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "put",
                "x-kubernetes-group-version-kind": _gvk(rt),
            },
            "patch": {
                "description": f"partially update the specified {rt.kind}",
                "operationId": f"patch{rt.kind}",
                "parameters": params,
                "requestBody": {"content": content, "required": True},
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": _gvk(rt),
            },
        }
    return {k: json.dumps(v, separators=(",", ":")).encode() for k, v in by_gv.items()}


def openapi_v3_index(docs: dict[str, bytes]) -> dict:
    paths = {}
    for key, body in sorted(docs.items()):
        h = hashlib.sha512(body).hexdigest()[:128].upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={h}"}
    return {"paths": paths}
