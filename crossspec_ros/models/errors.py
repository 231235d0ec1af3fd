"""Errors raised while loading or running a caption model.

Every message says what failed, where, and what to do about it; callers (nodes, CLI) show
the message as it is.
"""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """Base class: a model could not be loaded as asked."""


class ModelNotFoundError(ModelLoadError):
    """A model directory, file or hub id is not available (offline, missing, incomplete)."""


class CheckpointLayoutError(ModelLoadError):
    """A checkpoint's state-dict keys or shapes do not match the architecture."""


class DeviceUnavailableError(ModelLoadError):
    """The requested device (e.g. CUDA) does not exist on this machine."""


class QuantizationUnavailableError(ModelLoadError):
    """4-bit/8-bit loading was asked for but bitsandbytes (or a CUDA device) is missing."""


class UnsupportedDtypeError(ModelLoadError):
    """A dtype name that the backends do not support."""
