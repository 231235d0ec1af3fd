"""Fuzz: random and corrupted packets of each encoding through the decode path: no exception,
no event outside the sensor, and every kind of damage counted (``crossspec bench fuzz`` runs
the same with 1,000,000 packets per encoding)."""

from __future__ import annotations

import pytest

from crossspec_ros.bench.fuzz import ENCODINGS, fuzz_decode

N_PACKETS = {"evt3": 100_000, "evt2": 30_000, "evt21": 30_000, "libcaer_cmp": 30_000}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_decode_path_survives_random_and_corrupted_packets(encoding: str) -> None:
    report = fuzz_decode(encoding, N_PACKETS[encoding])
    assert report["crashes"] == 0 and report["bad_batches"] == 0
    assert report["decoded_packets"] == N_PACKETS[encoding] and report["events"] > 0
    for counter in ("unsupported_encoding", "big_endian", "invalid_size", "empty_packets",
                    "odd_length", "out_of_bounds_events", "size_changes", "size_mismatch"):
        assert report["counters"][counter] > 0, counter
    if encoding != "evt3":  # the evt3 library skips what it does not know without a count
        assert report["counters"]["unknown_words"] > 0
