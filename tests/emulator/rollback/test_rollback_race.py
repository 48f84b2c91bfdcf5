"""A deploy that slips in between rollback's read and its lock (issue 19, races): the rollback role's
own task files run in order with the change made between decide.yml and lock.yml, against the API
emulator.  Rollback decides again on its read under the lock: an off rollback keeps what the deploy
changed (and still removes the speculative args), and the guard's rollback (expect_digest) refuses
the config it did not judge and writes nothing to the service.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from deploy_helpers import NGRAM, FakeKServe, Run, create_namespace, get, run_deploy, write_inventory  # noqa: E402

pytestmark = pytest.mark.slow

ISVC_API = "serving.kserve.io/v1beta1"
SLIPPED_ARG = "--max-num-batched-tokens=2048"
SLIPPED_DIGEST = "sha256:" + "d" * 64

# read, decide, [a deploy slips in], lock, apply, unlock: the role's order (tasks/main.yml) without the
# wait, the reclaim and the verification; the connection as the project's playbooks set it.
PLAYBOOK = """
- name: Rollback with a deploy slipped in between the read and the lock
  hosts: specpilot_services
  gather_facts: false
  module_defaults:
    group/kubernetes.core.k8s: &conn
      kubeconfig: "{{ specpilot_k8s_kubeconfig | default(omit, true) }}"
    group/specpilot.core.k8s: *conn
  tasks:
    - name: Read
      ansible.builtin.include_role: {name: specpilot_rollback, tasks_from: read.yml}
    - name: Decide
      ansible.builtin.include_role: {name: specpilot_rollback, tasks_from: decide.yml}
    - name: A deploy slips in (another argument, another spec digest)
      kubernetes.core.k8s_json_patch:
        api_version: serving.kserve.io/v1beta1
        kind: InferenceService
        name: "{{ inventory_hostname }}"
        namespace: "{{ specpilot_namespace }}"
        patch:
          - {op: add, path: /spec/predictor/model/args/-, value: "%(arg)s"}
          - {op: replace, path: "/metadata/annotations/specpilot.io~1spec-digest", value: "%(digest)s"}
    - name: Lock, apply, unlock
      block:
        - name: Lock
          ansible.builtin.include_role: {name: specpilot_rollback, tasks_from: lock.yml}
        - name: Apply
          ansible.builtin.include_role: {name: specpilot_rollback, tasks_from: apply.yml}
          when: __specpilot_rollback_decision.needs_apply
      always:
        - name: Unlock
          ansible.builtin.include_role: {name: specpilot_rollback, tasks_from: unlock.yml}
          when: __specpilot_rollback_lock.acquired | default(false)
""" % {
    "arg": SLIPPED_ARG,
    "digest": SLIPPED_DIGEST,
}


def _args(isvc):
    return isvc["spec"]["predictor"]["model"]["args"]


def _speculative(args):
    return [a for a in args if "speculative" in a or "ngram" in a]


def test_a_deploy_slipped_between_read_and_lock_is_not_overwritten(emulator, tmp_path):
    ns = "rb-race"
    create_namespace(emulator, ns)
    services = {"plain": {"specpilot_speculative": NGRAM}, "judged": {"specpilot_speculative": NGRAM}}
    inv = write_inventory(tmp_path / "inv", ns, services, {"specpilot_rollback_wait": False})
    with FakeKServe(emulator, ns):
        deployed = run_deploy(emulator, tmp_path, inv)
    assert deployed.rc == 0, deployed.out[-4000:]
    judged = get(emulator, ISVC_API, "InferenceService", "judged", ns)
    digest = judged["metadata"]["annotations"]["specpilot.io/spec-digest"]
    host_vars = inv / "host_vars" / "judged.yml"
    host_vars.write_text(
        host_vars.read_text() + yaml.safe_dump({"specpilot_rollback_expect_digest": digest})
    )
    playbook = tmp_path / "race.yml"
    playbook.write_text("---" + PLAYBOOK)

    mark = emulator.control.mark()
    run = Run(emulator, tmp_path, inv, playbook=str(playbook)).wait(300)

    # off: decided again on the fresh read - the deploy's argument stays, the speculative ones go
    plain = get(emulator, ISVC_API, "InferenceService", "plain", ns)
    assert SLIPPED_ARG in _args(plain) and _speculative(_args(plain)) == [], run.out[-4000:]
    assert "plain: the service changed after it was read" in run.out
    # the guard's rollback: the live digest is no longer the judged one - refused, nothing applied
    judged = get(emulator, ISVC_API, "InferenceService", "judged", ns)
    assert SLIPPED_ARG in _args(judged) and _speculative(_args(judged)), run.out[-4000:]
    assert judged["metadata"]["annotations"]["specpilot.io/spec-digest"] == SLIPPED_DIGEST
    assert "changed since it was judged" in run.out
    isvc_writes = [
        w
        for w in emulator.control.writes(since=mark)
        if w.get("resource") == "inferenceservices" and w.get("name") == "judged"
    ]
    assert [w.get("verb") for w in isvc_writes] == ["patch"]  # the slip, and nothing from the rollback
    for name in services:  # both locks released
        assert get(emulator, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-" + name, ns) is None
