"""Legacy (non-aggregated) discovery documents, cached per registry generation."""

from __future__ import annotations

import threading
from typing import Any

from . import KUBE_VERSION, openapi
from .resources import GROUP_ORDER
from .util import dumps


def version_info() -> dict:
    minor = KUBE_VERSION.split(".")[1]
    return {
        "major": "1",
        "minor": minor,
        "gitVersion": KUBE_VERSION,
        "gitCommit": "a78aa47129b8539636eb86a9d00e31b2720fe06b",
        "gitTreeState": "clean",
        "buildDate": "2024-12-10T11:36:01Z",
        "goVersion": "go1.22.9",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


class Discovery:
    def __init__(self, cluster: Any):
        self.cluster = cluster
        self._lock = threading.Lock()
        self._gen = -1
        self._cache: dict[str, bytes] = {}
        self._v3: dict[str, bytes] = {}

    def _refresh(self) -> None:
        gen = self.cluster.registry_generation
        if gen == self._gen:
            return
        with self.cluster.lock:
            gen = self.cluster.registry_generation
            groups = self.cluster.served_groups()
            resources = self.cluster.all_resources()
        cache: dict[str, bytes] = {}
        cache["/api"] = dumps(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}
                ],
            }
        )
        group_docs = []
        order = {g: i for i, g in enumerate(GROUP_ORDER)}
        named = sorted((g for g in groups if g), key=lambda g: (order.get(g, len(order)), g))
        for g in named:
            versions = [{"groupVersion": f"{g}/{v}", "version": v} for v in groups[g]]
            doc = {"name": g, "versions": versions, "preferredVersion": versions[0]}
            group_docs.append(doc)
            cache[f"/apis/{g}"] = dumps({"kind": "APIGroup", "apiVersion": "v1", **doc})
        cache["/apis"] = dumps({"kind": "APIGroupList", "apiVersion": "v1", "groups": group_docs})
        by_gv: dict[tuple[str, str], list] = {}
        for rt in resources:
            by_gv.setdefault((rt.group, rt.version), []).extend(rt.discovery_entries())
        for (g, v), entries in by_gv.items():
            if g:
                cache[f"/apis/{g}/{v}"] = dumps(
                    {
                        "kind": "APIResourceList",
                        "apiVersion": "v1",
                        "groupVersion": f"{g}/{v}",
                        "resources": entries,
                    }
                )
            else:
                cache[f"/api/{v}"] = dumps(
                    {"kind": "APIResourceList", "groupVersion": v, "resources": entries}
                )
        cache["/openapi/v2#pb"] = openapi.openapi_v2_protobuf(resources)
        cache["/openapi/v2"] = dumps(openapi.openapi_v2_json(resources))
        v3 = openapi.openapi_v3_docs(resources)
        cache["/openapi/v3"] = dumps(openapi.openapi_v3_index(v3))
        with self._lock:
            self._cache = cache
            self._v3 = v3
            self._gen = gen

    def get(self, key: str) -> bytes | None:
        self._refresh()
        return self._cache.get(key)

    def openapi_v3(self, gv_key: str) -> bytes | None:
        self._refresh()
        return self._v3.get(gv_key)
