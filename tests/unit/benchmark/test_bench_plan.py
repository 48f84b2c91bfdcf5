"""specpilot.core.benchmark_plan (module_utils/benchmark/bench_plan.py) and the benchmark role's filters:
what the role measures and how, decided in Python from the validated plan and the settings."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from bench_helpers import ROOT, WORKLOADS

from ansible_collections.specpilot.core.plugins.filter import benchmark as filters
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_plan
from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_plan import (
    BenchPlanError,
    build_plan,
)
from ansible_collections.specpilot.core.plugins.modules.benchmark_plan import ARGUMENT_SPEC

PLAN = {
    "name": "chat",
    "namespace": "ml",
    "args": ["--model", "/mnt/models", "--speculative-config", '{"method": "ngram"}'],
    "args_without_speculative": ["--model", "/mnt/models"],
    "spec_digest": "d" * 64,
    "speculative_config": {"method": "ngram", "num_speculative_tokens": 3},
    "inferenceservice": {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "chat",
            "namespace": "ml",
            "labels": {"team": "a", "specpilot.io/service": "chat"},
            "annotations": {"specpilot.io/spec-digest": "d" * 64, "keep": "me"},
        },
        "spec": {"predictor": {"model": {"args": ["--old"], "runtime": "vllm"}, "minReplicas": 1}},
    },
}


def params(**over):
    """The module's parameters as AnsibleModule validates them (defaults filled in)."""
    given = dict(
        plan=PLAN, qps_levels=[1, 4], bundled_dir=str(WORKLOADS), cwd="/work", report_root=".reports/bench"
    )
    given.update(over)
    result = ArgumentSpecValidator(ARGUMENT_SPEC).validate(given)
    assert not result.error_messages, result.error_messages
    return result.validated_parameters


def test_levels_labels_and_report_dir():
    out = build_plan(params(qps_levels=[1, None], concurrency=2, concurrency_levels=[4]))
    assert out["levels"] == [
        {"qps": 1, "concurrency": 2},
        {"qps": None, "concurrency": 2},
        {"qps": None, "concurrency": 4},
    ]
    assert out["level_labels"] == ["qps=1 concurrency=2", "qps=inf concurrency=2", "qps=inf concurrency=4"]
    assert out["dir"] == "/work/.reports/bench/chat"
    assert build_plan(params(report_root="/abs/r"))["dir"] == "/abs/r/chat"
    assert build_plan(params())["level_labels"] == ["qps=1", "qps=4"]


def test_bad_levels_name_the_setting():
    with pytest.raises(BenchPlanError, match="needs specpilot_benchmark_concurrency"):
        build_plan(params(qps_levels=[None]))
    with pytest.raises(BenchPlanError, match="at least one QPS or concurrency level"):
        build_plan(params(qps_levels=[]))


def test_workload_bundled_path_or_spec_prompts():
    assert build_plan(params())["workload"] == {
        "name": "code-edit",
        "file": "%s/code-edit.jsonl" % WORKLOADS,
        "prompts": None,
    }
    own = build_plan(params(workload="w/mine.jsonl", workload_name="mine"))["workload"]
    assert own == {"name": "mine", "file": "/work/w/mine.jsonl", "prompts": None}
    spec = build_plan(params(prompts=["a", "b"]))["workload"]
    assert spec == {"name": "spec-prompts", "file": None, "prompts": ["a", "b"]}


def test_baseline_twin_is_the_plan_without_speculative_config():
    twin = build_plan(params(twin_suffix="-base"))["twin"]
    digest = hashlib.sha256(("d" * 64 + " without speculative decoding").encode()).hexdigest()
    assert twin["name"] == "chat-base" and twin["args"] == PLAN["args_without_speculative"]
    assert twin["digest"] == digest
    m = twin["manifest"]
    assert m["metadata"]["name"] == "chat-base" and m["metadata"]["namespace"] == "ml"
    assert m["metadata"]["labels"] == {
        "team": "a",
        "specpilot.io/service": "chat-base",
        "specpilot.io/benchmark-twin-of": "chat",
    }
    assert m["metadata"]["annotations"] == {
        "keep": "me",
        "specpilot.io/speculative-method": "off",
        "specpilot.io/spec-digest": digest,
        "specpilot.io/purpose": "baseline of the specpilot benchmark; deleted when the run ends",
    }
    # only the arguments differ: the rest of the InferenceService is the plan's
    assert m["spec"]["predictor"] == {
        "model": {"args": ["--model", "/mnt/models"], "runtime": "vllm"},
        "minReplicas": 1,
    }
    assert PLAN["inferenceservice"]["metadata"]["name"] == "chat"  # the plan is not changed


