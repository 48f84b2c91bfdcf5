"""Patches and server-side apply, as kube-apiserver does them.

* :func:`json_merge_patch` - RFC 7386 (``application/merge-patch+json``).
* :func:`json_patch` - RFC 6902 (``application/json-patch+json``) through the ``jsonpatch`` library,
  with the apiserver's error statuses.
* :func:`strategic_merge_patch` - a port of ``k8s.io/apimachinery/pkg/util/strategicpatch``
  (apply side: ``StrategicMergeMapPatch`` with ``MergeParallelList`` and ``IgnoreUnmatchedNulls``):
  merge keys, ``$patch`` replace/delete/merge, ``$setElementOrder/<list>``, ``$retainKeys``,
  ``$deleteFromPrimitiveList/<list>``, ``null`` deletes.
* :func:`server_side_apply` and :func:`record_update` - the field manager
  (``k8s.io/apimachinery/pkg/util/managedfields`` over ``sigs.k8s.io/structured-merge-diff``):
  ownership sets, ``metadata.managedFields`` in the FieldsV1 format, apply merge semantics of
  atomic/set/map lists and granular/atomic maps, removal of fields a manager stopped applying,
  conflicts (409) and ``force``.

Type information comes from a :class:`TypeInfo`: :func:`builtin_type_info` for built-in kinds
(patch strategies and list types taken from the Go struct tags of k8s.io/api) and
:func:`schema_type_info` for custom resources (list/map types from the CRD schema, no strategies).
Paths given to a TypeInfo are tuples of field names (and map keys); list items are skipped.
"""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any, Protocol

import jsonpatch
import jsonpointer

from .schema import OBJECT_META_TYPE, StructuralSchema, go_json, go_quote, go_value, table_node

__all__ = [
    "PatchError",
    "ApplyConflict",
    "TypeInfo",
    "json_merge_patch",
    "json_patch",
    "builtin_type_info",
    "schema_type_info",
    "deduced_type_info",
    "strategic_merge_patch",
    "server_side_apply",
    "record_update",
    "MAX_JSON_PATCH_OPERATIONS",
]

MAX_JSON_PATCH_OPERATIONS = 10000


# ============================================================================================
# errors
# ============================================================================================


class PatchError(Exception):
    """A failed patch; :meth:`status` is the v1 Status body the apiserver sends."""

    def __init__(
        self, code: int, reason: str, message: str, *, details: dict | None = None, detail: str = ""
    ):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        #: the underlying error text when the apiserver hides it behind a generic message
        self.detail = detail or message

    def status(self) -> dict:
        st: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            st["details"] = self.details
        st["code"] = self.code
        return st


class ApplyConflict(PatchError):
    """409 Conflict of server-side apply; ``conflicts`` is a list of (manager description, path)."""

    def __init__(self, message: str, causes: list[dict], conflicts: list[tuple[str, str]]):
        super().__init__(409, "Conflict", message, details={"causes": causes})
        self.conflicts = conflicts


def _bad_request(msg: str) -> PatchError:
    return PatchError(400, "BadRequest", msg)


def _generic_invalid(msg: str) -> PatchError:
    # errors.NewGenericServerResponse(422, "", GroupResource{}, "", msg, 0, false)
    return PatchError(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
        details={},
        detail=msg,
    )


def _unknown(msg: str) -> PatchError:
    # a plain Go error reaching the handler: ErrorToAPIStatus -> 500, reason Unknown
    return PatchError(500, "Unknown", msg)


# ============================================================================================
# JSON merge patch / JSON patch
# ============================================================================================


def json_merge_patch(target: dict, patch: dict) -> dict:
    """RFC 7386 merge patch; returns a new object (``target`` is not modified)."""
    if not isinstance(patch, dict):
        if isinstance(patch, list):
            raise _bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
        raise _bad_request("Invalid JSON Patch")
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    _merge_docs(out, patch)
    return out


def _merge_docs(doc: dict, patch: dict) -> None:
    for k, v in patch.items():
        if v is None:
            doc.pop(k, None)
        elif isinstance(v, dict) and isinstance(doc.get(k), dict):
            _merge_docs(doc[k], v)
        else:
            doc[k] = _prune_nulls_deep(copy.deepcopy(v))


def _prune_nulls_deep(v: Any) -> Any:
    if isinstance(v, dict):
        for k in [k for k, x in v.items() if x is None]:
            del v[k]
        for x in v.values():
            _prune_nulls_deep(x)
    elif isinstance(v, list):
        for x in v:
            _prune_nulls_deep(x)
    return v


def json_patch(target: dict, ops: list) -> dict:
    """RFC 6902 JSON patch; returns a new object. Failures raise :class:`PatchError` like the
    apiserver: 400 for a body that is not a list of operations, 413 above 10000 operations, 422 with
    the generic message for an operation that does not apply (failed ``test``, missing path, ...)."""
    if not isinstance(ops, list):
        t = "object" if isinstance(ops, dict) else "string" if isinstance(ops, str) else "number"
        raise _bad_request(f"json: cannot unmarshal {t} into Go value of type jsonpatch.Patch")
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise PatchError(
            413,
            "RequestEntityTooLarge",
            f"Request entity too large: The allowed maximum operations in a JSON patch is "
            f"{MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}",
        )
    for op in ops:
        if not isinstance(op, dict):
            t = "array" if isinstance(op, list) else "string" if isinstance(op, str) else "number"
            if op is None or isinstance(op, bool):
                t = "bool" if isinstance(op, bool) else "null"
            if op is None:
                continue  # json.Unmarshal leaves a null operation empty; it fails when applied
            raise _bad_request(f"json: cannot unmarshal {t} into Go value of type jsonpatch.Operation")
    try:
        return jsonpatch.JsonPatch(ops).apply(copy.deepcopy(target), in_place=True)
    except jsonpatch.JsonPatchTestFailed as e:
        raise _generic_invalid(f"testing value failed: {e}") from None
    except (
        jsonpatch.JsonPatchException,
        jsonpointer.JsonPointerException,
        KeyError,
        IndexError,
        TypeError,
    ) as e:
        raise _generic_invalid(str(e)) from None


# ============================================================================================
# type information
# ============================================================================================


class TypeInfo(Protocol):
    """What the patch algorithms need to know about a kind. Paths are tuples of field names
    (list items skipped, map keys included)."""

    def list_type(self, path: tuple[str, ...]) -> tuple[str, tuple[str, ...]]: ...

    def patch_strategy(self, path: tuple[str, ...]) -> tuple[str | None, str | None]: ...

    # Optional (defaults: "granular", declared-field heuristics, None, {}):
    #   map_type(path) -> "granular" | "atomic"
    #   is_field(path) -> bool   (path[-1] is a declared struct field, not a map key)
    #   key_default(path, key) -> default of a list-map key field
    #   skeleton() -> dict        (the fields an empty typed object of the kind always has)


class _TableTypeInfo:
    """Type information from a table: a tree of field names whose nodes may carry
    ``@list`` (list_type, keys), ``@patch`` (strategy, merge key), ``@map`` ("atomic"),
    ``@elem`` (node of the values of a string-keyed map) and ``@keydefaults``."""

    def __init__(self, root: dict, skeleton: dict | None = None, deduced: bool = False):
        self._root = root
        self._skeleton = skeleton or {}
        self._deduced = deduced
        self._cache: dict[tuple, tuple[dict | None, bool]] = {}

    def _lookup(self, path: tuple[str, ...]) -> tuple[dict | None, bool]:
        hit = self._cache.get(path)
        if hit is None:
            if self._deduced and path and path[0] != "metadata":
                hit = (None, path[0] in ("apiVersion", "kind") and len(path) == 1)
            else:
                hit = table_node(self._root, path)
            self._cache[path] = hit
        return hit

    def list_type(self, path):
        node, _ = self._lookup(tuple(path))
        lt = node.get("@list") if node else None
        return lt if lt else ("atomic", ())

    def patch_strategy(self, path):
        node, _ = self._lookup(tuple(path))
        ps = node.get("@patch") if node else None
        return ps if ps else (None, None)

    def map_type(self, path):
        node, _ = self._lookup(tuple(path))
        return "atomic" if node and node.get("@map") == "atomic" else "granular"

    def is_field(self, path):
        if not path:
            return False
        _, named = self._lookup(tuple(path))
        return named

    def key_default(self, path, key):
        node, _ = self._lookup(tuple(path))
        return ((node or {}).get("@keydefaults") or {}).get(key)

    def skeleton(self):
        return copy.deepcopy(self._skeleton)


class _SchemaTypeInfo:
    """Type information of a custom resource, from its structural schema."""

    def __init__(self, schema: StructuralSchema):
        self.schema = schema

    def list_type(self, path):
        return self.schema.list_type(tuple(path))

    def patch_strategy(self, path):
        return (None, None)

    def map_type(self, path):
        return self.schema.map_type(tuple(path))

    def is_field(self, path):
        return self.schema.is_field(tuple(path))

    def key_default(self, path, key):
        return self.schema.key_default(tuple(path), key)

    def skeleton(self):
        return {}


