"""The lab controller's one image mapping (controller/jobs.py): a Job container of the lab's runtime image
that calls python3 runs the lab engine's interpreter (.venv-vllm), exposed in the sandbox; every other
command and image runs with this machine's programs."""

from __future__ import annotations

from specpilot_lab.controller import jobs


def test_the_lab_runtime_image_s_python3_is_the_lab_engine_s(monkeypatch, tmp_path):
    venv = tmp_path / "venv-vllm"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    python = venv / "bin" / "python"
    python.write_text("")
    monkeypatch.setattr(jobs.engine, "VLLM_VENV", venv)
    argv, exposed = jobs.image_argv(
        "specpilot-lab/vllm-cpu:0.32.0", ["python3", "/specpilot/probe/model_dir.py"]
    )
    assert argv == [str(python), "/specpilot/probe/model_dir.py"]
    assert ["--ro-bind", str(venv), str(venv)] == exposed[-3:]
    assert jobs.image_argv("specpilot-lab/vllm-cpu@sha256:" + "a" * 64, ["python"])[0][0] == str(python)
    for image, argv in (
        ("busybox:1.36", ["python3", "x.py"]),
        ("specpilot-lab/vllm-cpu:0.32.0", ["sh", "-c", "true"]),
        ("specpilot-lab/vllm-cpu-other:1", ["python3"]),
    ):
        assert jobs.image_argv(image, argv) == (argv, [])
    python.unlink()  # no lab engine installed: the machine's python3, which reports the missing vLLM
    assert jobs.image_argv("specpilot-lab/vllm-cpu:0.32.0", ["python3"]) == (["python3"], [])
