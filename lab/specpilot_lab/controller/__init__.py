"""The lab controller: turns InferenceServices, PVCs and Jobs applied to the API emulator into
what KServe (Standard mode) and a one-node cluster would make of them, with a real vLLM
engine per predictor pod. Run it with ``python -m specpilot_lab.controller`` (``make lab-up``
starts it beside the emulator)."""

from .manager import Controller

__all__ = ["Controller"]
