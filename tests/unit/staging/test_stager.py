"""The staging program (module_utils/staging/stager.py) as the Job runs it: a subprocess of the
machine's python3 with a request file, against a loopback HTTP server (files, checksum
manifests, archives, a fake Hugging Face hub) and an S3 server (moto), plus the pure helpers."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile

import pytest

import staging_support as ss
from ansible_collections.specpilot.core.plugins.module_utils.staging import stager


def request(dest_root, *artifacts, **kw):
    arts = []
    for i, a in enumerate(artifacts):
        a = dict(a)
        a.setdefault("role", "target" if i == 0 else "draft")
        a.setdefault("dest", a["role"])
        a.setdefault(
            "request_digest", "sha256:" + hashlib.sha256(json.dumps(a, sort_keys=True).encode()).hexdigest()
        )
        arts.append(a)
    return dict(
        {"format": 1, "dest_root": str(dest_root), "artifacts": arts, "progress_interval": 0.05}, **kw
    )


@pytest.fixture
def models(tmp_path):
    src = tmp_path / "src"
    ss.make_model(src / "target", weight_bytes=3 * 1024 * 1024, shards=2)
    ss.sha256sums(src / "target")
    ss.make_model(src / "draft", weight_bytes=512 * 1024, layers=1, seed=1)
    ss.make_archive(src / "draft", src / "draft.tar.gz")
    ss.make_archive(src / "draft", src / "draft.zip")
    return src


# ---------------------------------------------------------------- https
def test_https_directory_with_manifest_then_rerun_is_a_no_op(tmp_path, models):
    with ss.ModelHTTPServer(models) as srv:
        req = request(tmp_path / "pvc", {"uri": srv.files_url("target/"), "dest": "svc/target"})
        code, out, res = ss.run_stager(req, tmp_path / "w")
        assert code == 0, out
        want = {k: v for k, v in ss.tree_digest(models / "target").items() if k != "SHA256SUMS"}
        assert ss.tree_digest(tmp_path / "pvc" / "svc" / "target") == want  # the manifest lists the files
        art = res["artifacts"][0]
        assert art["changed"] and art["files"] == 7 and art["bytes_downloaded"] == art["bytes"]
        marker = json.loads((tmp_path / "pvc" / "svc" / "target" / stager.MARKER).read_text())
        assert (
            marker["source"] == srv.files_url("target/")
            and marker["request_digest"] == art["status"]["request_digest"]
        )
        assert (
            marker["files"]["model-00001-of-00002.safetensors"]["sha256"]
            == hashlib.sha256(
                (models / "target" / "model-00001-of-00002.safetensors").read_bytes()
            ).hexdigest()
        )
        assert art["layout"]["tensors"] == 2 and art["layout"]["tokenizer"] == ["tokenizer.json"]
        sent = srv.bytes_sent
        code, out, res = ss.run_stager(req, tmp_path / "w")
        assert code == 0 and not res["artifacts"][0]["changed"], out
        assert (
            res["artifacts"][0]["bytes_downloaded"] == 0 and srv.bytes_sent == sent
        )  # not even listed again
        assert "up to date" in out


def test_progress_lines_carry_bytes_done_and_total(tmp_path, models):
    with ss.ModelHTTPServer(models, throttle_bps=20 * 1024 * 1024) as srv:
        code, out, res = ss.run_stager(
            request(tmp_path / "pvc", {"uri": srv.files_url("target/")}), tmp_path / "w"
        )
    assert code == 0
    total = res["artifacts"][0]["bytes"]
    lines = [line for line in out.splitlines() if "progress target" in line]
    assert len(lines) >= 2
    assert lines[-1].split("progress target ", 1)[1].startswith(f"{total}/{total} bytes (100.0%)")


@pytest.mark.parametrize("archive", ["draft.tar.gz", "draft.zip"])
def test_archive_is_unpacked_with_its_top_directory_stripped(tmp_path, models, archive):
    with ss.ModelHTTPServer(models) as srv:
        digest = hashlib.sha256((models / archive).read_bytes()).hexdigest()
        req = request(
            tmp_path / "pvc",
            {
                "role": "draft",
                "uri": srv.files_url(archive),
                "archive_sha256": digest,
                "exclude": ["generation_config.json"],
            },
        )
        code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 0, out
    got = ss.tree_digest(tmp_path / "pvc" / "draft")
    want = {k: v for k, v in ss.tree_digest(models / "draft").items() if k != "generation_config.json"}
    assert got == want
    assert not (tmp_path / "pvc" / "draft" / stager.PARTIAL).exists()


def test_archive_with_a_wrong_sha256_is_rejected(tmp_path, models):
    with ss.ModelHTTPServer(models) as srv:
        req = request(
            tmp_path / "pvc",
            {"role": "draft", "uri": srv.files_url("draft.tar.gz"), "archive_sha256": "0" * 64},
        )
        code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 2 and "draft.tar.gz is corrupt" in res["message"] and res["path"] == "draft.tar.gz"


def test_include_and_exclude_select_files(tmp_path, models):
    with ss.ModelHTTPServer(models) as srv:
        req = request(
            tmp_path / "pvc",
            {
                "uri": srv.files_url("target/"),
                "include": ["*.json", "*.safetensors"],
                "exclude": ["generation_config.json"],
            },
            layout_check=True,
        )
        code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 0, out
    names = sorted(ss.tree_digest(tmp_path / "pvc" / "target"))
    assert "SHA256SUMS" not in names and "generation_config.json" not in names
    assert "config.json" in names and "model-00002-of-00002.safetensors" in names


def test_corruption_in_transit_is_detected_and_names_the_file(tmp_path, models):
    with ss.ModelHTTPServer(models) as srv:
        srv.corrupt = {"target/model-00002-of-00002.safetensors"}
        code, out, res = ss.run_stager(
            request(tmp_path / "pvc", {"uri": srv.files_url("target/")}), tmp_path / "w"
        )
    assert code == 2, out
    assert res["path"] == "model-00002-of-00002.safetensors" and res["role"] == "target" and res["permanent"]
    assert "is corrupt: sha256" in res["message"]
    assert not (tmp_path / "pvc" / "target" / "model-00002-of-00002.safetensors").exists()
    assert not list((tmp_path / "pvc" / "target").rglob("*.part"))


def test_published_repr_digest_is_verified(tmp_path, models):
    (models / "single").mkdir()
    shutil.copy(models / "target" / "config.json", models / "single" / "config.json")
    with ss.ModelHTTPServer(models, repr_digest=True) as srv:
        srv.corrupt = {"single/config.json"}
        req = request(tmp_path / "pvc", {"uri": srv.files_url("single/config.json")}, layout_check=False)
        code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 2 and res["path"] == "config.json" and "sha256" in res["message"]


def test_a_differing_file_on_the_pvc_fails_unless_force(tmp_path, models):
    dest = tmp_path / "pvc" / "target"
    dest.mkdir(parents=True)
    (dest / "config.json").write_text('{"vocab_size": 1}')
    with ss.ModelHTTPServer(models) as srv:
        req = request(tmp_path / "pvc", {"uri": srv.files_url("target/")})
        code, out, res = ss.run_stager(req, tmp_path / "w")
        assert code == 2 and res["path"] == "config.json"
        assert "already exists on the PVC" in res["message"] and "force: true" in res["message"]
        assert (dest / "config.json").read_text() == '{"vocab_size": 1}'  # untouched
        code, out, res = ss.run_stager(dict(req, force=True), tmp_path / "w")
    assert code == 0, out
    assert ss.tree_digest(dest) == {
        k: v for k, v in ss.tree_digest(models / "target").items() if k != "SHA256SUMS"
    }


def test_corruption_on_the_pvc_is_found_by_a_recheck(tmp_path, models):
    with ss.ModelHTTPServer(models) as srv:
        req = request(tmp_path / "pvc", {"uri": srv.files_url("target/")})
        assert ss.run_stager(req, tmp_path / "w")[0] == 0
        victim = tmp_path / "pvc" / "target" / "model-00001-of-00002.safetensors"
        data = bytearray(victim.read_bytes())
        data[-1] ^= 0x01
        victim.write_bytes(bytes(data))
        code, out, res = ss.run_stager(dict(req, recheck=True), tmp_path / "w")
        assert code == 2 and res["path"] == "model-00001-of-00002.safetensors"
        assert "corrupted" in res["message"]
        code, out, res = ss.run_stager(dict(req, force=True), tmp_path / "w")
    assert code == 0, out
    assert res["artifacts"][0]["bytes_downloaded"] == victim.stat().st_size  # only that file again
    assert ss.tree_digest(tmp_path / "pvc" / "target") == {
        k: v for k, v in ss.tree_digest(models / "target").items() if k != "SHA256SUMS"
    }


@pytest.mark.parametrize("ranges", [True, False])
def test_an_interrupted_copy_resumes(tmp_path, models, ranges):
    big = models / "big"
    ss.make_model(big, weight_bytes=4 * 1024 * 1024)
    with ss.ModelHTTPServer(models) as srv:
        srv.no_ranges = not ranges
        req = request(
            tmp_path / "pvc",
            {"uri": srv.files_url("big/model.safetensors"), "dest": "big"},
            layout_check=False,
        )
        code, out, _ = ss.run_stager(dict(req, _test_stop_after_bytes=2 * 1024 * 1024), tmp_path / "w")
        assert code == 1  # killed halfway
        part = tmp_path / "pvc" / "big" / stager.PARTIAL / "model.safetensors.part"
        assert part.stat().st_size >= 2 * 1024 * 1024
        sent = srv.settled_bytes_sent()  # the killed run's response may still be writing its last chunk
        code, out, res = ss.run_stager(req, tmp_path / "w")
        assert code == 0, out
        art = res["artifacts"][0]
        again = srv.bytes_sent - sent
    size = (big / "model.safetensors").stat().st_size
    assert (tmp_path / "pvc" / "big" / "model.safetensors").read_bytes() == (
        big / "model.safetensors"
    ).read_bytes()
    if ranges:
        assert art["bytes_resumed"] >= 2 * 1024 * 1024 and again <= size - 2 * 1024 * 1024
        assert "resuming at" in out
    else:  # the server ignores ranges: start again, still correct
        assert art["bytes_resumed"] == 0 and again == size


# ---------------------------------------------------------------- layout
def test_layout_check_names_what_is_wrong(tmp_path):
    bad = tmp_path / "src" / "bad"
    ss.make_model(bad, tokenizer=False)
    raw = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(raw[:-10])  # truncated
    res = stager.check_layout(str(bad), "model", [])
    assert any("no tokenizer files" in e for e in res["errors"])
    assert any("model.safetensors" in e and "data bytes" in e for e in res["errors"])
    head = stager.check_layout(str(ss.make_model(tmp_path / "head", tokenizer=False)), "head", [])
    assert head["errors"] == [] and head["warnings"]
    idx = ss.make_model(tmp_path / "idx", shards=2)
    (idx / "model-00002-of-00002.safetensors").unlink()
    res = stager.check_layout(str(idx), "model", [])
    assert res["error_path"] == "model-00002-of-00002.safetensors"
    (tmp_path / "nocfg").mkdir()
    assert "config.json is missing" in stager.check_layout(str(tmp_path / "nocfg"), "model", [])["errors"]


def test_a_draft_with_another_vocabulary_is_rejected(tmp_path):
    src = tmp_path / "src"
    ss.make_model(src / "target", vocab_size=2048)
    ss.make_model(src / "draft", vocab_size=4096, seed=2)
    req = request(
        tmp_path / "pvc",
        {"uri": "pvc://models/target", "src_root": str(src)},
        {"uri": "pvc://models/draft", "src_root": str(src), "kind": "model"},
    )
    code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 2 and "vocab_size 4096 differs from the target's 2048" in res["message"]


def test_pvc_source_copies_between_claims(tmp_path):
    src = tmp_path / "other-pvc"
    ss.make_model(src / "models" / "tiny")
    req = request(tmp_path / "pvc", {"uri": "pvc://other/models/tiny", "src_root": str(src)})
    code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 0, out
    assert ss.tree_digest(tmp_path / "pvc" / "target") == ss.tree_digest(src / "models" / "tiny")


def test_pvc_copies_trust_a_source_marker_and_verify_size_skips_hashing(tmp_path):
    src = tmp_path / "cache-pvc"
    ss.make_model(src / "raw")
    req = request(tmp_path / "a", {"uri": "pvc://cache/raw", "src_root": str(src)}, verify="size")
    code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 0, out
    marker = json.loads((tmp_path / "a" / "target" / stager.MARKER).read_text())
    assert all(v["sha256"] is None for v in marker["files"].values())  # in-kernel copy, sizes only
    # a directory specpilot staged carries its digests: a copy of it is verified against them
    req = request(tmp_path / "b", {"uri": "pvc://cache/target", "src_root": str(tmp_path / "a")})
    code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 0, out
    staged = json.loads((tmp_path / "b" / "target" / stager.MARKER).read_text())["files"]
    victim = tmp_path / "b" / "target" / "model.safetensors"
    assert staged["model.safetensors"]["sha256"] == hashlib.sha256(victim.read_bytes()).hexdigest()
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))  # the source PVC now differs from its own marker
    req = request(tmp_path / "c", {"uri": "pvc://cache/target", "src_root": str(tmp_path / "b")}, verify="size")
    code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 2 and res["path"] == "model.safetensors" and "is corrupt" in res["message"]



def test_pvc_files_copied_two_at_a_time_are_each_verified(tmp_path):
    """A pvc:// source's files are staged two at a time (issue 41): every file still lands whole
    with its own sha256 in the marker, and a corrupt one is named while the others finish."""
    src = tmp_path / "cache-pvc"
    ss.make_model(src / "raw", weight_bytes=2 * 1024 * 1024, shards=4)
    req = request(tmp_path / "a", {"uri": "pvc://cache/raw", "src_root": str(src)})
    code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 0, out
    dest = tmp_path / "a" / "target"
    assert ss.tree_digest(dest) == ss.tree_digest(src / "raw")
    staged = json.loads((dest / stager.MARKER).read_text())["files"]
    assert len(staged) == len(ss.tree_digest(src / "raw")) and len(staged) >= 5
    for rel, info in staged.items():
        assert info["sha256"] == hashlib.sha256((dest / rel).read_bytes()).hexdigest(), rel
    victim = dest / "model-00002-of-00004.safetensors"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))  # the staged copy now differs from its marker: a corrupt source
    req = request(tmp_path / "b", {"uri": "pvc://cache/target", "src_root": str(tmp_path / "a")})
    code, out, res = ss.run_stager(req, tmp_path / "w")
    assert code == 2 and "is corrupt" in res["message"], out
    assert res["path"] == "model-00002-of-00004.safetensors"
    assert not (tmp_path / "b" / "target" / "model-00002-of-00004.safetensors").exists()
    assert not list((tmp_path / "b" / "target").rglob("*.part"))

# ---------------------------------------------------------------- S3 (moto)
needs_moto = pytest.mark.skipif(
    not ss.MotoS3.available(), reason=".venv-staging (moto, boto3) missing: run make"
)


@needs_moto
def test_s3_prefix_with_credentials_from_the_environment(tmp_path, models):
    with ss.MotoS3(tmp_path / "moto") as s3:
        s3.upload(models / "target", "models", "llama/target")
        s3.upload(
            models / "draft", "models", "llama/draft", multipart_threshold=256 * 1024
        )  # multipart ETags
        env = {f"SPECPILOT_SRC_TARGET_{k}": v for k, v in s3.env.items()}
        env.update({f"SPECPILOT_SRC_DRAFT_{k}": v for k, v in s3.env.items()})
        req = request(
            tmp_path / "pvc",
            {"uri": "s3://models/llama/target", "env_prefix": "SPECPILOT_SRC_TARGET_"},
            {"uri": "s3://models/llama/draft/", "env_prefix": "SPECPILOT_SRC_DRAFT_"},
        )
        code, out, res = ss.run_stager(req, tmp_path / "w", env=env)
        assert code == 0, out
        assert ss.tree_digest(tmp_path / "pvc" / "target") == ss.tree_digest(models / "target")
        assert ss.tree_digest(tmp_path / "pvc" / "draft") == ss.tree_digest(models / "draft")
        marker = (tmp_path / "pvc" / "target" / stager.MARKER).read_text()
        assert ss.S3_SECRET not in out and ss.S3_KEY not in out and ss.S3_SECRET not in marker
        # wrong credentials: a permanent error that does not print them
        bad = dict(env, SPECPILOT_SRC_TARGET_AWS_SECRET_ACCESS_KEY="wrong-secret-value-123")
        req2 = request(
            tmp_path / "pvc2", {"uri": "s3://nosuchbucket/x", "env_prefix": "SPECPILOT_SRC_TARGET_"}
        )
        code, out, res = ss.run_stager(req2, tmp_path / "w", env=bad)
    assert code == 2 and "NoSuchBucket" in res["message"]
    assert "wrong-secret-value-123" not in out and ss.S3_KEY not in out


@needs_moto
def test_s3_resume_uses_a_range_request(tmp_path, models):
    ss.make_model(models / "big", weight_bytes=4 * 1024 * 1024)
    with ss.MotoS3(tmp_path / "moto") as s3:
        s3.upload(models / "big", "models", "big")
        req = request(tmp_path / "pvc", {"uri": "s3://models/big"})
        code, _out, _ = ss.run_stager(
            dict(req, _test_stop_after_bytes=1024 * 1024), tmp_path / "w", env=s3.env
        )
        assert code == 1
        code, out, res = ss.run_stager(req, tmp_path / "w", env=s3.env)
    assert code == 0, out
    assert res["artifacts"][0]["bytes_resumed"] >= 1024 * 1024
    assert ss.tree_digest(tmp_path / "pvc" / "target") == ss.tree_digest(models / "big")


# ---------------------------------------------------------------- hf (fake hub, real client when installed)
@pytest.mark.skipif(
    not ss.STAGING_PYTHON.exists(), reason=".venv-staging (huggingface_hub) missing: run make"
)
def test_hf_downloads_by_snapshot_download_pinned_to_the_commit_only_the_selected_files(tmp_path, models):
    """huggingface_hub's snapshot_download fetches each selected file at the commit the revision resolved to
    (never the moving tag), with the token; include/exclude choose the files; a rerun fetches nothing."""
    sha = "abc123" + "0" * 34
    with ss.ModelHTTPServer(models, token="hf_testtoken") as srv:
        srv.add_hf_repo("org/draft", models / "draft", sha=sha, revisions=("main", "v1.0"))
        art = {"uri": "hf://org/draft@v1.0", "exclude": ["generation_config.json"]}
        req = request(tmp_path / "pvc", art, layout_check=False)
        env = {"HF_ENDPOINT": srv.url, "HF_TOKEN": "hf_testtoken", "HF_HUB_DISABLE_TELEMETRY": "1"}
        code, out, res = ss.run_stager(req, tmp_path / "w", env=env, python=ss.STAGING_PYTHON)
        assert code == 0, out
        fetched = [r for r in srv.requests if "/resolve/" in r["path"]]
        srv.requests.clear()
        code2, out2, res2 = ss.run_stager(req, tmp_path / "w", env=env, python=ss.STAGING_PYTHON)
        rerun_requests = list(srv.requests)
        # interrupted mid-way: the hub's copy of a file is gone once opened (the PVC holds one extra file at
        # most), only the staging program's resumable .part stays; the next run resumes it
        cut = request(tmp_path / "pvc-cut", art, layout_check=False)
        code_cut, out_cut, _ = ss.run_stager(
            dict(cut, _test_stop_after_bytes=200 * 1024), tmp_path / "w", env=env, python=ss.STAGING_PYTHON
        )
        partial = tmp_path / "pvc-cut" / "target" / stager.PARTIAL
        left = sorted(p.relative_to(partial).as_posix() for p in partial.rglob("*") if p.is_file())
        code_resumed, out_resumed, res_resumed = ss.run_stager(
            cut, tmp_path / "w", env=env, python=ss.STAGING_PYTHON
        )
        srv.requests.clear()
        # HF_HUB_OFFLINE: what is staged stays done; a new destination is a retryable error, the hub untouched
        offline = dict(env, HF_HUB_OFFLINE="1")
        code3, _out3, _res3 = ss.run_stager(req, tmp_path / "w", env=offline, python=ss.STAGING_PYTHON)
        code4, out4, res4 = ss.run_stager(
            request(tmp_path / "pvc2", art, layout_check=False),
            tmp_path / "w",
            env=offline,
            python=ss.STAGING_PYTHON,
        )
    assert res["artifacts"][0]["status"]["resolved_revision"] == sha
    assert fetched and all(f"/resolve/{sha}/" in r["path"] and r["authorization"] for r in fetched)
    assert not any("generation_config.json" in r["path"] for r in fetched)
    wanted = {k: v for k, v in ss.tree_digest(models / "draft").items() if k != "generation_config.json"}
    assert ss.tree_digest(tmp_path / "pvc" / "target") == wanted
    assert "hf_testtoken" not in out
    assert code2 == 0 and res2["artifacts"][0]["changed"] is False and rerun_requests == []
    assert srv.requests == []  # offline: the hub untouched
    assert code_cut == 1 and any(name.endswith(".part") for name in left), out_cut
    hub_copies = [n for n in left if not n.endswith((".part", ".part.json")) and "/.cache/" not in n]
    assert hub_copies == []
    assert code_resumed == 0 and res_resumed["artifacts"][0]["bytes_resumed"] > 0, out_resumed
    assert ss.tree_digest(tmp_path / "pvc-cut" / "target") == wanted
    assert code3 == 0 and code4 == 1 and "listing failed" in res4["message"], out4


@pytest.mark.skipif(
    not ss.STAGING_PYTHON.exists(), reason=".venv-staging (huggingface_hub) missing: run make"
)
def test_hf_with_the_real_client_against_a_fake_hub(tmp_path, models):
    with ss.ModelHTTPServer(models, token="hf_secret_token_42") as srv:
        srv.add_hf_repo("org/target", models / "target", sha="f" * 40)
        srv.corrupt = set()
        req = request(tmp_path / "pvc", {"uri": "hf://org/target", "revision": "main"})
        env = {"HF_ENDPOINT": srv.url, "HF_TOKEN": "hf_secret_token_42", "HF_HUB_DISABLE_TELEMETRY": "1"}
        code, out, res = ss.run_stager(req, tmp_path / "w", env=env, python=ss.STAGING_PYTHON)
        assert code == 0, out
        assert res["artifacts"][0]["status"]["resolved_revision"] == "f" * 40
        assert ss.tree_digest(tmp_path / "pvc" / "target") == ss.tree_digest(models / "target")
        assert "hf_secret_token_42" not in out
        # a corrupted LFS file is caught by the hub's sha256
        srv.corrupt = {"model-00001-of-00002.safetensors"}
        code, out, res = ss.run_stager(
            request(tmp_path / "pvc2", {"uri": "hf://org/target"}),
            tmp_path / "w",
            env=env,
            python=ss.STAGING_PYTHON,
        )
        assert code == 2 and res["path"] == "model-00001-of-00002.safetensors"
        code, out, res = ss.run_stager(
            request(tmp_path / "pvc3", {"uri": "hf://org/nope"}),
            tmp_path / "w",
            env=env,
            python=ss.STAGING_PYTHON,
        )
    assert code == 2 and "hf://org/nope" in res["message"]


def test_authorization_is_not_sent_to_another_host_after_a_redirect(tmp_path, models):
    with ss.ModelHTTPServer(models) as srv:
        req = request(tmp_path / "pvc", {"uri": f"{srv.url}/redirect/target/config.json"}, layout_check=False)
        code, out, res = ss.run_stager(req, tmp_path / "w", env={"HTTP_AUTHORIZATION": "Bearer very-secret"})
    assert code == 0, out
    first = [r for r in srv.requests if r["path"].startswith("/redirect/")]
    followed = [r for r in srv.requests if r["path"].startswith("/files/")]
    assert first and all(r["authorization"] for r in first)
    assert followed and not any(r["authorization"] for r in followed)
    assert "very-secret" not in out


def test_boto3_missing_is_a_clear_permanent_error(tmp_path):
    req = request(tmp_path / "pvc", {"uri": "s3://bucket/prefix"})
    code, out, res = ss.run_stager(req, tmp_path / "w", env={"PYTHONPATH": ""})
    assert code == 2 and "need boto3 in the staging image" in res["message"]


# ---------------------------------------------------------------- helpers
def test_redaction_and_safe_paths():
    assert (
        stager.redact_uri("https://u:p@h.example:8443/a/b?X-Amz-Signature=s#f")
        == "https://***@h.example:8443/a/b?***"
    )
    assert stager.redact_uri("s3://bucket/key") == "s3://bucket/key"
    for bad in ("../x", "/etc/passwd", "a/../../b", ".specpilot-partial/x"):
        with pytest.raises(stager.StageError):
            stager.safe_rel(bad)
    assert stager.safe_rel("a/./b") == "a/b"
    assert stager.selected("sub/model.safetensors", ["*.safetensors"], [])
    assert not stager.selected("x.bin", ["*.safetensors"], [])
    assert not stager.selected("original/x.pt", [], ["original/*"])
    sums = stager.parse_checksum_manifest(
        "# c\n" + "a" * 64 + "  dir/f\n" + "B" * 64 + " *g\nSHA256 (h) = " + "c" * 64
    )
    assert sums == {"dir/f": "a" * 64, "g": "b" * 64, "h": "c" * 64}


def test_archives_with_links_or_escaping_paths_are_refused(tmp_path):
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as tf:
        ti = tarfile.TarInfo("model/link")
        ti.type, ti.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(ti)
    with pytest.raises(stager.StageError, match="refusing to unpack links"):
        list(stager.iter_archive(str(evil)))
    escape = tmp_path / "escape.tar"
    with tarfile.open(escape, "w") as tf:
        data = b"{}"
        ti = tarfile.TarInfo("../../outside.json")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    srv_root = tmp_path / "srv"
    srv_root.mkdir()
    shutil.copy(escape, srv_root / "escape.tar")
    with ss.ModelHTTPServer(srv_root) as srv:
        code, out, res = ss.run_stager(
            request(tmp_path / "pvc", {"uri": srv.files_url("escape.tar")}), tmp_path / "w"
        )
    assert code == 2 and "unsafe path" in res["message"]
    assert not (tmp_path / "outside.json").exists()


def _top_imports(path):
    import ast

    top = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            top.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            top.add(node.module or "")
    return top


def test_the_program_is_standard_library_only():
    """stager.py imports the standard library and the collection's retry policy, deploy_retry (from the
    collection, or beside it in the Job's ConfigMap), which is standard library only itself; the fetch
    tools (boto3, huggingface_hub) only inside the functions of their schemes."""
    import sys

    from ansible_collections.specpilot.core.plugins.module_utils.k8s import deploy_retry

    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    policy = {"ansible_collections.specpilot.core.plugins.module_utils.k8s", "deploy_retry"}
    fetch = {"boto3", "botocore.config", "huggingface_hub", "huggingface_hub.utils"}
    top = {name for name in _top_imports(stager.__file__) if name.split(".")[0] not in stdlib}
    assert top - fetch == policy
    own = {name.split(".")[0] for name in _top_imports(deploy_retry.__file__)}
    assert own <= stdlib, own - stdlib
