"""Helpers shared by the emulator tests (imported by name: pytest puts this directory on sys.path)."""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable

from specpilot_lab.apiserver.auth import ADMIN_TOKEN

_counter = itertools.count()

# raw HTTP requests to an emulator go as the lab admin (the emulator refuses anonymous ones with 401)
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

WIDGET_GROUP = "lab.specpilot.dev"

# A small CRD with everything the emulator must honour: two served versions, status and
# scale subresources, printer columns, defaults, enum/pattern/min/max, preserve-unknown.
WIDGET_CRD: dict = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{WIDGET_GROUP}"},
    "spec": {
        "group": WIDGET_GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wd"],
            "categories": ["specpilot"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                },
                "additionalPrinterColumns": [
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {
                        "name": "Ready",
                        "type": "string",
                        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                    },
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {
                                "type": "object",
                                "required": ["color"],
                                "properties": {
                                    "color": {"type": "string", "enum": ["red", "green", "blue"]},
                                    "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                                    "label": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 10},
                                    "replicas": {"type": "integer"},
                                    "tags": {"type": "array", "items": {"type": "string"}},
                                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "replicas": {"type": "integer"},
                                    "conditions": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "type": {"type": "string"},
                                                "status": {"type": "string"},
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
            {
                "name": "v1beta1",
                "served": True,
                "storage": False,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            },
        ],
    },
}


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_counter)}-{int(time.time() * 1000) % 100000}"


def make_namespace(emu, prefix: str = "t") -> str:
    name = unique(prefix)
    r = emu.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    assert r.status == 201, r
    return name


def install_widget_crd(emu) -> None:
    r = emu.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{WIDGET_GROUP}")
    if r.status == 200 and not r.json()["metadata"].get("deletionTimestamp"):
        return
    r = emu.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)
    assert r.status == 201, r


def widget(name: str, ns: str, **spec: Any) -> dict:
    return {
        "apiVersion": f"{WIDGET_GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"color": "red", **spec},
    }


def widgets_path(ns: str, name: str = "", version: str = "v1") -> str:
    base = f"/apis/{WIDGET_GROUP}/{version}/namespaces/{ns}/widgets"
    return f"{base}/{name}" if name else base


def wait_for(fn: Callable[[], Any], timeout: float = 5.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")
