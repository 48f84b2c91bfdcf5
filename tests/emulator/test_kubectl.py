"""kubectl against the emulator, with the upstream KServe v0.20.0 CRDs.

Debian's kubectl (1.20, unpacked into .venv by make) always runs; a newer kubectl
found on the machine runs too, since newer clients use other API paths
(server-side field validation, OpenAPI v3).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT.parent / "shared" / "reference" / "kserve-crds" / "v0.20.0"


def _kubectls() -> list:
    found = []
    debian = ROOT / ".venv" / "bin" / "kubectl"
    if debian.exists():
        found.append(pytest.param(str(debian), id="debian-1.20"))
    modern = sorted(Path("/usr/lib/google-cloud-sdk/bin").glob("kubectl.1.*"))
    if modern:
        found.append(pytest.param(str(modern[-1]), id=modern[-1].name))
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="no kubectl: run make"))]


pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.upstream_crds,
    pytest.mark.skipif(not UPSTREAM.is_dir(), reason=f"upstream CRDs not found at {UPSTREAM}"),
]


@pytest.fixture(scope="module")
def bare_emulator(emulator_factory):
    """An emulator with no KServe CRDs: kubectl installs the upstream ones itself."""
    return emulator_factory(crds=[])


@pytest.fixture(params=_kubectls())
def kubectl(request, bare_emulator, tmp_path):
    binary = request.param

    def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(os.environ, KUBECONFIG=str(bare_emulator.kubeconfig), HOME=str(tmp_path))
        proc = subprocess.run(
            [binary, f"--cache-dir={tmp_path / 'kube-cache'}", *args],
            input=stdin, capture_output=True, text=True, env=env, timeout=120,
        )
        if check:
            assert proc.returncode == 0, f"kubectl {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc

    run.emulator = bare_emulator
    run.binary = binary
    return run


def _install_upstream_crds(kubectl) -> None:
    for crd in sorted(UPSTREAM.glob("*.yaml")):
        # The InferenceService CRD is ~2 MB: client-side apply would store it again in the
        # last-applied annotation, which a real apiserver refuses (256 KiB limit).
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))


ISVC = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: {name}
  namespace: default
spec:
  predictor:
{extra}
    model:
      modelFormat:
        name: vLLM
      args: ["--model=/mnt/models/target"]
"""


def test_apply_upstream_crds_and_list(kubectl):
    _install_upstream_crds(kubectl)
    crds = json.loads(kubectl("get", "crd", "-o", "json").stdout)
    names = {c["metadata"]["name"] for c in crds["items"]}
    assert {"inferenceservices.serving.kserve.io", "servingruntimes.serving.kserve.io",
            "clusterservingruntimes.serving.kserve.io"} <= names
    listing = json.loads(kubectl("get", "inferenceservices", "-A", "-o", "json").stdout)
    assert listing["kind"] in ("List", "InferenceServiceList")
    assert isinstance(listing["items"], list)
    # short name from discovery
    assert kubectl("get", "isvc", "-A").returncode == 0


def test_client_side_apply_of_huge_crd_is_refused_like_a_real_apiserver(kubectl):
    proc = kubectl("apply", "-f", str(UPSTREAM / "serving.kserve.io_inferenceservices.yaml"), check=False)
    assert proc.returncode != 0
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in proc.stderr


def test_dry_run_server_stores_nothing(kubectl):
    _install_upstream_crds(kubectl)
    name = "dryrun-" + Path(kubectl.binary).name.replace(".", "-")
    kubectl.emulator.control.clear_requests()
    out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=ISVC.format(name=name, extra=""))
    assert "server dry run" in out.stdout
    got = kubectl("get", "isvc", name, "-n", "default", check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr
    writes = [r for r in kubectl.emulator.control.requests() if r["method"] in ("POST", "PATCH", "PUT")]
    assert writes and all(r["dry_run"] for r in writes)


def test_misplaced_storage_uris_are_pruned(kubectl):
    _install_upstream_crds(kubectl)
    name = "pruned-" + Path(kubectl.binary).name.replace(".", "-")
    manifest = ISVC.format(name=name, extra="").replace(
        "      args:", "      storageUris:\n        - uri: s3://bucket/draft\n          mountPath: /mnt/models/draft\n      args:"
    )
    # Newer kubectl asks the server for strict field validation and is refused;
    # without it (Debian's 1.20, or --validate=false) the server prunes silently.
    proc = kubectl("apply", "--validate=false", "-f", "-", stdin=manifest)
    assert proc.returncode == 0
    isvc = json.loads(kubectl("get", "isvc", name, "-o", "json").stdout)
    assert "storageUris" not in isvc["spec"]["predictor"]["model"]
    assert isvc["spec"]["predictor"]["model"]["args"] == ["--model=/mnt/models/target"]


def test_relative_mount_path_is_rejected_with_the_field(kubectl):
    _install_upstream_crds(kubectl)
    name = "relative-" + Path(kubectl.binary).name.replace(".", "-")
    extra = "    storageUris:\n      - uri: s3://bucket/target\n        mountPath: relative"
    proc = kubectl("apply", "-f", "-", stdin=ISVC.format(name=name, extra=extra), check=False)
    assert proc.returncode != 0
    assert "spec.predictor.storageUris[0].mountPath" in proc.stderr
    assert "should match '^/.*'" in proc.stderr
    assert "is invalid" in proc.stderr


def test_logs_of_a_pod(kubectl, tmp_path):
    from specpilot_lab import podlogs

    kubectl("apply", "-f", "-", stdin=(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: logger\n  namespace: default\n"
        "spec:\n  containers:\n    - name: kserve-container\n      image: vllm\n"
    ))
    podlogs.append(kubectl.emulator.state_dir, "default", "logger", "kserve-container",
                   ["INFO speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3)",
                    "INFO Application startup complete."])
    out = kubectl("logs", "logger", "-c", "kserve-container", "--tail=1").stdout
    assert out.strip() == "INFO Application startup complete."
    full = kubectl("logs", "logger").stdout
    assert "SpeculativeConfig(method='ngram'" in full
