# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see galaxy.yml)
"""Filters that build a specpilot service spec from inventory variables."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.spec import assemble_from_vars


def spec_from_vars(names, variables, default_name=None):
    """names | spec_from_vars(hostvars[inventory_hostname], default_name) -> spec dict."""
    if not isinstance(names, (list, tuple)):
        raise AnsibleFilterError("spec_from_vars expects a list of variable names, got %s" % type(names).__name__)
    resolved = {}
    for name in names:
        try:
            resolved[name] = variables[name]
        except KeyError:
            continue
    spec, _unknown = assemble_from_vars(resolved, default_name)
    return spec


class FilterModule(object):
    """specpilot spec filters."""

    def filters(self):
        return {
            "spec_from_vars": spec_from_vars,
        }
