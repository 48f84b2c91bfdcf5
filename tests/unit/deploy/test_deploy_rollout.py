"""Rollout evaluation: a stale Ready never passes for the new rollout; failures are recognised."""

from __future__ import annotations

import copy

from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_rollout as dr
from deploy_unit_helpers import applied, deployment, plan, pod, ready_status

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _setup():
    old, new = (
        plan(),
        plan(speculative={"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}),
    )
    old_isvc = applied(old["inferenceservice"], extra_status=ready_status())
    new_isvc = applied(new["inferenceservice"], extra_status=ready_status())  # Ready=True: stale
    return old, new, old_isvc, new_isvc


def test_stale_ready_with_the_old_template_is_not_done():
    old, new, old_isvc, new_isvc = _setup()
    status = dr.rollout_status(
        dr.expected_from_plan(new), new_isvc, deployment(old_isvc), [pod(old_isvc)], now=T0
    )
    assert not status["done"] and not status["failed"]
    assert status["checks"]["isvc_ready"] and not status["checks"]["template_args"]
    assert "previous pod template" in status["message"]


def test_new_template_not_observed_or_not_available_is_not_done():
    _old, new, _o, new_isvc = _setup()
    for dep, what in (
        (deployment(new_isvc, generation=2, observed=1), "not observed"),
        (deployment(new_isvc, generation=2, observed=2, updated=0), "replicas updated"),
        (
            deployment(new_isvc, generation=2, observed=2, replicas=2, updated=1, available=1),
            "replicas updated",
        ),
        (deployment(new_isvc, generation=2, observed=2, available=0), "available"),
    ):
        status = dr.rollout_status(dr.expected_from_plan(new), new_isvc, dep, [], now=T0)
        assert not status["done"], what
        assert what in status["message"]


def test_the_new_generation_rolled_out_is_done():
    _old, new, _o, new_isvc = _setup()
    status = dr.rollout_status(
        dr.expected_from_plan(new),
        new_isvc,
        deployment(new_isvc, generation=2, observed=2),
        [pod(new_isvc)],
        now=T0,
    )
    assert status["done"] and status["phase"] == "ready"
    not_ready = copy.deepcopy(new_isvc)
    not_ready["status"] = ready_status(False)
    assert not dr.rollout_status(
        dr.expected_from_plan(new), not_ready, deployment(new_isvc, generation=2, observed=2), [], now=T0
    )["done"]


def test_digest_annotation_guards_changes_the_args_do_not_show():
    old = plan()
    new = plan(resources={"limits": {"memory": "99Gi"}})  # same args, other spec
    old_isvc = applied(old["inferenceservice"], extra_status=ready_status())
    new_isvc = applied(new["inferenceservice"], extra_status=ready_status())
    stale = deployment(old_isvc)  # same args, old digest on the template
    assert not dr.rollout_status(dr.expected_from_plan(new), new_isvc, stale, [], now=T0)["done"]
    # a KServe that does not copy annotations: the generation must have moved since before the apply
    bare = deployment(old_isvc, digest=None)
    base = {"deployment_generation": 1, "rollout_expected": True}
    assert not dr.rollout_status(dr.expected_from_plan(new), new_isvc, bare, [], baseline=base, now=T0)[
        "done"
    ]
    bumped = deployment(old_isvc, digest=None, generation=2, observed=2)
    assert dr.rollout_status(dr.expected_from_plan(new), new_isvc, bumped, [], baseline=base, now=T0)["done"]


def test_knative_needs_a_new_ready_revision_with_all_traffic():
    p = plan(deployment_mode="Knative", rollout="auto")
    isvc = applied(p["inferenceservice"], extra_status=ready_status())
    expected = dr.expected_from_plan(p)
    base = {"latest_created_revision": "svc-predictor-00001", "rollout_expected": True}

    def comp(created, ready, traffic):
        obj = copy.deepcopy(isvc)
        obj["status"]["components"] = {
            "predictor": {"latestCreatedRevision": created, "latestReadyRevision": ready, "traffic": traffic}
        }
        return obj

    old = comp(
        "svc-predictor-00001",
        "svc-predictor-00001",
        [{"revisionName": "svc-predictor-00001", "percent": 100}],
    )
    assert not dr.rollout_status(expected, old, None, [], baseline=base, now=T0)["done"]  # stale
    starting = comp(
        "svc-predictor-00002",
        "svc-predictor-00001",
        [{"revisionName": "svc-predictor-00001", "percent": 100}],
    )
    assert "not ready" in dr.rollout_status(expected, starting, None, [], baseline=base, now=T0)["message"]
    split = comp(
        "svc-predictor-00002",
        "svc-predictor-00002",
        [
            {"revisionName": "svc-predictor-00001", "percent": 50},
            {"revisionName": "svc-predictor-00002", "percent": 50},
        ],
    )
    assert "50%" in dr.rollout_status(expected, split, None, [], baseline=base, now=T0)["message"]
    done = comp(
        "svc-predictor-00002",
        "svc-predictor-00002",
        [{"revisionName": "svc-predictor-00002", "percent": 100, "latestRevision": True}],
    )
    assert dr.rollout_status(expected, done, None, [], baseline=base, now=T0)["done"]


def test_failures_end_the_wait_early():
    _old, new, old_isvc, new_isvc = _setup()
    dep = deployment(new_isvc, generation=2, observed=1, updated=0, available=0)
    expected = dr.expected_from_plan(new)
    crash = pod(
        new_isvc,
        ready=False,
        restarts=2,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        last={"exitCode": 1, "reason": "Error"},
    )
    status = dr.rollout_status(expected, new_isvc, dep, [crash], now=T0)
    assert status["failed"] and status["cause"] == "crashloop" and "exit code 1" in status["message"]
    once = pod(
        new_isvc,
        ready=False,
        restarts=1,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        last={"exitCode": 1, "reason": "Error"},
    )
    assert not dr.rollout_status(expected, new_isvc, dep, [once], now=T0)["failed"]  # below the threshold
    oom = pod(new_isvc, ready=False, restarts=2, last={"exitCode": 137, "reason": "OOMKilled"})
    assert dr.rollout_status(expected, new_isvc, dep, [oom], now=T0)["cause"] == "oomkilled"
    # an old pod crashing is not this rollout's failure
    old_crash = pod(old_isvc, ready=False, restarts=5, last={"exitCode": 1, "reason": "Error"})
    assert not dr.rollout_status(expected, new_isvc, dep, [old_crash], now=T0)["failed"]


def test_unschedulable_after_the_grace_period():
    _old, new, _o, new_isvc = _setup()
    dep = deployment(new_isvc, generation=2, observed=1, updated=0, available=0)
    msg = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    pending = pod(new_isvc, phase="Pending", ready=False, unschedulable=msg, created="2027-01-15T07:59:00Z")
    expected = dr.expected_from_plan(new)
    assert not dr.rollout_status(expected, new_isvc, dep, [pending], now=T0, options={"pending_grace": 300})[
        "failed"
    ]
    status = dr.rollout_status(expected, new_isvc, dep, [pending], now=T0, options={"pending_grace": 30})
    assert status["cause"] == "unschedulable" and "Insufficient nvidia.com/gpu" in status["message"]


def test_image_pull_and_invalid_spec():
    _old, new, _o, new_isvc = _setup()
    dep = deployment(new_isvc, generation=2, observed=1, updated=0, available=0)
    expected = dr.expected_from_plan(new)
    bad_image = pod(
        new_isvc, ready=False, state={"waiting": {"reason": "InvalidImageName", "message": "bad ref"}}
    )
    assert dr.rollout_status(expected, new_isvc, dep, [bad_image], now=T0)["cause"] == "image"
    invalid = copy.deepcopy(new_isvc)
    invalid["status"] = {
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "RuntimeNotRecognized", "message": "no runtime"}
        ],
        "modelStatus": {
            "transitionStatus": "InvalidSpec",
            "lastFailureInfo": {
                "message": "No ServingRuntimes with the name: x",
                "time": "2027-01-15T08:00:10Z",
            },
        },
    }
    early = dr.rollout_status(expected, invalid, None, [], now=T0 + 10, started=T0)
    assert not early["failed"]  # KServe may not have seen the new spec yet
    late = dr.rollout_status(expected, invalid, None, [], now=T0 + 20, started=T0)
    assert late["cause"] == "invalid-spec" and "No ServingRuntimes" in late["message"]


