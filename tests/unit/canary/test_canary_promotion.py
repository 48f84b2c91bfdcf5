"""What a canary's promotion of a runtime image change writes after the predictor (module_utils/operate/canary_change.py
promotion_writes, the canary role's promote step through the filter canary_promotion): the service it leaves is what
deploy.yml of the same spec makes - deploy's decision on it changes nothing, and no spec.predictor.model.image is left
to pin the image over a later deploy's (deploy's server-side apply removes only what its own field manager owns)."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.filter.canary import canary_images, canary_promotion
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_state
from ansible_collections.specpilot.core.plugins.module_utils.service import live
from service_plans import SPEC, applied, plan

OLD, NEW, LATER = "vllm/vllm-openai:v0.31.0", "vllm/vllm-openai:v0.32.0", "vllm/vllm-openai:v0.33.0"
UNPIN = {"spec": {"predictor": {"model": {"image": None}}}}


def _plan(**changes):
    return plan(**dict({"runtime": {"image": NEW}}, **changes))


def _image_plan(image, **changes):
    return _plan(runtime=dict(SPEC["runtime"], image=image), **changes)


def _merge(target, patch):
    """A JSON merge patch (RFC 7386) applied, as the API server applies promote.yml's patches."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _deployed(plan):
    """The service and its runtime as deploy.yml of ``plan`` leaves them."""
    runtime, isvc = deploy_state.desired_objects(plan, None)
    return applied(isvc), applied(runtime)


def _promoted(stable, plan, images):
    """promote.yml's first write in Standard mode: the predictor becomes the canary's (the plan's, named after the
    canary, naming the spec's image when it changes: prepare.yml), the plan's metadata."""
    predictor = copy.deepcopy(plan["inferenceservice"]["spec"]["predictor"])
    predictor["name"] = "s" + plan["spec_digest"][:8]
    if images["on_canary"]:
        predictor["model"]["image"] = images["on_canary"]
    meta = plan["inferenceservice"]["metadata"]
    patch = {"metadata": {"labels": meta["labels"], "annotations": meta["annotations"]},
             "spec": {"canary": None, "predictor": predictor}}
    return _merge(stable, patch)


def test_a_promoted_image_change_leaves_what_deploy_of_the_same_spec_makes():
    stable, stable_runtime = _deployed(_image_plan(OLD))
    plan = _image_plan(NEW)
    images = canary_images(stable, plan, stable_runtime)
    assert images["changed"] and images["problem"] == "" and images["canary"] == NEW
    writes = canary_promotion(plan, images)
    # deploy's own ServingRuntime of the spec (the object deploy.yml applies), with the spec's image
    assert writes["runtime"] == deploy_state.decide(plan, {})["servingruntime"]
    assert live.runtime_image(writes["runtime"]) == NEW
    assert writes["unpin"] == UNPIN
    isvc = _merge(_promoted(stable, plan, images), writes["unpin"])
    runtime = applied(writes["runtime"])
    assert "image" not in isvc["spec"]["predictor"]["model"] and "canary" not in isvc["spec"]
    # deploy.yml of the same spec right after: nothing to apply, and the service runs the plan (the runtime's image)
    decision = deploy_state.decide(plan, {"inferenceservice": isvc, "servingruntime": runtime})
    assert decision["in_sync"] and not decision["needs_apply"], (decision["runtime_sync"], decision["isvc_sync"])
    assert live.changes(isvc, plan, runtime) == []
    # a later deploy.yml of another image: its runtime's image is what the predictor runs
    later = _image_plan(LATER)
    later_runtime = applied(deploy_state.decide(later, {})["servingruntime"])
    assert live.view(isvc).image is None
    assert [c["spec"] for c in live.changes(isvc, later, later_runtime) if c["field"] == "image"] == []


def test_without_the_promotions_writes_the_image_stays_pinned_over_a_later_deploys():
    """What promotion left before (the predictor's merge patch only): deploy.yml of the same spec had the runtime to
    apply, and the image named on the predictor outlived it - a later spec's runtime image never ran."""
    stable, stable_runtime = _deployed(_image_plan(OLD))
    plan = _image_plan(NEW)
    pinned = _promoted(stable, plan, canary_images(stable, plan, stable_runtime))
    decision = deploy_state.decide(plan, {"inferenceservice": pinned, "servingruntime": stable_runtime})
    assert not decision["runtime_sync"]["in_sync"]
    later = _image_plan(LATER)
    later_runtime = applied(deploy_state.decide(later, {})["servingruntime"])
    assert live.view(pinned).image == NEW
    assert live.changes(pinned, later, later_runtime)[0] == {"field": "image", "live": NEW, "spec": LATER}


