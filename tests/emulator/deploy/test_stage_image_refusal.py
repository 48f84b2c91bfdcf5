"""The PVC staging image must be able to fetch the sources (issue 36): the default image (python:3.12-slim) has
neither huggingface_hub nor boto3, so an hf:// or s3:// source is refused with it, naming the variable, the value
and the fix, before anything is written to the cluster; an image said to fetch them gets past the check."""

from __future__ import annotations

import pytest
from deploy_helpers import GROUP_VARS, NGRAM, Run, create_namespace, write_inventory

from ansible_collections.specpilot.core.plugins.filter.staging import stage_image_problem

DEFAULT_IMAGE = "docker.io/library/python:3.12-slim@sha256:78387bc3"


@pytest.mark.parametrize(
    "uri, schemes, refused",
    [
        ("hf://org/model", [], "huggingface_hub"),
        ("s3://bucket/model/", [], "boto3"),
        ("s3://bucket/model/", ["hf"], "boto3"),
        ("hf://org/model", ["hf", "s3"], ""),
        ("s3://bucket/model/", ["S3"], ""),
        ("https://example.org/model.tar", [], ""),
        ("pvc://other/model", [], ""),
    ],
)
def test_each_source_against_what_the_image_can_fetch(uri, schemes, refused):
    problem = stage_image_problem([{"role": "draft", "uri": uri}], DEFAULT_IMAGE, schemes)
    if not refused:
        assert problem == ""
    else:
        assert problem.startswith("specpilot_draft.uri is %s: the staging image %s cannot fetch" % (uri, DEFAULT_IMAGE))
        assert refused in problem and "specpilot_stage_pvc_image_schemes" in problem


def test_the_default_image_refuses_an_hf_source_before_any_write(emulator, tmp_path):
    ns = "stage-image"
    create_namespace(emulator, ns)
    target = dict(GROUP_VARS["specpilot_target"], uri="hf://specpilot-lab/tiny-target", revision="0" * 40)
    inv = write_inventory(
        tmp_path / "inv", ns, {"svc": {"specpilot_speculative": NGRAM, "specpilot_target": target}},
        {"specpilot_model_facts": "off"},
    )
    mark = emulator.control.mark()
    run = Run(emulator, tmp_path, inv, playbook="playbooks/stage.yml").wait(300)
    assert run.rc != 0
    assert (
        "svc: specpilot_target.uri is hf://specpilot-lab/tiny-target: the staging image "
        "docker.io/library/python:3.12-slim@sha256:" in run.out
    ), run.out[-3000:]
    assert emulator.control.writes(since=mark, include_dry_run=True) == []
    assert "Refuse sources the staging image cannot fetch" in run.out