def schema_type_info(schema: StructuralSchema) -> TypeInfo:
    """TypeInfo of a custom resource (no strategic-merge strategies; the server answers 415 to
    strategic merge patches of custom resources)."""
    return _SchemaTypeInfo(schema)


def deduced_type_info() -> TypeInfo:
    """TypeInfo for objects without a schema: maps granular, lists atomic (SMD's deduced type),
    ``metadata`` typed as ObjectMeta."""
    return _TableTypeInfo({"metadata": OBJECT_META_TYPE}, {}, deduced=True)


# ---- built-in kinds (from the struct tags of k8s.io/api) ------------------------------------

_ATOMIC_LIST = {"@list": ("atomic", ())}
_MAP = {"@elem": {}}
_ATOMIC_MAP = {"@elem": {}, "@map": "atomic"}
_ATOMIC_STRUCT = {"@map": "atomic"}
_RESOURCES = {"limits": _MAP, "requests": _MAP, "claims": {"@list": ("map", ("name",))}}


def _mlist(keys: tuple[str, ...], merge_key: str | None = None, strategy: str = "merge", **children) -> dict:
    node = {"@list": ("map", keys), "@patch": (strategy, merge_key or keys[0])}
    node.update(children)
    return node


_CONDITIONS = _mlist(("type",))
_CONTAINER = {
    "ports": _mlist(("containerPort", "protocol"), "containerPort", **{"@keydefaults": {"protocol": "TCP"}}),
    "env": _mlist(
        ("name",),
        valueFrom={
            "configMapKeyRef": _ATOMIC_STRUCT,
            "secretKeyRef": _ATOMIC_STRUCT,
            "fieldRef": _ATOMIC_STRUCT,
            "resourceFieldRef": _ATOMIC_STRUCT,
            "fileKeyRef": _ATOMIC_STRUCT,
        },
    ),
    "envFrom": {"@list": ("atomic", ())},
    "resources": _RESOURCES,
    "volumeMounts": _mlist(("mountPath",)),
    "volumeDevices": _mlist(("devicePath",)),
    "resizePolicy": _ATOMIC_LIST,
}
_POD_SPEC = {
    "volumes": _mlist(
        ("name",),
        strategy="merge,retainKeys",
        configMap=_ATOMIC_STRUCT,
        csi={"volumeAttributes": _MAP, "nodePublishSecretRef": _ATOMIC_STRUCT},
        flexVolume={"options": _MAP},
        persistentVolumeClaim={},
        emptyDir={},
    ),
    "initContainers": _mlist(("name",), **_CONTAINER),
    "containers": _mlist(("name",), **_CONTAINER),
    "ephemeralContainers": _mlist(("name",), **_CONTAINER),
    "imagePullSecrets": _mlist(("name",)),
    "hostAliases": _mlist(("ip",)),
    "topologySpreadConstraints": _mlist(
        ("topologyKey", "whenUnsatisfiable"), "topologyKey", labelSelector=_ATOMIC_STRUCT
    ),
    "resourceClaims": _mlist(("name",), strategy="merge,retainKeys"),
    "schedulingGates": _mlist(("name",)),
    "tolerations": _ATOMIC_LIST,
    "readinessGates": _ATOMIC_LIST,
    "nodeSelector": _ATOMIC_MAP,
    "overhead": _MAP,
    "resources": _RESOURCES,
}
_POD_STATUS = {
    "conditions": _CONDITIONS,
    "podIPs": _mlist(("ip",)),
    "hostIPs": {"@list": ("atomic", ()), "@patch": ("merge", "ip")},
    "resourceClaimStatuses": _mlist(("name",), strategy="merge,retainKeys"),
}
_POD_TEMPLATE = {"metadata": OBJECT_META_TYPE, "spec": _POD_SPEC}
_WORKLOAD_STATUS = {"conditions": _CONDITIONS}
_JOB_SPEC = {"selector": _ATOMIC_STRUCT, "template": _POD_TEMPLATE}

_BUILTIN_TABLES: dict[tuple[str, str], dict] = {
    ("", "Pod"): {"spec": _POD_SPEC, "status": _POD_STATUS},
    ("", "PodTemplate"): {"template": _POD_TEMPLATE},
    ("", "ReplicationController"): {
        "spec": {"template": _POD_TEMPLATE, "selector": _ATOMIC_MAP},
        "status": _WORKLOAD_STATUS,
    },
    ("", "Service"): {
        "spec": {
            "ports": _mlist(("port", "protocol"), "port", **{"@keydefaults": {"protocol": "TCP"}}),
            "selector": _ATOMIC_MAP,
        },
        "status": {"conditions": _CONDITIONS},
    },
    ("", "ConfigMap"): {"data": _MAP, "binaryData": _MAP},
    ("", "Secret"): {"data": _MAP, "stringData": _MAP},
    ("", "Namespace"): {"status": {"conditions": _CONDITIONS}},
    ("", "Node"): {
        "spec": {"podCIDRs": {"@list": ("set", ()), "@patch": ("merge", None)}},
        "status": {
            "conditions": _CONDITIONS,
            "addresses": {"@list": ("atomic", ()), "@patch": ("merge", "type")},
            "capacity": _MAP,
            "allocatable": _MAP,
        },
    },
    ("", "PersistentVolumeClaim"): {
        "spec": {"resources": {"limits": _MAP, "requests": _MAP}, "selector": _ATOMIC_STRUCT},
        "status": {"conditions": _CONDITIONS, "capacity": _MAP, "allocatedResources": _MAP},
    },
    ("", "PersistentVolume"): {"spec": {"capacity": _MAP, "claimRef": _ATOMIC_STRUCT}},
    ("", "Event"): {"involvedObject": _ATOMIC_STRUCT, "related": _ATOMIC_STRUCT},
    ("", "ServiceAccount"): {"secrets": _mlist(("name",))},
    ("", "Endpoints"): {},
    ("", "LimitRange"): {},
    ("", "ResourceQuota"): {"spec": {"hard": _MAP}, "status": {"hard": _MAP, "used": _MAP}},
    ("apps", "Deployment"): {
        "spec": {
            "selector": _ATOMIC_STRUCT,
            "template": _POD_TEMPLATE,
            "strategy": {"@patch": ("retainKeys", None)},
        },
        "status": _WORKLOAD_STATUS,
    },
    ("apps", "ReplicaSet"): {
        "spec": {"selector": _ATOMIC_STRUCT, "template": _POD_TEMPLATE},
        "status": _WORKLOAD_STATUS,
    },
    ("apps", "StatefulSet"): {
        "spec": {"selector": _ATOMIC_STRUCT, "template": _POD_TEMPLATE},
        "status": _WORKLOAD_STATUS,
    },
    ("apps", "DaemonSet"): {
        "spec": {"selector": _ATOMIC_STRUCT, "template": _POD_TEMPLATE},
        "status": _WORKLOAD_STATUS,
    },
    ("apps", "ControllerRevision"): {},
    ("batch", "Job"): {
        "spec": _JOB_SPEC,
        "status": {"conditions": {"@list": ("atomic", ()), "@patch": ("merge", "type")}},
    },
    ("batch", "CronJob"): {"spec": {"jobTemplate": {"metadata": OBJECT_META_TYPE, "spec": _JOB_SPEC}}},
    ("coordination.k8s.io", "Lease"): {},
    ("events.k8s.io", "Event"): {"regarding": _ATOMIC_STRUCT, "related": _ATOMIC_STRUCT},
    ("rbac.authorization.k8s.io", "Role"): {},
    ("rbac.authorization.k8s.io", "ClusterRole"): {},
    ("rbac.authorization.k8s.io", "RoleBinding"): {"roleRef": _ATOMIC_STRUCT},
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): {"roleRef": _ATOMIC_STRUCT},
    ("apiextensions.k8s.io", "CustomResourceDefinition"): {},
}

