# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter that builds a specpilot service spec from inventory variables."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.service.spec import assemble_from_vars


def spec_from_vars(variables, default_name=None):
    """{specpilot_x: value, ...} | spec_from_vars(default_name) -> {x: value, ...} (spec keys only)."""
    if not isinstance(variables, Mapping):
        raise AnsibleFilterError(
            "spec_from_vars expects a mapping of variable names to values, got %s" % type(variables).__name__
        )
    spec, _unknown = assemble_from_vars(dict(variables), default_name)
    return spec


class FilterModule(object):
    """specpilot spec filters."""

    def filters(self):
        return {"spec_from_vars": spec_from_vars}
