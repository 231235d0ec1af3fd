"""The word decoders' shared pieces: counting set bits also where numpy < 2 has no
np.bitwise_count (a ROS Jazzy install keeps Ubuntu 24.04's numpy 1.26)."""

import numpy as np
import pytest

from crossspec_ros.events.words import set_bits, set_bits_by_bytes


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_set_bits_by_bytes_counts_each_elements_bits_as_python_does(dtype):
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    values = rng.integers(0, info.max, size=(3, 50), dtype=dtype, endpoint=True)
    values[0, :2] = (0, info.max)
    expected = np.array([[int(v).bit_count() for v in row] for row in values])
    assert np.array_equal(set_bits_by_bytes(values), expected)
    assert np.array_equal(set_bits(values), expected)
    # a strided view (every other column) is counted as well
    assert np.array_equal(set_bits_by_bytes(values[:, ::2]), expected[:, ::2])


def test_set_bits_by_bytes_refuses_signed_integers():
    with pytest.raises(TypeError, match="unsigned"):
        set_bits_by_bytes(np.array([-1, 3], dtype=np.int32))
