"""A model's vision call compiled for one shape (issue 55: the verifier's tower, eager, costs ~16 ms
a frame on an H200, launch-bound, against < 1 ms of compute).

A static runtime that compiles its prompt's chunks (``RuntimeOptions.compile_prefill``) also
compiles its model's vision call (the model's hook ``vision_call``: a function of pixels and
an example of them; the verifier's is one frame's, the event drafter's one window's event
images) for that one shape, warms it up once, and keeps it on the runtime
(``StaticLM.vision``). Every prefill on that runtime, live frame by frame or one
shot after the close, encodes each frame through it (Video-LLaVA's ``_encode`` goes frame by
frame), so the live and the one-shot prefill still give the same cache bit for bit: the
exactness contract is per runtime, vision included. Another shape (several frames at once)
runs eager, and nothing compiles after the warm-up. On a GPU the call replays a CUDA graph
(reduce-overhead), so its output is copied before the next replay writes over it, one replay
at a time (``CUDA_GRAPH_REPLAY``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from crossspec_ros.models.compile_gate import refused_by_compiled_graphs
from crossspec_ros.models.static_runtime import CUDA_GRAPH_REPLAY, _compiled
from crossspec_ros.models.streams import inference, synchronize

logger = logging.getLogger(__name__)


class CompiledVision:
    """``encode`` (pixels -> features) compiled for ``example``'s shape."""

    def __init__(self, encode: Callable[[torch.Tensor], torch.Tensor], example: torch.Tensor,
                 device: torch.device, stream: Any, name: str) -> None:
        self.eager, self.shape = encode, tuple(example.shape)
        self.device, self.stream, self.name = device, stream, name
        self.compiled_fn = _compiled(encode, device)
        self.compiled = True
        self.compile_failed: str | None = None
        self.calls = {"compiled": 0, "eager": 0}
        self._told: set[str] = set()

    def warm_up(self, example: torch.Tensor) -> float:
        """Compile and run once; seconds. A compile that fails leaves the call eager
        (logged), as a runtime's steps do."""
        t0 = time.perf_counter()
        try:
            with inference(self.device, self.stream):
                # eager once first: transformers installs its output-capturing hooks at a
                # model's first call, under a lock the compiler cannot trace
                self.eager(example)
                self(example)
            synchronize(self.device, self.stream)
        except Exception as err:
            self.compile_failed = f"{type(err).__name__}: {err}"
            self.compiled = False
            logger.warning("%s: compiling its vision failed (%s); it runs eager", self.name,
                           self.compile_failed)
        self.calls = {"compiled": 0, "eager": 0}
        return round(time.perf_counter() - t0, 2)

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        if not self.compiled:
            self.calls["eager"] += 1
            return self.eager(pixels)
        if tuple(pixels.shape) != self.shape:
            return self._eager(pixels, f"pixels {tuple(pixels.shape)}, compiled for "
                                       f"{self.shape}")
        # the graph guards on strides and dispatch keys: a frame sliced out of a window's
        # [1, F, ...] keeps the window's strides, and pixels cast under inference mode are
        # inference tensors while those already in the vision dtype are not. A copy (made
        # under inference mode, as every prefill calls this) is always the warm-up's kind
        pixels = pixels.clone(memory_format=torch.contiguous_format)
        cuda = self.device.type == "cuda"
        try:
            with CUDA_GRAPH_REPLAY if cuda else contextlib.nullcontext():
                out = self.compiled_fn(pixels).clone()  # a replay writes over its outputs
                if cuda:
                    synchronize(self.device, self.stream)
        except RuntimeError as err:  # no compiled graph takes it (outside inference mode)
            if not refused_by_compiled_graphs(err):
                raise
            return self._eager(pixels, "no compiled graph takes it: "
                               f"{str(err).strip().splitlines()[-1].strip()}")
        self.calls["compiled"] += 1
        return out

    def _eager(self, pixels: torch.Tensor, why: str) -> torch.Tensor:
        """An eager call on a compiled vision: counted, and said once per reason."""
        self.calls["eager"] += 1
        if why not in self._told:
            self._told.add(why)
            logger.warning("%s: a vision call runs eager (%s); nothing compiles after the "
                           "warm-up", self.name, why)
        return self.eager(pixels)


def compile_vision(model: Any, runtime: Any) -> dict[str, float]:
    """Put ``model``'s per-frame vision, compiled and warmed up, on ``runtime`` (a model
    without the ``vision_call`` hook keeps its vision eager); seconds by shape."""
    hook = getattr(model, "vision_call", None)
    if hook is None:
        return {}
    encode, example = hook()
    vision = CompiledVision(encode, example, model.device, model.stream, model.info.name)
    seconds = vision.warm_up(example)
    runtime.vision = vision
    return {f"vision {'x'.join(map(str, vision.shape))}": seconds}
