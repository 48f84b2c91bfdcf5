"""The lines the rollback role prints on its decision (decide.yml) and on the draft reclaim (reclaim.yml):
module_utils/operate/rollback.decision_summary and reclaim_summary, through their filters rollback_decision_summary and
rollback_reclaim_summary; one test per branch."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.filter.rollback import rollback_reclaim_summary
from ansible_collections.specpilot.core.plugins.module_utils.operate.rollback import reclaim_summary

DRAFT = "/mnt/models/draft"


def test_nothing_to_reclaim():
    assert reclaim_summary({}, False) == "draft (none found); nothing to reclaim"
    assert rollback_reclaim_summary(None) == "draft (none found); nothing to reclaim"
    assert reclaim_summary({"draft_path": DRAFT, "pvc": None, "modelcar": None}, True) == (
        "draft /mnt/models/draft; nothing to reclaim"
    )


def test_storage_uris_entry_dropped():
    reclaim = {"draft_path": DRAFT, "storage_uri_dropped": {"uri": "hf://org/draft"}}
    assert (
        reclaim_summary(reclaim, False) == "draft /mnt/models/draft; storageUris entry hf://org/draft dropped"
    )


def test_pvc_deleted_left_or_refused():
    pvc = {"claim": "models", "subpath": "chat/draft"}
    base = {"draft_path": DRAFT, "pvc": pvc}
    assert reclaim_summary(base, True).endswith("PVC models sub-directory chat/draft will be deleted")
    assert reclaim_summary(base, False).endswith(
        "PVC models sub-directory chat/draft left untouched (set specpilot_rollback_confirm_reclaim: true to delete it)"
    )
    refused = dict(base, pvc=dict(pvc, refused="chat/draft is served by chat-2: not deleted"))
    assert (
        reclaim_summary(refused, True)
        == "draft /mnt/models/draft; chat/draft is served by chat-2: not deleted"
    )


def test_modelcar_repointed_or_not():
    mc = {
        "digest": "sha256:old",
        "new_digest": "sha256:new",
        "result": {"image": "reg/chat:v1", "dropped_layer": {"digest": "sha256:layer"}},
    }
    assert reclaim_summary({"draft_path": DRAFT, "modelcar": mc}, False) == (
        "draft /mnt/models/draft; Modelcar image sha256:old -> sha256:new (reg/chat:v1, draft layer sha256:layer"
        " no longer referenced; the old image stays in the registry)"
    )
    unknown = {"new_digest": "sha256:new", "result": None}
    assert "Modelcar image ? -> sha256:new (, draft layer ? no longer" in reclaim_summary(
        {"modelcar": unknown}, False
    )
    assert reclaim_summary(
        {"modelcar": {"new_digest": None, "result": {"msg": "no draft layer"}}}, False
    ).endswith("Modelcar image: no draft layer")
    assert reclaim_summary({"modelcar": {"digest": "sha256:x", "result": None}}, False).endswith(
        "Modelcar image: no draft layer to drop"
    )


def test_filter_refuses_a_non_mapping():
    with pytest.raises(AnsibleFilterError, match="rollback_reclaim_summary expects a mapping"):
        rollback_reclaim_summary(["x"])


def test_decision_summary_what_the_rollback_writes():
    from ansible_collections.specpilot.core.plugins.filter.rollback import rollback_decision_summary

    off = {"needs_apply": True, "removed_args": ["--speculative-config", "{}"], "added_args": []}
    assert rollback_decision_summary(off, "off") == "removes --speculative-config {}"
    gmu = dict(off, added_args=["--gpu-memory-utilization", "0.9"])
    assert (
        rollback_decision_summary(gmu) == "removes --speculative-config {} adds --gpu-memory-utilization 0.9"
    )
    repoint = dict(off, reclaim={"modelcar": {"new_storage_uri": "oci://reg/chat@sha256:new"}})
    assert rollback_decision_summary(repoint).endswith("{} repoints storageUri to oci://reg/chat@sha256:new")
    assert rollback_decision_summary({"needs_apply": False}, "off") == "nothing to change (already off)"
    assert rollback_decision_summary({"needs_apply": False}, "restore") == (
        "nothing to change (the recorded revision runs)"
    )
