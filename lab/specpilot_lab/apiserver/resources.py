"""The resource types the emulator serves: built-in kinds plus those CRDs register."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
NS_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
SUB_VERBS = ["get", "patch", "update"]


@dataclass
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    verbs: list[str] = field(default_factory=lambda: list(ALL_VERBS))
    # subresource name -> verbs ("status", "log", "scale", "finalize")
    subresources: dict[str, list[str]] = field(default_factory=dict)
    has_generation: bool = False
    return_deleted_object: bool = False
    allow_create_on_update: bool = False
    # custom resources only
    crd_name: str | None = None
    schema: Any = None  # schema.StructuralSchema of this version
    printer_columns: list[dict] | None = None
    preserve_unknown_root: bool = False
    served: bool = True
    storage: bool = True
    deprecated: bool = False
    deprecation_warning: str | None = None
    # built-in kinds only: top-level fields the kind knows (unknown ones are dropped with a warning)
    known_fields: tuple[str, ...] | None = None
    scale_paths: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if not self.singular:
            self.singular = self.kind.lower()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> tuple[str, str]:
        """The storage key: objects are shared across the versions of one group/resource."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def is_custom(self) -> bool:
        return self.crd_name is not None

    @property
    def status_subresource(self) -> bool:
        return "status" in self.subresources

    def storage_version_hash(self) -> str:
        digest = hashlib.sha256(f"{self.group}/{self.version}/{self.kind}".encode()).digest()
        return base64.b64encode(digest[:8]).decode()

    def discovery_entries(self) -> list[dict]:
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        main["storageVersionHash"] = self.storage_version_hash()
        out = [main]
        for sub, verbs in self.subresources.items():
            entry: dict[str, Any] = {
                "name": f"{self.plural}/{sub}",
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": list(verbs),
            }
            if sub == "scale":
                entry.update({"group": "autoscaling", "version": "v1", "kind": "Scale"})
            if sub == "log":
                entry["kind"] = "Pod"
            if sub == "binding":
                entry["kind"] = "Binding"
            if sub == "exec":
                entry["kind"] = "PodExecOptions"
            if sub == "token":
                entry.update({"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"})
            out.append(entry)
        return out


_COMMON = ("apiVersion", "kind", "metadata")


def _b(group: str, plural: str, kind: str, namespaced: bool = True, **kw: Any) -> ResourceType:
    return ResourceType(
        group=group, version=kw.pop("version", "v1"), plural=plural, kind=kind, namespaced=namespaced, **kw
    )