def test_pod_summary_reads_init_failures():
    _old, new, _o, new_isvc = _setup()
    p = pod(new_isvc, ready=False)
    p["status"]["initContainerStatuses"] = [
        {
            "name": "modelcar-init",
            "restartCount": 2,
            "state": {
                "terminated": {"exitCode": 1, "reason": "Error", "message": "NOK ... modelcar is invalid"}
            },
        }
    ]
    summary = dr.pod_summary(p, dr.expected_from_plan(new), T0)
    assert summary["new"] and summary["init_failure"]["container"] == "modelcar-init"
    status = dr.rollout_status(dr.expected_from_plan(new), new_isvc, None, [p], now=T0)
    assert status["cause"] == "init"


class _Reader:
    """reader.get over a dict {(kind, name): object}; pods by label selector."""

    def __init__(self, objects):
        self.objects, self.asked = objects, []

    def get(self, kind, api_version, name=None, namespace=None, label_selector=None):
        self.asked.append((kind, name))
        if kind == "Pod":
            return [o for (k, _), o in self.objects.items() if k == "Pod"]
        return self.objects.get((kind, name))


def test_a_named_predictor_is_read_from_its_own_deployment():
    """A promoted canary keeps the canary's name: its Deployment {isvc}-{name}-predictor is the
    predictor's (constants.PredictorServiceName, KServe 0.20); {isvc}-predictor is not read."""
    _, new, _, new_isvc = _setup()
    named = copy.deepcopy(new_isvc)
    named["spec"]["predictor"]["name"] = "s1a2"
    dep = deployment(named)
    assert dr.predictor_deployment_name("svc", named) == "svc-s1a2-predictor"
    assert dr.predictor_deployment_name("svc", new_isvc) == "svc-predictor"
    assert dr.predictor_deployment_name("svc") == "svc-predictor"
    name, ns = new["name"], new["namespace"]
    reader = _Reader(
        {
            ("InferenceService", name): named,
            ("Deployment", "%s-s1a2-predictor" % name): dep,
            ("Deployment", "%s-predictor" % name): {"metadata": {"name": "the old stable one"}},
        }
    )
    isvc, got, pods = dr.read_workload(reader, name, ns)
    assert isvc is named and got is dep and pods == []
    assert ("Deployment", "%s-predictor" % name) not in reader.asked
    # Knative mode has no Deployment of its own to read
    assert dr.read_workload(_Reader({("InferenceService", name): named}), name, ns, "Knative")[1] is None


