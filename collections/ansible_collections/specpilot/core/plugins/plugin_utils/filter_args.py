# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the collection's filters share: their argument checks, failing as Ansible reports a filter's error."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def mapping_or_none(value, what):
    """A plain dict copy of a mapping argument, None for None; AnsibleFilterError for anything else."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise AnsibleFilterError("%s expects a mapping, got %s" % (what, type(value).__name__))
    return dict(value)