def builtin_resources() -> list[ResourceType]:
    """Fresh ResourceType objects for every built-in kind the emulator serves."""
    st = {"status": list(SUB_VERBS)}
    return [
        # core v1
        _b(
            "",
            "namespaces",
            "Namespace",
            False,
            short_names=["ns"],
            verbs=list(NS_VERBS),
            subresources={"finalize": ["update"], "status": list(SUB_VERBS)},
            return_deleted_object=True,
            known_fields=_COMMON + ("spec", "status"),
        ),
        _b(
            "",
            "configmaps",
            "ConfigMap",
            short_names=["cm"],
            known_fields=_COMMON + ("data", "binaryData", "immutable"),
        ),
        _b("", "secrets", "Secret", known_fields=_COMMON + ("data", "stringData", "type", "immutable")),
        _b(
            "",
            "pods",
            "Pod",
            short_names=["po"],
            categories=["all"],
            subresources={
                "binding": ["create"],
                "exec": ["create", "get"],
                "log": ["get"],
                "status": list(SUB_VERBS),
            },
            return_deleted_object=True,
            known_fields=_COMMON + ("spec", "status"),
        ),
        _b(
            "",
            "services",
            "Service",
            short_names=["svc"],
            categories=["all"],
            verbs=list(NS_VERBS),
            subresources=dict(st),
            return_deleted_object=True,
            known_fields=_COMMON + ("spec", "status"),
        ),
        _b(
            "",
            "serviceaccounts",
            "ServiceAccount",
            short_names=["sa"],
            subresources={"token": ["create"]},
            known_fields=_COMMON + ("secrets", "imagePullSecrets", "automountServiceAccountToken"),
        ),
        _b(
            "",
            "events",
            "Event",
            short_names=["ev"],
            allow_create_on_update=True,
            known_fields=_COMMON
            + (
                "involvedObject",
                "reason",
                "message",
                "source",
                "firstTimestamp",
                "lastTimestamp",
                "count",
                "type",
                "eventTime",
                "series",
                "action",
                "related",
                "reportingComponent",
                "reportingInstance",
            ),
        ),
        _b(
            "",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            short_names=["pvc"],
            subresources=dict(st),
            known_fields=_COMMON + ("spec", "status"),
        ),
        _b(
            "",
            "persistentvolumes",
            "PersistentVolume",
            False,
            short_names=["pv"],
            subresources=dict(st),
            known_fields=_COMMON + ("spec", "status"),
        ),
        _b(
            "",
            "nodes",
            "Node",
            False,
            short_names=["no"],
            subresources=dict(st),
            known_fields=_COMMON + ("spec", "status"),
        ),
        _b(
            "",
            "endpoints",
            "Endpoints",
            short_names=["ep"],
            allow_create_on_update=True,
            known_fields=_COMMON + ("subsets",),
        ),
        # apps/v1
        _b(
            "apps",
            "deployments",
            "Deployment",
            short_names=["deploy"],
            categories=["all"],
            subresources={"scale": list(SUB_VERBS), "status": list(SUB_VERBS)},
            has_generation=True,
            known_fields=_COMMON + ("spec", "status"),
            scale_paths={"spec": "spec.replicas", "status": "status.replicas"},
        ),
        _b(
            "apps",
            "replicasets",
            "ReplicaSet",
            short_names=["rs"],
            categories=["all"],
            subresources={"scale": list(SUB_VERBS), "status": list(SUB_VERBS)},
            has_generation=True,
            known_fields=_COMMON + ("spec", "status"),
            scale_paths={"spec": "spec.replicas", "status": "status.replicas"},
        ),
        # batch/v1
        _b(
            "batch",
            "jobs",
            "Job",
            categories=["all"],
            subresources=dict(st),
            has_generation=True,
            known_fields=_COMMON + ("spec", "status"),
        ),
        _b(
            "batch",
            "cronjobs",
            "CronJob",
            short_names=["cj"],
            categories=["all"],
            subresources=dict(st),
            has_generation=True,
            known_fields=_COMMON + ("spec", "status"),
        ),
        # rbac
        _b("rbac.authorization.k8s.io", "roles", "Role", known_fields=_COMMON + ("rules",)),
        _b(
            "rbac.authorization.k8s.io",
            "rolebindings",
            "RoleBinding",
            known_fields=_COMMON + ("subjects", "roleRef"),
        ),
        _b(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "ClusterRole",
            False,
            known_fields=_COMMON + ("rules", "aggregationRule"),
        ),
        _b(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
            False,
            known_fields=_COMMON + ("subjects", "roleRef"),
        ),
        # authentication and authorization: create-only, nothing stored (auth_api.py)
        _b(
            "authentication.k8s.io",
            "selfsubjectreviews",
            "SelfSubjectReview",
            False,
            verbs=["create"],
            known_fields=_COMMON + ("status",),
        ),
        _b(
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            False,
            verbs=["create"],
            known_fields=_COMMON + ("spec", "status"),
        ),
        # apiextensions
        _b(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            short_names=["crd", "crds"],
            categories=["api-extensions"],
            subresources=dict(st),
            has_generation=True,
            known_fields=_COMMON + ("spec", "status"),
        ),
        # coordination
        _b("coordination.k8s.io", "leases", "Lease", known_fields=_COMMON + ("spec",)),
        # storage
        _b(
            "storage.k8s.io",
            "storageclasses",
            "StorageClass",
            False,
            short_names=["sc"],
            known_fields=_COMMON
            + (
                "provisioner",
                "parameters",
                "reclaimPolicy",
                "mountOptions",
                "allowVolumeExpansion",
                "volumeBindingMode",
                "allowedTopologies",
            ),
        ),
    ]


# Built-in API groups in the order a real server lists them in /apis.
GROUP_ORDER = [
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "flowcontrol.apiserver.k8s.io",
]


def version_priority(version: str) -> tuple:
    """Kubernetes version ordering (v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > foo), higher first."""
    import re

    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", version)
    if not m:
        return (0, 0, 0, version)
    major = int(m.group(1))
    stage = {"alpha": 1, "beta": 2, None: 3}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (1, stage, major, minor) if stage != 3 else (2, major, 0, 0)
