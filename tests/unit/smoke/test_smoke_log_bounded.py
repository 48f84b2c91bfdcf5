"""What the smoke role keeps of an engine log (issue 40, smoke over a fleet): pod_log's ``vllm_facts`` parses the
log where it is read (module_utils/fact_tasks.py ``pod_log_facts``), so that ansible-playbook holds neither the
text nor every metrics window of every service's engine log. Before, a long-lived engine's log (text, lines and
up to 1,000 windows) sat in every service's variables, and every worker forked per task copied a process that
grew with the fleet: smoke over 200 services took 5.4x the time of 50 and 11.8 GiB."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks

ROOT = Path(__file__).resolve().parents[3]
START = [
    "(APIServer pid=7) INFO 11-29 03:00:00 [api_server.py:1] vLLM API server version 0.32.0",
    "INFO:     Application startup complete.",
]
WINDOW = (
    "(APIServer pid=7) INFO 11-29 03:%02d:%02d [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.00, "
    "Accepted throughput: 10.00 tokens/s, Drafted throughput: 20.00 tokens/s, Accepted: 10 tokens, "
    "Drafted: 20 tokens, Per-position acceptance rate: 0.600, 0.400, Avg Draft acceptance rate: 50.0%%"
)


def engine_log(windows: int, probe_line: str = "") -> str:
    lines = START + [WINDOW % divmod(i % 3600, 60) for i in range(windows)]
    return "\n".join(lines + ([probe_line] if probe_line else []) + [WINDOW % (59, 59), ""])


def facts_of(text: str, **options) -> dict:
    params = dict({"since": None, "max_windows": 1000, "max_issues": 100}, **options, content=text)
    return fact_tasks.pod_log_facts(params)


def test_the_whole_log_keeps_its_facts_not_its_text_nor_its_windows():
    short, long = facts_of(engine_log(10), max_windows=1), facts_of(engine_log(5000), max_windows=1)
    assert set(short) == {"facts", "last_line", "changed"} and short["changed"] is False
    assert short["last_line"] == WINDOW % (59, 59)  # the last line that is not empty: the probes' marker
    assert long["facts"]["windows_total"] == 5001 and len(long["facts"]["windows"]) == 1
    assert long["facts"]["ready"] and long["facts"]["vllm_version"] == short["facts"]["vllm_version"] == "0.32.0"
    # what a service leaves in ansible-playbook's variables does not grow with its engine's log
    assert len(json.dumps(long)) < 1.1 * len(json.dumps(short)) < 4000


def test_the_window_after_the_marker_is_what_vllm_log_facts_reads():
    marker = 'INFO:     127.0.0.1:5 - "GET /metrics HTTP/1.1" 200 OK'
    text = engine_log(30, marker)
    window = facts_of(text, since=marker)["facts"]
    expected = fact_tasks.log_facts(dict(path=None, content=text, since=marker, max_windows=1000, max_issues=100))
    assert window == {k: v for k, v in expected.items() if k != "changed"}
    assert window["since_found"] and window["summary"]["windows"] == 1 and window["summary"]["drafted_tokens"] == 20
    # the summary the verdict reads (smoke_acceptance.figures) does not depend on the windows kept
    long = engine_log(300, marker) + "\n".join(WINDOW % (0, s) for s in range(50)) + "\n"
    one = facts_of(long, since=marker, max_windows=1)["facts"]
    assert one["summary"] == facts_of(long, since=marker)["facts"]["summary"] and one["summary"]["windows"] == 51


def test_the_smoke_role_never_keeps_an_engine_log():
    """Every pod_log of the role parses where it reads and keeps one window."""
    reads = []
    for path in sorted((ROOT / "roles" / "specpilot_smoke" / "tasks").glob("*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            args = task.get("specpilot.core.pod_log")
            if args is not None:
                reads.append((path.name, args))
    # the running container's log and its previous instance's (one task, a loop), the probes' window
    assert len(reads) == 2
    for name, args in reads:
        assert "max_windows" in str(args.get("vllm_facts")), name
        if "since_seconds" not in args:  # the whole log, not the probes' window
            assert args["vllm_facts"] == {"max_windows": 1}, name
