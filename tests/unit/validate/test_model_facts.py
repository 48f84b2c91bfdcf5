"""Model facts read at the artifact's source (module_utils/service/model_facts.py) and the draft's kind against the
method (compat.check_draft_kind): a fake Hugging Face hub (HF_ENDPOINT, HF_TOKEN), the moto S3 server, a
fake OCI registry that answers Range requests, local paths, and the lab's PVC, which a validate-only run
cannot read.  Only config.json and the tokenizer are fetched, never weights; results are cached by source
and revision; when facts cannot be read, the findings name the checks that could not run."""

from __future__ import annotations

import copy
import hashlib
import http.server
import io
import json
import subprocess
import tarfile
import threading

import pytest
import yaml

import staging_support as ss
from validate_helpers import ROOT, base_spec, paths

from ansible_collections.specpilot.core.plugins.module_utils.service import compat
from ansible_collections.specpilot.core.plugins.module_utils.service import model_facts as mf
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import assemble_from_vars
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate
from specpilot_lab.models import SHAPES, llama_config

TOKEN = "hf_model_facts_test_token"
TARGET_SHA, HEAD_SHA, DRAFT_SHA = "a" * 40, "b" * 40, "c" * 40

QWEN3_TARGET = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
# a published EAGLE-3 head for Qwen3-8B declares the generic head (AngelSlim/Qwen3-8B_eagle3 style)
QWEN3_EAGLE3_HEAD = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 151936,
    "draft_vocab_size": 32000,
    "torch_dtype": "bfloat16",
}


def tokenizer_json(n=64):
    return json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(n)}}})


def write_model(path, config, tokenizer=True, weights=0):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    if tokenizer:
        (path / "tokenizer.json").write_text(tokenizer_json())
    if weights:
        (path / "model.safetensors").write_bytes(ss.pseudo_random(weights, 7))
    return path


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    """Network reads on (the tests run with them off), a fresh cache, no stray credentials."""
    monkeypatch.setenv(mf.ENV_MODE, "auto")
    monkeypatch.setenv(mf.ENV_CACHE, str(tmp_path / "cache"))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache"


@pytest.fixture
def hub(tmp_path, cache_env, monkeypatch):
    """A fake hub that wants a token: a Qwen3 target, its EAGLE-3 head, the lab's tiny draft (a plain
    causal LM), each with a weights file that must never be fetched."""
    root = tmp_path / "hub"
    write_model(root / "qwen3", QWEN3_TARGET, weights=256 * 1024)
    write_model(root / "qwen3-eagle3", QWEN3_EAGLE3_HEAD, tokenizer=False, weights=128 * 1024)
    lab_draft(root / "lab-draft", weights=64 * 1024)
    with ss.ModelHTTPServer(root, token=TOKEN) as srv:
        srv.add_hf_repo("Qwen/Qwen3-8B", root / "qwen3", sha=TARGET_SHA)
        srv.add_hf_repo("AngelSlim/Qwen3-8B_eagle3", root / "qwen3-eagle3", sha=HEAD_SHA)
        srv.add_hf_repo("specpilot-lab/tiny-draft", root / "lab-draft", sha=DRAFT_SHA)
        monkeypatch.setenv("HF_ENDPOINT", srv.url)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        yield srv


def lab_draft(path, weights=0):
    """The lab's tiny draft as specpilot_lab.models writes it: a one-layer LlamaForCausalLM with the
    target's tokenizer (config from the same llama_config)."""
    return write_model(path, llama_config(SHAPES["draft"], ["LlamaForCausalLM"]), weights=weights)


def lab_target(path):
    return write_model(path, llama_config(SHAPES["target"], ["LlamaForCausalLM"]))


def qwen3_spec(version="0.32.0", **draft):
    spec = base_spec(
        vllm_version=version,
        target={"uri": "hf://Qwen/Qwen3-8B"},
        draft=dict({"uri": "hf://AngelSlim/Qwen3-8B_eagle3"}, **draft),
        acknowledged_warnings=["async-scheduling-disabled"],
    )
    return spec


def downloads(srv):
    return [r["path"].split("?")[0] for r in srv.requests if "/resolve/" in r["path"]]


def codes(findings):
    return {f["code"] for f in findings}


