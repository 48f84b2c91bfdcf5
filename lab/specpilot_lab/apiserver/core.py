"""The emulated cluster: resource registry, object lifecycle and the write pipeline.

Everything HTTP-specific lives in :mod:`.handler`; this module only knows about objects.
All mutations happen under ``store.lock``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from .. import podlogs
from . import auth, crds, errors, kinds, validation
from .schema import OBJECT_META_FIELDS
from .errors import ApiError, FieldErr
from .resources import ResourceType, builtin_resources, version_priority
from .selection import FieldSelector, LabelSelector
from .store import Store
from .util import clone, deep_equal, new_uid, now_rfc3339, random_suffix

log = logging.getLogger("specpilot_lab.apiserver")

BOOT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")


def _schema_mod():
    from . import schema  # written alongside; imported lazily so this module loads without it

    return schema


def _patch_mod():
    from . import patch

    return patch


@dataclass
class WriteOptions:
    dry_run: bool = False
    field_manager: str | None = None
    field_validation: str = "Warn"  # Strict | Warn | Ignore
    force: bool = False
    user_agent: str = ""

    def manager(self) -> str:
        if self.field_manager:
            return self.field_manager
        ua = (self.user_agent or "unknown").split("/", 1)[0]
        return ua[:128] or "unknown"


@dataclass
class DeleteOptions:
    dry_run: bool = False
    propagation: str | None = None  # Background | Foreground | Orphan
    grace_period: int | None = None
    precondition_uid: str | None = None
    precondition_rv: str | None = None


@dataclass
class Result:
    obj: Any
    warnings: list[str] = field(default_factory=list)
    code: int = 200


def _md(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _ns_name(obj: dict) -> tuple[str, str]:
    md = _md(obj)
    return md.get("namespace", "") or "", md.get("name", "")


def _strip_volatile(obj: dict) -> dict:
    """A comparable copy: no resourceVersion, managedFields without their timestamps."""
    c = dict(obj)
    md = dict(c.get("metadata") or {})
    md.pop("resourceVersion", None)
    if "managedFields" in md:
        md["managedFields"] = [
            {k: v for k, v in (e or {}).items() if k != "time"} for e in md["managedFields"] or []
        ]
    c["metadata"] = md
    return c


class Cluster:
    """All state of one emulated cluster."""

    def __init__(
        self,
        state_dir: str | os.PathLike,
        boot_crds: Iterable[str | os.PathLike] = (),
        boot_namespaces: Iterable[str] = BOOT_NAMESPACES,
        watch_history: int = 4096,
    ):
        self.state_dir = Path(state_dir)
        self.store = Store(history=watch_history)
        self.lock = self.store.lock
        self.boot_namespaces = tuple(boot_namespaces)
        self.cluster_ips = kinds.ClusterIPs()
        self._schema_cache: dict[str, Any] = {}
        self._boot_crd_docs: list[bytes] = []
        self.registry_generation = 0
        self._pending_ns: set[str] = set()
        self._pending_crds: set[str] = set()
        self._pending_foreground: set[tuple[tuple[str, str], str, str]] = set()
        self._processing_pending = False
        self._gc_queue: set[tuple[tuple[str, str], str, str]] = set()
        self._gc_wakeup = threading.Event()
        self._closed = threading.Event()
        self.load_boot_crds(boot_crds)
        self.reset()
        self._gc_thread = threading.Thread(target=self._gc_loop, name="gc", daemon=True)
        self._gc_thread.start()

    # ------------------------------------------------------------------ boot / reset
    def load_boot_crds(self, paths: Iterable[str | os.PathLike]) -> None:
        """Read the CRDs to install at boot (kept as compact JSON, so reset() need not re-parse YAML)."""
        docs: list[bytes] = []
        for path in paths:
            p = Path(path)
            files = (
                sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml")) + sorted(p.glob("*.json"))
                if p.is_dir()
                else [p]
            )
            for f in files:
                docs.extend(_crd_docs_of_file(f))
        self._boot_crd_docs = docs

    def reset(self) -> None:
        """Back to the boot state: built-in kinds, boot namespaces, boot CRDs; nothing else."""
        with self.lock:
            self.store.reset()
            self.resources: dict[tuple[str, str, str], ResourceType] = {}
            self._pending_ns.clear()
            self._pending_crds.clear()
            self._pending_foreground.clear()
            self._gc_queue.clear()
            self.cluster_ips = kinds.ClusterIPs()
            for rt in builtin_resources():
                self.resources[(rt.group, rt.version, rt.plural)] = rt
            self._registry_changed()
            opts = WriteOptions(field_manager="kube-apiserver")
            for ns in self.boot_namespaces:
                self.create(
                    self.rt("", "v1", "namespaces"),
                    None,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                    opts,
                )
            for obj in auth.bootstrap_policy():
                plural = "clusterroles" if obj["kind"] == "ClusterRole" else "clusterrolebindings"
                self.create(self.rt(auth.RBAC, "v1", plural), None, obj, opts)
            crd_rt = self.rt("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            kubectl = WriteOptions(field_manager="kubectl-create")
            for raw in self._boot_crd_docs:
                doc = json.loads(raw)
                try:
                    self.create(crd_rt, None, doc, kubectl)
                except ApiError as exc:
                    log.error("boot CRD %s rejected: %s", _md(doc).get("name"), exc.message)
        shutil.rmtree(self.state_dir / "podlogs", ignore_errors=True)

    def close(self) -> None:
        self._closed.set()
        self._gc_wakeup.set()

    # ------------------------------------------------------------------ registry
    def _registry_changed(self) -> None:
        self.registry_generation += 1

    def rt(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.resources.get((group, version, plural))
        if rt is None:
            raise errors.resource_not_found()
        return rt

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.resources.get((group, version, plural))

    def served_groups(self) -> dict[str, list[str]]:
        """group -> versions (preferred first)."""
        out: dict[str, set[str]] = {}
        for g, v, _p in list(self.resources):
            out.setdefault(g, set()).add(v)
        return {g: sorted(vs, key=version_priority, reverse=True) for g, vs in out.items()}

    def resources_in(self, group: str, version: str) -> list[ResourceType]:
        return [rt for (g, v, _p), rt in sorted(self.resources.items()) if g == group and v == version]

    def all_resources(self) -> list[ResourceType]:
        return [rt for _k, rt in sorted(self.resources.items())]

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self.resources.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def storage_types(self) -> dict[tuple[str, str], ResourceType]:
        """One ResourceType per group/resource (preferred version)."""
        out: dict[tuple[str, str], ResourceType] = {}
        for rt in self.resources.values():
            cur = out.get(rt.group_resource)
            if cur is None or version_priority(rt.version) > version_priority(cur.version):
                out[rt.group_resource] = rt
        return out

    def compile_schema(self, schema_doc: dict) -> Any:
        key = crds.schema_key(schema_doc)
        compiled = self._schema_cache.get(key)
        if compiled is None:
            compiled = _schema_mod().StructuralSchema(schema_doc)
            if len(self._schema_cache) > 64:
                self._schema_cache.clear()
            self._schema_cache[key] = compiled
        return compiled

    def _register_crd(self, crd: dict) -> None:
        name = _md(crd).get("name")
        for key in [k for k, rt in self.resources.items() if rt.crd_name == name]:
            del self.resources[key]
        for rt in crds.resource_types(crd, self.compile_schema):
            self.resources[(rt.group, rt.version, rt.plural)] = rt
        self._registry_changed()

    def _unregister_crd(self, crd: dict) -> None:
        name = _md(crd).get("name")
        keys = [k for k, rt in self.resources.items() if rt.crd_name == name]
        for key in keys:
            del self.resources[key]
        spec = crd.get("spec") or {}
        self.store.drop_resource((spec.get("group", ""), (spec.get("names") or {}).get("plural", "")))
        self._registry_changed()

    # ------------------------------------------------------------------ reads
    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        obj = self.store.get(rt.group_resource, namespace or "", name)
        if obj is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return obj

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
    ) -> tuple[list[dict], int]:
        with self.lock:
            objs = self.store.list(rt.group_resource, namespace if rt.namespaced else None)
            rv = self.store.rv
        out = [o for o in objs if self.matches(o, labels, fields)]
        return out, rv

    @staticmethod
    def matches(obj: dict, labels: LabelSelector | None, fields: FieldSelector | None) -> bool:
        if labels and not labels.matches(_md(obj).get("labels")):
            return False
        if fields and not fields.matches(obj):
            return False
        return True

    def view(self, rt: ResourceType, obj: dict) -> dict:
        """An object as served through ``rt``'s version (apiVersion rewritten, no conversion)."""
        if obj.get("apiVersion") == rt.api_version:
            return obj
        v = dict(obj)
        v["apiVersion"] = rt.api_version
        return v

    # ------------------------------------------------------------------ namespace checks
    def _check_namespace(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get(("", "namespaces"), "", namespace or "")
        if ns is None:
            raise errors.namespace_not_found(namespace or "")
        if _md(ns).get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{errors.qualified(rt.plural, rt.group)} "{name}" is forbidden: unable to create new '
                f"content in namespace {namespace} because it is being terminated",
                {
                    "name": name,
                    **({"group": rt.group} if rt.group else {}),
                    "kind": rt.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _check_crd_serving(self, rt: ResourceType, verb: str) -> None:
        if rt.crd_name:
            crd = self.store.get(crds.CRD_GR, "", rt.crd_name)
            if crd is not None and _md(crd).get("deletionTimestamp") and verb == "create":
                raise errors.method_not_allowed(
                    f"create not allowed while custom resource definition is terminating"
                )

    # ------------------------------------------------------------------ create
    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        opts: WriteOptions,
        subresource: str | None = None,
        name: str = "",
    ) -> Result:
        if subresource == "binding" and rt.group_resource == ("", "pods"):
            return self._bind_pod(rt, namespace, name, body, opts)
        if subresource:
            raise errors.method_not_allowed()
        obj = self._decode(rt, body)
        md = obj["metadata"]
        self._check_body_namespace(rt, namespace, md)
        with self.lock:
            self._check_crd_serving(rt, "create")
            if not md.get("name") and md.get("generateName"):
                md["name"] = validation.generated_name(str(md["generateName"]), random_suffix())
            if md.get("resourceVersion"):
                raise ApiError(500, "", "resourceVersion should not be set on objects to be created")
            self._check_namespace(rt, namespace, md.get("name") or "")
            return self._create_locked(rt, obj, opts)

    def _bind_pod(
        self, rt: ResourceType, namespace: str | None, name: str, body: Any, opts: WriteOptions
    ) -> Result:
        """POST pods/NAME/binding (what a scheduler does): sets spec.nodeName once."""
        if not isinstance(body, dict) or not (body.get("target") or {}).get("name"):
            raise errors.ApiError(
                422,
                "Invalid",
                f'Binding.core "{name}" is invalid: target.name: Required value',
                {"name": name, "kind": "Binding"},
            )
        node = body["target"]["name"]
        with self.lock:
            old = self.get(rt, namespace, name)
            current = (old.get("spec") or {}).get("nodeName")
            if current:
                raise errors.conflict(
                    rt.plural, rt.group, name, f'pod {name} is already assigned to node "{current}"'
                )
            if _md(old).get("deletionTimestamp"):
                raise errors.conflict(
                    rt.plural, rt.group, name, f"pod {name} is being deleted, cannot be assigned " "to a host"
                )
            new = clone(old)
            new.setdefault("spec", {})["nodeName"] = node
            conds = [
                c
                for c in (new.setdefault("status", {}).get("conditions") or [])
                if c.get("type") != "PodScheduled"
            ]
            conds.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": now_rfc3339(),
                }
            )
            new["status"]["conditions"] = conds
            if not opts.dry_run:
                stored = self.store.put(rt.group_resource, new, old)
                self._after_write(rt, old, stored)
        return Result(errors.success_status(), [], 201)

    def _create_locked(
        self,
        rt: ResourceType,
        obj: dict,
        opts: WriteOptions,
        apply: bool = False,
        warnings: list[str] | None = None,
    ) -> Result:
        md = obj["metadata"]
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "generation"):
            md.pop(k, None)
        md["uid"] = new_uid()
        md["creationTimestamp"] = now_rfc3339()
        if rt.is_custom:
            if rt.status_subresource:
                obj.pop("status", None)
        elif rt.group_resource == crds.CRD_GR:
            obj.pop("status", None)
            obj["status"] = {
                "acceptedNames": {"kind": "", "plural": ""},
                "conditions": [],
                "storedVersions": [],
            }
        else:
            kinds.prepare_create(rt, obj, self)
        res = self._admit(rt, None, obj, opts, None, apply=apply, warnings=warnings)
        res.code = 201
        if not opts.dry_run and rt.group_resource == crds.CRD_GR:
            self._crd_established(res.obj)
        if not opts.dry_run and rt.group_resource == ("", "namespaces"):
            self._namespace_created(res.obj)
        if opts.dry_run:
            res.obj["metadata"].pop("resourceVersion", None)
        return res

    def _decode(self, rt: ResourceType, body: Any) -> dict:
        if not isinstance(body, dict):
            raise errors.bad_request(
                f"Object 'Kind' is missing in '{json.dumps(body)[:200]}'"
                if body is not None
                else "the body of the request was empty"
            )
        obj = clone(body)
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if api_version and api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the "
                f"expected API version ({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        md = obj.get("metadata")
        if md is None:
            md = obj["metadata"] = {}
        if not isinstance(md, dict):
            raise errors.bad_request(
                "json: cannot unmarshal into Go struct field .metadata of type " "v1.ObjectMeta"
            )
        if not rt.is_custom:
            msg = kinds.decode_errors(rt, obj)
            if msg:
                raise errors.bad_request(msg)
        return obj

    def _check_body_namespace(self, rt: ResourceType, namespace: str | None, md: dict) -> None:
        if rt.namespaced:
            body_ns = md.get("namespace")
            if body_ns and namespace and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace " "sent on the request"
                )
            md["namespace"] = namespace or body_ns or ""
        else:
            md.pop("namespace", None)

    # ------------------------------------------------------------------ update (PUT)
    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        opts: WriteOptions,
        subresource: str | None = None,
    ) -> Result:
        if subresource not in (None, "status", "finalize", "scale"):
            raise errors.method_not_allowed()
        if subresource == "scale":
            return self._update_scale(rt, namespace, name, body, opts)
        obj = self._decode(rt, body)
        md = obj["metadata"]
        if md.get("name") and md["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({md['name']}) does not match the name on the " f"URL ({name})"
            )
        md["name"] = name
        self._check_body_namespace(rt, namespace, md)
        with self.lock:
            old = self.store.get(rt.group_resource, namespace or "", name)
            if old is None:
                if rt.allow_create_on_update and subresource is None:
                    self._check_namespace(rt, namespace, name)
                    md.pop("resourceVersion", None)
                    return self._create_locked(rt, obj, opts)
                raise errors.not_found(rt.plural, rt.group, name)
            rv = md.get("resourceVersion")
            if rv and rv != _md(old).get("resourceVersion"):
                raise errors.modified_conflict(rt.plural, rt.group, name)
            if subresource == "finalize":
                merged = clone(old)
                merged.setdefault("spec", {})["finalizers"] = list(
                    (obj.get("spec") or {}).get("finalizers") or []
                )
                res = self._admit(rt, old, merged, opts, None)
                self._process_pending()
                return res
            res = self._admit(rt, old, obj, opts, subresource)
            return res

    # ------------------------------------------------------------------ patch
    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch_body: Any,
        patch_type: str,
        opts: WriteOptions,
        subresource: str | None = None,
    ) -> Result:
        if subresource not in (None, "status", "scale"):
            raise errors.method_not_allowed()
        pm = _patch_mod()
        if patch_type == "strategic" and (rt.is_custom or (subresource == "scale")):
            if rt.is_custom:
                raise errors.unsupported_media_type(errors.UNSUPPORTED_PATCH_CR)
        if patch_type == "apply" and not opts.field_manager:
            raise errors.bad_request(
                "PATCH is not supported for apply without a fieldManager; "
                "fieldManager is required for apply requests"
            )
        if subresource == "scale":
            return self._patch_scale(rt, namespace, name, patch_body, patch_type, opts)
        with self.lock:
            old = self.store.get(rt.group_resource, namespace or "", name)
            warnings: list[str] = []
            if patch_type == "apply":
                config = self._apply_config(rt, patch_body, namespace, name)
                if old is None:
                    if subresource:
                        raise errors.not_found(rt.plural, rt.group, name)
                    self._check_crd_serving(rt, "create")
                    self._check_namespace(rt, namespace, name)
                    warnings = self._prune_unknown(rt, config, opts)
                    info = self._type_info(rt)
                    try:
                        new = pm.server_side_apply(
                            None, config, opts.field_manager, opts.force, info, self._now()
                        )
                    except pm.PatchError as exc:
                        raise self._patch_error(exc, rt, name) from None
                    new["apiVersion"], new["kind"] = rt.api_version, rt.kind
                    new.setdefault("metadata", {})["name"] = name
                    if rt.namespaced:
                        new["metadata"]["namespace"] = namespace or ""
                    return self._create_locked(rt, new, opts, apply=True, warnings=warnings)
                warnings = self._prune_unknown(rt, config, opts)
                info = self._type_info(rt)
                try:
                    new = pm.server_side_apply(
                        old,
                        config,
                        opts.field_manager,
                        opts.force,
                        info,
                        self._now(),
                        subresource=subresource,
                    )
                except pm.PatchError as exc:
                    raise self._patch_error(exc, rt, name) from None
                self._check_patch_rv(rt, old, new, name, config)
                return self._admit(rt, old, new, opts, subresource, apply=True, warnings=warnings)
            if old is None:
                raise errors.not_found(rt.plural, rt.group, name)
            try:
                if patch_type == "merge":
                    new = pm.json_merge_patch(old, patch_body)
                elif patch_type == "json":
                    if not isinstance(patch_body, list):
                        raise errors.bad_request(
                            "json: cannot unmarshal object into Go value of type " "jsonpatch.Patch"
                        )
                    new = pm.json_patch(old, patch_body)
                elif patch_type == "strategic":
                    new = pm.strategic_merge_patch(old, patch_body, self._type_info(rt))
                else:
                    raise errors.unsupported_media_type(f"unsupported patch type {patch_type!r}")
            except pm.PatchError as exc:
                raise self._patch_error(exc, rt, name) from None
            if not isinstance(new, dict):
                raise errors.bad_request("the patched object is not a JSON object")
            self._check_patch_rv(rt, old, new, name, patch_body if isinstance(patch_body, dict) else None)
            if new.get("apiVersion") not in (None, rt.api_version) or new.get("kind") not in (None, rt.kind):
                if new.get("kind") not in (None, rt.kind):
                    raise errors.bad_request(
                        f"the kind in the data ({new.get('kind')}) does not match the "
                        f"expected kind ({rt.kind})"
                    )
            md = new.get("metadata")
            if not isinstance(md, dict):
                new["metadata"] = md = {}
            if md.get("name") not in (None, name):
                raise errors.bad_request(
                    f"the name of the object ({md.get('name')}) does not match the name "
                    f"on the URL ({name})"
                )
            if rt.namespaced and md.get("namespace") not in (None, "", namespace):
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace " "sent on the request"
                )
            md["name"] = name
            if rt.namespaced:
                md["namespace"] = namespace or ""
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            if not rt.is_custom:
                msg = kinds.decode_errors(rt, new)
                if msg:
                    raise errors.bad_request(msg)
            return self._admit(rt, old, new, opts, subresource)

    def _check_patch_rv(self, rt: ResourceType, old: dict, new: dict, name: str, patch: dict | None) -> None:
        new_rv = _md(new).get("resourceVersion")
        if new_rv and new_rv != _md(old).get("resourceVersion"):
            raise errors.modified_conflict(rt.plural, rt.group, name)

    def _apply_config(self, rt: ResourceType, body: Any, namespace: str | None, name: str) -> dict:
        if not isinstance(body, dict):
            raise errors.bad_request("error decoding YAML: the body of an apply request must be an object")
        if not body.get("apiVersion"):
            raise errors.bad_request("apiVersion must be set")
        if not body.get("kind"):
            raise errors.bad_request("kind must be set")
        if body.get("kind") != rt.kind or body.get("apiVersion") != rt.api_version:
            if body.get("kind") != rt.kind:
                raise errors.bad_request(
                    f"the kind in the data ({body.get('kind')}) does not match the "
                    f"expected kind ({rt.kind})"
                )
            raise errors.bad_request(
                f"the API version in the data ({body.get('apiVersion')}) does not match "
                f"the expected API version ({rt.api_version})"
            )
        config = clone(body)
        md = config.get("metadata")
        if not isinstance(md, dict):
            md = config["metadata"] = {}
        if md.get("name") and md["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({md['name']}) does not match the name on the " f"URL ({name})"
            )
        md["name"] = name
        if rt.namespaced:
            if md.get("namespace") and md["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace " "sent on the request"
                )
            md["namespace"] = namespace or ""
        else:
            md.pop("namespace", None)
        if not rt.is_custom:
            msg = kinds.decode_errors(rt, config)
            if msg:
                raise errors.bad_request(msg)
        return config

    def _type_info(self, rt: ResourceType) -> Any:
        """Type information for patches and managedFields (deduced for kinds patch.py lacks)."""
        pm = _patch_mod()
        if rt.is_custom:
            return pm.schema_type_info(rt.schema)
        return pm.builtin_type_info(rt.group, rt.version, rt.kind) or pm.deduced_type_info()

    @staticmethod
    def _now() -> Any:
        return now_rfc3339()

    def _patch_error(self, exc: Any, rt: ResourceType, name: str) -> ApiError:
        status = None
        for attr in ("status", "to_status", "body"):
            fn = getattr(exc, attr, None)
            if callable(fn):
                try:
                    status = fn()
                except TypeError:
                    status = None
            elif isinstance(fn, dict):
                status = fn
            if isinstance(status, dict):
                break
        code = int(getattr(exc, "code", 500) or 500)
        reason = getattr(exc, "reason", "") or ""
        message = getattr(exc, "message", None) or str(exc)
        if isinstance(status, dict) and status.get("kind") == "Status":
            return ApiError(code, reason, message, body=status)
        return ApiError(code, reason, message, getattr(exc, "details", None))

    # ------------------------------------------------------------------ scale subresource
    def get_scale(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        if not rt.scale_paths:
            raise errors.resource_not_found()
        obj = self.get(rt, namespace, name)
        return self._scale_of(rt, obj)

    def _scale_of(self, rt: ResourceType, obj: dict) -> dict:
        md = _md(obj)
        spec_path = rt.scale_paths["spec"].split(".")
        status_path = rt.scale_paths["status"].split(".")
        from .util import get_path

        sel = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: md[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in md
            },
            "spec": {"replicas": get_path(obj, spec_path) or 0},
            "status": {
                "replicas": get_path(obj, status_path) or 0,
                "selector": ",".join(f"{k}={v}" for k, v in sorted(sel.items())),
            },
        }

    def _set_replicas(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        replicas: Any,
        rv: str | None,
        opts: WriteOptions,
    ) -> Result:
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.invalid(
                "Scale",
                "autoscaling",
                name,
                [FieldErr("Invalid", "spec.replicas", "must be greater than or equal to 0", replicas, True)],
            )
        with self.lock:
            old = self.get(rt, namespace, name)
            if rv and rv != _md(old).get("resourceVersion"):
                raise errors.modified_conflict(rt.plural, rt.group, name)
            new = clone(old)
            cur = new
            path = rt.scale_paths["spec"].split(".")
            for p in path[:-1]:
                cur = cur.setdefault(p, {})
            cur[path[-1]] = replicas
            res = self._admit(rt, old, new, opts, None)
            res.obj = self._scale_of(rt, res.obj)
            return res

    def _update_scale(
        self, rt: ResourceType, namespace: str | None, name: str, body: Any, opts: WriteOptions
    ) -> Result:
        if not rt.scale_paths:
            raise errors.resource_not_found()
        if not isinstance(body, dict):
            raise errors.bad_request("invalid Scale body")
        return self._set_replicas(
            rt,
            namespace,
            name,
            (body.get("spec") or {}).get("replicas"),
            _md(body).get("resourceVersion"),
            opts,
        )

    def _patch_scale(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch_body: Any,
        patch_type: str,
        opts: WriteOptions,
    ) -> Result:
        if not rt.scale_paths:
            raise errors.resource_not_found()
        pm = _patch_mod()
        scale = self.get_scale(rt, namespace, name)
        try:
            if patch_type == "json":
                new = pm.json_patch(scale, patch_body)
            else:
                new = pm.json_merge_patch(scale, patch_body)
        except pm.PatchError as exc:
            raise self._patch_error(exc, rt, name) from None
        return self._set_replicas(rt, namespace, name, (new.get("spec") or {}).get("replicas"), None, opts)

    # ------------------------------------------------------------------ the write pipeline
    def _prune_unknown(self, rt: ResourceType, obj: dict, opts: WriteOptions) -> list[str]:
        """Drop unknown fields; Strict turns them into a 400, Warn into warnings."""
        unknown: list[str] = []
        md = obj.get("metadata")
        if isinstance(md, dict):
            for k in [k for k in md if k not in OBJECT_META_FIELDS]:
                del md[k]
                unknown.append(f"metadata.{k}")
        if rt.is_custom:
            if rt.schema is not None:
                unknown.extend(p for p in (rt.schema.prune(obj) or []) if not p.startswith("metadata."))
        elif rt.known_fields:
            for k in [k for k in obj if k not in rt.known_fields]:
                del obj[k]
                unknown.append(k)
        if not unknown or opts.field_validation == "Ignore":
            return []
        msgs = [f'unknown field "{p}"' for p in unknown]
        if opts.field_validation == "Strict":
            raise errors.bad_request("strict decoding error: " + ", ".join(msgs))
        return msgs

    def _admit(
        self,
        rt: ResourceType,
        old: dict | None,
        new: dict,
        opts: WriteOptions,
        subresource: str | None,
        apply: bool = False,
        warnings: list[str] | None = None,
    ) -> Result:
        warnings = list(warnings or [])
        md = new.setdefault("metadata", {})
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        # --- subresource semantics
        if subresource == "status" and old is not None:
            merged = clone(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            if "managedFields" in md:
                merged["metadata"]["managedFields"] = md["managedFields"]
            new = merged
            md = new["metadata"]
        elif old is not None and rt.status_subresource:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        # --- unknown fields (apply configs were pruned before merging)
        if not apply:
            warnings.extend(self._prune_unknown(rt, new, opts))
        else:
            self._prune_unknown(rt, new, WriteOptions(field_validation="Ignore"))
        # --- defaulting
        if rt.is_custom:
            if rt.schema is not None:
                rt.schema.apply_defaults(new)
        elif rt.group_resource == crds.CRD_GR:
            crds.apply_defaults(new)
        else:
            kinds.apply_defaults(rt, new, self)
        # --- system metadata
        if old is not None:
            omd = _md(old)
            for k in SYSTEM_META:
                if k in omd:
                    md[k] = omd[k]
                else:
                    md.pop(k, None)
            md["name"] = omd.get("name")
            if rt.namespaced:
                md["namespace"] = omd.get("namespace")
            (
                md.pop("generateName", None)
                if "generateName" not in omd
                else md.__setitem__("generateName", omd["generateName"])
            )
        md.pop("selfLink", None)
        md.pop("resourceVersion", None)
        # --- validation
        errs, warns = validation.validate_metadata(rt, new, old)
        warnings.extend(warns)
        schema_errs: list[Any] = []
        if rt.is_custom:
            if rt.schema is not None:
                if subresource == "status":
                    schema_errs = list(rt.schema.validate_status(new) or [])
                else:
                    schema_errs = list(rt.schema.validate(new) or [])
        elif rt.group_resource == crds.CRD_GR:
            errs.extend(crds.validate(new, old, self.compile_schema))
        else:
            errs.extend(kinds.validate(rt, new, old))
        if errs or schema_errs:
            raise self._invalid(rt, md.get("name") or "", errs, schema_errs)
        # --- generation
        if rt.has_generation or rt.is_custom:
            if old is None:
                md["generation"] = 1
            else:
                gen = int(_md(old).get("generation") or 1)
                if subresource != "status" and self._spec_changed(rt, old, new):
                    gen += 1
                md["generation"] = gen
        elif old is not None and "generation" in _md(old):
            md["generation"] = _md(old)["generation"]
        else:
            md.pop("generation", None)
        # --- managed fields
        if not apply:
            pm = _patch_mod()
            pm.record_update(old, new, opts.manager(), self._type_info(rt), self._now(), subresource)
        # --- no-op?
        if old is not None and deep_equal(_strip_volatile(old), _strip_volatile(new)):
            return Result(old, warnings)
        # --- a deleting object whose last finalizer went away
        if old is not None and _md(old).get("deletionTimestamp") and not md.get("finalizers"):
            if rt.group_resource == ("", "namespaces") and (new.get("spec") or {}).get("finalizers"):
                pass
            else:
                if opts.dry_run:
                    return Result(new, warnings)
                final = self._remove(rt, old)
                self._process_pending()
                return Result(final, warnings)
        if old is None and self.store.get(
            rt.group_resource, md.get("namespace", "") or "", md.get("name", "")
        ):
            raise errors.already_exists(rt.plural, rt.group, md.get("name", ""))
        if opts.dry_run:
            if old is not None:
                md["resourceVersion"] = _md(old).get("resourceVersion")
            return Result(new, warnings)
        stored = self.store.put(rt.group_resource, new, old)
        self._after_write(rt, old, stored)
        if rt.deprecated and rt.deprecation_warning:
            warnings.append(rt.deprecation_warning)
        return Result(stored, warnings)

    def _spec_changed(self, rt: ResourceType, old: dict, new: dict) -> bool:
        skip = {"metadata", "apiVersion", "kind"}
        if rt.status_subresource:
            skip.add("status")
        a = {k: v for k, v in old.items() if k not in skip}
        b = {k: v for k, v in new.items() if k not in skip}
        return not deep_equal(a, b)

    def _invalid(self, rt: ResourceType, name: str, errs: list[FieldErr], schema_errs: list[Any]) -> ApiError:
        sm = _schema_mod()
        converted = [
            sm.FieldError(
                FieldErr.REASONS.get(e.type, "FieldValueInvalid"),
                e.field,
                e.detail,
                e.value if e.has_value else sm.OMIT,
            )
            for e in errs
        ]
        body = sm.invalid_status(rt.kind, rt.group, name, converted + list(schema_errs))
        return ApiError(422, "Invalid", body.get("message", ""), body=body)

    def _after_write(self, rt: ResourceType, old: dict | None, obj: dict) -> None:
        if rt.group_resource == crds.CRD_GR and not _md(obj).get("deletionTimestamp"):
            if old is None or not deep_equal(old.get("spec"), obj.get("spec")):
                try:
                    self._register_crd(obj)
                except Exception as exc:  # schema compiled once already in validation
                    log.error("registering CRD %s failed: %s", _md(obj).get("name"), exc)
                if old is not None:
                    self._crd_established(obj)
        if _md(obj).get("ownerReferences"):
            self._gc_queue.add((rt.group_resource, *_ns_name(obj)))
            self._gc_wakeup.set()

    def _crd_established(self, crd: dict) -> None:
        new = clone(crd)
        new["status"] = crds.established_status(crd, crd.get("status"), now_rfc3339())
        if deep_equal(new["status"], crd.get("status")):
            return
        rt = self.rt(*crds.CRD_GR[:1], "v1", crds.CRD_GR[1])
        self.store.put(rt.group_resource, new, crd)

    def _namespace_created(self, ns: dict) -> None:
        name = _md(ns).get("name", "")
        sa_rt = self.rt("", "v1", "serviceaccounts")
        if self.store.get(sa_rt.group_resource, name, "default") is None:
            self._create_locked(
                sa_rt,
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": name},
                },
                WriteOptions(field_manager="kube-controller-manager"),
            )

    # ------------------------------------------------------------------ delete
    def delete(self, rt: ResourceType, namespace: str | None, name: str, opts: DeleteOptions) -> Result:
        with self.lock:
            obj = self.store.get(rt.group_resource, namespace or "", name)
            if obj is None:
                raise errors.not_found(rt.plural, rt.group, name)
            md = _md(obj)
            if opts.precondition_uid and opts.precondition_uid != md.get("uid"):
                raise errors.conflict(
                    rt.plural,
                    rt.group,
                    name,
                    f"Precondition failed: UID in precondition: {opts.precondition_uid}, "
                    f"UID in object meta: {md.get('uid')}",
                )
            if opts.precondition_rv and opts.precondition_rv != md.get("resourceVersion"):
                raise errors.conflict(
                    rt.plural,
                    rt.group,
                    name,
                    f"the ResourceVersion in the precondition ({opts.precondition_rv}) does "
                    f"not match the ResourceVersion in record ({md.get('resourceVersion')}). "
                    "The object might have been modified",
                )
            result = self._delete_locked(rt, obj, opts)
            if not opts.dry_run:
                self._process_pending()
            return result

    def _status_for_delete(self, rt: ResourceType, obj: dict) -> dict:
        details: dict[str, Any] = {"name": _md(obj).get("name")}
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
        details["uid"] = _md(obj).get("uid")
        return errors.success_status(details)

    def _delete_locked(self, rt: ResourceType, obj: dict, opts: DeleteOptions) -> Result:
        md = _md(obj)
        gr = rt.group_resource
        if gr == ("", "namespaces"):
            return self._delete_namespace(rt, obj, opts)
        if gr == crds.CRD_GR:
            return self._delete_crd(rt, obj, opts)
        policy = opts.propagation or "Background"
        finalizers = list(md.get("finalizers") or [])
        if policy == "Foreground" and self._dependents(obj):
            if "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
        if policy == "Orphan" and not opts.dry_run:
            self._orphan_dependents(obj)
        if md.get("deletionTimestamp"):
            # already being deleted: nothing more to do than what finalizers will do
            return Result(obj, [], 200)
        if finalizers:
            new = clone(obj)
            nmd = new["metadata"]
            nmd["finalizers"] = finalizers
            nmd["deletionTimestamp"] = now_rfc3339()
            nmd["deletionGracePeriodSeconds"] = 0
            if rt.has_generation or rt.is_custom:
                nmd["generation"] = int(nmd.get("generation") or 1) + 1
            if opts.dry_run:
                return Result(new, [], 200)
            stored = self.store.put(gr, new, obj)
            if "foregroundDeletion" in finalizers:
                self._pending_foreground.add((gr, *_ns_name(stored)))
                self._delete_dependents(stored, "Foreground")
            return Result(self.view(rt, stored), [], 200)
        if opts.dry_run:
            return Result(obj if rt.return_deleted_object else self._status_for_delete(rt, obj), [], 200)
        final = self._remove(rt, obj)
        return Result(
            self.view(rt, final) if rt.return_deleted_object else self._status_for_delete(rt, obj), [], 200
        )

    def _remove(self, rt: ResourceType, obj: dict) -> dict:
        ns, name = _ns_name(obj)
        final = self.store.remove(rt.group_resource, ns, name)
        if final is None:
            return obj
        if rt.group_resource == ("", "pods"):
            podlogs.remove_pod(self.state_dir, ns, name)
        if rt.group_resource == crds.CRD_GR:
            self._unregister_crd(final)
        if rt.group_resource == ("", "namespaces"):
            self._pending_ns.discard(name)
        self._delete_dependents(final, "Background")
        return final

    # --- garbage collection
    def _dependents(self, owner: dict) -> list[tuple[ResourceType, dict]]:
        uid = _md(owner).get("uid")
        if not uid:
            return []
        types = self.storage_types()
        out = []
        for gr, obj in self.store.iter_all():
            for ref in _md(obj).get("ownerReferences") or []:
                if isinstance(ref, dict) and ref.get("uid") == uid:
                    rt = types.get(gr)
                    if rt is not None:
                        out.append((rt, obj))
                    break
        return out

    def _delete_dependents(self, owner: dict, policy: str) -> None:
        for rt, dep in self._dependents(owner):
            cur = self.store.get(rt.group_resource, *_ns_name(dep))
            if cur is None or _md(cur).get("deletionTimestamp"):
                continue
            self._delete_locked(rt, cur, DeleteOptions(propagation=policy))

    def _orphan_dependents(self, owner: dict) -> None:
        uid = _md(owner).get("uid")
        for rt, dep in self._dependents(owner):
            new = clone(dep)
            refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self.store.put(rt.group_resource, new, dep)

    # --- namespaces
    def _delete_namespace(self, rt: ResourceType, ns: dict, opts: DeleteOptions) -> Result:
        if _md(ns).get("deletionTimestamp"):
            return Result(ns, [], 200)
        new = clone(ns)
        new["metadata"]["deletionTimestamp"] = now_rfc3339()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("status", {})["phase"] = "Terminating"
        if opts.dry_run:
            return Result(new, [], 200)
        stored = self.store.put(rt.group_resource, new, ns)
        name = _md(ns).get("name", "")
        self._pending_ns.add(name)
        return Result(stored, [], 200)

    def _finalize_namespace(self, name: str) -> bool:
        """Delete the namespace's contents; remove it when empty. True when something changed."""
        ns_rt = self.rt("", "v1", "namespaces")
        ns = self.store.get(ns_rt.group_resource, "", name)
        if ns is None:
            self._pending_ns.discard(name)
            return False
        changed = False
        remaining = 0
        for gr, rt in self.storage_types().items():
            if not rt.namespaced:
                continue
            for obj in self.store.list(gr, name):
                remaining += 1
                if not _md(obj).get("deletionTimestamp"):
                    self._delete_locked(rt, obj, DeleteOptions(propagation="Background"))
                    changed = True
        if remaining:
            remaining = sum(
                self.store.count(gr, name) for gr, rt in self.storage_types().items() if rt.namespaced
            )
        if remaining == 0:
            cur = self.store.get(ns_rt.group_resource, "", name)
            if (cur.get("spec") or {}).get("finalizers"):
                new = clone(cur)
                new["spec"]["finalizers"] = []
                cur = self.store.put(ns_rt.group_resource, new, cur)
            if not _md(cur).get("finalizers"):
                self._remove(ns_rt, cur)
            self._pending_ns.discard(name)
            changed = True
        return changed

    # --- CRDs
    def _delete_crd(self, rt: ResourceType, crd: dict, opts: DeleteOptions) -> Result:
        if _md(crd).get("deletionTimestamp"):
            return Result(crd, [], 200)
        new = clone(crd)
        nmd = new["metadata"]
        nmd["deletionTimestamp"] = now_rfc3339()
        nmd["deletionGracePeriodSeconds"] = 0
        nmd["generation"] = int(nmd.get("generation") or 1) + 1
        fins = list(nmd.get("finalizers") or [])
        if crds.CLEANUP_FINALIZER not in fins:
            fins.append(crds.CLEANUP_FINALIZER)
        nmd["finalizers"] = fins
        new["status"] = crds.terminating_status(crd.get("status"), now_rfc3339())
        if opts.dry_run:
            return Result(new, [], 200)
        stored = self.store.put(rt.group_resource, new, crd)
        self._pending_crds.add(nmd["name"])
        return Result(stored, [], 200)

    def _finalize_crd(self, name: str) -> bool:
        crd_rt = self.rt("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        crd = self.store.get(crd_rt.group_resource, "", name)
        if crd is None:
            self._pending_crds.discard(name)
            return False
        spec = crd.get("spec") or {}
        gr = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        rt = self.storage_types().get(gr)
        changed = False
        if rt is not None:
            for obj in self.store.list(gr, None):
                if not _md(obj).get("deletionTimestamp"):
                    self._delete_locked(rt, obj, DeleteOptions(propagation="Background"))
                    changed = True
        if self.store.count(gr) == 0:
            cur = self.store.get(crd_rt.group_resource, "", name)
            fins = [f for f in _md(cur).get("finalizers") or [] if f != crds.CLEANUP_FINALIZER]
            if fins:
                new = clone(cur)
                new["metadata"]["finalizers"] = fins
                self.store.put(crd_rt.group_resource, new, cur)
                self._unregister_crd(cur)
            else:
                self._remove(crd_rt, cur)
            self._pending_crds.discard(name)
            changed = True
        return changed

    def _finalize_foreground(self, key: tuple[tuple[str, str], str, str]) -> bool:
        gr, ns, name = key
        obj = self.store.get(gr, ns, name)
        if obj is None or "foregroundDeletion" not in (_md(obj).get("finalizers") or []):
            self._pending_foreground.discard(key)
            return False
        if self._dependents(obj):
            return False
        rt = self.storage_types().get(gr)
        new = clone(obj)
        fins = [f for f in new["metadata"].get("finalizers") or [] if f != "foregroundDeletion"]
        self._pending_foreground.discard(key)
        if fins:
            new["metadata"]["finalizers"] = fins
            self.store.put(gr, new, obj)
        else:
            new["metadata"].pop("finalizers", None)
            if rt is not None:
                self._remove(rt, obj)
        return True

    def _process_pending(self) -> None:
        if self._processing_pending:
            return
        self._processing_pending = True
        try:
            for _ in range(100):
                progressed = False
                for name in list(self._pending_ns):
                    progressed |= self._finalize_namespace(name)
                for name in list(self._pending_crds):
                    progressed |= self._finalize_crd(name)
                for key in list(self._pending_foreground):
                    progressed |= self._finalize_foreground(key)
                if not progressed:
                    break
        finally:
            self._processing_pending = False

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        opts: DeleteOptions,
    ) -> Result:
        if "deletecollection" not in rt.verbs:
            raise errors.method_not_allowed()
        with self.lock:
            objs, _ = self.list(rt, namespace, labels, fields)
            items = []
            for obj in objs:
                res = self._delete_locked(rt, obj, opts)
                items.append(
                    res.obj
                    if isinstance(res.obj, dict) and res.obj.get("kind") == rt.kind
                    else self.view(rt, obj)
                )
            if not opts.dry_run:
                self._process_pending()
            return Result(
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(self.store.rv)},
                    "items": items,
                }
            )

    # ------------------------------------------------------------------ after-the-fact hooks
    def after_mutation(self) -> None:
        """Run cleanups that removals or finalizer edits made possible."""
        with self.lock:
            if self._pending_ns or self._pending_crds or self._pending_foreground:
                self._process_pending()

    def _gc_loop(self) -> None:
        while not self._closed.is_set():
            self._gc_wakeup.wait(1.0)
            self._gc_wakeup.clear()
            if self._closed.is_set():
                return
            time.sleep(0.05)
            try:
                self._gc_dangling()
                self.after_mutation()
            except Exception:  # keep the collector alive whatever happens
                log.exception("garbage collector")

    def _gc_dangling(self) -> None:
        """Dependents whose owners do not exist are deleted, as the real garbage collector does."""
        with self.lock:
            queue, self._gc_queue = self._gc_queue, set()
            types = self.storage_types()
            for gr, ns, name in queue:
                obj = self.store.get(gr, ns, name)
                rt = types.get(gr)
                if obj is None or rt is None or _md(obj).get("deletionTimestamp"):
                    continue
                refs = [r for r in _md(obj).get("ownerReferences") or [] if isinstance(r, dict)]
                dangling = []
                for ref in refs:
                    owner_rt = self.by_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
                    if owner_rt is None:
                        continue  # unknown kind: the real collector cannot decide either
                    if owner_rt.namespaced and not rt.namespaced:
                        dangling.append(ref)
                        continue
                    owner = self.store.get(
                        owner_rt.group_resource, ns if owner_rt.namespaced else "", ref.get("name", "")
                    )
                    if owner is None or _md(owner).get("uid") != ref.get("uid"):
                        dangling.append(ref)
                if not dangling:
                    continue
                if len(dangling) == len(refs):
                    self._delete_locked(rt, obj, DeleteOptions(propagation="Background"))
                else:
                    new = clone(obj)
                    bad = {id(r) for r in dangling}
                    new["metadata"]["ownerReferences"] = [r for r in refs if id(r) not in bad]
                    self.store.put(gr, new, obj)
            self._process_pending()

    # ------------------------------------------------------------------ pod logs
    def pod_log_path(self, namespace: str, pod: dict, container: str | None, previous: bool) -> Path | None:
        spec = pod.get("spec") or {}
        names = [c.get("name") for c in spec.get("containers") or [] if isinstance(c, dict)]
        init_names = [c.get("name") for c in spec.get("initContainers") or [] if isinstance(c, dict)]
        eph_names = [c.get("name") for c in spec.get("ephemeralContainers") or [] if isinstance(c, dict)]
        pod_name = _md(pod).get("name")
        if not container:
            if len(names) == 1:
                container = names[0]
            else:
                msg = f"a container name must be specified for pod {pod_name}, choose one of: [{' '.join(names)}]"
                if init_names:
                    msg += f" or one of the init containers: [{' '.join(init_names)}]"
                raise errors.bad_request(msg)
        if container not in names + init_names + eph_names:
            raise errors.bad_request(f"container {container} is not valid for pod {pod_name}")
        path = podlogs.log_path(self.state_dir, namespace, pod_name, container, previous)
        if previous:
            if not path.exists():
                raise errors.bad_request(
                    f'previous terminated container "{container}" in pod "{pod_name}" ' "not found"
                )
            return path
        if not path.exists():
            for st in (pod.get("status") or {}).get("containerStatuses") or []:
                if st.get("name") == container and (st.get("state") or {}).get("waiting"):
                    reason = st["state"]["waiting"].get("reason") or "ContainerCreating"
                    raise errors.bad_request(
                        f'container "{container}" in pod "{pod_name}" is waiting to ' f"start: {reason}"
                    )
            return None
        return path

    @staticmethod
    def container_finished(pod: dict | None, container: str) -> bool:
        if pod is None:
            return True
        st = pod.get("status") or {}
        if st.get("phase") in ("Succeeded", "Failed"):
            return True
        for cs in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or []):
            if cs.get("name") == container and "terminated" in (cs.get("state") or {}):
                return True
        return False


