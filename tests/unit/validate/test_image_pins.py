"""Images pinned by digest (issue 19, a pinned supply chain): with specpilot_image_pins: digest (a
production inventory), an image the spec names by tag only is the warning image-tag-only at its field,
acknowledgeable; the default (tag) keeps the older rule (a tag other than latest)."""

from __future__ import annotations

from validate_helpers import base_spec

from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate

DIGEST = "sha256:" + "ab" * 32


def _codes(result, kind="warnings"):
    return {(f["path"], f["code"]) for f in result[kind]}


def test_a_tag_only_runtime_image_warns_in_digest_mode_and_not_by_default():
    spec = base_spec()
    assert ("runtime.image", "image-tag-only") in _codes(validate(spec, {"image_pins": "digest"}))
    assert "image-tag-only" not in {c for _p, c in _codes(validate(base_spec(), {}))}


def test_tag_and_digest_pass_in_digest_mode():
    spec = base_spec(runtime={"image": "vllm/vllm-openai:v0.32.0@" + DIGEST})
    result = validate(spec, {"image_pins": "digest"})
    assert "image-tag-only" not in {c for _p, c in _codes(result)}, result["report"]


def test_the_warning_is_acknowledgeable_and_says_how_to_pin():
    spec = base_spec(acknowledged_warnings=["image-tag-only"])
    result = validate(spec, {"image_pins": "digest"})
    assert "image-tag-only" not in {c for _p, c in _codes(result)}
    (note,) = [n for n in result["notes"] if n["code"] == "image-tag-only"]
    assert "vllm/vllm-openai:v0.32.0" in note["message"] and "@sha256:<digest>" in note["hint"]


def test_a_modelcar_base_pulled_from_a_registry_must_be_pinned_a_local_layout_not():
    car = {"image": "registry.example.com/models/svc:v1@" + DIGEST}
    pulled = base_spec(modelcar=dict(car, base_image="docker://docker.io/library/busybox:1.36.1"))
    local = base_spec(modelcar=dict(car, base_image="oci:/srv/layouts/busybox:1.36"))
    assert ("modelcar.base_image", "image-tag-only") in _codes(validate(pulled, {"image_pins": "digest"}))
    assert ("modelcar.base_image", "image-tag-only") not in _codes(validate(local, {"image_pins": "digest"}))
