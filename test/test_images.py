"""Image messages -> RGB arrays: every supported encoding, padding, and clear errors."""

import io
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from crossspec_ros.images import (
    UnsupportedImageError,
    compressed_to_rgb,
    image_to_rgb,
    rgb_to_image_fields,
)

RGB = np.random.default_rng(0).integers(0, 256, size=(4, 5, 3), dtype=np.uint8)


def make_image(pixels: np.ndarray, encoding: str, pad: int = 0, bigendian: bool = False):
    height, width = pixels.shape[:2]
    row = pixels.reshape(height, -1).view(np.uint8).reshape(height, -1)
    padded = np.concatenate([row, np.zeros((height, pad), np.uint8)], axis=1)
    return SimpleNamespace(height=height, width=width, encoding=encoding, is_bigendian=bigendian,
                           step=padded.shape[1], data=padded.tobytes())


@pytest.mark.parametrize("pad", [0, 3])
def test_rgb8_and_bgr8_decode_to_the_same_rgb_with_row_padding(pad):
    assert np.array_equal(image_to_rgb(make_image(RGB, "rgb8", pad)), RGB)
    assert np.array_equal(image_to_rgb(make_image(RGB[:, :, ::-1].copy(), "bgr8", pad)), RGB)


def test_rgba_and_mono_encodings_become_rgb():
    rgba = np.concatenate([RGB, np.full((4, 5, 1), 7, np.uint8)], axis=2)
    assert np.array_equal(image_to_rgb(make_image(rgba, "rgba8")), RGB)
    mono = RGB[:, :, 0].copy()[:, :, None]
    out = image_to_rgb(make_image(mono, "mono8"))
    assert out.shape == (4, 5, 3) and np.array_equal(out[:, :, 2], mono[:, :, 0])


def test_mono16_keeps_the_high_byte_in_either_byte_order():
    mono16 = (np.arange(20, dtype=np.uint16).reshape(4, 5, 1) * 3000)
    little = image_to_rgb(make_image(mono16.astype("<u2"), "mono16"))
    big = image_to_rgb(make_image(mono16.astype(">u2"), "mono16", bigendian=True))
    assert np.array_equal(little[:, :, 0], (mono16[:, :, 0] >> 8).astype(np.uint8))
    assert np.array_equal(little, big)


def test_unknown_encoding_and_short_data_raise_a_clear_error():
    with pytest.raises(UnsupportedImageError, match="'yuv422' is not supported"):
        image_to_rgb(make_image(RGB, "yuv422"))
    short = make_image(RGB, "rgb8")
    short.data = short.data[:-1]
    with pytest.raises(UnsupportedImageError, match="does not fit its header"):
        image_to_rgb(short)


def test_png_and_jpeg_compressed_images_decode():
    for fmt, exact in (("png", True), ("jpeg", False)):
        buffer = io.BytesIO()
        Image.fromarray(RGB).save(buffer, format=fmt.upper())
        out = compressed_to_rgb(SimpleNamespace(format=fmt, data=buffer.getvalue()))
        assert out.shape == RGB.shape
        if exact:
            assert np.array_equal(out, RGB)
    with pytest.raises(UnsupportedImageError, match="cannot decode"):
        compressed_to_rgb(SimpleNamespace(format="png", data=b"not a png"))
    with pytest.raises(UnsupportedImageError, match="'tiff' is not supported"):
        compressed_to_rgb(SimpleNamespace(format="tiff", data=b""))


def test_rgb_to_image_fields_round_trips():
    fields = rgb_to_image_fields(RGB)
    msg = SimpleNamespace(**fields)
    assert np.array_equal(image_to_rgb(msg), RGB)