# ---------------------------------------------------------------- hf:// (fake hub, HF_ENDPOINT, HF_TOKEN)
@pytest.mark.parametrize("version", ["0.32.0", "0.10.1"])
def test_qwen3_target_with_an_eagle3_head_that_declares_llama_is_accepted(hub, version):
    """vLLM restricts EAGLE-3 by the target's family, not the head's declared model_type."""
    result = validate(qwen3_spec(version), {})
    assert not result["errors"], result["report"]
    facts = result["model_facts"]
    assert facts["mode"] == "auto"
    assert {"architecture", "hidden_size", "model_type", "tokenizer"} <= set(facts["target"]["keys"])
    assert facts["draft"]["resolved_revision"] == HEAD_SHA
    got = downloads(hub)
    assert got and not any(p.endswith(".safetensors") for p in got)  # never weights
    assert all(f"/resolve/{TARGET_SHA}/" in p or f"/resolve/{HEAD_SHA}/" in p for p in got)
    assert all(r["authorization"] for r in hub.requests)


def test_a_second_read_does_not_touch_the_network(hub, cache_env):
    first = validate(qwen3_spec(), {})
    assert not first["errors"], first["report"]
    assert not first["model_facts"]["target"]["cached"]
    seen = len(hub.requests)
    assert seen and list(cache_env.glob("*.json"))
    second = validate(qwen3_spec(), {})
    assert len(hub.requests) == seen
    assert second["model_facts"]["target"]["cached"] and second["model_facts"]["draft"]["cached"]
    assert second["errors"] == first["errors"] and second["plan"]["gpu_budget"] == first["plan"]["gpu_budget"]


def test_the_cache_is_keyed_by_source_and_revision(hub, cache_env):
    validate(qwen3_spec(), {})
    seen = len(hub.requests)
    spec = qwen3_spec()
    spec["target"]["revision"] = TARGET_SHA
    validate(spec, {})
    assert len(hub.requests) > seen  # another revision is another entry
    cache = mf.Cache(str(cache_env), ttl=60)
    source = {"kind": "hf", "uri": "hf://Qwen/Qwen3-8B", "revision": TARGET_SHA}
    entry = cache.get(mf._cache_key(source, {"HF_ENDPOINT": hub.url}), now=10**12)
    assert entry and entry["immutable"]  # a commit never expires; a branch does
    moving = cache.get(mf._cache_key(dict(source, revision=None), {"HF_ENDPOINT": hub.url}), now=10**12)
    assert moving is None


def test_a_typed_fact_that_contradicts_the_source_is_an_error_naming_both(hub):
    result = validate(qwen3_spec(hidden_size=2048), {})
    (error,) = [e for e in result["errors"] if e["code"] == "model-fact-conflict"]
    assert error["path"] == "draft.hidden_size"
    assert "2048" in error["message"] and "4096" in error["message"]
    assert "hf://AngelSlim/Qwen3-8B_eagle3" in error["message"]
    assert "specpilot_draft.hidden_size" in result["report"]


def test_typed_facts_that_agree_stand_and_the_source_fills_in_the_rest(hub):
    result = validate(qwen3_spec(hidden_size=4096, architecture="LlamaForCausalLMEagle3"), {})
    assert not result["errors"], result["report"]
    draft = result["model_facts"]["draft"]
    assert draft["typed"] == ["architecture", "hidden_size"]
    assert "hidden_size" not in draft["keys"] and {"model_type", "vocab_size"} <= set(draft["keys"])


