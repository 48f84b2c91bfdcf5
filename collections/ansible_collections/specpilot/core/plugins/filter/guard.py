# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter: is speculative decoding on in an InferenceService's engine arguments."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.operate.acceptance_guard import (
    isvc_speculative as _state,
)


def isvc_speculative(isvc):
    """InferenceService (or null) -> {exists, on, config, flags, digest}."""
    if isvc is not None and not isinstance(isvc, Mapping):
        raise AnsibleFilterError("isvc_speculative expects an InferenceService mapping, got %s" % type(isvc).__name__)
    return _state(dict(isvc) if isvc else None)


class FilterModule(object):
    """specpilot guard filters."""

    def filters(self):
        return {"isvc_speculative": isvc_speculative}