def test_progress_says_what_the_pods_do_while_the_deployment_lags():
    """Issue 39: "Deployment generation 1 not observed yet (observed None)" repeated for minutes
    while the new pod ran and its engine loaded; the message now leads with the pods."""
    _old, new, _o, new_isvc = _setup()
    dep = deployment(new_isvc, generation=2, observed=None)
    dep["status"].pop("observedGeneration", None)
    loading = pod(
        new_isvc,
        ready=False,
        state={"running": {"startedAt": "2027-01-15T07:58:20Z"}},
    )
    status = dr.rollout_status(dr.expected_from_plan(new), new_isvc, dep, [loading], now=T0)
    assert not status["done"] and not status["failed"]
    assert status["message"].startswith("waiting: pod svc-predictor-abc-1 (new): Running, the engine is loading")
    assert "container up 100s" in status["message"]
    assert "not observed by its controller yet (status shows none)" in status["message"]
    restarted = pod(
        new_isvc,
        ready=False,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        restarts=1,
        last={"exitCode": 137, "reason": "OOMKilled"},
    )
    status = dr.rollout_status(dr.expected_from_plan(new), new_isvc, dep, [restarted], now=T0)
    assert not status["failed"]
    assert "kserve-container restarting (CrashLoopBackOff), 1 container restart, last exit 137 OOMKilled" in (
        status["message"]
    )
    starting = pod(new_isvc, phase="Pending", ready=False, state={"waiting": {"reason": "ContainerCreating"}})
    status = dr.rollout_status(dr.expected_from_plan(new), new_isvc, dep, [starting], now=T0)
    assert "Pending, starting (ContainerCreating)" in status["message"]
