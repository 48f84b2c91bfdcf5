"""Artifact staging in the lab, through playbooks/stage.yml and ansible-playbook:

* option C: the staging Job runs in the lab controller (bubblewrap, the PVC bind-mounted) and
  fills <pvc>/<path>/target from the loopback HTTP server and <pvc>/<path>/draft from S3 (moto),
  credentials from a Secret; a re-run is changed=0 and starts no Job; no secret value in the
  -vvv output, the Job spec or the pod log; a corrupted file fails the Job, named, with the log
  tail and the reason; a Job killed halfway is resumed by the next run;
* option B: the Modelcar image lands in the lab registry with separate target and draft layers,
  /models/target and /models/draft non-empty, sh/ln/sleep in the base; a re-run pushes nothing;
  a draft-only change keeps the target layer and uploads about the draft's bytes (an InferenceService
  served from such an image by its digest: molecule deploy's mol-draft-b and the README walk's lab-modelcar).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess

import pytest

import staging_support as ss
from specpilot_lab import registry as lab_registry
from specpilot_lab.controller.jobs import bwrap_available

pytestmark = [
    pytest.mark.lab,
    pytest.mark.slow,
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run lab Jobs here"),
]
NS = "ml"


@pytest.fixture
def sources(tmp_path):
    src = tmp_path / "src"
    ss.make_model(src / "target", weight_bytes=6 * 1024 * 1024, shards=2)
    ss.sha256sums(src / "target")
    ss.make_model(src / "draft", weight_bytes=1024 * 1024, layers=1, seed=1)
    ss.sha256sums(src / "draft")
    return src


def pvc_host(target_uri, draft_uri, **extra):
    host = {
        "specpilot_namespace": NS,
        "specpilot_delivery": "pvc",
        "specpilot_pvc": {"name": "models", "path": "svc", "create": True, "size": "1Gi"},
        "specpilot_target": {"uri": target_uri},
        "specpilot_draft": {"uri": draft_uri},
    }
    host.update(extra)
    return host


def jobs(lab):
    return lab.list("batch/v1", "Job", NS)


def test_pvc_staging_from_http_and_s3_then_nothing_to_do(fake_lab, sources, tmp_path):
    if not ss.MotoS3.available():
        pytest.skip(".venv-staging (moto, boto3) missing: run make")
    lab = fake_lab()
    lab.namespace(NS)
    with ss.ModelHTTPServer(sources) as srv, ss.MotoS3(tmp_path / "moto") as s3:
        s3.upload(sources / "draft", "models", "llama/draft")
        lab.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s3-creds"},
                "type": "Opaque",
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in s3.env.items()},
            },
            NS,
        )
        host = pvc_host(srv.files_url("target/"), "s3://models/llama/draft")
        host["specpilot_draft"]["secret_name"] = "s3-creds"
        inv = ss.write_inventory(tmp_path, {"svc": host}, ss.lab_staging_vars())
        proc = ss.run_playbook(inv, lab.emu.env, "-vvv")  # the run that creates the Job, at -vvv
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-6000:]
        # the PVC, the staging Job (specpilot.core.k8s_job: its ConfigMap, the Job, the owner reference), the status
        assert ss.recap(out)["svc"]["changed"] >= 3
        assert "[svc] specpilot-stage: progress" in out and "bytes (100.0%)" in out
        pvc = lab.state / "pvcs" / NS / "models" / "svc"
        assert ss.tree_digest(pvc / "target") == {
            k: v for k, v in ss.tree_digest(sources / "target").items() if k != "SHA256SUMS"
        }
        assert ss.tree_digest(pvc / "draft") == ss.tree_digest(sources / "draft")
        marker = json.loads((pvc / "draft" / ".specpilot-staged.json").read_text())
        assert (
            marker["source"] == "s3://models/llama/draft" and len(marker["files"]) == 6
        )  # with its SHA256SUMS
        status = lab.get("v1", "ConfigMap", "specpilot-stage-models", NS)["data"]
        assert sorted(status) == ["svc__draft.json", "svc__target.json"]
        assert len(jobs(lab)) == 1
        job = jobs(lab)[0]
        sent = srv.bytes_sent

        again = ss.run_playbook(inv, lab.emu.env, "-vvv")
        out2 = again.stdout + again.stderr
        assert again.returncode == 0, out2[-6000:]
        assert ss.recap(out2)["svc"]["changed"] == 0
        assert "up to date" in out2 and len(jobs(lab)) == 1 and srv.bytes_sent == sent
        # no secret value anywhere: task output at -vvv, the Job spec, the pod log
        pod = lab.list("v1", "Pod", NS, label_selector=f"job-name={job['metadata']['name']}")[0]
        log = lab.pod_log(NS, pod["metadata"]["name"])
        spec_text = json.dumps(job) + json.dumps(pod["spec"])
        for secret in (ss.S3_SECRET, ss.S3_KEY):
            for where, text in (
                ("first run", out),
                ("-vvv run", out2),
                ("Job/pod spec", spec_text),
                ("pod log", log),
            ):
                assert secret not in text, f"secret value in the {where}"
        c = job["spec"]["template"]["spec"]["containers"][0]
        assert c["envFrom"] == [
            {"prefix": "SPECPILOT_SRC_DRAFT_", "secretRef": {"name": "s3-creds", "optional": False}}
        ]


def test_a_corrupted_file_fails_the_job_naming_it(fake_lab, sources, tmp_path):
    lab = fake_lab()
    lab.namespace(NS)
    with ss.ModelHTTPServer(sources) as srv:
        srv.corrupt = {"target/model-00002-of-00002.safetensors"}
        inv = ss.write_inventory(
            tmp_path,
            {"svc": pvc_host(srv.files_url("target/"), srv.files_url("draft/"))},
            ss.lab_staging_vars(),
        )
        proc = ss.run_playbook(inv, lab.emu.env)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert "BackoffLimitExceeded" in out and "container exit code 2" in out
        assert "file: model-00002-of-00002.safetensors (target)" in out
        assert "model-00002-of-00002.safetensors is corrupt: sha256" in out and "log tail:" in out
        assert lab.get("v1", "ConfigMap", "specpilot-stage-models", NS) is None  # nothing recorded
        failed_job = jobs(lab)[0]["metadata"]["uid"]
        # the source is repaired: the failed Job of the same request is replaced, the good files are kept
        srv.corrupt = set()
        seen = len(srv.requests)
        proc = ss.run_playbook(inv, lab.emu.env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-5000:]
        assert [j["metadata"]["uid"] for j in jobs(lab)] != [failed_job] and len(jobs(lab)) == 1
        fetched = [r["path"] for r in srv.requests[seen:] if r["method"] == "GET"]
        assert "/files/target/model-00002-of-00002.safetensors" in fetched
        assert "/files/target/model-00001-of-00002.safetensors" not in fetched  # complete before: kept
        assert lab.get("v1", "ConfigMap", "specpilot-stage-models", NS) is not None


def test_pvc_created_only_when_asked_never_resized_and_copies_between_pvcs(fake_lab, sources, tmp_path):
    lab = fake_lab()
    lab.namespace(NS)
    lab.pvc_with_models(NS, sources, name="cache")  # another claim: mounted read-only
    host = pvc_host("pvc://cache/target", "pvc://models/incoming/draft")
    host["specpilot_pvc"] = {"name": "models", "path": "svc", "size": "5Gi"}  # no create
    inv = ss.write_inventory(tmp_path, {"svc": host}, ss.lab_staging_vars())
    proc = ss.run_playbook(inv, lab.emu.env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "PersistentVolumeClaim ml/models does not exist" in out
    assert "specpilot_pvc.create: true" in out and not jobs(lab)
    # made by someone else, 1Gi, holding the draft under incoming/ (a source on the destination claim)
    incoming = lab.pvc_with_models(NS, None, name="models") / "incoming"
    shutil.copytree(sources / "draft", incoming / "draft")
    host["specpilot_pvc"]["create"] = True
    inv = ss.write_inventory(tmp_path, {"svc": host}, ss.lab_staging_vars())
    proc = ss.run_playbook(inv, lab.emu.env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "PVC models requests 1Gi, the spec asks for 5Gi; it is left as it is" in out
    assert (
        lab.get("v1", "PersistentVolumeClaim", "models", NS)["spec"]["resources"]["requests"]["storage"]
        == "1Gi"
    )
    pvc = lab.state / "pvcs" / NS / "models" / "svc"
    assert ss.tree_digest(pvc / "target") == ss.tree_digest(sources / "target")
    assert ss.tree_digest(pvc / "draft") == ss.tree_digest(sources / "draft")
    mounts = jobs(lab)[0]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "src-2", "mountPath": "/specpilot/src/cache", "readOnly": True} in mounts


def test_a_job_killed_halfway_is_resumed_by_the_next_run(fake_lab, tmp_path):
    src = tmp_path / "src"
    ss.make_model(src / "target", weight_bytes=12 * 1024 * 1024)
    ss.sha256sums(src / "target")
    ss.make_model(src / "draft", weight_bytes=64 * 1024, layers=1, seed=1)
    big = (src / "target" / "model.safetensors").stat().st_size
    lab = fake_lab()
    lab.namespace(NS)
    part = (
        lab.state
        / "pvcs"
        / NS
        / "models"
        / "svc"
        / "target"
        / ".specpilot-partial"
        / "model.safetensors.part"
    )
    with ss.ModelHTTPServer(src, throttle_bps=3 * 1024 * 1024) as srv:
        inv = ss.write_inventory(
            tmp_path,
            {"svc": pvc_host(srv.files_url("target/"), srv.files_url("draft/config.json"))},
            dict(ss.lab_staging_vars(), specpilot_stage_pvc_layout_check=False),
        )
        first = ss.run_playbook(inv, lab.emu.env, background=True)
        try:
            lab.wait(lambda: part.exists() and part.stat().st_size > big * 0.4, 60, "the copy to be 40% done")
            name = jobs(lab)[0]["metadata"]["name"]
            lab.delete("batch/v1", "Job", name, NS)  # the controller kills the pod, like a node going away
            out1, _ = first.communicate(timeout=120)
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode != 0 and "does not exist" in out1
        halfway = part.stat().st_size
        assert big * 0.4 < halfway < big
        srv.throttle_bps = None
        sent = srv.bytes_sent
        proc = ss.run_playbook(inv, lab.emu.env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-5000:]
        again = srv.bytes_sent - sent
    assert "resuming at" in out
    target = lab.state / "pvcs" / NS / "models" / "svc" / "target"
    assert (target / "model.safetensors").read_bytes() == (src / "target" / "model.safetensors").read_bytes()
    assert again < big - halfway + 64 * 1024 + 16 * 1024  # the rest of the big file and the small files


# ---------------------------------------------------------------- option B
@pytest.mark.skipif(
    not shutil.which("skopeo") or not shutil.which("docker-registry"),
    reason="skopeo and docker-registry are needed (make installs them)",
)
def test_modelcar_in_the_lab_registry_pushed_by_digest_and_a_draft_change_keeps_the_target_layer(sources, tmp_path):
    lab_registry.build_base_layout(tmp_path / "base", tag="busybox")
    draft = tmp_path / "draft-local"
    shutil.copytree(sources / "draft", draft)
    password = "Registry-Passw0rd-never-logged"
    with ss.ModelHTTPServer(sources) as srv, lab_registry.Registry(tmp_path / "reg") as reg:
        image = f"{reg.addr}/models/svc"
        host = {
            "specpilot_namespace": NS,
            "specpilot_delivery": "modelcar",
            "specpilot_modelcar": {"image": f"{image}:v1", "tls_verify": False},
            "specpilot_target": {"uri": srv.files_url("target/")},
            "specpilot_draft": {
                # the lab draft's typed facts say 128; staging_support.make_model's draft has 64, and a typed
                # fact that contradicts local_path's config.json is an error
                "hidden_size": 64,
                "local_path": str(draft),
            },
        }
        group = {
            "specpilot_stage_modelcar_base": f"oci:{tmp_path / 'base'}:busybox",
            "specpilot_stage_modelcar_cache_dir": str(tmp_path / "cache"),
            "specpilot_stage_modelcar_registry_username": "robot",
            "specpilot_stage_modelcar_registry_password": password,
            "specpilot_pvc": None,
        }
        inv = ss.write_inventory(tmp_path, {"svc": host}, group)
        proc = ss.run_playbook(inv, None)  # no cluster needed
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-6000:]
        assert ss.recap(out)["svc"]["changed"] >= 1 and "pushed: " in out
        digest = out.split(f"pushed: {image}@", 1)[1].split()[0].strip("'\"")
        raw = subprocess.run(
            ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{image}@{digest}"],
            check=True,
            capture_output=True,
        ).stdout
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == digest
        manifest = json.loads(raw)
        assert len(manifest["layers"]) == 3  # busybox base, target, draft
        target_layer = manifest["layers"][1]["digest"]
        root = lab_registry.pull_and_unpack(f"{image}@{digest}", tmp_path / "pulled").parent
        assert ss.tree_digest(root / "models" / "target") == {
            k: v for k, v in ss.tree_digest(sources / "target").items() if k != "SHA256SUMS"
        }
        assert ss.tree_digest(root / "models" / "draft") == ss.tree_digest(draft)
        for applet in ("sh", "ln", "sleep"):
            assert (root / "bin" / applet).is_symlink()

        again = ss.run_playbook(inv, None, "-vvv")
        out2 = again.stdout + again.stderr
        assert again.returncode == 0, out2[-6000:]
        assert ss.recap(out2)["svc"]["changed"] == 0 and f"already in the registry: {image}@{digest}" in out2
        assert password not in out + out2

        # a draft-only change to the same tag: refused (the tag would move under the pods that pull
        # it, and the old image would be left untagged) ...
        ss.make_model(draft, weight_bytes=1024 * 1024, layers=1, seed=9)
        refused = ss.run_playbook(inv, None)
        assert refused.returncode != 0 and "already names another image" in refused.stdout + refused.stderr
        # ... unless forced: the target layer stays, about the draft's bytes go up
        third = ss.run_playbook(inv, None, "-e", "specpilot_stage_modelcar_force=true")
        out3 = third.stdout + third.stderr
        assert third.returncode == 0, out3[-6000:]
        digest2 = out3.split(f"pushed: {image}@", 1)[1].split()[0].strip("'\"")
        manifest2 = json.loads(
            subprocess.run(
                ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{image}@{digest2}"],
                check=True,
                capture_output=True,
            ).stdout
        )
        assert digest2 != digest and manifest2["layers"][1]["digest"] == target_layer
        uploaded = int(out3.split("blob(s), ", 1)[1].split(" bytes", 1)[0])
        draft_bytes = sum(p.stat().st_size for p in draft.rglob("*") if p.is_file())
        assert draft_bytes < uploaded <= 1.05 * draft_bytes
        # (an InferenceService served from such an image by its digest: molecule deploy's mol-draft-b, which
        # stages, deploys and asks the engine for a completion, and the README walk's lab-modelcar,
        # tests/lab/test_lab_up.py; the lab controller's pull of a Modelcar: test_controller.py
        # test_oci_modelcar_from_the_lab_registry. This test started a second lab for it.)
