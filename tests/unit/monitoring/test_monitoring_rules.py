"""Monitoring artifacts: metric and label names exactly as vLLM exports them, shapes, parameters,
and playbooks/monitoring.yml (render, idempotence, apply to the emulator)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import vllm_pages as vp
from ansible_collections.specpilot.core.plugins.module_utils.operate import monitoring as sm

ROOT = vp.ROOT
V0_PAGE = ROOT / "tests" / "data" / "vllm" / "metrics_v0_0.6.3.txt"
CRD = Path(__file__).resolve().parent / "data" / "prometheusrules.yaml"
POD_MONITOR_CRD = Path(__file__).resolve().parent / "data" / "podmonitors.yaml"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def page_names_and_labels(page: str) -> dict[str, set]:
    out: dict[str, set] = {}
    for name, labels, _value in vp.samples(page):
        out.setdefault(name, set()).update(labels)
    return out


def all_texts(out: dict) -> list[str]:
    texts = [r["expr"] for g in out["prometheus_rule"]["spec"]["groups"] for r in g["rules"]]
    texts += [t["expr"] for p in out["dashboard"]["panels"] for t in p["targets"]]
    return texts + list(out["expressions"].values())


def test_vllm_032_names_and_labels_are_on_the_real_page():
    page = page_names_and_labels(vp.real_page())
    out = sm.render("tiny", "lab", "0.32.0", NGRAM)
    used = out["metrics"]
    assert set(used) >= {"vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total",
                         "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                         "vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket",
                         "vllm:inter_token_latency_seconds_sum"}
    missing = [m for m in used if m not in page]
    assert not missing, f"not exported by vLLM 0.32: {missing}"
    # labels the expressions group or match by, other than the ones Prometheus adds (namespace)
    for text in all_texts(out):
        for metric, matchers in re.findall(r"(vllm:[a-z_:]+)\{([^}]*)\}", text):
            for label in re.findall(r"([a-z_]+)\s*!?=", matchers):
                if label == "namespace":
                    continue
                assert label in page[metric], f"{metric} has no label {label}"
        for grouping in re.findall(r"by \(([^)]*)\)", text):
            for label in (g.strip() for g in grouping.split(",")):
                if label in ("namespace",):
                    continue
                assert any(label in labels for name, labels in page.items() if name in used), label
    # every expression sums over the data-parallel engine label (grouping never keeps `engine`)
    assert not any("engine" in g for t in all_texts(out) for g in re.findall(r"by \(([^)]*)\)", t))


def test_v0_profile_uses_the_v0_gauge_on_a_real_v0_page():
    page = page_names_and_labels(V0_PAGE.read_text())
    out = sm.render("svc", "ml", "0.6.3", {"method": "draft_model", "model": "x", "num_speculative_tokens": 4})
    assert out["profile"]["era"] == "v0"
    assert "vllm:spec_decode_draft_acceptance_rate" in out["metrics"] and "vllm:spec_decode_draft_acceptance_rate" in page
    assert "vllm:time_per_output_token_seconds_bucket" in out["metrics"] and "vllm:time_per_output_token_seconds_bucket" in page
    # the over-counting V0 _total counters are never used
    assert "vllm:spec_decode_num_accepted_tokens_total" not in out["metrics"]
    alerts = [r["alert"] for r in out["prometheus_rule"]["spec"]["groups"][0]["rules"]]
    assert alerts == ["SpecDecodeLowAcceptance", "SpecDecodeBorderlineAcceptance", "SpecDecodeMetricsMissing"]


@pytest.mark.parametrize("version,itl,per_position", [
    ("0.8.4", "vllm:time_per_output_token_seconds", False),
    ("0.8.5", "vllm:time_per_output_token_seconds", True),
    ("0.10.2", "vllm:inter_token_latency_seconds", True),
    ("0.33.0", "vllm:inter_token_latency_seconds", True),
])
def test_metric_profile_per_version(version, itl, per_position):
    profile = sm.metric_profile(version)
    assert profile["era"] == "v1" and profile["itl"] == itl
    assert (profile["per_position"] is not None) is per_position
    assert (profile["drafts"] is not None) is per_position


def test_not_planned_renders_latency_only():
    out = sm.render("svc", "ml", "0.32.0", None)
    assert out["planned"] is False
    assert out["prometheus_rule"]["spec"]["groups"][0]["rules"] == []
    assert [p["title"] for p in out["dashboard"]["panels"]] == ["Time to first token", "Inter-token latency"]
    assert not any("spec_decode" in m for m in out["metrics"])


def test_dashboard_shape():
    out = sm.render("lab-ngram", "specpilot-lab", "0.32.0", NGRAM)
    dash = out["dashboard"]
    assert dash["uid"] == "specpilot-specpilot-lab-lab-ngram" and len(dash["uid"]) <= 40
    titles = [p["title"] for p in dash["panels"]]
    assert titles == ["Draft acceptance rate", "Mean acceptance length", "Per-position acceptance",
                      "Drafted and accepted tokens", "Time to first token", "Inter-token latency"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(set(ids)) == len(ids)
    assert dash["templating"]["list"][0]["type"] == "datasource"
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert 'model_name="lab-ngram"' in target["expr"] and 'namespace="specpilot-lab"' in target["expr"]
    json.dumps(dash)  # JSON-serialisable as is
    long = sm.dashboard_uid("a-very-long-inference-service-name-for-chat", "a-long-namespace")
    assert len(long) == 40


def test_custom_selector_and_rule_labels():
    out = sm.render("svc", "ml", "0.32.0", NGRAM, selector={"job": "kserve", "model_name": "svc"},
                    rule_labels={"release": "prom"})
    rule = out["prometheus_rule"]
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert all('job="kserve",model_name="svc"' in r["expr"] for r in rule["spec"]["groups"][0]["rules"])
    assert all("namespace" not in r["expr"] for r in rule["spec"]["groups"][0]["rules"])


@pytest.mark.parametrize("settings,message", [
    ({"window": "15 minutes"}, "Prometheus duration"),
    ({"min_acceptance_rate": 1.5}, "between 0 and 1"),
    ({"min_acceptance_rate": 0.7, "warn_acceptance_rate": 0.6}, "below min_acceptance_rate"),
    ({"min_draft_tokens": -1}, "integer >= 0"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(sm.MonitoringError, match=message):
        sm.prometheus_rule("svc", "ml", "0.32.0", settings=settings)


def test_bad_selector_label_is_refused():
    with pytest.raises(sm.MonitoringError, match="label name"):
        sm.render("svc", "ml", "0.32.0", NGRAM, selector={"bad-label": "x"})


def test_scrape_configs_select_the_services_pods_on_the_engines_port():
    """Issue 39: the rules and the dashboard relied on a scrape config nobody shipped. A PodMonitor (any
    mode) and a ServiceMonitor (Standard) are rendered; one is applied with the rule, never both."""
    out = sm.render("svc", "ml", "0.32.0", NGRAM, rule_labels={"release": "prom"})
    pod = out["pod_monitor"]
    assert pod["kind"] == "PodMonitor" and pod["metadata"]["namespace"] == "ml"
    assert pod["metadata"]["labels"]["release"] == "prom"
    assert pod["spec"]["selector"] == {"matchLabels": {"serving.kserve.io/inferenceservice": "svc"}}
    assert pod["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    knative = sm.render("svc", "ml", "0.32.0", NGRAM, deployment_mode="Knative")["pod_monitor"]
    assert knative["spec"]["podMetricsEndpoints"][0]["port"] == "user-port"
    svc = out["service_monitor"]["spec"]
    assert svc["selector"]["matchLabels"] == {"serving.kserve.io/inferenceservice": "svc", "component": "predictor"}
    assert svc["endpoints"][0]["targetPort"] == 8080
    plan = sm.to_apply(out)
    assert [o["kind"] for o in plan["objects"]] == ["PrometheusRule", "PodMonitor"]
    assert plan["crds"] == ["prometheusrules.monitoring.coreos.com", "podmonitors.monitoring.coreos.com"]
    assert [o["kind"] for o in sm.to_apply(out, "servicemonitor")["objects"]] == ["PrometheusRule", "ServiceMonitor"]
    assert sm.to_apply(out, "none")["crds"] == ["prometheusrules.monitoring.coreos.com"]
    with pytest.raises(sm.MonitoringError, match="scrape must be one of"):
        sm.to_apply(out, "both")


# ------------------------------------------------------------------ playbooks/monitoring.yml


def run_playbook(tmp_path: Path, *args: str, kubeconfig: Path | None = None, extra: dict | None = None,
                 playbook: str = "monitoring.yml") -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), TMPDIR=str(tmp_path), ANSIBLE_NOCOLOR="1")
    if kubeconfig:
        env["K8S_AUTH_KUBECONFIG"] = str(kubeconfig)
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(ROOT / "inventories" / "lab"),
           str(ROOT / "playbooks" / playbook), *args]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


SA_NS = "specpilot-lab"
SA = "specpilot-automation"
SA_USER = f"system:serviceaccount:{SA_NS}:{SA}"


def _shipped_service_account(emu, tmp_path: Path) -> dict:
    """playbooks/rbac.yml as the admin (inventories/lab's namespace), then a TokenRequest of its ServiceAccount:
    the variables that run a playbook as that ServiceAccount."""
    from specpilot_lab.apiserver.server import write_kubeconfig

    rbac = run_playbook(tmp_path, kubeconfig=emu.kubeconfig, playbook="rbac.yml",
                        extra={"specpilot_k8s_kubeconfig": str(emu.kubeconfig)})
    assert rbac.returncode == 0, rbac.stdout[-4000:] + rbac.stderr[-2000:]
    r = emu.request("POST", f"/api/v1/namespaces/{SA_NS}/serviceaccounts/{SA}/token", {"spec": {}})
    assert r.status == 201, r
    path = write_kubeconfig(tmp_path / "automation.kubeconfig", emu.url.replace("http://", "https://"), SA_NS,
                            token=r.json()["status"]["token"], user=SA, ca_file=emu.state_dir / "apiserver.crt")
    return {"specpilot_k8s_kubeconfig": str(path)}


def recap(output: str) -> dict:
    return {m.group(1): (int(m.group(3)), int(m.group(5))) for m in RECAP.finditer(output)}


@pytest.mark.slow
def test_playbook_renders_per_service_and_is_idempotent(tmp_path):
    out = tmp_path / "mon"
    proc = run_playbook(tmp_path, "-e", f"specpilot_monitoring_render_dir={out}", "--limit", "lab-ngram,lab-draft")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rule = yaml.safe_load((out / "lab-ngram" / "prometheusrule.yaml").read_text())
    expected = sm.render("lab-ngram", "specpilot-lab", "0.32.0", NGRAM)
    assert rule == expected["prometheus_rule"]  # Prometheus templates ({{ $value }}) untouched by Jinja
    assert yaml.safe_load((out / "lab-ngram" / "podmonitor.yaml").read_text()) == expected["pod_monitor"]
    assert yaml.safe_load((out / "lab-ngram" / "servicemonitor.yaml").read_text()) == expected["service_monitor"]
    dash = json.loads((out / "lab-draft" / "dashboard.json").read_text())
    assert dash["uid"] == "specpilot-specpilot-lab-lab-draft"
    assert any(t["legendFormat"] == "position {{position}}" for p in dash["panels"] for t in p["targets"])
    again = run_playbook(tmp_path, "-e", f"specpilot_monitoring_render_dir={out}", "--limit", "lab-ngram,lab-draft")
    assert again.returncode == 0 and all(c == 0 for c, _f in recap(again.stdout).values()), again.stdout


@pytest.mark.slow
def test_playbook_applies_rule_and_dashboard(emulator_factory, tmp_path):
    from specpilot_lab.testing import LAB_CRDS

    args = ["-e", "specpilot_monitoring_apply=true", "-e", "specpilot_monitoring_render_dir=", "--limit", "lab-ngram",
            "-e", '{"specpilot_monitoring_rule_labels": {"release": "prom"}}']
    # issue 39: without the Prometheus operator's CRDs the run said kubernetes.core's raw error; now it names
    # what is missing and what to do, and applies nothing
    bare = emulator_factory(crds=[LAB_CRDS, CRD], name="monitoring-bare")
    refused = run_playbook(tmp_path, *args, kubeconfig=bare.kubeconfig)
    said = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode != 0
    assert "lab-ngram: the cluster has no CRD podmonitors.monitoring.coreos.com (the Prometheus operator's), " \
           "so nothing was applied" in said, said[-3000:]
    assert "specpilot_monitoring_scrape=none" in said
    assert bare.request("GET", "/apis/monitoring.coreos.com/v1/namespaces/specpilot-lab/prometheusrules").json()[
        "items"] == []

    emu = emulator_factory(crds=[LAB_CRDS, CRD, POD_MONITOR_CRD], name="monitoring")
    emu.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": "specpilot-lab"}})
    # issue 39: as the shipped ServiceAccount (roles/specpilot_rbac), whose Role and ClusterRole must allow
    # the read of the operator's CRDs and the applies; the API emulator enforces RBAC as kube-apiserver does
    sa = _shipped_service_account(emu, tmp_path)
    mark = emu.control.mark()
    proc = run_playbook(tmp_path, *args, kubeconfig=emu.kubeconfig, extra=sa)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mine = [e for e in emu.control.requests(since=mark) if e["user"] == SA_USER]
    assert mine and not [e for e in mine if e["code"] in (401, 403)], [e for e in mine if e["code"] in (401, 403)]
    assert {(e["verb"], e["name"]) for e in mine if e["resource"] == "customresourcedefinitions"} == {
        ("get", "prometheusrules.monitoring.coreos.com"), ("get", "podmonitors.monitoring.coreos.com")}
    assert {e["resource"] for e in mine if e["verb"] == "create"} == {"prometheusrules", "podmonitors", "configmaps"}
    monitor = emu.request("GET", "/apis/monitoring.coreos.com/v1/namespaces/specpilot-lab/podmonitors/"
                                 "lab-ngram-specpilot-vllm").json()
    stored = emu.request("GET", "/apis/monitoring.coreos.com/v1/namespaces/specpilot-lab/prometheusrules/"
                                "lab-ngram-specpilot-speculative").json()
    expected = sm.render("lab-ngram", "specpilot-lab", "0.32.0", NGRAM, rule_labels={"release": "prom"})
    assert stored["spec"] == expected["prometheus_rule"]["spec"]
    assert stored["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"] == expected["pod_monitor"]["spec"]
    cm = emu.request("GET", "/api/v1/namespaces/specpilot-lab/configmaps/specpilot-specpilot-lab-lab-ngram").json()
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["specpilot-specpilot-lab-lab-ngram.json"]) == expected["dashboard"]
    again = run_playbook(tmp_path, *args, kubeconfig=emu.kubeconfig, extra=sa)
    assert again.returncode == 0 and recap(again.stdout)["lab-ngram"] == (0, 0), again.stdout