def test_candidate_twin_from_the_filter():
    cand = json.loads(json.dumps(PLAN))
    cand["args"] = ["--model", "/mnt/models", "--speculative-config", '{"k": 5}']
    cand["spec_digest"] = "c" * 64
    cand["speculative_config"] = {"method": "suffix"}
    twin = filters.benchmark_twin(PLAN, {"plan": cand, "suffix": "-tune-k5"})
    assert twin["name"] == "chat-tune-k5" and twin["args"] == cand["args"]
    assert twin["digest"] == hashlib.sha256(("c" * 64 + " as chat-tune-k5").encode()).hexdigest()
    ann = twin["manifest"]["metadata"]["annotations"]
    assert ann["specpilot.io/speculative-method"] == "suffix"
    assert ann["specpilot.io/purpose"] == "candidate of the specpilot tuning run; deleted when the run ends"
    with pytest.raises(AnsibleFilterError, match="'suffix' is missing"):
        filters.benchmark_twin(PLAN, {"plan": cand})
    with pytest.raises(AnsibleFilterError, match="expects the candidate"):
        filters.benchmark_twin(PLAN, None)


def test_service_url_choice():
    isvc = {"status": {"url": "http://ext", "address": {"url": "http://local"}}}
    assert filters.benchmark_url(isvc, "controller") == "http://ext"
    assert filters.benchmark_url(isvc, "job") == "http://local"
    assert filters.benchmark_url(isvc, "vllm_bench", "http://mine") == "http://mine"
    assert (
        filters.benchmark_url({"status": {"address": {"url": "http://local"}}}, "controller")
        == "http://local"
    )
    assert filters.benchmark_url({"status": {}}, "controller") == ""


def test_target_problem_messages():
    ready = {"type": "Ready", "status": "True"}
    ok = {"status": {"conditions": [ready]}, "spec": {"predictor": {"model": {"args": ["a"]}}}}
    assert filters.benchmark_target_problem([ok], ["a"]) == ""
    assert "does not exist: deploy it first" in filters.benchmark_target_problem([], ["a"])
    not_ready = dict(ok, status={"conditions": [dict(ready, status="False")]})
    assert filters.benchmark_target_problem([not_ready], ["a"]).startswith("it is not Ready")
    other = filters.benchmark_target_problem([ok], ["b"])
    assert (
        "its arguments differ from the validated plan" in other and 'Deployed: ["a"] Planned: ["b"]' in other
    )
    with pytest.raises(AnsibleFilterError, match="resources of k8s_info"):
        filters.benchmark_target_problem({}, [])


def test_sweep_temperatures_reasons_and_request_params():
    sweep = build_plan(
        params(
            temperatures=[0, "0.4", 0.8],
            production_temperature=0.4,
            request_params={"temperature": 1, "top_p": 0.9},
        )
    )["sweep"]
    assert sweep == {"temperatures": [0.0, 0.4, 0.8], "skipped": None, "request_params": {"top_p": 0.9}}
    assert build_plan(params(temperatures=[], production_temperature=""))["sweep"]["skipped"].startswith(
        "The temperature sweep has no temperatures"
    )
    off = build_plan(params(sweep_enabled=False, client="job", temperatures=[0]))["sweep"]["skipped"]
    assert off == "The temperature sweep is turned off (specpilot_benchmark_sweep_enabled: false)."
    job = build_plan(params(client="job", temperatures=[0]))["sweep"]["skipped"]
    assert "runs only with specpilot_benchmark_client: controller, and this benchmark used job." in job


