"""modelcar_reclaim (option B draft reclaim) against real registries on loopback (Debian's
docker-registry): a Modelcar built by modelcar_build loses its draft layer by manifest surgery
(the base and target layers keep their digests, only a config and a manifest are uploaded), the
result pulls and unpacks without /models/draft, re-runs change nothing, check mode pushes nothing,
the old image still resolves; images without the layer annotations (the config label, the first
bytes of a layer, an explicit digest); Basic auth, and a Bearer registry whose blobs live on
another host (token scope widened for the push, no Authorization header sent to blob storage)."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import staging_support as ss
from ansible_collections.specpilot.core.plugins.module_utils.staging import (
    modelcar,
    modelcar_reclaim,
    oci_layout,
    oci_registry,
)
from specpilot_lab import registry as lab_registry

pytestmark = pytest.mark.skipif(
    not shutil.which("skopeo") or not shutil.which("docker-registry"),
    reason="skopeo and docker-registry are needed (make installs them)",
)

TARGET_BYTES = 1024 * 1024
DRAFT_BYTES = 256 * 1024


@pytest.fixture
def models(tmp_path):
    return ss.modelcar_inputs(tmp_path, TARGET_BYTES, DRAFT_BYTES)


build_params = ss.modelcar_params


def raw_manifest(ref: str) -> bytes:
    return subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"],
        capture_output=True,
        check=True,
    ).stdout


def resolves(ref: str) -> str | None:
    proc = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"], capture_output=True
    )
    return oci_registry.sha256_digest(proc.stdout) if proc.returncode == 0 else None


def registry_files(reg_dir: Path) -> set[str]:
    """Every blob the registry stores (its filesystem driver's blob store)."""
    return {p.parent.name for p in reg_dir.rglob("blobs/sha256/*/*/data")}


@pytest.fixture
def traffic(monkeypatch):
    """Bytes received from and sent to registries by the client, per request."""
    seen = []
    orig = oci_registry.Registry._exchange

    def exchange(self, method, url, headers, data, limit):
        reply = orig(self, method, url, headers, data, limit)
        seen.append((method, url, len(reply.body or b""), len(data or b""), dict(headers)))
        return reply

    monkeypatch.setattr(oci_registry.Registry, "_exchange", exchange)
    return seen


def test_reclaim_drops_the_draft_layer_by_manifest_surgery(models, tmp_path, traffic):
    with lab_registry.Registry(tmp_path / "reg") as reg:
        built = modelcar.build_push(build_params(models, f"{reg.addr}/models/chat:v1"))
        base_layer, target_layer, draft_layer = (
            d["digest"] for d in json.loads(raw_manifest(built["image_ref"]))["layers"]
        )
        assert [x["digest"] for x in built["layers"]] == [target_layer, draft_layer]
        source_uri = built["storage_uri"]  # oci://repo@sha256:... as in the InferenceService
        params = {
            "image": source_uri,
            "draft_subdir": "draft",
            "target_subdir": "target",
            "tls_verify": False,
        }
        blobs_before = registry_files(tmp_path / "reg")

        # check mode: the digest is computed, nothing is written
        check = modelcar_reclaim.reclaim(dict(params), check_mode=True)
        assert check["changed"] and not check["pushed"] and check["bytes_uploaded"] == 0
        assert resolves(f"{reg.addr}/models/chat:sha256-{built['digest'][7:19]}-nodraft") is None
        assert registry_files(tmp_path / "reg") == blobs_before
        assert all(m in ("GET", "HEAD") for m, *_ in traffic)

        res = modelcar_reclaim.reclaim(dict(params))
        assert res["changed"] and res["pushed"] and res["reclaimed"] and res["identified_by"] == "annotation"
        assert res["digest"] == check["digest"] != built["digest"]  # check mode computed the same image
        assert res["storage_uri"] == f"oci://{reg.addr}/models/chat@{res['digest']}"
        assert res["tag"] == f"sha256-{built['digest'][7:19]}-nodraft"  # the source had no tag: derived
        assert (
            res["dropped_layer"]["digest"] == draft_layer and res["dropped_layer"]["mount"] == "/models/draft"
        )
        assert res["bytes_reclaimed"] == res["dropped_layer"]["size"] > DRAFT_BYTES
        assert res["verify"]["ok"] and res["verify"]["source_kept"] and res["verify"]["tag_pinned"]

        # only the new config and the new manifest were uploaded (a few KiB); no layer moved
        assert res["blobs_uploaded"] == 1 and res["bytes_uploaded"] == res["upload_size"] < 8192
        assert sum(sent for *_, sent, _h in traffic) == res["bytes_uploaded"]
        assert sum(got for _m, _u, got, _s, _h in traffic) < 64 * 1024  # never a layer read
        assert registry_files(tmp_path / "reg") - blobs_before == {
            res["config_digest"][7:],
            res["digest"][7:],
        }

        manifest = json.loads(raw_manifest(res["image_ref"]))
        assert [d["digest"] for d in manifest["layers"]] == [
            base_layer,
            target_layer,
        ]  # byte-identical layers
        assert manifest["layers"][1]["annotations"] == {
            oci_layout.ANN_ARTIFACT_ROLE: "target",
            oci_layout.ANN_ARTIFACT_SUBDIR: "target",
        }
        config = json.loads(
            subprocess.run(
                [
                    "skopeo",
                    "inspect",
                    "--config",
                    "--raw",
                    "--tls-verify=false",
                    f"docker://{res['image_ref']}",
                ],
                capture_output=True,
                check=True,
            ).stdout
        )
        source_config = built_config(built)
        assert config["rootfs"]["diff_ids"] == source_config["rootfs"]["diff_ids"][:2]
        filled = [h for h in config["history"] if not h.get("empty_layer")]
        assert len(filled) == len(manifest["layers"]) and not any(
            "/models/draft" in h["created_by"] for h in filled
        )
        assert (
            "removed /models/draft" in config["history"][-1]["created_by"]
            and config["history"][-1]["empty_layer"]
        )
        labels = config["config"]["Labels"]
        assert labels[oci_layout.LABEL_MODELS] == "/models/target"
        assert labels[modelcar_reclaim.LABEL_RECLAIMED_FROM] == built["digest"]

        # the image pulls and unpacks: the target as it was, no draft
        models_dir = lab_registry.pull_and_unpack(res["image_ref"], tmp_path / "pulled", work_dir=tmp_path)
        assert sorted(p.name for p in models_dir.iterdir()) == ["target"]
        assert ss.tree_digest(models_dir / "target") == ss.tree_digest(models / "m" / "target")

        # the old image is untouched: by digest and by its tag
        assert resolves(f"{reg.addr}/models/chat@{built['digest']}") == built["digest"]
        assert resolves(f"{reg.addr}/models/chat:v1") == built["digest"]

        # again: the tag already names that digest -> nothing written
        mark = len(traffic)
        again = modelcar_reclaim.reclaim(dict(params))
        assert not again["changed"] and not again["pushed"] and again["registry_had_digest"]
        assert again["digest"] == res["digest"] and again["bytes_uploaded"] == 0
        assert all(m in ("GET", "HEAD") for m, *_ in traffic[mark:])

        # on the result itself: no draft layer, nothing to reclaim
        done = modelcar_reclaim.reclaim(dict(params, image=res["storage_uri"]))
        assert not done["changed"] and not done["reclaimed"] and done["already_without_draft"]
        assert done["digest"] == res["digest"] and "reclaimed from %s" % built["digest"] in done["msg"]


def built_config(built):
    return json.loads(oci_layout.Layout(built["layout"]).read_blob(built["config_digest"]))


def test_the_tag_names_the_new_image_and_never_moves_the_source_tag(models, tmp_path):
    with lab_registry.Registry(tmp_path / "reg") as reg:
        built = modelcar.build_push(build_params(models, f"{reg.addr}/models/chat:v1"))
        src = f"oci://{reg.addr}/models/chat:v1@{built['digest']}"
        res = modelcar_reclaim.reclaim({"image": src, "draft_subdir": "draft", "tls_verify": False})
        assert res["tag"] == "v1-nodraft" and resolves(f"{reg.addr}/models/chat:v1-nodraft") == res["digest"]
        other = modelcar_reclaim.reclaim(
            {"image": src, "tls_verify": False, "tag": "slim"}
        )  # by role "draft"
        assert other["digest"] == res["digest"] and other["changed"]  # deterministic: same image, other tag
        with pytest.raises(modelcar_reclaim.ReclaimError, match="source image's own tag"):
            modelcar_reclaim.reclaim(
                {"image": src, "draft_subdir": "draft", "tls_verify": False, "tag": "v1"}
            )
        with pytest.raises(modelcar_reclaim.ReclaimError, match="holds /models/nope"):
            modelcar_reclaim.reclaim(
                {"image": src, "draft_subdir": "draft", "target_subdir": "nope", "tls_verify": False}
            )
        assert resolves(f"{reg.addr}/models/chat:v1") == built["digest"]
        # a draft-only rebuild: the reclaim of either image is the same image (same base and target layers)
        ss.make_model(models / "m" / "draft", weight_bytes=DRAFT_BYTES, layers=1, seed=7)
        rebuilt = modelcar.build_push(build_params(models, f"{reg.addr}/models/chat:v2"))
        res2 = modelcar_reclaim.reclaim(
            {"image": rebuilt["storage_uri"], "draft_subdir": "draft", "tls_verify": False}
        )
        slim = json.loads(raw_manifest(res2["image_ref"]))["layers"]
        assert [d["digest"] for d in slim] == [
            d["digest"] for d in json.loads(raw_manifest(res["image_ref"]))["layers"]
        ]


def _strip_annotations(layout_dir: Path, tag: str) -> str:
    """An image as modelcar_build wrote it before the layer annotations existed."""
    layout = oci_layout.Layout(str(layout_dir))
    manifest, _desc = layout.resolve(tag)
    for d in manifest["layers"]:
        d.pop("annotations", None)
    desc = layout.put_json(manifest, oci_layout.MT_MANIFEST)
    layout.write_index(desc, tag)
    return desc["digest"]


def test_images_without_the_annotations(models, tmp_path, traffic):
    with lab_registry.Registry(tmp_path / "reg") as reg:
        built = modelcar.build_push(build_params(models, f"{reg.addr}/models/old:v1", push=False))
        old_digest = _strip_annotations(Path(built["layout"]), "v1")
        lab_registry.push(Path(built["layout"]), f"{reg.addr}/models/old:v1", tag="v1")
        # the config label (every modelcar_build image has it) and the build history name the layers
        res = modelcar_reclaim.reclaim({"image": f"{reg.addr}/models/old:v1", "tls_verify": False})
        assert res["identified_by"] == "label" and res["source"]["digest"] == old_digest
        assert res["dropped_layer"]["role"] == "draft" and res["dropped_layer"]["subdir"] == "draft"
        assert [a["role"] for a in res["artifacts"]] == ["target", "draft"]

        # an image from another writer (the lab's: no annotations, no label): the first bytes of the layers
        lab_digest = lab_registry.build_modelcar_layout(
            tmp_path / "lab-layout",
            {"target": models / "m" / "target", "draft": models / "m" / "draft"},
            tag="v1",
        )
        lab_registry.push(tmp_path / "lab-layout", f"{reg.addr}/models/lab:v1", tag="v1")
        src = f"{reg.addr}/models/lab@{lab_digest}"
        with pytest.raises(modelcar_reclaim.ReclaimError, match="give target_subdir"):
            modelcar_reclaim.reclaim({"image": src, "draft_subdir": "draft", "tls_verify": False})
        with pytest.raises(modelcar_reclaim.ReclaimError, match="cannot tell which layer.*draft_layer"):
            modelcar_reclaim.reclaim(
                {"image": src, "draft_subdir": "draft", "tls_verify": False, "identify_by_content": False}
            )
        mark = len(traffic)
        res = modelcar_reclaim.reclaim(
            {"image": src, "draft_subdir": "draft", "target_subdir": "target", "tls_verify": False}
        )
        assert res["identified_by"] == "layer-content" and res["reclaimed"] and res["verify"]["ok"]
        lab_layers = json.loads(raw_manifest(src))["layers"]
        # the lab writes its model layers in sorted order: base, draft, target (not the last layer here)
        assert res["dropped_layer"]["digest"] == lab_layers[1]["digest"]
        assert [d["digest"] for d in json.loads(raw_manifest(res["image_ref"]))["layers"]] == [
            lab_layers[0]["digest"],
            lab_layers[2]["digest"],
        ]
        # only the start of each layer was read (64 KiB each), never a whole layer
        peeks = [(u, got, h) for m, u, got, _s, h in traffic[mark:] if m == "GET" and "/blobs/" in u]
        assert all(got <= modelcar_reclaim.PEEK_BYTES for _u, got, h in peeks if "Range" in h)
        assert sum(got for _u, got, _h in peeks) < 4 * modelcar_reclaim.PEEK_BYTES < TARGET_BYTES
        models_dir = lab_registry.pull_and_unpack(res["image_ref"], tmp_path / "pulled", work_dir=tmp_path)
        assert sorted(p.name for p in models_dir.iterdir()) == ["target"]

        # named by its digest
        explicit = modelcar_reclaim.reclaim(
            {"image": src, "draft_layer": lab_layers[1]["digest"], "tls_verify": False, "tag": "explicit"}
        )
        assert explicit["identified_by"] == "explicit" and explicit["dropped_layer"]["mount"] is None
        assert (
            json.loads(raw_manifest(explicit["image_ref"]))["layers"]
            == json.loads(raw_manifest(res["image_ref"]))["layers"]
        )
        with pytest.raises(modelcar_reclaim.ReclaimError, match="first layer"):
            modelcar_reclaim.reclaim(
                {"image": src, "draft_layer": lab_layers[0]["digest"], "tls_verify": False}
            )


@pytest.mark.skipif(
    not ss.AuthRegistry.available(), reason="docker-registry, skopeo or bcrypt (crypt) missing"
)
def test_basic_auth_and_the_password_never_shows(models, tmp_path):
    with ss.AuthRegistry(tmp_path / "reg") as reg:
        creds = {"username": ss.REGISTRY_USER, "password": ss.REGISTRY_PASSWORD}
        built = modelcar.build_push(build_params(models, f"{reg.addr}/models/chat:v1", **creds))
        p = {"image": built["storage_uri"], "draft_subdir": "draft", "tls_verify": False, **creds}
        res = modelcar_reclaim.reclaim(dict(p))
        assert res["pushed"] and res["verify"]["ok"]
        assert ss.REGISTRY_PASSWORD not in json.dumps(res)
        with pytest.raises(oci_registry.RegistryError) as err:
            modelcar_reclaim.reclaim(dict(p, password="wrong-password-xyz", tag="other"))
        assert "refused" in str(err.value) and "wrong-password-xyz" not in str(err.value)
        with pytest.raises(oci_registry.RegistryError, match="asks for credentials"):
            modelcar_reclaim.reclaim(dict(p, username=None, password=None, tag="other"))
        authfile = ss.robot_authfile(tmp_path / "auth.json", reg.addr)
        by_file = ss.reclaim_by_authfile(modelcar_reclaim.reclaim, built["storage_uri"], authfile)
        assert not by_file["changed"] and by_file["digest"] == res["digest"]


class BearerFront:
    """A registry front on 127.0.0.1 with Bearer tokens (a pull token cannot push) whose blob reads are
    redirected to "blob storage" on another host name (localhost), which refuses an Authorization header."""

    def __init__(self, backend: str):
        self.backend = backend
        self.violations: list[str] = []
        self.tokens: list[str] = []
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code, headers=None, body=b""):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _proxy(self, path, headers):
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                req = urllib.request.Request(
                    f"http://{front.backend}{path}", data=data, method=self.command, headers=headers
                )
                opener = urllib.request.build_opener(NoRedirect())
                try:
                    resp = opener.open(req, timeout=30)
                except urllib.error.HTTPError as exc:
                    resp = exc
                body = resp.read() if self.command != "HEAD" else b""
                out = {}
                for k in ("Content-Type", "Docker-Content-Digest", "Location", "Content-Range"):
                    if resp.headers.get(k):
                        v = resp.headers[k]
                        if k == "Location":
                            v = v.replace(f"http://{front.backend}", f"http://{front.addr}")
                        out[k] = v
                self._send(resp.status if hasattr(resp, "status") else resp.code, out, body)

            def _handle(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/token":
                    scope = urllib.parse.parse_qs(url.query).get("scope", [""])[0]
                    token = "tok-push" if scope.endswith("pull,push") else "tok-pull"
                    front.tokens.append(token)
                    return self._send(
                        200, {"Content-Type": "application/json"}, json.dumps({"token": token}).encode()
                    )
                if url.path.startswith("/storage/"):
                    if self.headers.get("Authorization"):
                        front.violations.append(self.path)
                        return self._send(400, {}, b"only one auth mechanism allowed")
                    hdrs = {"Range": self.headers["Range"]} if self.headers.get("Range") else {}
                    return self._proxy(url.path[len("/storage") :], hdrs)
                name = url.path.split("/")[2:4]
                need = "tok-pull" if self.command in ("GET", "HEAD") else "tok-push"
                have = (self.headers.get("Authorization") or "").replace("Bearer ", "")
                if url.path != "/v2/" and not (have == need or have == "tok-push"):
                    scope = "repository:%s:%s" % (
                        "/".join(name),
                        "pull" if need == "tok-pull" else "pull,push",
                    )
                    return self._send(
                        401,
                        {
                            "WWW-Authenticate": 'Bearer realm="http://%s/token",service="front",scope="%s"'
                            % (front.addr, scope)
                        },
                    )
                if self.command == "GET" and "/blobs/sha256:" in url.path:
                    return self._send(307, {"Location": f"http://localhost:{front.port}/storage{self.path}"})
                hdrs = {
                    k: self.headers[k] for k in ("Accept", "Content-Type", "Range") if self.headers.get(k)
                }
                return self._proxy(self.path, hdrs)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _handle

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *a, **kw):
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.addr = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_bearer_tokens_and_blobs_on_another_host(models, tmp_path):
    with lab_registry.Registry(tmp_path / "reg") as reg, BearerFront(reg.addr) as front:
        lab_digest = lab_registry.build_modelcar_layout(
            tmp_path / "lab-layout",
            {"target": models / "m" / "target", "draft": models / "m" / "draft"},
            tag="v1",
        )
        lab_registry.push(tmp_path / "lab-layout", f"{reg.addr}/models/lab:v1", tag="v1")
        res = modelcar_reclaim.reclaim(
            {
                "image": f"{front.addr}/models/lab:v1@{lab_digest}",
                "draft_subdir": "draft",
                "target_subdir": "target",
                "tls_verify": False,
                "username": "u",
                "password": "p",
            }
        )
        assert res["pushed"] and res["verify"]["ok"] and res["identified_by"] == "layer-content"
        assert front.tokens[0] == "tok-pull" and "tok-push" in front.tokens  # the scope widened for the push
        assert front.violations == []  # blob storage never got the registry's Authorization header
        assert resolves(f"{reg.addr}/models/lab:v1-nodraft") == res["digest"]
