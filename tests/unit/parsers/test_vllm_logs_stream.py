"""vllm_logs streams: memory stays flat on a large log, and the figures stay exact."""

from __future__ import annotations

import tracemalloc

import pytest
from vllm_samples import CPU_RUN, printed_v1, real, real_log, spec_lines

from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import parse_log_file

MIB = 1 << 20


def _periodic_block():
    """Real lines: the L13 excerpt plus the cpu run between readiness and shutdown."""
    l13 = real_log("L13").read_bytes()
    cpu = real(CPU_RUN / "server.log").read_bytes().splitlines(keepends=True)
    ready = next(i for i, ln in enumerate(cpu) if b"Application startup complete" in ln)
    stop = next(i for i, ln in enumerate(cpu) if b"[shutdown]" in ln)
    block = (l13 if l13.endswith(b"\n") else l13 + b"\n") + b"".join(cpu[ready + 1:stop])
    return block


def _write(path, block, size):
    reps = max(1, size // len(block))
    with open(path, "wb") as fh:
        for _ in range(reps):
            fh.write(block)
    return reps


def _peak(path):
    tracemalloc.start()
    try:
        result = parse_log_file(path, max_windows=100)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_large_log_flat_memory_and_exact_totals(tmp_path):
    block = _periodic_block()
    per_block = [printed_v1(t) for _, t in spec_lines(real_log("L13"), "SpecDecoding metrics:")]
    per_block += [printed_v1(t) for _, t in spec_lines(real(CPU_RUN / "server.log"), "SpecDecoding metrics:")]
    small, large = tmp_path / "small.log", tmp_path / "large.log"
    reps_small = _write(small, block, 2 * MIB)
    reps_large = _write(large, block, 20 * MIB)

    res_small, peak_small = _peak(small)
    res_large, peak_large = _peak(large)

    assert res_large["windows_total"] == reps_large * len(per_block)
    assert res_large["summary"]["accepted_tokens"] == reps_large * sum(p["accepted_tokens"] for p in per_block)
    assert res_large["summary"]["drafted_tokens"] == reps_large * sum(p["drafted_tokens"] for p in per_block)
    assert res_small["summary"]["draft_acceptance_rate"] == pytest.approx(
        res_large["summary"]["draft_acceptance_rate"], abs=1e-9)
    assert len(res_large["windows"]) == 100 and res_large["windows_dropped"] == res_large["windows_total"] - 100
    assert res_large["lines"] == reps_large * block.count(b"\n")
    assert reps_large >= 9 * reps_small
    # 10x the log, about the same peak: a chunk and the kept windows, not the log
    assert peak_large < 8 * MIB, peak_large
    assert peak_large <= 1.5 * peak_small + 1 * MIB, (peak_small, peak_large)


def test_one_very_long_line_is_read_whole(tmp_path):
    path = tmp_path / "long.log"
    body = ("Mean acceptance length: 2.03, Accepted throughput: 22.80 tokens/s, Drafted throughput: 66.60 tokens/s, "
            "Accepted: 228 tokens, Drafted: 666 tokens, Per-position acceptance rate: "
            + ", ".join(["0.500"] * 400_000) + ", Avg Draft acceptance rate: 34.2%")
    path.write_text("INFO 06-16 20:48:20 [metrics.py:101] SpecDecoding metrics: " + body + "\nINFO:     Application startup complete.\n")
    result = parse_log_file(path)
    [w] = result["windows"]
    assert len(w["per_position_acceptance"]) == 400_000 and w["accepted_tokens"] == 228
    assert result["ready"] is True and result["lines"] == 2