def test_report_thresholds_and_policy():
    assert build_plan(params())["report"] == {"thresholds": {}, "policy": {}}
    out = build_plan(
        params(
            min_speedup=1.2, client="vllm_bench", vllm_bench={"image": "i"}, thresholds={"tpot_min_gain": 0.5}
        )
    )
    assert out["report"]["thresholds"] == pytest.approx(
        {"tpot_min_gain": 0.5, "throughput_min_gain": 0.2, "throughput_metric": "system"}
    )
    assert build_plan(params(min_speedup=1.5, slo={"policy": "slo"}))["report"]["policy"] == {
        "min_gain": 0.5,
        "policy": "slo",
    }


def test_job_runs_and_names():
    long_plan = dict(PLAN, name="x" * 55)
    out = build_plan(
        params(plan=long_plan, client="job", ignore_eos=True, request_params={"top_k": 4}, max_requests="12")
    )
    assert out["vllm_bench"] is None and out["job"]["names"] == {
        "baseline": ("x" * 55 + "-bench-baseline")[:63],
        "speculative": ("x" * 55 + "-bench-speculative")[:63],
    }
    assert (
        build_plan(params(plan=dict(PLAN, name="y" * 56), client="job"))["job"]["names"]["baseline"]
        == "y" * 56 + "-bench"
    )
    first = out["job"]["runs"][0]
    assert first["qps"] == 1 and first["concurrency"] is None and first["max_requests"] == 12
    assert first["workload"] == "/specpilot/workload.jsonl" and first["prompts"] is None
    assert first["sampling"] == {
        "temperature": 0.0,
        "max_tokens": 256,
        "seed": 42,
        "ignore_eos": True,
        "top_k": 4,
    }
    assert "base_url" not in first and "label" not in first
    assert build_plan(params())["job"] is None


def test_vllm_bench_args_env_and_dataset():
    out = build_plan(
        params(
            client="vllm_bench",
            qps_levels=[4],
            concurrency_levels=[2],
            runs_per_prompt=2,
            max_tokens=16,
            vllm_bench={"image": "img", "model": "org/model", "api_key_secret": {"name": "tok", "key": "t"}},
        )
    )["vllm_bench"]
    texts = bench_plan.prompt_texts({"file": str(WORKLOADS / "code-edit.jsonl"), "prompts": None})
    assert out["num_prompts"] == 2 * len(texts)
    assert [d["conversations"][0]["value"] for d in out["dataset"]] == texts * 2
    paced, closed = out["args"]

    def arg(args, flag):
        return args[args.index(flag) + 1]

    assert arg(paced, "--request-rate") == "4" and "--max-concurrency" not in paced
    assert arg(closed, "--max-concurrency") == "2" and "--request-rate" not in closed
    assert arg(paced, "--model") == "org/model" and arg(paced, "--served-model-name") == "chat"
    assert (
        arg(paced, "--dataset-path") == "/specpilot/workload.json"
        and arg(paced, "--sharegpt-output-len") == "16"
    )
    assert arg(paced, "--temperature") == "0" and arg(paced, "--seed") == "42" and "--base-url" not in paced
    assert out["jobs"] == {
        "baseline": ["chat-vbench-base-0", "chat-vbench-base-1"],
        "speculative": ["chat-vbench-spec-0", "chat-vbench-spec-1"],
    }
    assert out["env"] == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "t"}}},
    ]


def test_vllm_bench_random_dataset_and_options():
    out = build_plan(
        params(
            client="vllm_bench",
            api="chat",
            max_requests=7,
            ignore_eos=True,
            vllm_bench={
                "image": "i",
                "dataset": "random",
                "tokenizer": "tok/x",
                "extra_args": ["--x", 3],
                "hf_token_secret": {"name": "hf"},
            },
        )
    )["vllm_bench"]
    args = out["args"][0]
    assert out["dataset"] is None and out["num_prompts"] == 7
    assert args[:4] == ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
    assert (
        args[args.index("--dataset-name") + 1] == "random"
        and args[args.index("--random-input-len") + 1] == "256"
    )
    assert args[args.index("--model") + 1] == "chat" and args[args.index("--tokenizer") + 1] == "tok/x"
    assert args[-3:] == ["--ignore-eos", "--x", "3"]
    assert out["env"][1] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}},
    }