# The shape of an empty typed Go object of the kind (non-pointer structs, and non-omitempty
# fields that serialize as null). Only used to decide whether a container was "added".
_TEMPLATE_SKEL = {"metadata": {"creationTimestamp": None}, "spec": {"containers": None}}
_SKELETONS: dict[tuple[str, str], dict] = {
    ("", "Pod"): {"spec": {"containers": None}, "status": {}},
    ("", "PodTemplate"): {"template": copy.deepcopy(_TEMPLATE_SKEL)},
    ("", "Service"): {"spec": {}, "status": {"loadBalancer": {}}},
    ("", "Namespace"): {"spec": {}, "status": {}},
    ("", "Node"): {
        "spec": {},
        "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}, "nodeInfo": {}},
    },
    ("", "PersistentVolumeClaim"): {"spec": {"resources": {}}, "status": {}},
    ("", "Event"): {
        "involvedObject": {},
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "eventTime": None,
        "reportingComponent": "",
        "reportingInstance": "",
    },
    ("apps", "Deployment"): {
        "spec": {"selector": None, "template": copy.deepcopy(_TEMPLATE_SKEL), "strategy": {}},
        "status": {},
    },
    ("apps", "ReplicaSet"): {
        "spec": {"selector": None, "template": copy.deepcopy(_TEMPLATE_SKEL)},
        "status": {},
    },
    ("apps", "StatefulSet"): {
        "spec": {"selector": None, "template": copy.deepcopy(_TEMPLATE_SKEL), "updateStrategy": {}},
        "status": {"replicas": 0, "availableReplicas": 0},
    },
    ("apps", "DaemonSet"): {
        "spec": {"selector": None, "template": copy.deepcopy(_TEMPLATE_SKEL), "updateStrategy": {}},
        "status": {},
    },
    ("batch", "Job"): {"spec": {"template": copy.deepcopy(_TEMPLATE_SKEL)}, "status": {}},
    ("batch", "CronJob"): {
        "spec": {
            "jobTemplate": {
                "metadata": {"creationTimestamp": None},
                "spec": {"template": copy.deepcopy(_TEMPLATE_SKEL)},
            }
        },
        "status": {},
    },
    ("coordination.k8s.io", "Lease"): {"spec": {}},
    ("rbac.authorization.k8s.io", "Role"): {"rules": None},
    ("rbac.authorization.k8s.io", "ClusterRole"): {"rules": None},
    ("rbac.authorization.k8s.io", "RoleBinding"): {"roleRef": {}},
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): {"roleRef": {}},
    ("apiextensions.k8s.io", "CustomResourceDefinition"): {
        "spec": {"names": {}, "versions": None},
        "status": {"acceptedNames": {}, "storedVersions": None},
    },
}
_BUILTIN_CACHE: dict[tuple[str, str], _TableTypeInfo] = {}


def pod_spec_type_info_table() -> dict:
    """The type table of core/v1 PodSpec (its patch strategies), for a kind that embeds one."""
    return copy.deepcopy(_POD_SPEC)


def table_type_info(table: dict) -> TypeInfo:
    """TypeInfo of an object typed by a table (``@list``/``@patch`` nodes, as the built-in kinds' tables):
    what a controller's strategic merge of a custom type (KServe's LLMInferenceServiceSpec) needs."""
    return _TableTypeInfo(table)


def builtin_type_info(group: str, version: str, kind: str) -> TypeInfo | None:
    """TypeInfo of a built-in kind (core ``""``, apps, batch, rbac, coordination, events,
    apiextensions); None for kinds it does not know."""
    key = (group or "", kind)
    info = _BUILTIN_CACHE.get(key)
    if info is None:
        table = _BUILTIN_TABLES.get(key)
        if table is None:
            return None
        root = {"metadata": OBJECT_META_TYPE}
        root.update(table)
        skel = {"metadata": {"creationTimestamp": None}}
        skel.update(_SKELETONS.get(key, {}))
        info = _TableTypeInfo(root, skel)
        _BUILTIN_CACHE[key] = info
    return info


def _info_map_type(info, path) -> str:
    f = getattr(info, "map_type", None)
    return f(path) if f else "granular"


def _info_is_field(info, path) -> bool:
    f = getattr(info, "is_field", None)
    return f(path) if f else True


def _info_key_default(info, path, key):
    f = getattr(info, "key_default", None)
    return f(path, key) if f else None


def _info_skeleton(info) -> dict:
    f = getattr(info, "skeleton", None)
    return f() if f else {}


# ============================================================================================
# strategic merge patch (port of apimachinery/pkg/util/strategicpatch, apply side)
# ============================================================================================

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList"

_ERR_BAD_JSON_DOC = "invalid JSON document"
_ERR_NO_LIST_OF_LISTS = "lists of lists are not supported"
_ERR_BAD_PRIMITIVE_LIST = "invalid patch format of primitive list"
_ERR_BAD_RETAIN_KEYS = "invalid patch format of retainKeys"
_ERR_BAD_SET_ORDER = "invalid patch format of setElementOrder list"
_BAD_REQUEST_ERRORS = {_ERR_BAD_JSON_DOC, _ERR_BAD_PRIMITIVE_LIST, _ERR_BAD_RETAIN_KEYS, _ERR_BAD_SET_ORDER}
_INVALID_ERRORS = {_ERR_NO_LIST_OF_LISTS, "patch content doesn't match retainKeys list"}


class _SmpError(Exception):
    pass


class _Absent:
    def __repr__(self):  # pragma: no cover
        return "<absent>"


_ABSENT = _Absent()


