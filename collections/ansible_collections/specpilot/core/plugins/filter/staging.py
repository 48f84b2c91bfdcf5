# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters of the staging roles."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.pvc_staging import PlanError, status_data


def stage_status_data(plan, result):
    try:
        return status_data(plan, result)
    except PlanError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"stage_status_data": stage_status_data}