def _cache_dir() -> Path | None:
    env = os.environ.get("SPECPILOT_LAB_CACHE")
    if env == "":
        return None
    base = Path(env) if env else Path(__file__).resolve().parents[3] / ".cache" / "specpilot-lab"
    return base / "crd-json"


def _crd_docs_of_file(path: Path) -> list[bytes]:
    """The CRDs in one YAML/JSON file as compact JSON documents.

    Parsing the 2 MB upstream KServe YAML takes about a second even with libyaml, so the result
    is cached by content hash under ``.cache/specpilot-lab`` (``SPECPILOT_LAB_CACHE`` overrides it,
    an empty value turns the cache off).
    """
    import hashlib

    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    cache = _cache_dir()
    cached = cache / f"{digest}.json" if cache else None
    if cached is not None:
        try:
            return [line for line in cached.read_bytes().split(b"\n") if line]
        except OSError:
            pass
    docs: list[dict] = []
    for doc in yaml.load_all(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
            docs.append(doc)
        elif isinstance(doc, dict) and doc.get("kind") == "List":
            docs.extend(
                i
                for i in doc.get("items") or []
                if isinstance(i, dict) and i.get("kind") == "CustomResourceDefinition"
            )
    out = [json.dumps(d, separators=(",", ":")).encode() for d in docs]
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
            tmp.write_bytes(b"\n".join(out) + b"\n")  # one JSON document per line
            os.replace(tmp, cached)
        except OSError:
            pass
    return out
