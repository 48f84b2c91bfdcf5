"""Fixtures of the molecule staging scenario (standard library + the lab package).

    python fixtures.py up ROOT LAB_DIR     tiny models, an HTTP server for them (daemon), the lab's
                                           busybox base layout, ROOT/fixtures.json
    python fixtures.py down ROOT           stop the HTTP server

fixtures.json: {"http": "http://127.0.0.1:PORT", "registry": "127.0.0.1:PORT", "models": DIR,
"base": "oci:DIR:busybox", "lab": LAB_DIR}.
"""

import functools
import hashlib
import http.server
import json
import os
import random
import signal
import struct
import sys
import tarfile
import time
from pathlib import Path


def make_model(path, weights, seed, layers):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": 2048,
                "hidden_size": 128,
                "num_hidden_layers": layers,
            }
        )
    )
    (path / "tokenizer.json").write_text(
        json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}}})
    )
    data = random.Random(seed).randbytes(weights)
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(data)], "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + data)


def up(root, lab_dir):
    root, lab_dir = Path(root).resolve(), Path(lab_dir).resolve()
    models = root / "models"
    make_model(models / "target", 2 * 1024 * 1024, 0, 2)
    make_model(models / "draft", 512 * 1024, 1, 1)
    sums = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}"
        for p in sorted((models / "target").iterdir())
    ]
    (models / "target" / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    with tarfile.open(models / "draft.tar.gz", "w:gz") as tf:
        for p in sorted((models / "draft").iterdir()):
            tf.add(p, f"draft/{p.name}")
    from specpilot_lab import registry

    registry.build_base_layout(root / "base", tag="busybox")
    ready = json.loads((lab_dir / "run" / "registry.ready").read_text())
    port_file = root / "http.port"
    port_file.unlink(missing_ok=True)
    if os.fork() == 0:  # the HTTP server, detached
        os.setsid()
        if os.fork():
            os._exit(0)
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(models))
        handler.log_message = lambda *a: None
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        (root / "http.pid").write_text(str(os.getpid()))
        port_file.write_text(str(srv.server_address[1]))
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        srv.serve_forever()
        os._exit(0)
    deadline = time.monotonic() + 10
    while not port_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    fixtures = {
        "http": f"http://127.0.0.1:{port_file.read_text()}",
        "registry": ready["addr"],
        "models": str(models),
        "base": f"oci:{root / 'base'}:busybox",
        "lab": str(lab_dir),
    }
    (root / "fixtures.json").write_text(json.dumps(fixtures, indent=1))
    print(json.dumps(fixtures))


def down(root):
    pid_file = Path(root) / "http.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
            print("stopped")
        except (ProcessLookupError, ValueError):
            pass
        pid_file.unlink()


if __name__ == "__main__":
    if sys.argv[1] == "up":
        up(sys.argv[2], sys.argv[3])
    else:
        down(sys.argv[2])
