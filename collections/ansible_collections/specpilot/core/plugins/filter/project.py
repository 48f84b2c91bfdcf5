# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter: the root of the Ansible project a playbook belongs to (where the report root .reports/ lives)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError

MARKER = "ansible.cfg"


def project_root(playbook_dir, marker=MARKER):
    """playbook_dir | project_root: the nearest directory at or above playbook_dir that holds ``marker``
    (the project's ansible.cfg), as an absolute path; the directory ansible-playbook runs in when none does.

    playbooks/X.yml, molecule/<scenario>/converge.yml and an AWX project checkout all resolve to the
    repository root, whatever directory ansible-playbook was started from."""
    if not isinstance(playbook_dir, str) or not playbook_dir:
        raise AnsibleFilterError("project_root expects a directory (playbook_dir), got %r" % (playbook_dir,))
    if not isinstance(marker, str) or not marker or "/" in marker:
        raise AnsibleFilterError("project_root: marker must be a file name, got %r" % (marker,))
    here = os.path.abspath(os.path.expanduser(playbook_dir))
    while True:
        if os.path.isfile(os.path.join(here, marker)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return os.getcwd()
        here = parent


class FilterModule(object):
    """specpilot project filters."""

    def filters(self):
        return {"project_root": project_root}
