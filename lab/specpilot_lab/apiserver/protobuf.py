"""Decoding of Kubernetes protobuf request bodies (``application/vnd.kubernetes.protobuf``).

Since client-go 1.32, typed clients send built-in kinds as protobuf, so ``kubectl create
namespace|configmap|secret|deployment|...`` from kubectl 1.32+ posts protobuf bodies. The
emulator answers in JSON (those clients accept it) and decodes the bodies of the kinds the
``kubectl create`` generators produce, using the field numbers of the k8s.io/api protobuf
messages. Fields outside these tables are skipped; other kinds are refused with 415, which
is what a server without protobuf support for a type answers.

Go's JSON encoding drops empty values of ``omitempty`` fields while protobuf (proto2, gogo)
always writes non-pointer fields; so empty strings, zeros, false and empty collections are
dropped, except for the pointer fields marked ``keep`` (where a zero is meaningful).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from . import errors
from .util import now_rfc3339

MAGIC = b"k8s\x00"


@dataclass(frozen=True)
class F:
    name: str
    type: str  # str int bool bytes msg map_ss map_sb map_sq time ios qty
    sub: Any = None  # schema dict for msg (or a key into SCHEMAS)
    rep: bool = False
    keep: bool = False
    inline: bool = False


def _s(name: str, rep: bool = False) -> F:
    return F(name, "str", rep=rep)


def _i(name: str, keep: bool = False) -> F:
    return F(name, "int", keep=keep)


def _b(name: str, keep: bool = False) -> F:
    return F(name, "bool", keep=keep)


def _m(name: str, sub: str, rep: bool = False, inline: bool = False) -> F:
    return F(name, "msg", sub, rep=rep, inline=inline)


SCHEMAS: dict[str, dict[int, F]] = {
    # --- apimachinery
    "ObjectMeta": {
        1: _s("name"),
        2: _s("generateName"),
        3: _s("namespace"),
        5: _s("uid"),
        6: _s("resourceVersion"),
        7: _i("generation"),
        8: F("creationTimestamp", "time"),
        9: F("deletionTimestamp", "time"),
        10: _i("deletionGracePeriodSeconds", True),
        11: F("labels", "map_ss"),
        12: F("annotations", "map_ss"),
        13: _m("ownerReferences", "OwnerReference", rep=True),
        14: _s("finalizers", rep=True),
    },
    "OwnerReference": {
        1: _s("kind"),
        3: _s("name"),
        4: _s("uid"),
        5: _s("apiVersion"),
        6: _b("controller", True),
        7: _b("blockOwnerDeletion", True),
    },
    "LabelSelector": {
        1: F("matchLabels", "map_ss"),
        2: _m("matchExpressions", "LabelSelectorRequirement", rep=True),
    },
    "LabelSelectorRequirement": {1: _s("key"), 2: _s("operator"), 3: _s("values", rep=True)},
    "TypeMeta": {1: _s("apiVersion"), 2: _s("kind")},
    # --- core/v1
    "ConfigMap": {
        1: _m("metadata", "ObjectMeta"),
        2: F("data", "map_ss"),
        3: F("binaryData", "map_sb"),
        4: _b("immutable", True),
    },
    "Secret": {
        1: _m("metadata", "ObjectMeta"),
        2: F("data", "map_sb"),
        3: _s("type"),
        4: F("stringData", "map_ss"),
        5: _b("immutable", True),
    },
    "Namespace": {1: _m("metadata", "ObjectMeta"), 2: _m("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: _s("finalizers", rep=True)},
    "ServiceAccount": {
        1: _m("metadata", "ObjectMeta"),
        2: _m("secrets", "ObjectReference", rep=True),
        3: _m("imagePullSecrets", "LocalObjectReference", rep=True),
        4: _b("automountServiceAccountToken", True),
    },
    "ObjectReference": {
        1: _s("kind"),
        2: _s("namespace"),
        3: _s("name"),
        4: _s("uid"),
        5: _s("apiVersion"),
        6: _s("resourceVersion"),
        7: _s("fieldPath"),
    },
    "LocalObjectReference": {1: _s("name")},
    "Service": {1: _m("metadata", "ObjectMeta"), 2: _m("spec", "ServiceSpec")},
    "ServiceSpec": {
        1: _m("ports", "ServicePort", rep=True),
        2: F("selector", "map_ss"),
        3: _s("clusterIP"),
        18: _s("clusterIPs", rep=True),
        4: _s("type"),
        5: _s("externalIPs", rep=True),
        7: _s("sessionAffinity"),
        10: _s("externalName"),
        11: _s("externalTrafficPolicy"),
        19: _s("ipFamilies", rep=True),
        17: _s("ipFamilyPolicy"),
        22: _s("internalTrafficPolicy"),
    },
    "ServicePort": {
        1: _s("name"),
        2: _s("protocol"),
        6: _s("appProtocol"),
        3: _i("port"),
        4: F("targetPort", "ios"),
        5: _i("nodePort"),
    },
    "Pod": {1: _m("metadata", "ObjectMeta"), 2: _m("spec", "PodSpec")},
    "PodTemplateSpec": {1: _m("metadata", "ObjectMeta"), 2: _m("spec", "PodSpec")},
    "PodSpec": {
        1: _m("volumes", "Volume", rep=True),
        20: _m("initContainers", "Container", rep=True),
        2: _m("containers", "Container", rep=True),
        3: _s("restartPolicy"),
        4: _i("terminationGracePeriodSeconds", True),
        5: _i("activeDeadlineSeconds", True),
        6: _s("dnsPolicy"),
        7: F("nodeSelector", "map_ss"),
        8: _s("serviceAccountName"),
        9: _s("serviceAccount"),
        21: _b("automountServiceAccountToken", True),
        10: _s("nodeName"),
        11: _b("hostNetwork"),
        15: _m("imagePullSecrets", "LocalObjectReference", rep=True),
        16: _s("hostname"),
        17: _s("subdomain"),
        19: _s("schedulerName"),
        22: _m("tolerations", "Toleration", rep=True),
        24: _s("priorityClassName"),
        25: _i("priority", True),
        29: _s("runtimeClassName"),
        30: _b("enableServiceLinks", True),
    },
    "Container": {
        1: _s("name"),
        2: _s("image"),
        3: _s("command", rep=True),
        4: _s("args", rep=True),
        5: _s("workingDir"),
        6: _m("ports", "ContainerPort", rep=True),
        19: _m("envFrom", "EnvFromSource", rep=True),
        7: _m("env", "EnvVar", rep=True),
        8: _m("resources", "ResourceRequirements"),
        24: _s("restartPolicy"),
        9: _m("volumeMounts", "VolumeMount", rep=True),
        10: _m("livenessProbe", "Probe"),
        11: _m("readinessProbe", "Probe"),
        22: _m("startupProbe", "Probe"),
        13: _s("terminationMessagePath"),
        20: _s("terminationMessagePolicy"),
        14: _s("imagePullPolicy"),
        16: _b("stdin"),
        17: _b("stdinOnce"),
        18: _b("tty"),
    },
    "ContainerPort": {
        1: _s("name"),
        2: _i("hostPort"),
        3: _i("containerPort"),
        4: _s("protocol"),
        5: _s("hostIP"),
    },
    "EnvVar": {1: _s("name"), 2: _s("value"), 3: _m("valueFrom", "EnvVarSource")},
    "EnvVarSource": {
        1: _m("fieldRef", "ObjectFieldSelector"),
        3: _m("configMapKeyRef", "ConfigMapKeySelector"),
        4: _m("secretKeyRef", "SecretKeySelector"),
    },
    "ObjectFieldSelector": {1: _s("apiVersion"), 2: _s("fieldPath")},
    "ConfigMapKeySelector": {
        1: _m("", "LocalObjectReference", inline=True),
        2: _s("key"),
        3: _b("optional", True),
    },
    "SecretKeySelector": {
        1: _m("", "LocalObjectReference", inline=True),
        2: _s("key"),
        3: _b("optional", True),
    },
    "EnvFromSource": {
        1: _s("prefix"),
        2: _m("configMapRef", "ConfigMapEnvSource"),
        3: _m("secretRef", "SecretEnvSource"),
    },
    "ConfigMapEnvSource": {1: _m("", "LocalObjectReference", inline=True), 2: _b("optional", True)},
    "SecretEnvSource": {1: _m("", "LocalObjectReference", inline=True), 2: _b("optional", True)},
    "ResourceRequirements": {1: F("limits", "map_sq"), 2: F("requests", "map_sq")},
    "VolumeMount": {
        1: _s("name"),
        2: _b("readOnly"),
        3: _s("mountPath"),
        4: _s("subPath"),
        6: _s("subPathExpr"),
    },
    "Volume": {1: _s("name"), 2: _m("", "VolumeSource", inline=True)},
    "VolumeSource": {
        1: _m("hostPath", "HostPathVolumeSource"),
        2: _m("emptyDir", "EmptyDirVolumeSource"),
        6: _m("secret", "SecretVolumeSource"),
        10: _m("persistentVolumeClaim", "PersistentVolumeClaimVolumeSource"),
        19: _m("configMap", "ConfigMapVolumeSource"),
    },
    "HostPathVolumeSource": {1: _s("path"), 2: _s("type")},
    "EmptyDirVolumeSource": {1: _s("medium"), 2: F("sizeLimit", "qty")},
    "ConfigMapVolumeSource": {
        1: _m("", "LocalObjectReference", inline=True),
        2: _m("items", "KeyToPath", rep=True),
        3: _i("defaultMode", True),
        4: _b("optional", True),
    },
    "SecretVolumeSource": {
        1: _s("secretName"),
        2: _m("items", "KeyToPath", rep=True),
        3: _i("defaultMode", True),
        4: _b("optional", True),
    },
    "PersistentVolumeClaimVolumeSource": {1: _s("claimName"), 2: _b("readOnly")},
    "KeyToPath": {1: _s("key"), 2: _s("path"), 3: _i("mode", True)},
    "Toleration": {
        1: _s("key"),
        2: _s("operator"),
        3: _s("value"),
        4: _s("effect"),
        5: _i("tolerationSeconds", True),
    },
    "Probe": {
        1: _m("", "ProbeHandler", inline=True),
        2: _i("initialDelaySeconds"),
        3: _i("timeoutSeconds"),
        4: _i("periodSeconds"),
        5: _i("successThreshold"),
        6: _i("failureThreshold"),
    },
    "ProbeHandler": {
        1: _m("exec", "ExecAction"),
        2: _m("httpGet", "HTTPGetAction"),
        3: _m("tcpSocket", "TCPSocketAction"),
    },
    "ExecAction": {1: _s("command", rep=True)},
    "HTTPGetAction": {1: _s("path"), 2: F("port", "ios"), 3: _s("host"), 4: _s("scheme")},
    "TCPSocketAction": {1: F("port", "ios"), 2: _s("host")},
    # --- apps/v1
    "Deployment": {1: _m("metadata", "ObjectMeta"), 2: _m("spec", "DeploymentSpec")},
    "DeploymentSpec": {
        1: _i("replicas", True),
        2: _m("selector", "LabelSelector"),
        3: _m("template", "PodTemplateSpec"),
        4: _m("strategy", "DeploymentStrategy"),
        5: _i("minReadySeconds"),
        6: _i("revisionHistoryLimit", True),
        7: _b("paused"),
        9: _i("progressDeadlineSeconds", True),
    },
    "DeploymentStrategy": {1: _s("type"), 2: _m("rollingUpdate", "RollingUpdateDeployment")},
    "RollingUpdateDeployment": {1: F("maxUnavailable", "ios"), 2: F("maxSurge", "ios")},
    # --- batch/v1
    "Job": {1: _m("metadata", "ObjectMeta"), 2: _m("spec", "JobSpec")},
    "JobSpec": {
        1: _i("parallelism", True),
        2: _i("completions", True),
        3: _i("activeDeadlineSeconds", True),
        7: _i("backoffLimit", True),
        4: _m("selector", "LabelSelector"),
        5: _b("manualSelector", True),
        6: _m("template", "PodTemplateSpec"),
        8: _i("ttlSecondsAfterFinished", True),
        9: _s("completionMode"),
        10: _b("suspend", True),
        14: _s("podReplacementPolicy"),
    },
    "CronJob": {1: _m("metadata", "ObjectMeta"), 2: _m("spec", "CronJobSpec")},
    "CronJobSpec": {
        1: _s("schedule"),
        8: _s("timeZone"),
        2: _i("startingDeadlineSeconds", True),
        3: _s("concurrencyPolicy"),
        4: _b("suspend", True),
        5: _m("jobTemplate", "JobTemplateSpec"),
        6: _i("successfulJobsHistoryLimit", True),
        7: _i("failedJobsHistoryLimit", True),
    },
    "JobTemplateSpec": {1: _m("metadata", "ObjectMeta"), 2: _m("spec", "JobSpec")},
    # --- rbac/v1
    "Role": {1: _m("metadata", "ObjectMeta"), 2: _m("rules", "PolicyRule", rep=True)},
    "ClusterRole": {
        1: _m("metadata", "ObjectMeta"),
        2: _m("rules", "PolicyRule", rep=True),
        3: _m("aggregationRule", "AggregationRule"),
    },
    "AggregationRule": {1: _m("clusterRoleSelectors", "LabelSelector", rep=True)},
    "PolicyRule": {
        1: _s("verbs", rep=True),
        2: _s("apiGroups", rep=True),
        3: _s("resources", rep=True),
        4: _s("resourceNames", rep=True),
        5: _s("nonResourceURLs", rep=True),
    },
    "RoleBinding": {
        1: _m("metadata", "ObjectMeta"),
        2: _m("subjects", "Subject", rep=True),
        3: _m("roleRef", "RoleRef"),
    },
    "ClusterRoleBinding": {
        1: _m("metadata", "ObjectMeta"),
        2: _m("subjects", "Subject", rep=True),
        3: _m("roleRef", "RoleRef"),
    },
    "Subject": {1: _s("kind"), 2: _s("apiGroup"), 3: _s("name"), 4: _s("namespace")},
    "RoleRef": {1: _s("apiGroup"), 2: _s("kind"), 3: _s("name")},
}

# (apiVersion, kind) -> root message
KINDS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "Namespace"): "Namespace",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("v1", "Service"): "Service",
    ("v1", "Pod"): "Pod",
    ("apps/v1", "Deployment"): "Deployment",
    ("batch/v1", "Job"): "Job",
    ("batch/v1", "CronJob"): "CronJob",
    ("rbac.authorization.k8s.io/v1", "Role"): "Role",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "ClusterRole",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "RoleBinding",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "ClusterRoleBinding",
}


class ProtobufError(ValueError):
    pass


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data):
            raise ProtobufError("truncated varint")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 70:
            raise ProtobufError("varint too long")


def fields(data: bytes):
    """Yield (field number, wire type, value) of one message level."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _varint(data, i)
        elif wt == 1:
            val, i = data[i : i + 8], i + 8
        elif wt == 2:
            n, i = _varint(data, i)
            if i + n > len(data):
                raise ProtobufError("truncated field")
            val, i = data[i : i + n], i + n
        elif wt == 5:
            val, i = data[i : i + 4], i + 4
        else:
            raise ProtobufError(f"unsupported wire type {wt}")
        yield num, wt, val


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _time(raw: bytes) -> str | None:
    seconds = 0
    for num, _, val in fields(raw):
        if num == 1:
            seconds = _signed64(val)
    return now_rfc3339(seconds) if seconds else None