def test_without_the_token_the_findings_say_which_checks_could_not_run(hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    result = validate(qwen3_spec(), {})
    assert not result["errors"], result["report"]
    unread = [w for w in result["warnings"] if w["code"] == "model-facts-unread"]
    assert {w["path"] for w in unread} == {"draft.uri", "target.uri"}
    draft = [w for w in unread if w["path"] == "draft.uri"][0]["message"]
    assert "HTTP 401" in draft and "HF_TOKEN" in draft
    assert "the draft's kind against method eagle3 (needs draft.architecture)" in draft
    assert "the EAGLE head's hidden size (needs draft.hidden_size)" in draft
    assert TOKEN not in result["report"]


def test_a_repository_without_config_json_is_reported(hub, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("nothing here")
    hub.add_hf_repo("org/empty", tmp_path / "empty")
    result = validate(qwen3_spec(uri="hf://org/empty"), {})
    (warning,) = [w for w in result["warnings"] if w["code"] == "model-facts-unread"]
    assert warning["path"] == "draft.uri" and "has no config.json" in warning["message"]


def test_off_reads_nothing_and_says_which_checks_were_skipped(hub):
    result = validate(qwen3_spec(), {"model_facts": "off"})
    assert hub.requests == []
    notes = [n for n in result["notes"] if n["code"] == "model-facts-off"]
    assert {n["path"] for n in notes} == {"draft.uri", "target.uri"}
    assert all("specpilot_model_facts is off" in n["message"] for n in notes)
    assert "the EAGLE head's hidden size" in notes[0]["message"]


def test_an_unknown_mode_is_an_error(hub):
    result = validate(qwen3_spec(), {"model_facts": "sometimes"})
    assert "model_facts" in paths(result["errors"]) and hub.requests == []


# ---------------------------------------------------------------- the must-show case: lab-draft as eagle3
def lab_draft_spec(**changes):
    """inventories/lab's lab-draft service, with its typed facts removed."""
    inv = ROOT / "inventories" / "lab"
    variables = yaml.safe_load((inv / "group_vars" / "specpilot_services.yml").read_text())
    variables.update(yaml.safe_load((inv / "host_vars" / "lab-draft.yml").read_text()))
    spec, _ = assemble_from_vars(variables, "lab-draft")
    spec = copy.deepcopy(spec)
    for role in ("target", "draft"):
        spec[role] = {k: v for k, v in spec[role].items() if k not in compat.FACT_KEYS}
    spec.update(changes)
    return spec


def test_lab_draft_switched_to_eagle3_is_refused_from_a_local_copy(tmp_path, cache_env):
    spec = lab_draft_spec(speculative={"method": "eagle3", "num_speculative_tokens": 3})
    spec["target"]["local_path"] = str(lab_target(tmp_path / "target"))
    spec["draft"]["local_path"] = str(lab_draft(tmp_path / "draft"))
    result = validate(spec, {})
    assert not result["ok"]
    (error,) = [e for e in result["errors"] if e["code"] == "draft-kind"]
    assert error["path"] == "draft.local_path"
    assert "a complete causal LM" in error["message"] and "LlamaForCausalLM" in error["message"]
    assert "Eagle3LlamaForCausalLM" in error["message"]
    assert "specpilot_draft.local_path" in result["report"]


def test_lab_draft_switched_to_eagle3_is_refused_from_the_hub(hub):
    spec = lab_draft_spec(speculative={"method": "eagle3", "num_speculative_tokens": 3})
    spec["draft"]["uri"] = "hf://specpilot-lab/tiny-draft"
    result = validate(spec, {})
    (error,) = [e for e in result["errors"] if e["code"] == "draft-kind"]
    assert error["path"] == "draft.uri" and "hf://specpilot-lab/tiny-draft" in error["message"]


def test_lab_draft_switched_to_eagle3_is_refused_with_its_facts_typed():
    """Accepted before issue 15: the typed facts already say it is a causal LM with a tokenizer."""
    inv = ROOT / "inventories" / "lab"
    variables = yaml.safe_load((inv / "group_vars" / "specpilot_services.yml").read_text())
    variables.update(yaml.safe_load((inv / "host_vars" / "lab-draft.yml").read_text()))
    variables["specpilot_speculative"] = {"method": "eagle3", "num_speculative_tokens": 3}
    spec, _ = assemble_from_vars(variables, "lab-draft")
    result = validate(spec, {})
    assert "draft-kind" in codes(result["errors"])
    assert [e["path"] for e in result["errors"] if e["code"] == "draft-kind"] == ["draft.architecture"]


def test_the_lab_pvc_cannot_be_read_in_a_validate_only_run(cache_env):
    """The lab inventory validates as it is (every fact typed: a note); without its typed facts the
    warning names the PVC directory and every check that could not run."""
    inv = ROOT / "inventories" / "lab"
    variables = yaml.safe_load((inv / "group_vars" / "specpilot_services.yml").read_text())
    variables.update(yaml.safe_load((inv / "host_vars" / "lab-draft.yml").read_text()))
    typed, _ = assemble_from_vars(variables, "lab-draft")
    result = validate(typed, {})
    assert result["ok"] and not [w for w in result["warnings"] if w["code"].startswith("model-facts")]
    assert {n["path"] for n in result["notes"] if n["code"] == "model-facts-unverified"} == {
        "target",
        "draft",
    }
    bare = validate(lab_draft_spec(), {})
    unread = {w["path"]: w["message"] for w in bare["warnings"] if w["code"] == "model-facts-unread"}
    assert set(unread) == {"target", "draft"}
    assert "pvc://specpilot-lab-models/draft" in unread["draft"]
    assert "cannot read in a validate-only run" in unread["draft"]
    for check in ("draft's kind against method draft_model", "tokenizer comparison", "vocabulary comparison"):
        assert check in unread["draft"]
    assert "specpilot_target" in bare["report"] and "specpilot_draft" in bare["report"]


# ---------------------------------------------------------------- draft kind against method
@pytest.mark.parametrize(
    "method, draft, code",
    [
        ("draft_model", {"architecture": "LlamaForCausalLMEagle3", "hidden_size": 4096}, "draft-kind"),
        ("medusa", {"architecture": "LlamaForCausalLM", "tokenizer": "x"}, "draft-kind"),
        ("mlp_speculator", {"architecture": "LlamaForCausalLMEagle3"}, "draft-kind"),
        ("eagle", {"architecture": "LlamaForCausalLM", "tokenizer": "x"}, "draft-kind"),
    ],
)
def test_a_draft_of_another_kind_is_an_error_on_the_draft(method, draft, code):
    findings = compat_findings(method, draft)
    assert code in codes(findings.errors)
    assert all(e["path"].startswith("draft") for e in findings.errors if e["code"] == code)


def test_heads_of_the_right_kind_pass():
    for method, draft in (
        ("eagle3", {"architecture": "LlamaForCausalLMEagle3", "hidden_size": 4096}),
        (
            "eagle3",
            {"architecture": "Eagle3Speculator", "speculators_model_type": "eagle3", "hidden_size": 4096},
        ),
        ("medusa", {"architecture": "MedusaModel", "model_type": "medusa"}),
        ("mlp_speculator", {"architecture": "MLPSpeculatorPreTrainedModel", "model_type": "mlp_speculator"}),
        ("draft_model", {"architecture": "LlamaForCausalLM", "tokenizer": "t", "vocab_size": 128256}),
    ):
        findings = compat_findings(method, draft)
        assert not findings.errors, (method, findings.errors)


def test_an_eagle3_head_under_a_plain_name_is_told_by_its_keys():
    head = {"architecture": "LlamaForCausalLM", "head_markers": ["draft_vocab_size"], "hidden_size": 4096}
    assert compat.draft_kind(head) == "eagle3"
    assert not compat_findings("eagle3", head).errors
    # typed plain architecture and no tokenizer: it cannot be told, a warning
    unsure = compat_findings("eagle", {"architecture": "LlamaForCausalLM", "hidden_size": 4096})
    assert not unsure.errors and "draft-kind-unsure" in codes(unsure.warnings)


def test_a_head_that_names_another_target_is_refused():
    head = {
        "architecture": "Eagle3Speculator",
        "speculators_model_type": "eagle3",
        "hidden_size": 4096,
        "eagle_target": "Qwen/Qwen3-8B",
        "eagle_target_architectures": ["Qwen3ForCausalLM"],
    }
    findings = compat_findings("eagle3", head, target_uri="hf://meta-llama/Llama-3.1-8B-Instruct")
    assert "eagle-target-named" in codes(findings.errors)
    assert "eagle-target-name" in codes(findings.warnings)


def test_the_eagle3_head_size_is_its_target_hidden_size_when_declared():
    head = {"architecture": "LlamaForCausalLMEagle3", "hidden_size": 2048, "target_hidden_size": 4096}
    assert not compat_findings("eagle3", head).errors
    wrong = compat_findings("eagle3", dict(head, target_hidden_size=5120))
    assert "eagle-hidden-size" in codes(wrong.errors)


def compat_findings(method, draft, target_uri=None):
    from ansible_collections.specpilot.core.plugins.module_utils.report.findings import Findings

    findings = Findings()
    target = {"architecture": "LlamaForCausalLM", "model_type": "llama", "hidden_size": 4096}
    target.update({"tokenizer": "t", "vocab_size": 128256})
    origins = {"target": {"uri": target_uri}} if target_uri else {}
    compat.check_compatibility(
        {"method": method, "num_speculative_tokens": 3},
        target,
        draft,
        {},
        "0.32.0",
        findings,
        origins=origins,
    )
    return findings


# ---------------------------------------------------------------- local_path
def test_a_local_copy_that_contradicts_the_spec_is_an_error(tmp_path, cache_env):
    spec = base_spec()
    spec["target"]["local_path"] = str(write_model(tmp_path / "t", dict(QWEN3_TARGET, hidden_size=5120)))
    result = validate(spec, {})
    conflicts = {e["path"] for e in result["errors"] if e["code"] == "model-fact-conflict"}
    assert {"target.hidden_size", "target.model_type", "target.vocab_size"} <= conflicts


# ---------------------------------------------------------------- s3:// (moto)
S3_PROGRAM = """
import json, sys
from ansible_collections.specpilot.core.plugins.module_utils.service import model_facts as mf
cache = mf.Cache(sys.argv[2])
out = []
for _ in range(2):
    facts, problem, cached = mf.read({"kind": "s3", "uri": sys.argv[1]}, cache=cache)
    out.append({"facts": facts, "problem": problem, "cached": cached})
print(json.dumps(out))
"""


@pytest.mark.skipif(not ss.MotoS3.available(), reason=".venv-staging (moto, boto3) missing: run make")
def test_s3_facts_come_from_the_small_objects_only(tmp_path):
    model = lab_draft(tmp_path / "m", weights=512 * 1024)
    (model / "tokenizer.model").write_bytes(b"sentencepiece-bytes")
    with ss.MotoS3(tmp_path / "moto") as s3:
        s3.upload(model, "models", "lab/draft")
        env = dict(s3.env, PATH="/usr/bin:/bin", HOME=str(tmp_path))
        env["PYTHONPATH"] = "%s:%s" % (ROOT / "collections", ss.staging_site_packages())
        proc = subprocess.run(
            [str(ss.STAGING_PYTHON), "-c", S3_PROGRAM, "s3://models/lab/draft", str(tmp_path / "cache")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        log = (tmp_path / "moto" / "moto.log").read_text()
        missing = subprocess.run(
            [str(ss.STAGING_PYTHON), "-c", S3_PROGRAM, "s3://models/nothing", str(tmp_path / "cache2")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    first, second = json.loads(proc.stdout)
    assert first["problem"] is None and not first["cached"] and second["cached"]
    facts = first["facts"]
    assert facts["architecture"] == "LlamaForCausalLM" and facts["hidden_size"] == 128
    assert facts["num_hidden_layers"] == 1 and facts["vocab_size"] == 2048
    assert facts["tokenizer"].startswith("sha256:")  # tokenizer.json wins over tokenizer.model
    assert facts["weight_bytes"] == (model / "model.safetensors").stat().st_size  # from the listing
    assert (
        "GET /models/lab/draft/config.json" in log and log.count("GET /models?list-type=2&prefix=lab/") == 1
    )
    assert "GET /models/lab/draft/model.safetensors" not in log  # never weights
    assert "GET /models/lab/draft/tokenizer.model" not in log  # tokenizer.json is enough
    assert ss.S3_SECRET not in proc.stdout + proc.stderr
    assert missing.returncode == 0, missing.stderr
    problem = json.loads(missing.stdout)[0]["problem"]
    assert "s3://models/nothing" in problem


# ---------------------------------------------------------------- oci:// (the registry API)
class FakeRegistry:
    """The distribution API's reads: /v2/, manifests by tag or digest, blobs with Range."""

    def __init__(self):
        self.blobs, self.manifests, self.sent, self.requests = {}, {}, 0, []
        self.httpd = None

    def add_blob(self, data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    def add_image(self, name, tag, layers):
        config = self.add_blob(json.dumps({"architecture": "amd64", "os": "linux"}).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": dict(config, mediaType="application/vnd.oci.image.config.v1+json"),
            "layers": layers,
        }
        raw = json.dumps(manifest).encode()
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        self.manifests[(name, tag)] = self.manifests[(name, digest)] = raw
        return digest

    def __enter__(self):
        reg = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, code, body=b"", headers=None):
                self.send_response(code)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                reg.sent += len(body)

            def do_GET(self):
                reg.requests.append((self.path, self.headers.get("Range")))
                parts = self.path.split("/")
                if self.path == "/v2/":
                    return self._send(200, b"{}")
                if "manifests" in parts:
                    i = parts.index("manifests")
                    raw = reg.manifests.get(("/".join(parts[2:i]), parts[i + 1]))
                    if raw is None:
                        return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
                    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
                    headers = {"Content-Type": json.loads(raw)["mediaType"], "Docker-Content-Digest": digest}
                    return self._send(200, raw, headers)
                data = reg.blobs.get(parts[-1])
                if data is None:
                    return self._send(404)
                rng = self.headers.get("Range")
                if rng:
                    start, end = (int(x) for x in rng[len("bytes=") :].split("-"))
                    body = data[start : end + 1]
                    return self._send(206, body, {"Content-Range": f"bytes {start}-{end}/{len(data)}"})
                return self._send(200, data)

        self.port = ss.free_port()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def layer_of(src, prefix):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(src.rglob("*")):
            tar.add(path, f"{prefix}/{path.relative_to(src).as_posix()}", recursive=False)
    return buf.getvalue()


def test_oci_facts_come_from_tar_headers_and_the_small_members(tmp_path, cache_env):
    weights = 2 * 1024 * 1024
    lab_draft(tmp_path / "draft", weights=weights)
    lab_target(tmp_path / "target")
    with FakeRegistry() as reg:
        layer = reg.add_blob(layer_of(tmp_path / "draft", "models/draft"))
        target_layer = reg.add_blob(layer_of(tmp_path / "target", "models"))
        tar = "application/vnd.oci.image.layer.v1.tar"
        annotations = {"io.specpilot.modelcar.artifact.subdir": "draft"}
        digest = reg.add_image(
            "models/lab",
            "v1",
            [dict(target_layer, mediaType=tar), dict(layer, mediaType=tar, annotations=annotations)],
        )
        source = {"kind": "oci", "uri": f"oci://127.0.0.1:{reg.port}/models/lab:v1", "subdir": "draft"}
        facts, problem, cached = mf.read(source)
        assert problem is None and not cached, problem
        assert facts["architecture"] == "LlamaForCausalLM" and facts["num_hidden_layers"] == 1
        assert facts["tokenizer"].startswith("sha256:") and facts["resolved_revision"] == digest
        assert reg.sent < weights // 4  # headers and small files, never the weights
        assert mf.read(source)[2]  # cached
        # a KServe modelcar image: the model at /models, found in the last layers
        whole, problem, _ = mf.read({"kind": "oci", "uri": f"oci://127.0.0.1:{reg.port}/models/lab@{digest}"})
        assert problem is None and whole["num_hidden_layers"] == 2
        gz = reg.add_blob(b"\x1f\x8b not really gzip")
        reg.add_image("models/gz", "v1", [dict(gz, mediaType=tar + "+gzip")])
        _facts, problem, _ = mf.read({"kind": "oci", "uri": f"oci://127.0.0.1:{reg.port}/models/gz:v1"})
        assert "compressed" in problem
        _facts, problem, _ = mf.read({"kind": "oci", "uri": f"oci://127.0.0.1:{reg.port}/models/none:v1"})
        assert "no such image" in problem


def test_a_modelcar_service_reads_its_image(tmp_path, cache_env):
    """delivery modelcar without uris: the facts come from the pinned image (models/<subdir>)."""
    lab_draft(tmp_path / "draft", weights=64 * 1024)
    lab_target(tmp_path / "target")
    with FakeRegistry() as reg:
        tar = "application/vnd.oci.image.layer.v1.tar"
        layers = [
            dict(reg.add_blob(layer_of(tmp_path / "target", "models/target")), mediaType=tar),
            dict(reg.add_blob(layer_of(tmp_path / "draft", "models/draft")), mediaType=tar),
        ]
        digest = reg.add_image("models/lab", "v1", layers)
        spec = lab_draft_spec(
            delivery="modelcar",
            modelcar={"image": f"127.0.0.1:{reg.port}/models/lab:v1", "image_digest": digest},
            speculative={"method": "eagle3", "num_speculative_tokens": 3},
        )
        spec.pop("pvc", None)
        result = validate(spec, {})
    (error,) = [e for e in result["errors"] if e["code"] == "draft-kind"]
    assert error["path"] == "draft" and f"/models/lab@{digest}" in error["message"]


# ---------------------------------------------------------------- through playbooks/validate.yml
@pytest.mark.slow
def test_the_variable_specpilot_model_facts_reaches_every_validation(hub, tmp_path, monkeypatch):
    """The environment says off; -e specpilot_model_facts=auto turns the reads on for this run, and the
    lab-draft service switched to eagle3 is refused naming specpilot_draft.uri."""
    from validate_helpers import run_playbook

    monkeypatch.setenv(mf.ENV_MODE, "off")
    inv = ROOT / "inventories" / "lab"
    variables = yaml.safe_load((inv / "group_vars" / "specpilot_services.yml").read_text())
    variables.update(yaml.safe_load((inv / "host_vars" / "lab-draft.yml").read_text()))
    variables = {k: v for k, v in variables.items() if k.startswith("specpilot_")}
    for role in ("target", "draft"):
        variables["specpilot_" + role] = {
            k: v for k, v in variables["specpilot_" + role].items() if k not in compat.FACT_KEYS
        }
    variables["specpilot_draft"]["uri"] = "hf://specpilot-lab/tiny-draft"
    variables["specpilot_speculative"] = {"method": "eagle3", "num_speculative_tokens": 3}
    spec_file = tmp_path / "lab-draft.yml"
    spec_file.write_text(yaml.safe_dump(variables))
    playbook = str(ROOT / "playbooks" / "validate.yml")
    on = run_playbook(
        tmp_path, playbook, "-e", f"specpilot_spec_file={spec_file}", "-e", "specpilot_model_facts=auto"
    )
    assert on.returncode != 0, on.stdout
    assert "specpilot_draft.uri" in on.stdout and "[draft-kind]" in on.stdout
    off = run_playbook(tmp_path, playbook, "-e", f"specpilot_spec_file={spec_file}")
    assert off.returncode == 0, off.stdout + off.stderr
    assert "[draft-kind]" not in off.stdout


def test_the_switch_takes_yaml_booleans_and_the_environment():
    assert mf.mode_of({"model_facts": False}, {}) == ("off", None)
    assert mf.mode_of({"model_facts": "auto"}, {mf.ENV_MODE: "off"}) == ("auto", None)
    assert mf.mode_of({}, {mf.ENV_MODE: "off"}) == ("off", None)
    assert mf.mode_of({}, {}) == ("auto", None)
    assert mf.mode_of({"model_facts": "maybe"}, {})[1]


def test_s3_without_boto3_on_the_controller_says_so(cache_env):
    import importlib.util

    if importlib.util.find_spec("boto3") is not None:
        pytest.skip("boto3 is installed here")
    facts, problem, _ = mf.read({"kind": "s3", "uri": "s3://bucket/model"})
    assert facts == {} and "boto3 on the controller" in problem


# ---------------------------------------------------------------- the cache: offline, unreachable, corrupt
class DownHub:
    """A Hub endpoint that answers every request 503 (a proxy in front of an unreachable Hub), counting
    them."""

    def __init__(self):
        hub = self
        self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                hub.requests.append(self.path)
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def down_hub(cache_env, monkeypatch):
    hub = DownHub()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    yield hub
    hub.close()


def unread(result):
    return {w["path"]: w["message"] for w in result["warnings"] if w["code"] == "model-facts-unread"}


def validate_in_a_fork(spec):
    """validate() in a forked process, as an Ansible worker of another host runs it; its warnings."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        return pool.apply(_fork_validate, (spec,))


def _fork_validate(spec):
    return unread(validate(spec, {}))


def test_an_unreachable_hub_is_asked_once_per_run_and_every_spec_reports_its_checks(down_hub, monkeypatch):
    first = validate(qwen3_spec(), {})
    # the target's read: the first try and one retry a quarter second later; then the endpoint is known
    # down, and the draft's read does not ask
    assert len(down_hub.requests) == 2
    warnings = unread(first)
    assert set(warnings) == {"target.uri", "draft.uri"}
    assert "HTTP 503" in warnings["target.uri"]
    assert "did not answer" in warnings["draft.uri"] and down_hub.url in warnings["draft.uri"]
    assert "HTTP 503" in warnings["draft.uri"]  # the reason found by the first read
    assert "the EAGLE head's hidden size (needs draft.hidden_size)" in warnings["draft.uri"]
    # another host's worker of the same run (a forked process) and another spec: nothing asked, same report
    other = qwen3_spec()
    other["target"]["uri"] = "hf://meta-llama/Llama-3.1-8B-Instruct"
    forked = validate_in_a_fork(other)
    assert len(down_hub.requests) == 2
    assert set(forked) == {"target.uri", "draft.uri"} and all("did not answer" in m for m in forked.values())
    assert mf.ENV_UNREACHABLE_TTL in forked["target.uri"]


def test_an_unreachable_hub_is_asked_again_once_its_entry_has_expired(down_hub, monkeypatch, cache_env):
    source = {"kind": "hf", "uri": "hf://Qwen/Qwen3-8B", "revision": None}
    cache = mf.Cache(str(cache_env))
    _facts, problem, _cached = mf.read(source, cache=cache, now=1000.0)
    assert "HTTP 503" in problem and len(down_hub.requests) == 2
    _facts, problem, _cached = mf.read(source, cache=cache, now=1000.0 + mf.DEFAULT_UNREACHABLE_TTL - 1)
    assert "did not answer at 00:16:40 UTC" in problem and len(down_hub.requests) == 2
    _facts, problem, _cached = mf.read(source, cache=cache, now=1000.0 + mf.DEFAULT_UNREACHABLE_TTL + 1)
    assert "HTTP 503" in problem and len(down_hub.requests) == 4
    monkeypatch.setenv(mf.ENV_UNREACHABLE_TTL, "0")  # 0: not remembered at all
    mf.read(source, cache=cache, now=1000.0 + mf.DEFAULT_UNREACHABLE_TTL + 2)
    assert len(down_hub.requests) == 6


def test_a_refusal_is_not_an_unreachable_hub(hub, monkeypatch):
    """A 401 answers for one repository: the next read on the same Hub is still made (and succeeds)."""
    monkeypatch.delenv("HF_TOKEN")
    assert "HTTP 401" in unread(validate(qwen3_spec(), {}))["target.uri"]
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    seen = len(hub.requests)
    result = validate(qwen3_spec(), {})
    assert len(hub.requests) > seen and not unread(result)
    assert result["model_facts"]["target"]["resolved_revision"] == TARGET_SHA


@pytest.mark.parametrize("value", ["1", "yes", "TRUE", "on"])
def test_hf_hub_offline_reads_the_cache_only(hub, monkeypatch, value):
    validate(qwen3_spec(), {})  # online: the facts of both artifacts cached
    seen = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    cached = validate(qwen3_spec(), {})
    assert cached["model_facts"]["target"]["cached"] and cached["model_facts"]["draft"]["cached"]
    assert not unread(cached) and not cached["errors"], cached["report"]
    spec = qwen3_spec()
    spec["target"]["revision"] = TARGET_SHA  # another revision: not in the cache
    result = validate(spec, {})
    assert len(hub.requests) == seen  # nothing asked of the Hub
    (message,) = unread(result).values()
    assert "HF_HUB_OFFLINE is set" in message and "hf://Qwen/Qwen3-8B" in message
    assert result["model_facts"]["draft"]["cached"]


def test_hf_hub_offline_false_values_leave_the_hub_on(hub, monkeypatch):
    for value in ("0", "false", ""):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert not mf.hf_offline(dict(HF_HUB_OFFLINE=value))
    assert mf.hf_offline({"TRANSFORMERS_OFFLINE": "1"})
    result = validate(qwen3_spec(), {})
    assert not unread(result) and hub.requests


@pytest.mark.parametrize("garbage", ['{"format": 1, "key": "x", "fa', "[1, 2]", '{"format": 1}', "\0\0\0"])
def test_a_corrupt_cache_file_is_a_miss_and_is_written_again(hub, cache_env, garbage):
    first = validate(qwen3_spec(), {})
    files = sorted(cache_env.glob("*.json"))
    assert len(files) == 2
    for path in files:
        path.write_text(garbage)
    seen = len(hub.requests)
    again = validate(qwen3_spec(), {})
    assert len(hub.requests) > seen and not again["model_facts"]["target"]["cached"]
    assert again["errors"] == first["errors"] and again["plan"]["gpu_budget"] == first["plan"]["gpu_budget"]
    assert all(json.loads(p.read_text())["facts"] for p in files)  # good entries again
    assert validate(qwen3_spec(), {})["model_facts"]["target"]["cached"]


def test_concurrent_writers_never_leave_a_partial_file(cache_env):
    """Forked writers of one key (the hosts of a run): a reader sees no entry or a whole one, never a
    torn file, and no temporary file stays behind."""
    import multiprocessing

    cache = mf.Cache(str(cache_env))
    big = {"facts": {"vocab": list(range(20000))}, "read_at": 1e12, "immutable": True}
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_put_many, args=(str(cache_env), big)) for _ in range(4)]
    for proc in writers:
        proc.start()
    seen = []
    while any(p.is_alive() for p in writers):
        entry = cache.get("hf|x|hf://a/b||")
        seen.append(None if entry is None else len(entry["facts"]["vocab"]))
    for proc in writers:
        proc.join()
        assert proc.exitcode == 0
    final = cache.get("hf|x|hf://a/b||")
    assert set(seen) <= {None, 20000} and len(final["facts"]["vocab"]) == 20000
    assert [p.name for p in cache_env.iterdir()] == [cache._path("hf|x|hf://a/b||").rsplit("/", 1)[1]]


def _put_many(directory, entry):
    cache = mf.Cache(directory)
    for _ in range(30):
        cache.put("hf|x|hf://a/b||", entry)
