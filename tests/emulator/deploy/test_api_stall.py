"""A stalled API server (issue 19): every read of the deploy actions has a bounded request timeout
(``request_timeout``, kubernetes.core passes the client none), so a run against an API that stops
answering fails cleanly at the timeout instead of waiting for ever."""

from __future__ import annotations

import time

import pytest
from deploy_helpers import NGRAM, Run, create_namespace, write_inventory

pytestmark = pytest.mark.slow

PLAYBOOK = """---
- name: Read a service from a stalled API server
  hosts: specpilot_services
  gather_facts: false
  module_defaults:
    group/specpilot.core.k8s:
      kubeconfig: "{{ specpilot_k8s_kubeconfig | default(omit, true) }}"
  tasks:
    - name: Read
      specpilot.core.deploy_state:
        name: "{{ inventory_hostname }}"
        namespace: "{{ specpilot_namespace }}"
        request_timeout: 1
        retries: 2
"""


def test_a_stalled_api_fails_cleanly_at_the_request_timeout(emulator, tmp_path):
    ns = "stalled"
    create_namespace(emulator, ns)
    inv = write_inventory(tmp_path / "inv", ns, {"svc": {"specpilot_speculative": NGRAM}})
    playbook = tmp_path / "read.yml"
    playbook.write_text(PLAYBOOK)
    emulator.control.add_fault(verb="get", resource="inferenceservices", namespace=ns, delay_ms=20000)
    try:
        started = time.monotonic()
        run = Run(emulator, tmp_path, inv, playbook=str(playbook)).wait(120)
        took = time.monotonic() - started
    finally:
        emulator.control.clear_faults()
    assert run.rc != 0 and "no answer from the API server in 1.0 s (request_timeout)" in run.out, run.out[
        -3000:
    ]
    assert "Traceback" not in run.out
    assert took < 20  # two bounded attempts, not the 20 s stall (twice)
