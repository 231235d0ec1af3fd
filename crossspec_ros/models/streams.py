"""CUDA stream placement and wall-clock timing for model work (no-ops on CPU).

A later scheduler runs the drafter and the verifier on separate CUDA streams of one GPU.
Backends run their kernels inside ``on_stream`` and wait with ``synchronize``, which waits
for *their* stream only: ``torch.cuda.synchronize()`` would also wait for the other model
and serialize the two.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch

from crossspec_ros.models.compile_gate import COMPILE_GATE


def on_stream(device: torch.device, stream: Any | None) -> contextlib.AbstractContextManager:
    """Context placing CUDA work on ``stream``; a no-op on CPU or without a stream."""
    if stream is None or device.type != "cuda":
        return contextlib.nullcontext()
    return torch.cuda.stream(stream)


def synchronize(device: torch.device, stream: Any | None) -> None:
    """Wait until the work queued on ``stream`` (or the device's current stream) is done."""
    if device.type != "cuda":
        return
    (stream if stream is not None else torch.cuda.current_stream(device)).synchronize()


class Stopwatch:
    """Milliseconds between marks, each mark taken after the stream's work has finished."""

    def __init__(self, device: torch.device, stream: Any | None) -> None:
        self.device = device
        self.stream = stream
        self._last = time.perf_counter()

    def lap_ms(self) -> float:
        """Milliseconds since the previous lap (or creation), after syncing the stream."""
        synchronize(self.device, self.stream)
        now = time.perf_counter()
        elapsed = (now - self._last) * 1000.0
        self._last = now
        return elapsed


@contextlib.contextmanager
def inference(device: torch.device, stream: Any | None) -> Iterator[None]:
    """``torch.inference_mode`` on the model's stream, as model work: never while another
    thread compiles (``compile_gate.py``)."""
    with COMPILE_GATE.model_work(), torch.inference_mode(), on_stream(device, stream):
        yield


def assign_cuda_streams(*models: Any) -> None:
    """Give each CUDA model its own stream (kept if it has one), so the drafter's kernels
    overlap the verifier's on one GPU. Backends run their work on ``model.stream``."""
    for model in models:
        device = getattr(model, "device", None)
        if model is not None and device is not None and torch.device(device).type == "cuda" \
                and getattr(model, "stream", None) is None:
            model.stream = torch.cuda.Stream(device=device)
