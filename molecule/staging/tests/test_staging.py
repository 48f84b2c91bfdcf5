"""molecule verify for the staging scenario, with testinfra: what converge staged, read on this machine as a
user would - the files and markers on the PVC's backing directory, the status ConfigMap through kubectl, the
Modelcar image in the lab registry through skopeo."""

import json
import os

NAMESPACE = "specpilot-staging"
# the machine itself (the inventory's localhost); the platform "lab" is only molecule's name for the lab
testinfra_hosts = ["ansible://localhost"]
FIXTURES = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", ""), "fixtures", "fixtures.json")


def fixtures(host):
    return json.loads(host.file(FIXTURES).content_string)


def pvc_dir(host):
    return os.path.join(fixtures(host)["lab"], "pvcs", NAMESPACE, "staging-models", "stage-pvc")


def test_both_artifacts_are_staged_byte_for_byte(host):
    fx, root = fixtures(host), pvc_dir(host)
    for artifact in ("target", "draft"):
        staged = host.file(os.path.join(root, artifact, "model.safetensors"))
        source = host.file(os.path.join(fx["models"], artifact, "model.safetensors"))
        assert staged.is_file and staged.sha256sum == source.sha256sum
    assert host.file(os.path.join(root, "draft", "tokenizer.json")).is_file


def test_each_artifact_carries_its_marker_naming_its_source(host):
    fx, root = fixtures(host), pvc_dir(host)
    for artifact in ("target", "draft"):
        marker = host.file(os.path.join(root, artifact, ".specpilot-staged.json"))
        assert marker.is_file
    draft = json.loads(host.file(os.path.join(root, "draft", ".specpilot-staged.json")).content_string)
    assert draft["source"] == fx["http"] + "/draft.tar.gz"


def test_the_status_configmap_records_both(host):
    out = host.check_output(
        "kubectl --kubeconfig %s -n %s get configmap specpilot-stage-staging-models -o json",
        os.environ["K8S_AUTH_KUBECONFIG"],
        NAMESPACE,
    )
    assert sorted(json.loads(out)["data"]) == ["stage-pvc__draft.json", "stage-pvc__target.json"]


def test_the_modelcar_image_has_the_base_a_target_and_a_draft_layer(host):
    image = "%s/specpilot/stage-modelcar:v1" % fixtures(host)["registry"]
    manifest = json.loads(host.check_output("skopeo inspect --raw --tls-verify=false docker://%s", image))
    layers = manifest["layers"]
    assert len(layers) == 3
    assert {layer["mediaType"] for layer in layers[1:]} == {"application/vnd.oci.image.layer.v1.tar"}
