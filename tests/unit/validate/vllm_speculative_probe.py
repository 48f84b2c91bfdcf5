"""Run candidate speculative configs through vLLM's own SpeculativeConfig.

Runs under the lab's engine interpreter (.venv-vllm/bin/python), not under pytest:

    python vllm_speculative_probe.py TARGET_MODEL_DIR CANDIDATES.json VERDICTS.json

CANDIDATES.json is a list of {"id", "config"}; VERDICTS.json gets, for each id,
{"accepted": bool, "error": str}.  The target model directory needs only a config.json:
the config is built exactly as the engine builds it for --speculative-config (the parsed
dict plus the target's ModelConfig and ParallelConfig).
"""

from __future__ import annotations

import json
import os
import sys


def main(target_dir: str, candidates_file: str, verdicts_file: str) -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig  # public config classes

    with open(candidates_file) as handle:
        candidates = json.load(handle)
    target = ModelConfig(model=target_dir)
    verdicts = {}
    for item in candidates:
        try:
            SpeculativeConfig(
                **item["config"], target_model_config=target, target_parallel_config=ParallelConfig()
            )
            verdicts[item["id"]] = {"accepted": True, "error": ""}
        except Exception as exc:  # noqa: BLE001 - any exception is vLLM refusing the config
            verdicts[item["id"]] = {
                "accepted": False,
                "error": "%s: %s" % (type(exc).__name__, str(exc)[:400]),
            }
    with open(verdicts_file, "w") as handle:
        json.dump(verdicts, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
