"""module_utils/staging/data_safety and the PVC draft reclaim that uses it: a delete never reaches what the
service serves, whatever the live object says (a kubectl edit, an older deploy), and the reclaim
Job repeats the check after resolving symlinks."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from ansible_collections.specpilot.core.plugins.module_utils.staging import data_safety
from ansible_collections.specpilot.core.plugins.module_utils.operate import rollback

TARGET = {"the target": "target"}


@pytest.mark.parametrize(
    "path, protected, why",
    [
        ("draft", TARGET, None),
        ("target2", TARGET, None),  # a name that starts like the target is not the target
        ("lab/draft", {"t": "lab/target"}, None),
        ("target", TARGET, "is the target"),
        ("draft/../target", TARGET, "is the target"),
        ("./target/", TARGET, "is the target"),
        ("x", {"t": "x/target"}, "contains t"),
        ("target/draft", TARGET, "lies inside the target"),
        ("draft", {"t": ""}, "lies inside t"),  # the target is the whole volume
        ("", TARGET, "is the whole of /"),
        (".", TARGET, "is the whole of /"),
        ("../other", TARGET, "lies outside /"),
        ("draft/../../x", TARGET, "lies outside /"),
        ("/mnt/models/draft", {"t": "/mnt/models/target"}, None),
        ("/mnt/models/target", {"t": "/mnt/models/target"}, "is t"),
        ("/elsewhere/x", {}, None),
    ],
)
def test_delete_refusal_equal_parent_inside_dotdot_and_outside(path, protected, why):
    got = data_safety.delete_refusal(path, protected)
    assert (got is None) if why is None else (got is not None and got.startswith(why)), got


def test_delete_refusal_under_a_root():
    assert data_safety.delete_refusal("/data/draft", {"t": "target"}, root="/data") is None
    assert data_safety.delete_refusal("/data/../data/target", {"t": "target"}, root="/data").startswith(
        "is t"
    )
    assert data_safety.delete_refusal("/etc", {}, root="/data") == "lies outside /data"


def _live(args, storage="pvc://models"):
    return {
        "inferenceservice": {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "svc", "namespace": "ns", "annotations": {}},
            "spec": {"predictor": {"model": {"runtime": "r", "storageUri": storage, "args": args}}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    }


def _draft(path):
    return '--speculative-config={"method":"draft_model","model":"%s","num_speculative_tokens":3}' % path


@pytest.mark.parametrize(
    "target, draft, storage",
    [
        ("/mnt/models/target", "/mnt/models/target", "pvc://models"),  # draft == target
        ("/mnt/models/lab/target", "/mnt/models/lab", "pvc://models"),  # the draft is the target's parent
        ("/mnt/models/target", "/mnt/models/draft/../target", "pvc://models"),  # normalises to it
        ("/mnt/models", "/mnt/models/draft", "pvc://models/lab"),  # inside the target's directory
        ("/mnt/models/target", "/mnt/models", "pvc://models/lab"),  # the whole mount
    ],
)
@pytest.mark.parametrize("model_arg", ["--model=%s", "%s"])  # the module path's flag; vllm serve's positional
def test_the_pvc_reclaim_refuses_what_the_service_serves(target, draft, storage, model_arg):
    d = rollback.decide(
        _live([model_arg % target, _draft(draft)], storage), "off", now=1, options={"reclaim_draft": True}
    )
    pvc = d["reclaim"]["pvc"]
    assert pvc["refused"].startswith("refusing to delete the draft %s" % draft), pvc
    assert "the live engine's model %s, which is served" % target in pvc["refused"], pvc
    assert "Nothing was deleted" in pvc["refused"]
    assert d["needs_apply"]  # speculative decoding still goes off: only the delete is refused


def test_the_tokenizer_is_protected_too():
    args = ["--model=/mnt/models/target", "--tokenizer=/mnt/models/tok", _draft("/mnt/models/tok")]
    pvc = rollback.decide(_live(args), "off", now=1, options={"reclaim_draft": True})["reclaim"]["pvc"]
    assert "--tokenizer /mnt/models/tok" in pvc["refused"]


def _job(tmp_path, sub, protected):
    """Run the reclaim Job's script against tmp_path/data as its volume."""
    data = tmp_path / "data"
    env = dict(os.environ, DRAFT_SUBPATH=sub, SPECPILOT_PROTECTED="\n".join(protected))
    return subprocess.run(
        ["/bin/sh", "-c", rollback.reclaim_script(str(data))], env=env, capture_output=True, text=True
    )


def _volume(tmp_path):
    for d in ("target", "draft", "lab/target"):
        (tmp_path / "data" / d).mkdir(parents=True)
        (tmp_path / "data" / d / "config.json").write_text("{}")
    return tmp_path / "data"


def test_the_job_deletes_the_draft_and_nothing_else(tmp_path):
    data = _volume(tmp_path)
    run = _job(tmp_path, "draft", ["target", "lab/target"])
    assert run.returncode == 0, run.stdout + run.stderr
    line = [x for x in run.stdout.splitlines() if x.startswith("SPECPILOT-RESULT ")][0]
    assert json.loads(line.split(" ", 1)[1]) == {"path": "draft", "result": "deleted"}
    assert not (data / "draft").exists() and (data / "target" / "config.json").exists()
    again = _job(tmp_path, "draft", ["target"])
    assert again.returncode == 0 and '"result": "absent"' in again.stdout


@pytest.mark.parametrize(
    "sub, link",
    [
        ("draft", "target"),  # the draft directory is a symlink to the target
        ("draft", "."),  # ... to the volume's root
        ("draft", "lab"),  # ... to the target's parent
        ("draft", "/"),  # ... out of the volume
        ("target", None),
        ("lab", None),
        ("target/sub", None),
        ("../data/target", None),
        ("", None),
    ],
)
def test_the_job_refuses_after_resolving_symlinks(tmp_path, sub, link):
    data = _volume(tmp_path)
    if link is not None:
        (data / "draft" / "config.json").unlink()
        (data / "draft").rmdir()
        os.symlink(link if link.startswith("/") else str(data / link), data / "draft")
    (data / "target" / "sub").mkdir()
    run = _job(tmp_path, sub, ["target", "lab/target"])
    assert run.returncode == 2 and "SPECPILOT-ERROR refusing to delete" in run.stdout, run.stdout + run.stderr
    assert (data / "target" / "config.json").exists() and (data / "lab" / "target" / "config.json").exists()
