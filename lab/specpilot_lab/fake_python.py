"""``python3`` inside a lab pod that runs the stand-in engine (engine.fake_engine_python): this machine's
Python, where ``import vllm`` finds a module holding only the stand-in's release, as ``kubectl exec <pod> --
python3 -c "import vllm; print(vllm.__version__)"`` reads it in a vLLM image. Everything else is plain
Python: ``-c CODE``, ``-m MODULE`` or a script, with their arguments."""

import runpy
import sys
import types

VERSION = "0.32.0"  # the release fake_engine.py stands in for

vllm = types.ModuleType("vllm")
vllm.__version__ = VERSION
sys.modules["vllm"] = vllm

args = sys.argv[1:]
if args[:1] == ["-c"] and len(args) > 1:
    sys.argv = ["-c"] + args[2:]
    exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
elif args[:1] == ["-m"] and len(args) > 1:
    sys.argv = [args[1]] + args[2:]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
elif args:
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")
else:
    sys.exit("fake_python: give -c CODE, -m MODULE or a script")
