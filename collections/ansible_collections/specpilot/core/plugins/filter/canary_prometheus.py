# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter of the canary role: whether its Prometheus settings can read the arms (checked before anything
changes). The logic lives in module_utils/operate/canary_prometheus.py."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.operate import canary_prometheus

# how the messages name each setting: the role's variables
ROLE_VARIABLES = {
    "url": "specpilot_canary_prometheus_url",
    "window": "specpilot_canary_window",
    "scrape_interval": "specpilot_canary_prometheus_scrape_interval",
    "labels": "specpilot_canary_prometheus_labels",
    "selector": "specpilot_canary_prometheus_selector",
}


def canary_prometheus_problem(settings):
    """{url, window, scrape_interval, labels, selector} | canary_prometheus_problem -> why Prometheus cannot read
    the arms with these settings, or ''."""
    if not isinstance(settings, Mapping) or not set(ROLE_VARIABLES) <= set(settings):
        raise AnsibleFilterError(
            "canary_prometheus_problem expects a mapping of %s" % ", ".join(sorted(ROLE_VARIABLES))
        )
    return canary_prometheus.settings_problem(
        settings["url"],
        settings["window"],
        settings["scrape_interval"],
        settings["labels"],
        settings["selector"],
        names=ROLE_VARIABLES,
    )


class FilterModule(object):
    """specpilot canary Prometheus filters."""

    def filters(self):
        return {"canary_prometheus_problem": canary_prometheus_problem}
