"""sensor_msgs Image / CompressedImage <-> numpy RGB, for rclpy and rosbags messages alike.

Pure numpy (+ Pillow for jpeg/png): works on any object with the message's attributes, so bag
tools and nodes share it. Nodes may prefer cv_bridge where a ROS install provides it.
"""

from __future__ import annotations

import io

import numpy as np

# encoding -> (channels, dtype, how to get RGB from the channels)
_LAYOUTS: dict[str, tuple[int, str, tuple[int, ...] | None]] = {
    "rgb8": (3, "u1", (0, 1, 2)),
    "bgr8": (3, "u1", (2, 1, 0)),
    "rgba8": (4, "u1", (0, 1, 2)),
    "bgra8": (4, "u1", (2, 1, 0)),
    "mono8": (1, "u1", None),
    "8UC1": (1, "u1", None),
    "8UC3": (3, "u1", (2, 1, 0)),  # OpenCV's default channel order is BGR
    "mono16": (1, "u2", None),
    "16UC1": (1, "u2", None),
}
SUPPORTED_ENCODINGS = tuple(_LAYOUTS)


class UnsupportedImageError(ValueError):
    """An image that cannot be turned into RGB (unknown encoding, wrong size, bad bytes)."""


def image_to_rgb(msg) -> np.ndarray:
    """H x W x 3 uint8 RGB from a sensor_msgs/Image-like object (copy-free where possible)."""
    encoding = str(msg.encoding)
    if encoding not in _LAYOUTS:
        raise UnsupportedImageError(
            f"image encoding '{encoding}' is not supported; publish one of "
            f"{', '.join(SUPPORTED_ENCODINGS)} (or a jpeg/png CompressedImage)"
        )
    channels, kind, order = _LAYOUTS[encoding]
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    dtype = np.dtype(kind).newbyteorder(">" if msg.is_bigendian else "<")
    data = np.frombuffer(_as_bytes(msg.data), dtype=np.uint8)
    row_bytes = width * channels * dtype.itemsize
    if height == 0 or width == 0 or step < row_bytes or data.size < step * (height - 1) + row_bytes:
        raise UnsupportedImageError(
            f"image data does not fit its header: {width}x{height} {encoding}, step {step}, "
            f"{data.size} bytes (need at least {step * max(height - 1, 0) + row_bytes})"
        )
    rows = np.lib.stride_tricks.as_strided(data, shape=(height, row_bytes), strides=(step, 1))
    pixels = np.ascontiguousarray(rows).view(dtype).reshape(height, width, channels)
    if dtype.itemsize == 2:  # 16-bit mono: keep the high byte for display/model input
        pixels = (pixels.astype(np.uint16) >> 8).astype(np.uint8)
    if order is None:
        return np.repeat(pixels, 3, axis=2)
    if order == (0, 1, 2) and channels == 3:
        return pixels
    return np.ascontiguousarray(pixels[:, :, list(order)])


def compressed_to_rgb(msg) -> np.ndarray:
    """H x W x 3 uint8 RGB from a sensor_msgs/CompressedImage-like object (jpeg or png)."""
    from PIL import Image, UnidentifiedImageError

    fmt = str(msg.format).lower()
    if "jpeg" not in fmt and "jpg" not in fmt and "png" not in fmt:
        raise UnsupportedImageError(
            f"compressed image format '{msg.format}' is not supported; use jpeg or png"
        )
    try:
        with Image.open(io.BytesIO(_as_bytes(msg.data))) as image:
            return np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise UnsupportedImageError(f"cannot decode {msg.format} image data: {err}") from err


def rgb_to_image_fields(rgb: np.ndarray) -> dict:
    """Fields of a sensor_msgs/Image (rgb8) holding ``rgb`` (H x W x 3 uint8)."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"expected H x W x 3 uint8, got {rgb.shape} {rgb.dtype}")
    height, width = rgb.shape[:2]
    return {"height": height, "width": width, "encoding": "rgb8", "is_bigendian": 0,
            "step": width * 3, "data": np.ascontiguousarray(rgb).reshape(-1)}


def _as_bytes(data) -> bytes | memoryview | np.ndarray:
    if isinstance(data, bytes | bytearray | memoryview):
        return data
    if isinstance(data, np.ndarray):
        return data.view(np.uint8) if data.dtype != np.uint8 else data
    return bytes(data)  # array.array('B') from rclpy, or a list
