"""The smoke report: JSON, Markdown and the per-position PNG, and the two modules run by
ansible-playbook (check mode included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import smoke_samples as s

from ansible_collections.specpilot.core.plugins.module_utils.verify import smoke, smoke_report
from markdown_cells import unpadded

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def plan():
    return s.plan_for("lab-draft")


def make_report(plan, **over):
    data = s.data_for(plan, **over)
    data["generated_at"] = "2026-11-21T06:00:00Z"
    result = smoke.evaluate(data)
    return result, smoke_report.build_report(result, data)


def test_report_content_and_markdown(plan):
    result, rep = make_report(plan, rate_counts=(1, 60, 20, (1, 0, 0)))
    assert rep["kind"] == "specpilot-smoke" and rep["verdict"] == "fail" and rep["service"] == "lab-draft"
    assert rep["plan"]["speculative_config"]["model"] == "/mnt/models/draft"
    assert rep["engine"]["speculative_config"]["method"] == "draft_model"
    assert json.loads(json.dumps(rep)) == rep  # JSON-able as is
    md = unpadded(smoke_report.render_markdown(rep))
    assert md.startswith("# Smoke check: lab-draft - FAIL\n")
    assert (
        "| Acceptance rate | FAIL | draft acceptance rate 0.02 (from /metrics) is below the minimum 0.50"
        in md
    )
    assert "| draft acceptance rate | 0.017 | 0.017 |" in md
    assert "| 2 | 0.000 | 0.000 |" in md
    assert "## Reading" in md and "collapses to near zero by slot 2" in md
    assert "Thresholds: fail below 0.50, warn below 0.65." in md


def test_pipes_in_messages_do_not_break_the_table(plan):
    _result, rep = make_report(plan)
    rep["checks"][0]["message"] = "a | b\nc"
    assert "| InferenceService | PASS | a \\| b c |" in unpadded(smoke_report.render_markdown(rep))


def test_write_report_files_and_rewrite_only_on_change(plan, tmp_path):
    _result, rep = make_report(plan)
    files = smoke_report.write_report(rep, str(tmp_path / "out"), "smoke")
    assert files["changed"]
    saved = json.loads(Path(files["json"]).read_text())
    assert saved["verdict"] == "pass"
    assert Path(files["markdown"]).read_text().startswith(smoke_report.render_markdown(saved))
    assert smoke_report.pyplot()[0] is not None, "matplotlib is in requirements.txt"
    assert Path(files["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert saved["plots"] == [{"file": "smoke-acceptance.png", "title": "Per-position acceptance"}]
    assert "![Per-position acceptance](smoke-acceptance.png)" in Path(files["markdown"]).read_text()
    _result, rep2 = make_report(plan)
    assert not smoke_report.write_report(rep2, str(tmp_path / "out"), "smoke")["changed"]


def test_no_plot_without_per_position_data(plan, tmp_path):
    before, after = s.metrics_pair(plan["name"], spec=False)
    text = s.log_text(None, [], served=plan["name"])
    from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import parse_log_text

    _result, rep = make_report(
        plan,
        expect="off",
        metrics_before=before,
        metrics_after=after,
        log_facts=parse_log_text(text),
        log_window=parse_log_text(text, since=s.MARKER),
        inferenceservice=s.isvc_for(plan, args=plan["args_without_speculative"]),
        pod=s.pod_for(plan, args=plan["args_without_speculative"]),
    )
    files = smoke_report.write_report(rep, str(tmp_path), "smoke")
    assert files["plot"] is None and not list(tmp_path.glob("*.png"))
    assert "## Acceptance" not in Path(files["markdown"]).read_text()


def test_stats_are_compact(plan):
    result, _rep = make_report(plan, rate_counts=(18, 30, 10, (8, 6, 4)))
    st = smoke_report.stats(result, {"json": "/r/smoke.json", "markdown": "/r/smoke.md", "plot": None})
    assert st["verdict"] == "warn" and st["warned_checks"] == ["acceptance"] and st["failed_checks"] == []
    assert st["acceptance_rate"] == pytest.approx(0.6) and st["report"]["json"] == "/r/smoke.json"


# ------------------------------------------------------------------------------ through ansible-playbook


def run_play(tmp_path, tasks, check=False):
    out = tmp_path / "results.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "connection": "local",
            "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
            "tasks": [dict(t, register="r%d" % i, ignore_errors=True) for i, t in enumerate(tasks)]
            + [
                {
                    "name": "save",
                    "ansible.builtin.copy": {
                        "content": "{{ [%s] | to_json }}" % ", ".join("r%d" % i for i in range(len(tasks))),
                        "dest": str(out),
                    },
                    "check_mode": False,
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(s.ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        MPLCONFIGDIR=str(tmp_path / "mpl"),
    )
    cmd = [str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml")] + (
        ["--check"] if check else []
    )
    proc = subprocess.run(cmd, cwd=s.ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


@pytest.mark.slow
def test_smoke_verdict_module_writes_the_report_and_fails_on_request(plan, tmp_path):
    data = s.data_for(plan, rate_counts=(1, 60, 20, (1, 0, 0)))
    args = {k: v for k, v in data.items() if v is not None and k != "thresholds"}
    # the plan carries KServe's literal {{.Name}} (--served-model-name), which a playbook written out as
    # text would template (a plan a module returns is not templated again)
    args = json.loads(json.dumps(args).replace("{{.Name}}", plan["name"]))
    args.update(report_dir=str(tmp_path / "rep"), thresholds={"min_acceptance_rate": 0.5})
    ok, failing, checked = run_play(
        tmp_path,
        [
            {"specpilot.core.smoke_verdict": args},
            {
                "specpilot.core.smoke_verdict": dict(
                    args, fail_on_verdict=True, report_dir=str(tmp_path / "rep2")
                )
            },
            {
                "specpilot.core.smoke_verdict": dict(args, report_dir=str(tmp_path / "rep3")),
                "check_mode": True,
            },
        ],
    )
    assert ok["verdict"] == "fail" and not ok.get("failed") and ok["changed"]
    assert ok["report_files"]["json"] == str(tmp_path / "rep" / "smoke.json")
    assert json.loads((tmp_path / "rep" / "smoke.json").read_text())["verdict"] == "fail"
    assert ok["stats"]["failed_checks"] == ["acceptance"]
    assert failing["failed"] and "below the minimum 0.50" in failing["msg"]
    assert (tmp_path / "rep2" / "smoke.md").is_file()  # written before failing
    assert not checked.get("failed") and not (tmp_path / "rep3").exists()
    assert "check mode: the report was not written" in checked["report"]["notes"]


@pytest.mark.slow
def test_smoke_probe_module_in_check_mode(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_smoke_probe import Engine

    engine = Engine()
    try:
        (res,) = run_play(
            tmp_path,
            [
                {
                    "specpilot.core.smoke_probe": {
                        "url": engine.url,
                        "model": "svc",
                        "prompts": ["a", "b"],
                        "count": 2,
                        "max_tokens": 3,
                        "headers": {"Authorization": "Bearer secret"},
                    }
                }
            ],
            check=True,
        )
    finally:
        engine.close()
    assert res["ok"] and res["succeeded"] == 2 and not res["changed"]
    assert res["metrics_before"] and res["metrics_after"]
    assert "secret" not in json.dumps(res)


def test_the_acceptance_band_of_the_probes_and_the_production_temperature(plan):
    """Healthy probes (acceptance 0.9) at temperature 0 against a service that serves at 0.8: the band
    is stated, and the report says the probes did not run at the production temperature."""
    result, rep = make_report(plan, production_temperature=0.8)
    band = rep["acceptance_band"]
    assert band == result["acceptance_band"]
    assert band["band"] == "likely_helps" and band["acceptance_rate"] == pytest.approx(0.9)
    assert band["production_temperature"] == 0.8 and band["read_at_temperature"] == 0.0
    assert band["at_production"] is False
    assert band["rule"] == "below 0.5: off; 0.5-0.65: measure P99 under load; above 0.65: likely helps"
    md = smoke_report.render_markdown(rep)
    assert (
        "Band: Acceptance 0.900: above 0.65: likely helps (the rule: below 0.5: off; 0.5-0.65: measure P99 "
        "under load; above 0.65: likely helps); read at temperature 0, not at the production temperature 0.8"
    ) in md
    assert smoke_report.stats(result)["acceptance_band"] == "likely_helps"


def test_the_band_at_the_production_temperature_and_without_one(plan):
    # borderline acceptance (0.6) read at the production temperature 0
    _result, rep = make_report(plan, rate_counts=(18, 30, 10, (8, 6, 4)), production_temperature=0)
    band = rep["acceptance_band"]
    assert band["band"] == "measure_p99" and band["at_production"] is True
    assert "0.5-0.65: borderline, measure P99 under load" in band["line"]
    assert "read at the production temperature 0." in unpadded(smoke_report.render_markdown(rep))
    # low acceptance, no production temperature in the spec
    _result, rep = make_report(plan, rate_counts=(9, 30, 10, (6, 2, 1)))
    band = rep["acceptance_band"]
    assert band["band"] == "off" and band["at_production"] is None and band["production_temperature"] is None
    assert "the production temperature is not set (specpilot_workload.temperature)" in band["line"]
    # speculative decoding expected off: no band
    result = smoke.evaluate(s.data_for(plan, expect="off"))
    assert result["acceptance_band"] is None
