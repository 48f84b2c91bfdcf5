"""Issue 15 items 2 and 3 (pvc://) in the lab: deploy.yml's probe Job (specpilot.core.cluster_probe) runs the
lab's runtime image, whose python3 is the lab engine's interpreter (.venv-vllm: the controller maps the
image, controller/jobs.py image_interpreter), with the models PVC mounted read-only at /mnt/models.

One deploy of three services on one lab (the predictor engine is the stand-in: the probe, not the engine, is
under test; its ``import vllm`` is the real lab vLLM's):

* ``auto-svc``: specpilot_vllm_version auto deploys; the summary and the InferenceService name 0.32.0, read
  from the image; the release is cached in the ConfigMap specpilot-probe-cache; no probe Job is left;
* ``old-svc``: a declared 0.19.1 on the same image (specpilot_deploy_probe always) is refused before any
  write, naming both releases;
* ``eagle-svc``: the lab-draft service with its typed facts removed and its method switched to eagle3 is
  refused before any write, naming specpilot_draft: the facts the probe read off the PVC say the draft is a
  plain causal LM (LlamaForCausalLM), not an EAGLE-3 head;
* ``gone-svc`` (issue 39): the lab-draft service, every fact of its draft typed, whose draft directory is not
  on the PVC: the probe reads the directories all the same, and the spec is refused before any write, naming
  the service, specpilot_draft.subdir, the pvc:// path and the fix (it went live and crash-looped before).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from specpilot_lab import engine
from specpilot_lab.controller.jobs import bwrap_available
from specpilot_lab.models import SHAPES, llama_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "emulator" / "deploy"))
from deploy_helpers import NGRAM, run_deploy, write_inventory  # noqa: E402

pytestmark = [
    pytest.mark.lab,
    pytest.mark.slow,
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run lab Jobs here"),
    pytest.mark.skipif(not engine.vllm_available(), reason="the lab's vLLM (.venv-vllm) is not installed"),
]

NS = "probe-ns"
PVC = "specpilot-lab-models"
ISVC = ("serving.kserve.io/v1beta1", "InferenceService")
BARE = {"subdir": "target"}  # the target with no typed fact
LAB_DRAFT = yaml.safe_load((Path(__file__).resolve().parents[3] / "inventories/lab/host_vars/lab-draft.yml").read_text())


def _models(root: Path) -> Path:
    """The lab's tiny target and draft configs (specpilot_lab.models.llama_config), as staged on the PVC."""
    for sub, shape in (("target", "target"), ("draft", "draft")):
        (root / sub).mkdir(parents=True)
        (root / sub / "config.json").write_text(json.dumps(llama_config(SHAPES[shape], ["LlamaForCausalLM"])))
    return root


def test_the_probe_reads_the_image_release_and_the_pvc_facts_before_any_write(fake_lab, tmp_path):
    lab = fake_lab()
    lab.namespace(NS)
    lab.pvc_with_models(NS, _models(tmp_path / "models"), name=PVC)
    inv = write_inventory(
        tmp_path / "inv",
        NS,
        {
            "auto-svc": {"specpilot_vllm_version": "auto", "specpilot_speculative": NGRAM},
            "old-svc": {
                "specpilot_vllm_version": "0.19.1",
                "specpilot_speculative": NGRAM,
                "specpilot_deploy_probe": "always",
            },
            "eagle-svc": {
                "specpilot_target": BARE,
                "specpilot_draft": {"subdir": "draft"},
                "specpilot_speculative": {"method": "eagle3", "num_speculative_tokens": 3},
            },
            "gone-svc": dict(LAB_DRAFT, specpilot_draft=dict(LAB_DRAFT["specpilot_draft"], subdir="gone")),
        },
    )
    run = run_deploy(lab.emu, tmp_path, inv, "-e", "specpilot_deploy_probe_timeout=240")
    out = " ".join(run.out.split())
    summary = out.split("TASK [Summary of every service]", 1)[-1]
    assert run.rc != 0, out[-4000:]

    # (a) auto: deployed with the image's release, which the summary and the InferenceService name
    assert "auto-svc: deployed, ready" in summary, summary[:3000]
    assert "vLLM 0.32.0 read from the image" in summary
    isvc = lab.get(*ISVC, "auto-svc", NS)
    assert isvc["metadata"]["annotations"]["specpilot.io/vllm-version"] == "0.32.0"
    cache = lab.get("v1", "ConfigMap", "specpilot-probe-cache", NS)
    assert [json.loads(v)["vllm_version"] for v in cache["data"].values()] == ["0.32.0"]

    # (b) a declared release the image does not hold: refused before any write, naming both
    assert "old-svc: FAILED" in summary
    assert (
        "vllm_version is 0.19.1 but the runtime image specpilot-lab/vllm-cpu:0.32.0 holds vLLM 0.32.0" in out
    )
    assert lab.get(*ISVC, "old-svc", NS) is None

    # (c) lab-draft without its typed facts, as eagle3: refused on specpilot_draft from the PVC's facts
    assert "eagle-svc: FAILED" in summary
    assert "specpilot_draft" in out and "pvc://specpilot-lab-models/draft" in out
    assert "LlamaForCausalLM" in out and "EAGLE-3" in out
    assert lab.get(*ISVC, "eagle-svc", NS) is None
    # (d) a draft directory that is not on the PVC, its facts all typed: refused, naming the path
    assert "gone-svc: FAILED" in summary
    assert "gone-svc: the draft model is read from pvc://specpilot-lab-models/gone" in out, out[-4000:]
    assert "/mnt/models/gone does not exist in the probe's pod" in out
    assert "playbooks/stage.yml --limit gone-svc" in out
    assert lab.get(*ISVC, "gone-svc", NS) is None
    for name in ("old-svc", "eagle-svc", "gone-svc"):
        assert lab.get("coordination.k8s.io/v1", "Lease", "specpilot-deploy-%s" % name, NS) is None

    # the probe Jobs and their ConfigMaps are gone
    selector = "app.kubernetes.io/name=specpilot-probe"
    assert lab.list("batch/v1", "Job", NS, label_selector=selector) == []
    assert lab.list("v1", "ConfigMap", NS, label_selector=selector) == []
