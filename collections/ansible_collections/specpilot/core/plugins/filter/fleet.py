# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the fleet view (issue 40): each slice's set_stats key and the merged fleet summary; which cluster a host
reaches, one reader per cluster, and the services one read step covers."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_args import cluster_key
from ansible_collections.specpilot.core.plugins.module_utils.operate import fleet


def fleet_slice_key(hosts, kind):
    """The play's hosts (ansible_play_hosts_all) -> the set_stats key of this slice's part."""
    try:
        return fleet.slice_key(kind, list(hosts or ()))
    except ValueError as exc:
        raise AnsibleFilterError("fleet_slice_key: %s" % exc) from exc


def fleet_slice(data, hosts, kind, limit=None):
    """A slice's part (``data``) -> {<its key>: {kind, hosts, limit, data}}, for set_stats."""
    return {fleet_slice_key(hosts, kind): fleet.slice_payload(kind, list(hosts or ()), data, limit)}


def fleet_summary(variables, generated_at=None, expected=None):
    """{key: slice part} (the slices' set_stats, as AWX merges them, or any mapping holding them) -> the
    fleet summary (module_utils/operate/fleet.py ``merge``)."""
    if not isinstance(variables, Mapping):
        raise AnsibleFilterError("fleet_summary expects a mapping of the slices' set_stats, got %s"
                                 % type(variables).__name__)
    return fleet.merge(fleet.slices_of(dict(variables)), generated_at, list(expected or ()))


def k8s_cluster_key(variables):
    """A host's variables (hostvars[host]) -> the key of the cluster its tasks reach."""
    if not isinstance(variables, Mapping):
        raise AnsibleFilterError("k8s_cluster_key expects a host's variables, got %s" % type(variables).__name__)
    return cluster_key(variables)


def k8s_cluster_readers(hosts, hostvars):
    """The play's hosts (ansible_play_batch) and hostvars -> {cluster key: the first of those hosts on that cluster}:
    a step that reads a cluster once (the KServe CRDs) runs on these hosts only, and every other host takes the
    answer of its own cluster's reader (never the first host's cluster for all)."""
    readers = {}
    for host in hosts or ():
        readers.setdefault(k8s_cluster_key(hostvars[host]), host)
    return readers


def _at(variables, path):
    """The value at ``path`` (``var`` or ``var.key...``) of a host's variables; None where a part is missing."""
    value = variables
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _plan_of(variables, paths):
    """The plan at the first of ``paths`` whose variable the host has (a later path is a fallback for a host that
    lacks the first one's variable, not for a plan missing inside it)."""
    for path in paths:
        if path.split(".", 1)[0] in variables:
            return _at(variables, path)
    return None


def k8s_cluster_services(hosts, hostvars, plan, reader=None, only=None, api_version=None, runtime=False):
    """The play's hosts (ansible_play_batch) and hostvars -> the services one read step reads (deploy_state's
    ``services``): every host with a plan (at ``plan``, a path into its variables, or a list of them: the first whose
    variable it has) on the cluster of ``reader`` (default the first host), and with ``only`` (a path) true when given.
    Each {name, namespace, deployment_mode, kind, api_version} of its plan (``api_version`` where the plan names none),
    with its ``runtime`` when ``runtime`` is true."""
    hosts = list(hosts or ())
    paths = [plan] if isinstance(plan, str) else list(plan or ())
    if not paths:
        raise AnsibleFilterError("k8s_cluster_services: plan names no variable")
    if not hosts:
        return []
    cluster = k8s_cluster_key(hostvars[reader if reader is not None else hosts[0]])
    services = []
    for host in hosts:
        variables = hostvars[host]
        found = _plan_of(variables, paths)
        if not isinstance(found, Mapping) or not found.get("name") or (only and not _at(variables, only)):
            continue
        if k8s_cluster_key(variables) != cluster:
            continue
        service = {"name": found["name"], "namespace": found.get("namespace"),
                   "deployment_mode": found.get("deployment_mode"), "kind": found.get("kind") or "InferenceService",
                   "api_version": found.get("api_version") or api_version}
        if runtime:
            service["runtime"] = found.get("runtime")
        services.append(service)
    return services


class FilterModule(object):
    """specpilot fleet filters."""

    def filters(self):
        return {"fleet_slice_key": fleet_slice_key, "fleet_slice": fleet_slice, "fleet_summary": fleet_summary,
                "k8s_cluster_key": k8s_cluster_key, "k8s_cluster_readers": k8s_cluster_readers,
                "k8s_cluster_services": k8s_cluster_services}