def _quantity(raw: bytes) -> str:
    for num, _, val in fields(raw):
        if num == 1:
            return val.decode()
    return "0"


def _int_or_string(raw: bytes) -> int | str:
    typ, ival, sval = 0, 0, ""
    for num, _, val in fields(raw):
        if num == 1:
            typ = val
        elif num == 2:
            ival = _signed64(val) if isinstance(val, int) else 0
        elif num == 3:
            sval = val.decode()
    return sval if typ == 1 else ival


def _map_entry(raw: bytes) -> tuple[str, bytes]:
    key, value = "", b""
    for num, _, val in fields(raw):
        if num == 1:
            key = val.decode()
        elif num == 2:
            value = val
    return key, value


def _empty(v: Any) -> bool:
    if v is None or v is False:
        return True
    if isinstance(v, bool):
        return False
    return v == "" or v == 0 or v == [] or v == {}


def decode_message(raw: bytes, schema_name: str) -> dict:
    schema = SCHEMAS[schema_name]
    out: dict[str, Any] = {}
    keep: set[str] = set()
    for num, wt, val in fields(raw):
        f = schema.get(num)
        if f is None:
            continue
        if f.type == "str":
            v: Any = val.decode("utf-8")
        elif f.type == "int":
            v = _signed64(val) if wt == 0 else 0
        elif f.type == "bool":
            v = bool(val)
        elif f.type == "bytes":
            v = base64.b64encode(val).decode()
        elif f.type == "msg":
            v = decode_message(val, f.sub)
            if f.inline:
                out.update(v)
                continue
        elif f.type in ("map_ss", "map_sb", "map_sq"):
            k, mv = _map_entry(val)
            m = out.setdefault(f.name, {})
            if f.type == "map_ss":
                m[k] = mv.decode("utf-8")
            elif f.type == "map_sb":
                m[k] = base64.b64encode(mv).decode()
            else:
                m[k] = _quantity(mv)
            continue
        elif f.type == "time":
            v = _time(val)
        elif f.type == "ios":
            v = _int_or_string(val)
        elif f.type == "qty":
            v = _quantity(val)
        else:  # pragma: no cover - table error
            continue
        if f.rep:
            if wt == 2 and f.type in ("int", "bool"):  # packed (not used by k8s, accepted anyway)
                continue
            out.setdefault(f.name, []).append(v)
        else:
            out[f.name] = v
        if f.keep:
            keep.add(f.name)
    return {k: v for k, v in out.items() if k in keep or not _empty(v)}


def decode_object(body: bytes) -> dict:
    """A protobuf request body (``k8s\\0`` + runtime.Unknown) as a JSON-like object."""
    if not body.startswith(MAGIC):
        raise errors.bad_request(
            "provided protobuf is not a Kubernetes object (missing the k8s magic prefix)"
        )
    api_version = kind = ""
    raw = b""
    try:
        for num, _, val in fields(body[len(MAGIC) :]):
            if num == 1:
                tm = decode_message(val, "TypeMeta")
                api_version, kind = tm.get("apiVersion", ""), tm.get("kind", "")
            elif num == 2:
                raw = val
        root = KINDS.get((api_version, kind))
        if root is None:
            raise errors.unsupported_media_type(
                f"the body of the request was in an unknown format - accepted media types include: "
                f"application/json, application/yaml (protobuf is decoded for {len(KINDS)} built-in kinds, "
                f"not {api_version}/{kind})"
            )
        obj = decode_message(raw, root)
    except ProtobufError as exc:
        raise errors.bad_request(f"unable to decode protobuf body: {exc}") from None
    out = {"apiVersion": api_version, "kind": kind}
    out.update(obj)
    out.setdefault("metadata", {})
    return out