def _go_type(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "map[string]interface {}"
    if isinstance(v, list):
        return "[]interface {}"
    return type(v).__name__


def _err_bad_arg_type(expected: str, actual: Any) -> _SmpError:
    return _SmpError(f"expected a {expected}, but received a {_go_type(actual)}")


def _err_no_merge_key(m: dict, k: str) -> _SmpError:
    return _SmpError(f"map: {go_value(m)} does not contain declared merge key: {k}")


def _err_bad_patch_type(t: Any, m: dict) -> _SmpError:
    return _SmpError(f"unknown patch type: {go_value(t)} in map: {go_value(m)}")


def _go_eq(a: Any, b: Any) -> bool:
    """Go interface{} == for scalars (same dynamic type and value)."""
    return _go_type(a) == _go_type(b) and a == b


def _hkey(v: Any) -> tuple:
    return (_go_type(v), go_json(v) if isinstance(v, (dict, list)) else v)


def strategic_merge_patch(target: dict, patch: dict, info: TypeInfo) -> dict:
    """Apply a strategic merge patch; returns a new object. ``info`` gives the patch strategies
    (built-in kinds). Errors raise :class:`PatchError` with the apiserver's code."""
    if not isinstance(patch, dict):
        raise _bad_request(_ERR_BAD_JSON_DOC)
    original = copy.deepcopy(target) if isinstance(target, dict) else {}
    p = copy.deepcopy(patch)
    try:
        return _smp_merge_map(original, p, (), info)
    except _SmpError as e:
        msg = str(e)
        if msg in _BAD_REQUEST_ERRORS:
            raise _bad_request(msg) from None
        if msg in _INVALID_ERRORS:
            raise _generic_invalid(msg) from None
        raise _unknown(msg) from None


def _strategy(info: TypeInfo, path: tuple) -> tuple[str, str]:
    strategy, key = info.patch_strategy(path)
    strategies = [s for s in (strategy or "").split(",") if s]
    if not strategies:
        other = ""
    elif len(strategies) == 1:
        other = "" if strategies[0] == "retainKeys" else strategies[0]
    elif len(strategies) == 2 and "retainKeys" in strategies:
        other = strategies[0] if strategies[1] == "retainKeys" else strategies[1]
    else:
        raise _SmpError(f"unexpected patch strategy: {go_value(strategies)}")
    return other, key or ""


def _smp_merge_map(original: Any, patch: dict, tp: tuple, info: TypeInfo) -> dict:
    if _DIRECTIVE in patch:
        d = patch[_DIRECTIVE]
        if d == "replace":
            del patch[_DIRECTIVE]
            return _clean_new_value(patch)
        if d == "delete":
            return {}
        raise _err_bad_patch_type(d, patch)
    if original is None:
        original = {}
    _apply_retain_keys(original, patch)
    _merge_set_element_order(original, patch, tp, info)
    for k in list(patch.keys()):
        patch_v = patch[k]
        is_delete_list = False
        if k.startswith(_DELETE_PRIMITIVE):
            k = _extract_key(k, _DELETE_PRIMITIVE)
            is_delete_list = True
        elif k.startswith("$"):
            continue  # unknown directive: never stored
        if patch_v is None:
            original.pop(k, None)
            continue
        if k not in original:
            if not is_delete_list:
                v, keep = _remove_directives(_discard_nulls(patch_v))
                if keep:
                    original[k] = _clean_new_value(v)
            continue
        ov = original[k]
        if _go_type(ov) != _go_type(patch_v):
            if not is_delete_list:
                v, keep = _remove_directives(_discard_nulls(patch_v))
                if keep:
                    original[k] = _clean_new_value(v)
                else:
                    del original[k]
            continue
        ctp = tp + (k,)
        if isinstance(ov, dict):
            strategy, _ = _strategy(info, ctp)
            if strategy != "replace":
                original[k] = _smp_merge_map(ov, patch_v, ctp, info)
            else:
                original[k] = _clean_new_value(patch_v)
        elif isinstance(ov, list):
            strategy, mkey = _strategy(info, ctp)
            original[k] = _merge_slice_handler(ov, patch_v, ctp, info, strategy, mkey, is_delete_list)
        else:
            v, keep = _remove_directives(patch_v)
            if keep:
                original[k] = v
            else:
                del original[k]
    return original


def _clean_new_value(v: Any) -> Any:
    """Values taken from a patch as they are would lose nulls and unknown "$" keys when the
    apiserver decodes the result into a typed object; do that here."""
    if isinstance(v, dict):
        for k in list(v):
            if v[k] is None or k.startswith("$"):
                del v[k]
            else:
                v[k] = _clean_new_value(v[k])
    elif isinstance(v, list):
        for i, x in enumerate(v):
            v[i] = _clean_new_value(x)
    return v


def _discard_nulls(v: Any) -> Any:
    if isinstance(v, dict):
        for k in [k for k, x in v.items() if x is None]:
            del v[k]
        for x in v.values():
            _discard_nulls(x)
    elif isinstance(v, list):
        for x in v:
            _discard_nulls(x)
    return v


def _remove_directives(obj: Any) -> tuple[Any, bool]:
    if obj is None:
        return obj, True
    if isinstance(obj, dict):
        if _DIRECTIVE in obj:
            return None, False
        for k in list(obj):
            v, keep = _remove_directives(obj[k])
            if keep:
                obj[k] = v
            else:
                del obj[k]
        return obj, True
    if isinstance(obj, list):
        res = []
        for v in obj:
            nv, keep = _remove_directives(v)
            if keep:
                res.append(nv)
        return res, True
    return obj, True


def _extract_key(s: str, prefix: str) -> str:
    parts = s.split("/", 1)
    if len(parts) <= 1 or parts[0] != prefix:
        if prefix == _DELETE_PRIMITIVE:
            raise _SmpError(_ERR_BAD_PRIMITIVE_LIST)
        if prefix == _SET_ORDER:
            raise _SmpError(_ERR_BAD_SET_ORDER)
        raise _SmpError(f"fail to find unknown prefix {go_quote(prefix)} in {s}\n")
    return parts[1]


def _apply_retain_keys(original: dict, patch: dict) -> None:
    if _RETAIN_KEYS not in patch:
        return
    rk = patch.pop(_RETAIN_KEYS)
    if not isinstance(rk, list):
        raise _SmpError(_ERR_BAD_RETAIN_KEYS)
    allowed = {_hkey(v) for v in rk}
    for k, v in patch.items():
        if v is None or k.startswith(_DELETE_PRIMITIVE) or k.startswith(_SET_ORDER):
            continue
        if _hkey(k) not in allowed:
            raise _SmpError(_ERR_BAD_RETAIN_KEYS)
    for k in list(original):
        if _hkey(k) not in allowed:
            del original[k]


def _merge_set_element_order(original: dict, patch: dict, tp: tuple, info: TypeInfo) -> None:
    for key in list(patch.keys()):
        if not key.startswith(_SET_ORDER):
            continue
        set_order = patch.pop(key)
        if not isinstance(set_order, list):
            raise _err_bad_arg_type("[]interface {}", set_order)
        okey = _extract_key(key, _SET_ORDER)
        found_o = okey in original
        found_p = okey in patch
        orig_list: list = []
        patch_list: list = []
        if found_o:
            if not isinstance(original[okey], list):
                raise _err_bad_arg_type("[]interface {}", original[okey])
            orig_list = original[okey]
        if found_p:
            if not isinstance(patch[okey], list):
                raise _err_bad_arg_type("[]interface {}", patch[okey])
            patch_list = patch[okey]
        ctp = tp + (okey,)
        strategy, mkey = _strategy(info, ctp)
        _validate_patch_with_set_order_list(patch_list, set_order, mkey)
        if found_o and not found_p:
            merged = orig_list
        elif not found_o and found_p:
            merged, _ = _remove_directives(_discard_nulls(patch_list))
            merged = _clean_new_value(merged)
        elif found_o and found_p:
            merged = _merge_slice_handler(orig_list, patch_list, ctp, info, strategy, mkey, False)
        else:
            continue
        if not mkey:
            patch_items, server_only = _partition_primitives(merged, set_order)
        else:
            patch_items, server_only = _partition_maps(merged, set_order, mkey)
        kind = _slice_element_type(orig_list, patch_list)
        original[okey] = _normalize_element_order(patch_items, server_only, set_order, orig_list, mkey, kind)
        patch.pop(okey, None)


def _validate_patch_with_set_order_list(patch_list: list, set_order: list, mkey: str) -> None:
    if not set_order or not patch_list:
        return
    if mkey:
        non_delete, _ = _extract_to_delete_items(patch_list)
    else:
        non_delete = patch_list
    pi = si = 0
    while pi < len(non_delete) and si < len(set_order):
        item = non_delete[pi]
        if isinstance(item, dict) and _DIRECTIVE in item:
            pi += 1
            continue
        if _merge_key_value_equal(item, set_order[si], mkey):
            pi += 1
        si += 1
    if pi < len(non_delete) and si >= len(set_order):
        raise _SmpError(
            f"The order in patch list:\n{go_value(patch_list)}\n doesn't match {_SET_ORDER} list:\n"
            f"{go_value(set_order)}\n"
        )


def _merge_key_value_equal(left: Any, right: Any, mkey: str) -> bool:
    if not mkey:
        return _go_eq(left, right)
    if not isinstance(left, dict):
        raise _err_bad_arg_type("map[string]interface {}", left)
    if not isinstance(right, dict):
        raise _err_bad_arg_type("map[string]interface {}", right)
    if mkey not in left:
        raise _err_no_merge_key(left, mkey)
    if mkey not in right:
        raise _err_no_merge_key(right, mkey)
    return _go_eq(left[mkey], right[mkey])


def _merge_slice_handler(
    original: list, patch: list, tp, info, strategy: str, mkey: str, is_delete_list: bool
) -> list:
    if not isinstance(original, list):
        raise _err_bad_arg_type("[]interface {}", original)
    if not isinstance(patch, list):
        raise _err_bad_arg_type("[]interface {}", patch)
    if strategy == "merge" or is_delete_list:
        return _merge_slice(original, patch, tp, info, mkey, is_delete_list)
    v, _ = _remove_directives(_discard_nulls(patch))
    return _clean_new_value(v)


def _slice_element_type(*slices: list) -> str:
    prev = None
    for s in slices:
        for v in s:
            t = _go_type(v)
            if prev is None:
                prev = t
                if t == "[]interface {}":
                    raise _SmpError(_ERR_NO_LIST_OF_LISTS)
            elif prev != t:
                raise _SmpError(f"list element types are not identical: {go_value(list(slices))}")
    if prev is None:
        raise _SmpError("no elements in any of the given slices")
    return prev


def _merge_slice(original: list, patch: list, tp, info, mkey: str, is_delete_list: bool) -> list:
    if not original and not patch:
        return original
    kind = _slice_element_type(original, patch)
    if kind != "map[string]interface {}":
        if is_delete_list:
            return _delete_from_slice(original, patch)
        merged = _dedup_scalars(list(original) + list(patch))
    else:
        if not mkey:
            raise _SmpError(f"cannot merge lists without merge key for {'.'.join(tp)}")
        original, patch = _merge_slice_with_special(original, patch, mkey)
        original = list(original)
        # Go appends to its own copy of the slice header: the caller's `original` (the server
        # order used below) keeps its length but sees the in-place merges.
        merged = _merge_slice_without_special(original, patch, mkey, tp, info)
        original = merged[: len(original)]
    if not mkey:
        patch_items, server_only = _partition_primitives(merged, patch)
    else:
        patch_items, server_only = _partition_maps(merged, patch, mkey)
    return _normalize_element_order(patch_items, server_only, patch, original, mkey, kind)


def _merge_slice_with_special(original: list, patch: list, mkey: str) -> tuple[list, list]:
    without = []
    replace = False
    for v in patch:
        if _DIRECTIVE not in v:
            without.append(v)
            continue
        d = v[_DIRECTIVE]
        if d == "delete":
            if mkey not in v:
                raise _err_no_merge_key(v, mkey)
            original = _delete_matching(original, mkey, v[mkey])
        elif d == "replace":
            replace = True
        elif d == "merge":
            raise _SmpError("merging lists cannot yet be specified in the patch")
        else:
            raise _err_bad_patch_type(d, v)
    if replace:
        return without, []
    return original, without


def _find_map(items: list, key: str, value: Any) -> int:
    for i, v in enumerate(items):
        if not isinstance(v, dict):
            raise _SmpError(f"value for key {i} is not a map")
        if key in v and _go_eq(v[key], value):
            return i
    return -1


def _delete_matching(original: list, mkey: str, value: Any) -> list:
    original = list(original)
    while True:
        i = _find_map(original, mkey, value)
        if i < 0:
            return original
        del original[i]


def _merge_slice_without_special(original: list, patch: list, mkey: str, tp, info) -> list:
    original = list(original)
    for v in patch:
        if mkey not in v:
            raise _err_no_merge_key(v, mkey)
        i = _find_map(original, mkey, v[mkey])
        if i >= 0:
            original[i] = _smp_merge_map(original[i], v, tp, info)
        else:
            nv, keep = _remove_directives(_discard_nulls(v))
            if keep:
                original.append(_clean_new_value(nv))
    return original


def _delete_from_slice(current: list, to_delete: list) -> list:
    dels = {_hkey(v) for v in to_delete}
    return [v for v in current if _hkey(v) not in dels]


def _dedup_scalars(s: list) -> list:
    length = len(s) - 1
    i = 0
    while i < length:
        j = i + 1
        while j <= length:
            if _go_eq(s[i], s[j]):
                s[j] = s[length]
                s = s[:length]
                length -= 1
                j -= 1
            j += 1
        i += 1
    return s


def _partition_primitives(original: list, partition_by: list) -> tuple[list, list]:
    in_patch = {_hkey(v) for v in partition_by}
    patch, server = [], []
    for v in original:
        (patch if _hkey(v) in in_patch else server).append(v)
    return patch, server


def _partition_maps(original: list, partition_by: list, mkey: str) -> tuple[list, list]:
    patch, server = [], []
    for v in original:
        if not isinstance(v, dict):
            raise _err_bad_arg_type("map[string]interface {}", v)
        if mkey not in v:
            raise _err_no_merge_key(v, mkey)
        (patch if _find_map(partition_by, mkey, v[mkey]) >= 0 else server).append(v)
    return patch, server


def _extract_to_delete_items(items: list) -> tuple[list, list]:
    keep, dels = [], []
    for v in items:
        if not isinstance(v, dict):
            raise _err_bad_arg_type("map[string]interface {}", v)
        (dels if v.get(_DIRECTIVE, _ABSENT) == "delete" else keep).append(v)
    return keep, dels


def _validate_merge_key_in_lists(mkey: str, *lists: list) -> None:
    for lst in lists:
        for item in lst:
            if not isinstance(item, dict):
                raise _err_bad_arg_type("map[string]interface {}", item)
            if mkey not in item:
                raise _err_no_merge_key(item, mkey)


def _index_fn(order: list, mkey: str, kind: str):
    is_map = kind == "map[string]interface {}"

    def val(item):
        if is_map:
            return item.get(mkey) if isinstance(item, dict) else None
        return item

    lookup: dict = {}
    for i, v in enumerate(order):
        lookup.setdefault(_hkey(val(v)), i)

    def index(item) -> int:
        return lookup.get(_hkey(val(item)), -1)

    return index


def _normalize_slice_order(to_sort: list, order: list, mkey: str, kind: str) -> list:
    to_delete: list = []
    if kind == "map[string]interface {}":
        _validate_merge_key_in_lists(mkey, to_sort, order)
        to_sort, to_delete = _extract_to_delete_items(to_sort)
    index = _index_fn(order, mkey, kind)
    s = list(to_sort)

    def less(a, b) -> bool:
        ia = index(a)
        if ia >= 0:
            ib = index(b)
            if ib >= 0:
                return ia < ib
        return True

    # sort.SliceStable is an insertion sort for short lists; the comparator is not a strict
    # weak order when items are missing from `order`, so the algorithm matters.
    for i in range(1, len(s)):
        j = i
        while j > 0 and less(s[j], s[j - 1]):
            s[j], s[j - 1] = s[j - 1], s[j]
            j -= 1
    return s + to_delete


def _merge_sorted_slice(left: list, right: list, server_order: list, mkey: str, kind: str) -> list:
    index = _index_fn(server_order, mkey, kind)
    out = []
    i = j = 0
    for _ in range(len(left) + len(right)):
        if i >= len(left) and j < len(right):
            out.append(right[j])
            j += 1
        elif j >= len(right) and i < len(left):
            out.append(left[i])
            i += 1
        else:
            li = index(left[i])
            ri = index(right[j])
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _normalize_element_order(
    patch: list, server_only: list, patch_order: list, server_order: list, mkey: str, kind: str
) -> list:
    patch = _normalize_slice_order(patch, patch_order, mkey, kind)
    server_only = _normalize_slice_order(server_only, server_order, mkey, kind)
    return _merge_sorted_slice(server_only, patch, server_order, mkey, kind)


# ============================================================================================
# field sets (sigs.k8s.io/structured-merge-diff fieldpath.Set)
# ============================================================================================
# A path element is ("f", name) | ("k", ((key, json), ...)) | ("v", json) | ("i", index).


def _value_sort_key(v: Any) -> tuple:
    if isinstance(v, bool):
        return (2, v)
    if isinstance(v, (int, float)):
        return (0, float(v), 0 if isinstance(v, float) else 1)
    if isinstance(v, str):
        return (1, v)
    if isinstance(v, list):
        return (3, tuple(_value_sort_key(x) for x in v))
    if isinstance(v, dict):
        return (4, tuple((k, _value_sort_key(v[k])) for k in sorted(v)))
    return (5,)


def _pe_sort_key(pe: tuple) -> tuple:
    kind = pe[0]
    if kind == "f":
        return (0, pe[1])
    if kind == "k":
        return (1, tuple((n, _value_sort_key(json.loads(js))) for n, js in pe[1]))
    if kind == "v":
        return (2, _value_sort_key(json.loads(pe[1])))
    return (3, pe[1])


def _pe_serialize(pe: tuple) -> str:
    kind = pe[0]
    if kind == "f":
        return "f:" + pe[1]
    if kind == "k":
        return "k:{" + ",".join(go_json(n) + ":" + js for n, js in pe[1]) + "}"
    if kind == "v":
        return "v:" + pe[1]
    return f"i:{pe[1]}"


def _value_to_string(v: Any) -> str:
    """structured-merge-diff value.ToString."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return go_value(v)
    if isinstance(v, str):
        return go_quote(v)
    if isinstance(v, list):
        return "[" + ",".join(_value_to_string(x) for x in v) + "]"
    if isinstance(v, dict):
        return "".join(f"{k}={_value_to_string(v[k])}" for k in sorted(v))
    return str(v)


def _pe_string(pe: tuple) -> str:
    kind = pe[0]
    if kind == "f":
        return "." + pe[1]
    if kind == "k":
        return "[" + ",".join(f"{n}={_value_to_string(json.loads(js))}" for n, js in pe[1]) + "]"
    if kind == "v":
        return "[=" + _value_to_string(json.loads(pe[1])) + "]"
    return f"[{pe[1]}]"


def path_string(path: tuple) -> str:
    """fieldpath.Path.String(): ``.spec.containers[name="c"].image``."""
    return "".join(_pe_string(pe) for pe in path)


def _pe_parse(s: str) -> tuple:
    if len(s) < 2 or s[1] != ":":
        raise ValueError(f"invalid path element {s!r}")
    kind, rest = s[0], s[2:]
    if kind == "f":
        return ("f", rest)
    if kind == "v":
        return ("v", go_json(json.loads(rest)))
    if kind == "k":
        d = json.loads(rest)
        if not isinstance(d, dict):
            raise ValueError(f"invalid key path element {s!r}")
        return ("k", tuple(sorted((k, go_json(v)) for k, v in d.items())))
    if kind == "i":
        return ("i", int(rest))
    raise ValueError("unknown path element type")


class FieldSet:
    """A set of field paths, stored as a trie (members and children per level)."""

    __slots__ = ("members", "children")

    def __init__(self):
        self.members: set = set()
        self.children: dict = {}

    def copy(self) -> "FieldSet":
        out = FieldSet()
        out.members = set(self.members)
        out.children = {pe: c.copy() for pe, c in self.children.items()}
        return out

    def empty(self) -> bool:
        return not self.members and all(c.empty() for c in self.children.values())

    def insert(self, path: tuple) -> None:
        if not path:
            return
        node = self
        for pe in path[:-1]:
            nxt = node.children.get(pe)
            if nxt is None:
                nxt = node.children[pe] = FieldSet()
            node = nxt
        node.members.add(path[-1])

    def has(self, path: tuple) -> bool:
        node = self
        for pe in path[:-1]:
            node = node.children.get(pe)
            if node is None:
                return False
        return bool(path) and path[-1] in node.members

    def union(self, o: "FieldSet") -> "FieldSet":
        out = FieldSet()
        out.members = self.members | o.members
        for pe in self.children.keys() | o.children.keys():
            a = self.children.get(pe)
            b = o.children.get(pe)
            out.children[pe] = a.union(b) if a is not None and b is not None else (a or b).copy()
        return out

    def difference(self, o: "FieldSet") -> "FieldSet":
        out = FieldSet()
        out.members = self.members - o.members
        for pe, c in self.children.items():
            oc = o.children.get(pe)
            d = c.difference(oc) if oc is not None else c.copy()
            if not d.empty():
                out.children[pe] = d
        return out

    def intersection(self, o: "FieldSet") -> "FieldSet":
        out = FieldSet()
        out.members = self.members & o.members
        for pe, c in self.children.items():
            oc = o.children.get(pe)
            if oc is not None:
                i = c.intersection(oc)
                if not i.empty():
                    out.children[pe] = i
        return out

    def recursive_difference(self, o: "FieldSet") -> "FieldSet":
        out = FieldSet()
        out.members = self.members - o.members
        for pe, c in self.children.items():
            if pe in o.members:
                continue
            oc = o.children.get(pe)
            d = c.recursive_difference(oc) if oc is not None else c.copy()
            if not d.empty():
                out.children[pe] = d
        return out

    def paths(self, prefix: tuple = ()) -> list[tuple]:
        """All member paths, in the order of fieldpath.Set.Iterate."""
        out = [prefix + (pe,) for pe in sorted(self.members, key=_pe_sort_key)]
        for pe in sorted(self.children, key=_pe_sort_key):
            out.extend(self.children[pe].paths(prefix + (pe,)))
        return out

    def to_json(self) -> dict:
        """The FieldsV1 representation."""
        return self._emit(False)

    def _emit(self, include_self: bool) -> dict:
        out: dict = {}
        if include_self and (self.members or self.children):
            out["."] = {}
        for pe in sorted(self.members | self.children.keys(), key=_pe_sort_key):
            child = self.children.get(pe)
            key = _pe_serialize(pe)
            if child is None or child.empty():
                out[key] = {}
            else:
                out[key] = child._emit(pe in self.members)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "FieldSet":
        if not isinstance(d, dict):
            raise ValueError("expected a map")
        out = cls()
        for k, v in d.items():
            if k == ".":
                continue
            pe = _pe_parse(k)
            if not isinstance(v, dict):
                raise ValueError("expected a map")
            if "." in v or not v:
                out.members.add(pe)
            sub = cls.from_json(v)
            if sub.members or sub.children:
                out.children[pe] = sub
        return out


# ============================================================================================
# typed operations over values (structured-merge-diff typed package)
# ============================================================================================


class _TypedError(Exception):
    pass


_DUP = object()


def _item_pe(item: Any, lt: str, keys: tuple, info, tp: tuple) -> tuple:
    if lt == "map":
        if item is None:
            raise _TypedError("associative list with keys may not have a null element")
        if not isinstance(item, dict):
            raise _TypedError("associative list with keys may not have non-map elements")
        fields = []
        for k in keys:
            if k in item:
                fields.append((k, go_json(item[k])))
            else:
                d = _info_key_default(info, tp, k)
                if d is not None:
                    fields.append((k, go_json(d)))
        if keys and not fields:
            raise _TypedError(
                f"associative list with keys has an element that omits all key fields "
                f"{go_value(list(keys))} (and doesn't have default values for any key fields)"
            )
        fields.sort()
        return ("k", tuple(fields))
    if isinstance(item, dict):
        raise _TypedError("associative list without keys has an element that's a map type")
    if isinstance(item, list):
        raise _TypedError("not supported: associative list with lists as elements")
    if item is None:
        raise _TypedError("associative list without keys has an element that's an explicit null")
    return ("v", go_json(item))


def _list_kind(info, tp: tuple, items: list) -> tuple[str, tuple]:
    """The list type, degraded to atomic when the items cannot be indexed (lenient, for live data)."""
    lt, keys = info.list_type(tp)
    if lt == "atomic":
        return lt, keys
    try:
        for it in items:
            _item_pe(it, lt, keys, info, tp)
    except _TypedError:
        return "atomic", ()
    return lt, keys


def _to_field_set(v: Any, info, strict: bool = False) -> FieldSet:
    out = FieldSet()
    _tfs(v, (), (), out, info, strict)
    return out


def _tfs(v: Any, path: tuple, tp: tuple, out: FieldSet, info, strict: bool) -> None:
    if isinstance(v, dict):
        if path and _info_map_type(info, tp) == "atomic":
            out.insert(path)
            return
        for k, val in v.items():
            cp = path + (("f", k),)
            ctp = tp + (k,)
            _tfs(val, cp, ctp, out, info, strict)
            if val is None or (isinstance(val, dict) and not val) or not _info_is_field(info, ctp):
                out.insert(cp)
    elif isinstance(v, list):
        lt, keys = info.list_type(tp) if strict else _list_kind(info, tp, v)
        if lt == "atomic":
            out.insert(path)
            return
        pes = []
        seen: set = set()
        dups: set = set()
        for i, item in enumerate(v):
            try:
                pe = _item_pe(item, lt, keys, info, tp)
            except _TypedError as e:
                raise _TypedError(f"{path_string(path)}: element {i}: {e}") from None
            if pe in seen:
                if strict:
                    raise _TypedError(f"{path_string(path)}: duplicate entries for key {_pe_string(pe)}")
                dups.add(pe)
            seen.add(pe)
            pes.append(pe)
        for pe in dups:
            out.insert(path + (pe,))
        for item, pe in zip(v, pes):
            if pe in dups:
                continue
            _tfs(item, path + (pe,), tp, out, info, strict)
            out.insert(path + (pe,))
    else:
        out.insert(path)


def _veq(a: Any, b: Any) -> bool:
    """structured-merge-diff value.Equals (ints and floats compare numerically)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_veq(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_veq(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _merge(l: Any, r: Any, tp: tuple, info) -> Any:
    """typed.Merge with ruleKeepRHS (config ``r`` applied onto live ``l``)."""
    if r is _ABSENT:
        return l
    if l is _ABSENT:
        return r
    if isinstance(r, dict) or (r is None and isinstance(l, dict)):
        if not isinstance(l, dict) and l is not None:
            return r
        ld = l or {}
        rd = r or {}
        if (tp and _info_map_type(info, tp) == "atomic") or (not ld and not rd):
            return r
        out = {}
        for k, lv in ld.items():
            out[k] = _merge(lv, rd.get(k, _ABSENT), tp + (k,), info)
        for k, rv in rd.items():
            if k not in ld:
                out[k] = rv
        return out
    if isinstance(r, list) or (r is None and isinstance(l, list)):
        if not isinstance(l, list) and l is not None:
            return r
        ll = l or []
        rl = r or []
        lt, keys = info.list_type(tp)
        if lt == "atomic" or (not ll and not rl):
            return r
        lt2, keys2 = _list_kind(info, tp, ll)
        if lt2 == "atomic":
            return r
        return _merge_list(ll, rl, lt, keys, tp, info)
    return r


def _merge_list(ll: list, rl: list, lt: str, keys: tuple, tp: tuple, info) -> list:
    rpes = [_item_pe(x, lt, keys, info, tp) for x in rl]
    observed_r = {}
    for pe, x in zip(rpes, rl):
        observed_r[pe] = x
    lpes = [_item_pe(x, lt, keys, info, tp) for x in ll]
    observed_l: dict = {}
    for pe, x in zip(lpes, ll):
        observed_l[pe] = _DUP if pe in observed_l else x
    shared = [pe for pe in rpes if pe in observed_l]
    next_shared = shared.pop(0) if shared else None
    merged_r: set = set()
    out = []
    li = ri = 0
    nl, nr = len(lpes), len(rpes)

    def child(obs, pe):
        v = obs.get(pe, _ABSENT)
        return _ABSENT if v is _DUP else v

    while li < nl or ri < nr:
        if li < nl and ri < nr:
            pe = lpes[li]
            if pe == rpes[ri]:
                merged_r.add(pe)
                out.append(_merge(child(observed_l, pe), child(observed_r, pe), tp, info))
                li += 1
                ri += 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in observed_r and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < nl:
            pe = lpes[li]
            if pe not in observed_r:
                out.append(_merge(ll[li], _ABSENT, tp, info))
                li += 1
                continue
            if pe in merged_r:
                li += 1
        if ri < nr:
            pe = rpes[ri]
            merged_r.add(pe)
            out.append(_merge(child(observed_l, pe), child(observed_r, pe), tp, info))
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = shared.pop(0) if shared else None
    return out


class _Comparison:
    __slots__ = ("added", "modified", "removed")

    def __init__(self):
        self.added = FieldSet()
        self.modified = FieldSet()
        self.removed = FieldSet()


def _compare(l: Any, r: Any, info) -> _Comparison:
    c = _Comparison()
    _cmp(l, r, (), (), info, c)
    return c


def _cmp(l: Any, r: Any, path: tuple, tp: tuple, info, c: _Comparison) -> None:
    probe = r if r is not _ABSENT else l
    if probe is None:
        probe = l if r is None else r
    if isinstance(probe, dict) and all(x is _ABSENT or x is None or isinstance(x, dict) for x in (l, r)):
        ld = l if isinstance(l, dict) else {}
        rd = r if isinstance(r, dict) else {}
        if (path and _info_map_type(info, tp) == "atomic") or (not ld and not rd):
            _cmp_leaf(l, r, path, c)
            return
        for k in ld.keys() | rd.keys():
            _cmp(ld.get(k, _ABSENT), rd.get(k, _ABSENT), path + (("f", k),), tp + (k,), info, c)
        _cmp_node(l, r, path, c)
        return
    if isinstance(probe, list) and all(x is _ABSENT or x is None or isinstance(x, list) for x in (l, r)):
        ll = l if isinstance(l, list) else []
        rl = r if isinstance(r, list) else []
        lt, keys = _list_kind(info, tp, ll + rl)
        if lt == "atomic" or (not ll and not rl):
            _cmp_leaf(l, r, path, c)
            return
        lvals: dict = {}
        order: list = []
        for x in ll:
            pe = _item_pe(x, lt, keys, info, tp)
            if pe in lvals:
                lvals[pe].append(x)
            else:
                lvals[pe] = [x]
                order.append(pe)
        rvals: dict = {}
        for x in rl:
            pe = _item_pe(x, lt, keys, info, tp)
            if pe in rvals:
                rvals[pe].append(x)
            else:
                rvals[pe] = [x]
                if pe not in lvals:
                    order.append(pe)
        for pe in order:
            la = lvals.get(pe, [])
            ra = rvals.get(pe, [])
            ipath = path + (pe,)
            if len(la) <= 1 and len(ra) <= 1:
                _cmp(la[0] if la else _ABSENT, ra[0] if ra else _ABSENT, ipath, tp, info, c)
            elif len(la) >= 2 and len(ra) >= 2:
                if len(la) != len(ra) or not all(_veq(a, b) for a, b in zip(la, ra)):
                    c.modified.insert(ipath)
            elif len(la) >= 2:
                if ra:
                    _cmp(_ABSENT, ra[0], ipath, tp, info, c)
                c.removed.insert(ipath)
            else:
                if la:
                    _cmp(la[0], _ABSENT, ipath, tp, info, c)
                c.added.insert(ipath)
        _cmp_node(l, r, path, c)
        return
    _cmp_leaf(l, r, path, c)


def _cmp_leaf(l, r, path, c: _Comparison) -> None:
    if not path:
        return
    if l is _ABSENT:
        c.added.insert(path)
    elif r is _ABSENT:
        c.removed.insert(path)
    elif not _veq(l, r):
        c.modified.insert(path)


def _cmp_node(l, r, path, c: _Comparison) -> None:
    if not path:
        return
    if l is _ABSENT:
        c.added.insert(path)
    elif r is _ABSENT:
        c.removed.insert(path)


def _remove_items(v: Any, s: FieldSet, tp: tuple, info) -> Any:
    """typed.RemoveItems; containers emptied by the removal disappear."""
    if isinstance(v, dict):
        if not v or (tp and _info_map_type(info, tp) == "atomic"):
            return v
        out = {}
        for k, val in v.items():
            pe = ("f", k)
            if pe in s.members:
                continue
            sub = s.children.get(pe)
            if sub is not None:
                val = _remove_items(val, sub, tp + (k,), info)
                if val is _ABSENT:
                    continue
            out[k] = val
        return out if out else _ABSENT
    if isinstance(v, list):
        if not v:
            return v
        lt, keys = _list_kind(info, tp, v)
        if lt == "atomic":
            return v
        out_l = []
        for item in v:
            pe = _item_pe(item, lt, keys, info, tp)
            if pe in s.members:
                continue
            sub = s.children.get(pe)
            if sub is not None:
                item = _remove_items(item, sub, tp, info)
                if item is _ABSENT:
                    item = {}
            out_l.append(item)
        return out_l if out_l else _ABSENT
    return v


def _ensure_named(s: FieldSet, tp: tuple, info) -> FieldSet:
    """fieldpath.Set.EnsureNamedFieldsAreMembers."""
    out = FieldSet()
    out.members = set(s.members)
    for pe, child in s.children.items():
        if pe[0] == "f":
            ctp = tp + (pe[1],)
            if _info_is_field(info, ctp):
                out.members.add(pe)
            out.children[pe] = _ensure_named(child, ctp, info)
        else:
            out.children[pe] = _ensure_named(child, tp, info)
    return out


def _overlay(skel: Any, obj: Any) -> Any:
    """obj with the missing parts of the empty-object skeleton added (new containers only)."""
    if not isinstance(skel, dict) or not isinstance(obj, dict):
        return obj
    out = dict(obj)
    for k, sv in skel.items():
        if k not in out:
            out[k] = copy.deepcopy(sv)
        elif isinstance(sv, dict) and isinstance(out[k], dict):
            out[k] = _overlay(sv, out[k])
    return out


# ============================================================================================
# managed fields
# ============================================================================================

_STRIP = FieldSet()
for _p in (
    ("apiVersion",),
    ("kind",),
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "creationTimestamp"),
    ("metadata", "selfLink"),
    ("metadata", "uid"),
    ("metadata", "clusterName"),
    ("metadata", "generation"),
    ("metadata", "managedFields"),
    ("metadata", "resourceVersion"),
):
    _STRIP.insert(tuple(("f", x) for x in _p))


class _Entry:
    __slots__ = ("manager", "operation", "api_version", "subresource", "set", "time")

    def __init__(self, manager, operation, api_version, subresource, fset, time):
        self.manager = manager
        self.operation = operation
        self.api_version = api_version
        self.subresource = subresource or ""
        self.set = fset
        self.time = time

    @property
    def key(self) -> tuple:
        return (
            self.manager,
            self.operation,
            self.api_version if self.operation == "Update" else "",
            self.subresource,
        )

    def identifier(self) -> str:
        """BuildManagerIdentifier (JSON of the ManagedFieldsEntry without time and fields)."""
        d: dict[str, Any] = {"manager": self.manager, "operation": self.operation}
        if self.operation == "Update" and self.api_version:
            d["apiVersion"] = self.api_version
        if self.subresource:
            d["subresource"] = self.subresource
        return json.dumps(d, separators=(",", ":"))

    def describe(self) -> str:
        """printManager: how conflicts name a manager."""
        s = go_quote(self.manager)
        if self.subresource:
            s += f" with subresource {go_quote(self.subresource)}"
        if self.operation == "Update":
            s += f" using {self.api_version}"
        return s

    def encode(self) -> dict:
        d: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time is not None:
            d["time"] = self.time
        d["fieldsType"] = "FieldsV1"
        d["fieldsV1"] = self.set.to_json()
        if self.subresource:
            d["subresource"] = self.subresource
        return d


def _decode_managed(entries: Any) -> dict[tuple, _Entry]:
    out: dict[tuple, _Entry] = {}
    if entries is None:
        return out
    if not isinstance(entries, list):
        raise ValueError("managedFields must be a list")
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ValueError("managedFields entries must be objects")
        op = e.get("operation")
        if op not in ("Apply", "Update"):
            raise ValueError("operation must be `Apply` or `Update`")
        if not e.get("apiVersion"):
            raise ValueError("apiVersion must not be empty")
        ft = e.get("fieldsType")
        if not ft:
            raise ValueError(f"missing fieldsType in managed fields entry {i}")
        if ft != "FieldsV1":
            raise ValueError(f"invalid fieldsType {go_quote(str(ft))} in managed fields entry {i}")
        fset = FieldSet.from_json(e.get("fieldsV1") or {})
        entry = _Entry(
            e.get("manager", ""), op, e["apiVersion"], e.get("subresource", ""), fset, e.get("time")
        )
        out[entry.key] = entry
    return out


def _time_seconds(t: Any) -> float:
    if not t:
        return 0
    try:
        return datetime.datetime.fromisoformat(str(t).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0


def _encode_managed(managers: dict[tuple, _Entry]) -> list[dict]:
    entries = [e for e in managers.values() if not e.set.empty()]
    entries.sort(key=lambda e: (e.operation, _time_seconds(e.time), e.manager, e.api_version, e.subresource))
    return [e.encode() for e in entries]


def _set_managed(obj: dict, managers: dict[tuple, _Entry]) -> None:
    encoded = _encode_managed(managers)
    meta = obj.setdefault("metadata", {})
    if encoded:
        meta["managedFields"] = encoded
    else:
        meta.pop("managedFields", None)


def _without_managed(obj: dict | None) -> dict:
    if not obj:
        return {}
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        meta = dict(meta)
        del meta["managedFields"]
        out["metadata"] = meta
    return out


def _is_reset(mf: Any) -> bool:
    if isinstance(mf, list):
        return len(mf) == 0 or (len(mf) == 1 and mf[0] == {})
    return False


def _reset_set(reset_fields) -> FieldSet | None:
    fields = [f for f in (reset_fields or ()) if f]
    if not fields:
        return None
    out = FieldSet()
    for f in fields:
        out.insert(tuple(("f", part) for part in (f if isinstance(f, (tuple, list)) else (f,))))
    return out


def _exclude(cmp: _Comparison, ign: FieldSet | None) -> _Comparison:
    if ign is not None:
        cmp.added = cmp.added.recursive_difference(ign)
        cmp.modified = cmp.modified.recursive_difference(ign)
        cmp.removed = cmp.removed.recursive_difference(ign)
    return cmp


def _update_managers(managers: dict[tuple, _Entry], cmp: _Comparison, skip_key: tuple | None, force: bool):
    """merge.Updater.update: conflicts and removed fields of the other managers."""
    changed = cmp.modified.union(cmp.added)
    conflicts: list[tuple[_Entry, FieldSet]] = []
    for key, e in managers.items():
        if key == skip_key:
            continue
        cs = e.set.intersection(changed)
        if not cs.empty():
            conflicts.append((e, cs))
    if conflicts and not force:
        _raise_conflicts(conflicts)
    for e, cs in conflicts:
        e.set = e.set.difference(cs)
    if not cmp.removed.empty():
        for key, e in managers.items():
            if key != skip_key:
                e.set = e.set.difference(cmp.removed)
    for key in [k for k, e in managers.items() if e.set.empty()]:
        del managers[key]


def _raise_conflicts(conflicts: list[tuple[_Entry, FieldSet]]):
    conflicts = sorted(conflicts, key=lambda c: c[0].identifier())
    flat: list[tuple[_Entry, tuple]] = [(e, p) for e, cs in conflicts for p in cs.paths()]
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {e.describe()}",
            "field": path_string(p),
        }
        for e, p in flat
    ]
    if len(flat) == 1:
        e, p = flat[0]
        message = f"Apply failed with 1 conflict: conflict with {e.describe()}: {path_string(p)}"
    else:
        lines = []
        for e, cs in conflicts:
            lines.append(f"conflicts with {e.describe()}:")
            lines.extend(f"- {path_string(p)}" for p in cs.paths())
        message = f"Apply failed with {len(flat)} conflicts: " + "\n".join(lines)
    raise ApplyConflict(message, causes, [(e.describe(), path_string(p)) for e, p in flat])


def _record_update(
    managers: dict[tuple, _Entry],
    old: dict,
    new: dict,
    manager: str,
    api_version: str,
    subresource: str,
    info,
    now: str,
    ign: FieldSet | None = None,
) -> None:
    skel = _info_skeleton(info)
    cmp = _exclude(_compare(_overlay(skel, old), _overlay(skel, new), info), ign)
    _update_managers(managers, cmp, None, True)
    cur = cmp.modified.union(cmp.added).difference(_STRIP)
    if cur.empty():
        return
    key = (manager, "Update", api_version, subresource or "")
    prev = managers.get(key)
    if prev is not None:
        prev.set = cur.union(prev.set)
        prev.time = now
    else:
        managers[key] = _Entry(manager, "Update", api_version, subresource, cur, now)


def record_update(
    old: dict | None,
    new: dict,
    manager: str,
    info: TypeInfo,
    now: str,
    subresource: str | None = None,
    *,
    reset_fields=(),
) -> None:
    """Track a non-apply write (create, update, any patch) IN PLACE on ``new``: ``manager``
    (operation Update, apiVersion of ``new``) takes ownership of the fields it added or changed,
    other managers lose them and lose the fields it removed; entries of the same manager,
    operation, apiVersion and subresource are merged. ``old`` is None for a create.

    Like the apiserver, ``metadata.managedFields`` sent in ``new`` replace the tracked ones when
    they are non-empty (``[]`` or ``[{}]`` reset them); for a subresource they are ignored.
    ``reset_fields`` are the top-level fields (or paths as tuples) the write cannot change and
    nobody gains by it, like the apiserver's reset fields: ``("status",)`` for the main resource
    of a kind with a status subresource, ``("spec",)`` (and ``("metadata",)`` for most built-ins)
    for its ``/status``.
    """
    meta = new.get("metadata") if isinstance(new.get("metadata"), dict) else None
    sent = meta.get("managedFields", _ABSENT) if meta is not None else _ABSENT
    old_entries = ((old or {}).get("metadata") or {}).get("managedFields")

    def decode_or_empty(x):
        try:
            return _decode_managed(x)
        except (ValueError, TypeError, json.JSONDecodeError):
            return {}

    if subresource:
        managers = decode_or_empty(old_entries)
    elif sent is not _ABSENT and _is_reset(sent):
        managers = {}
    else:
        managers = {}
        if sent is not _ABSENT and sent:
            managers = decode_or_empty(sent)
        if not managers:
            managers = decode_or_empty(old_entries)
    if meta is not None:
        meta.pop("managedFields", None)
    old_c = _without_managed(old)
    if old is None:
        old_c = {k: new[k] for k in ("apiVersion", "kind") if k in new}
    _record_update(
        managers,
        old_c,
        new,
        manager,
        str(new.get("apiVersion") or ""),
        subresource or "",
        info,
        now,
        _reset_set(reset_fields),
    )
    _set_managed(new, managers)


def server_side_apply(
    live: dict | None,
    config: dict,
    manager: str,
    force: bool,
    info: TypeInfo,
    now: str,
    subresource: str | None = None,
    *,
    reset_fields=(),
) -> dict:
    """Server-side apply of ``config`` by ``manager``; returns the new object (``live`` is not
    modified) with ``metadata.managedFields`` updated. ``live`` None creates.

    Fields in ``config`` are set and owned by ``manager`` (operation Apply); fields it applied
    before and omits now are removed unless another manager owns them; changing a field another
    manager owns raises :class:`ApplyConflict` (409) unless ``force``, which moves the ownership.
    A re-apply that changes nothing returns the live object with its managedFields unchanged.
    ``reset_fields``: as for :func:`record_update` (fields the applier neither owns nor conflicts
    on; the caller still resets their values, e.g. copies ``status`` back from ``live``).
    """
    if not isinstance(config, dict):
        raise _bad_request("apply patch must be an object")
    cmeta = config.get("metadata")
    if isinstance(cmeta, dict) and cmeta.get("managedFields"):
        raise _bad_request("metadata.managedFields must be nil")
    config = copy.deepcopy(config)
    if isinstance(cmeta, dict) and "managedFields" in config["metadata"]:
        del config["metadata"]["managedFields"]
    api_version = str(config.get("apiVersion") or (live or {}).get("apiVersion") or "")
    sub = subresource or ""

    if live is None:
        managers: dict[tuple, _Entry] = {}
        live_obj: dict = {k: config[k] for k in ("apiVersion", "kind") if k in config}
    else:
        live = copy.deepcopy(live)
        try:
            managers = _decode_managed((live.get("metadata") or {}).get("managedFields"))
        except (ValueError, TypeError, json.JSONDecodeError) as e:
            raise _unknown(f"failed to decode managed fields: {e}") from None
        live_obj = _without_managed(live)
        if not managers:
            # skipNonAppliedManager: existing fields go to "before-first-apply"
            empty = {k: live_obj[k] for k in ("apiVersion", "kind") if k in live_obj}
            _record_update(
                managers,
                empty,
                live_obj,
                "before-first-apply",
                str(live_obj.get("apiVersion") or api_version),
                "",
                info,
                now,
            )

    ign = _reset_set(reset_fields)
    try:
        cfg_set = _to_field_set(config, info, strict=True)
    except _TypedError as e:
        meta = config.get("metadata") or {}
        raise _unknown(
            f"failed to create typed patch object ({meta.get('namespace', '')}/{meta.get('name', '')}; "
            f"{api_version}, Kind={config.get('kind', '')}): {e}"
        ) from None

    if ign is not None:
        cfg_set = cfg_set.recursive_difference(ign)
    apply_key = (manager, "Apply", "", sub)
    last = managers.get(apply_key)
    last_set = last.set if last is not None else None
    merged = _merge(live_obj, config, (), info)
    entry = _Entry(manager, "Apply", api_version, sub, cfg_set, last.time if last is not None else None)
    managers[apply_key] = entry
    new_obj = _ssa_prune(merged, managers, last_set, info)

    skel = _info_skeleton(info)
    cmp = _exclude(_compare(_overlay(skel, live_obj), _overlay(skel, new_obj), info), ign)
    _update_managers(managers, cmp, apply_key, force)

    entry.set = entry.set.difference(_STRIP)
    if entry.set.empty():
        managers.pop(apply_key, None)
    if live is not None and _veq(live_obj, new_obj):
        result = live_obj
    else:
        result = new_obj
        if apply_key in managers:
            managers[apply_key].time = now
    result = copy.deepcopy(result)
    _set_managed(result, managers)
    return result


def _ssa_prune(merged: dict, managers: dict[tuple, _Entry], last_set: FieldSet | None, info) -> dict:
    """merge.Updater.prune: drop what the applier owned last time and nobody owns now."""
    if last_set is None or last_set.empty():
        return merged
    last = _ensure_named(last_set, (), info)
    pruned = _remove_items(merged, last, (), info)
    if pruned is _ABSENT:
        pruned = {}
    managed = FieldSet()
    for e in managers.values():
        managed = managed.union(e.set)
    merged_set = _ensure_named(_to_field_set(merged, info), (), info)
    pruned_set = _ensure_named(_to_field_set(pruned, info), (), info)
    managed = _ensure_named(managed, (), info)
    pruned = _remove_items(merged, merged_set.difference(pruned_set.union(managed)), (), info)
    if pruned is _ABSENT:
        pruned = {}
    pruned_set = _ensure_named(_to_field_set(pruned, info), (), info)
    out = _remove_items(merged, merged_set.difference(pruned_set).intersection(last), (), info)
    return {} if out is _ABSENT else out
