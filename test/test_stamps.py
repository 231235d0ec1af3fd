"""Stamps one way everywhere (crossspec_ros/stamps.py): no module converts nanoseconds by
hand or keeps a nanoseconds-per-second of its own, and the conversions give what the hand-made
ones gave (the same ints, the same floats in rows and logs)."""

from __future__ import annotations

import re
from pathlib import Path

from crossspec_ros.stamps import SECOND_NS, join_ns, ns_to_seconds, seconds_to_ns, split_ns

PACKAGE = Path(__file__).resolve().parents[1] / "crossspec_ros"
# what a conversion by hand looks like: multiplying or dividing by a nanoseconds-per-second
# literal, a constant of its own, a ROS Time's fields multiplied or divided
BY_HAND = re.compile(r"[*/]\s*1e9\b|\b1e9\s*[*/]|\b1_000_000_000\b|\b10\s*\*\*\s*9\b|"
                     r"^NS\s*=|\.sec\s*\*|\.nanosec\s*/", re.M)


def test_no_module_converts_stamps_by_hand():
    found = [f"{path.relative_to(PACKAGE)}:{text[:m.start()].count(chr(10)) + 1}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "stamps.py"
             for text in [path.read_text()] for m in BY_HAND.finditer(text)]
    assert found == []


def test_a_stamp_splits_and_joins_back_and_reads_in_seconds_as_before():
    stamp = 1_700_000_002_123_456_789
    assert split_ns(stamp) == (1_700_000_002, 123_456_789)
    assert join_ns(*split_ns(stamp)) == stamp
    assert ns_to_seconds(stamp) == stamp / 1e9  # the rows' t0 and t1, as written before
    assert seconds_to_ns(1.001) == 1_001_000_000 and SECOND_NS == 10**9
