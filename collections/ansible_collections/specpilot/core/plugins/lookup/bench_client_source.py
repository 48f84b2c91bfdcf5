# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: bench_client_source
short_description: The source of specpilot's streaming load generator, to run it inside the cluster
version_added: 0.1.0
author:
  - specpilot maintainers (@specpilot)
description:
  - Returns the text of C(plugins/module_utils/benchmark/bench_client.py) of the installed specpilot.core
    collection - the load generator that M(specpilot.core.vllm_load) runs on the controller.
  - The file needs only Python and aiohttp, so it can go into a ConfigMap and run as a script in a
    Job (C(python3 bench_client.py --config runs.json)); its output goes back to
    M(specpilot.core.vllm_load) through O(specpilot.core.vllm_load#module:job_output).
  - Takes no terms.
"""

EXAMPLES = r"""
- name: Ship the load generator in a ConfigMap
  kubernetes.core.k8s:
    definition:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: chat-specpilot-bench
        namespace: llm-serving
      data:
        bench_client.py: "{{ lookup('specpilot.core.bench_client_source') }}"
"""

RETURN = r"""
_raw:
  description: One element, the source text.
  type: list
  elements: str
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_client


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError("bench_client_source takes no terms")
        path = os.path.splitext(bench_client.__file__)[0] + ".py"
        try:
            with open(path, "r", encoding="utf-8") as fh:
                return [fh.read()]
        except OSError as exc:
            raise AnsibleLookupError("cannot read %s: %s" % (path, exc))