def test_a_predictor_that_names_its_image_is_canaried_on_that_image_and_promoted_without_it():
    """The live predictor names the spec's image itself while its runtime names another (a service promoted by an
    earlier release; in Knative mode, the canary's revision a killed run left, taken up again): no image change, but
    the canary's predictor names the image (without it the canary arm would run the runtime's), and the promotion
    moves it to the runtime as it does for a change - what deploy.yml of the spec makes."""
    stable, old_runtime = _deployed(_image_plan(OLD))
    stable["spec"]["predictor"]["model"]["image"] = NEW
    plan = _image_plan(NEW, speculative=dict(SPEC["speculative"], num_speculative_tokens=2))
    images = canary_images(stable, plan, old_runtime)
    assert (images["changed"], images["pinned"], images["on_canary"], images["text"]) == (False, True, NEW, "")
    writes = canary_promotion(plan, images)
    assert live.runtime_image(writes["runtime"]) == NEW and writes["unpin"] == UNPIN
    isvc = _merge(_promoted(stable, plan, images), writes["unpin"])
    decision = deploy_state.decide(plan, {"inferenceservice": isvc, "servingruntime": applied(writes["runtime"])})
    assert decision["in_sync"] and live.view(isvc).image is None


def test_a_promotion_without_an_image_change_writes_nothing_more():
    stable, runtime = _deployed(_image_plan(NEW))
    plan = _image_plan(NEW, speculative=dict(SPEC["speculative"], num_speculative_tokens=2))
    images = canary_images(stable, plan, runtime)
    assert not images["changed"] and images["on_canary"] is None and images["problem"] == ""
    assert canary_promotion(plan, images) == {"runtime": None, "unpin": None}


def test_an_image_the_plans_own_inferenceservice_names_stays_on_the_predictor():
    """An image the spec itself puts on the predictor (overrides.inferenceservice) is deploy's to keep: the runtime is
    still deploy's, and nothing is removed."""
    stable, runtime = _deployed(_image_plan(OLD))
    plan = _image_plan(NEW, overrides={"inferenceservice": {"spec": {"predictor": {"model": {"image": NEW}}}}})
    writes = canary_promotion(plan, canary_images(stable, plan, runtime))
    assert live.runtime_image(writes["runtime"]) == NEW and writes["unpin"] is None


def test_an_image_change_with_a_runtime_specpilot_does_not_create_is_refused_before_any_change():
    """deploy.yml runs an existing runtime's image whatever runtime.image says (render.servingruntime renders none), so
    a canary of that image could not be promoted as deploy.yml runs it; the runtime may serve other services too."""
    shared = {"create": False, "name": "shared-vllm", "kind": "ServingRuntime", "image": NEW}
    plan = _plan(runtime=shared)
    assert plan["servingruntime"] is None
    stable = applied(plan["inferenceservice"])
    existing = {"kind": "ServingRuntime", "spec": {"containers": [{"name": "kserve-container", "image": OLD}]}}
    images = canary_images(stable, plan, existing)
    assert images["changed"]
    assert images["problem"].startswith(
        "specpilot_runtime.image: the spec's image %s is not the image of the existing ServingRuntime shared-vllm (%s), "
        "which specpilot does not create (specpilot_runtime.create: false" % (NEW, OLD))
    assert "Nothing was changed" in images["problem"]
    assert canary_promotion(plan, images) == {"runtime": None, "unpin": None}
    # the same image as the existing runtime's is no change, and nothing to refuse
    assert canary_images(stable, plan, dict(existing, spec={"containers": [{"name": "kserve-container", "image": NEW}]})
                         )["problem"] == ""


def test_the_filter_refuses_what_is_not_a_plan_and_an_images_result():
    with pytest.raises(AnsibleFilterError, match="canary_promotion expects"):
        canary_promotion(None, {})
    with pytest.raises(AnsibleFilterError, match="canary_promotion expects"):
        canary_promotion({}, "changed")