def test_vllm_bench_saves_its_per_request_detail_unless_turned_off():
    from ansible_collections.specpilot.core.plugins.module_utils.benchmark import vllm_bench as vb

    on = build_plan(params(client="vllm_bench", vllm_bench={"image": "i", "extra_args": ["--x"]}))[
        "vllm_bench"
    ]
    args = on["args"][0]
    # --save-result --save-detailed into the file the wrapper prints; the user's arguments still come last
    assert args[args.index("--save-result") :][:6] == vb.SAVE_ARGS and args[-1] == "--x"
    assert on["command"] == ["sh", "-c", vb.JOB_SCRIPT, "vllm-bench-serve", "vllm", "bench", "serve"]
    off = build_plan(
        params(
            client="vllm_bench",
            vllm_bench={"image": "i", "save_detailed": False, "command": ["python", "-m", "b"]},
        )
    )["vllm_bench"]
    assert off["command"] == ["python", "-m", "b"]
    assert "--save-result" not in off["args"][0] and "--save-detailed" not in off["args"][0]


def test_vllm_bench_job_name_keeps_the_end_and_starts_clean():
    name = bench_plan.vllm_bench_job_name("a" * 60, "speculative", 3)
    assert name == ("a" * 60 + "-vbench-spec-3")[-63:] and len(name) == 63
    assert bench_plan.vllm_bench_job_name("-" * 60, "baseline", 0) == "vbench-base-0"


def test_vllm_bench_settings_are_checked_in_one_message():
    with pytest.raises(BenchPlanError) as err:
        build_plan(
            params(
                client="vllm_bench",
                headers={"Authorization": "x"},
                vllm_bench={"dataset": "sharegpt", "command": []},
            )
        )
    msg = str(err.value)
    assert msg.startswith(
        "specpilot_benchmark_client=vllm_bench: specpilot_benchmark_vllm_bench_dataset must be workload or random."
    )
    for part in (
        "specpilot_benchmark_headers are not passed",
        "vllm_bench_image is empty",
        "vllm_bench_command is empty",
    ):
        assert part in msg


def test_prompt_texts_of_chat_workloads(tmp_path):
    path = tmp_path / "w.jsonl"
    lines = [
        "# comment",
        "",
        json.dumps(
            {
                "messages": [
                    {"role": "system", "content": "s"},
                    {"role": "user", "content": "u1"},
                    {"role": "user", "content": "u2"},
                ]
            }
        ),
        json.dumps(
            {"messages": [{"role": "system", "content": "only"}, {"role": "assistant", "content": "a"}]}
        ),
        json.dumps("plain"),
    ]
    path.write_text("\n".join(lines))
    assert bench_plan.prompt_texts({"file": str(path), "prompts": None}) == ["u2", "only\na", "plain"]
    assert bench_plan.prompt_texts({"file": None, "prompts": ["x", {"prompt": "y"}]}) == ["x", "y"]
    with pytest.raises(BenchPlanError, match="specpilot_benchmark_workload: cannot read"):
        bench_plan.prompt_texts({"file": str(tmp_path / "none.jsonl"), "prompts": None})


def test_the_role_keeps_its_decisions_in_python():
    """Issue 17: no Jinja expression of the benchmark role over about 200 characters (whitespace folded);
    a longer one is a decision that belongs in bench_plan.py or a filter."""
    long = []
    for path in sorted((ROOT / "roles" / "specpilot_benchmark").rglob("*.yml")):
        for span in re.findall(r"\{\{.*?\}\}", path.read_text(), re.S):
            if len(re.sub(r"\s+", " ", span)) > 200:
                long.append("%s: %s" % (path.relative_to(ROOT), span[:80]))
    assert long == []
