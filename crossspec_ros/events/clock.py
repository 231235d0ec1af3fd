"""Map sensor time (EVT3: microseconds since the camera started) onto the ROS clock.

The rule
--------
ROS time = sensor time + offset. Each packet gives one observation: a driver stamps a packet
at or after the moment its first event happened, so

    implied = header.stamp - sensor time of the packet's first event

is an *upper bound* of the offset (transport latency only makes it larger). The estimate is the
running minimum of these bounds. For bags crossspec writes (``events/encode.py`` stamps each
packet with the ROS time of its first event) the first packet already gives the exact offset.

Jumps: when a packet's implied offset differs from the estimate by more than ``max_jump_ns``
(default 1 s) the sensor clock or the ROS clock jumped (camera reset, bag replay looping,
sensor time wrap the decoder missed). The estimate then restarts from that packet alone; this is
logged (a warning the first time, debug after) and counted in ``resets``. Latency below the
bound only makes events late by at most that latency until a faster packet arrives.
"""

from __future__ import annotations

import logging

from crossspec_ros.stamps import SECOND_NS, ns_to_seconds

log = logging.getLogger(__name__)

DEFAULT_MAX_JUMP_NS = SECOND_NS


class SensorClock:
    """Running-minimum offset estimator with jump detection (one per event stream)."""

    def __init__(self, max_jump_ns: int = DEFAULT_MAX_JUMP_NS) -> None:
        if max_jump_ns <= 0:
            raise ValueError(f"max_jump_ns must be > 0, got {max_jump_ns}")
        self.max_jump_ns = int(max_jump_ns)
        self.offset_ns: int | None = None
        self.resets = 0
        self._warned = False

    def update(self, stamp_ns: int, first_sensor_ns: int) -> int:
        """Feed one packet (header stamp, sensor time of its first event); return the offset."""
        implied = int(stamp_ns) - int(first_sensor_ns)
        if self.offset_ns is None:
            self.offset_ns = implied
        elif abs(implied - self.offset_ns) > self.max_jump_ns:
            self.resets += 1
            msg = ("event clock jumped by %.3f s (sensor reset or bag loop?): re-estimating the "
                   "sensor->ROS offset from this packet (resets so far: %d)")
            jump_s = ns_to_seconds(implied - self.offset_ns)
            if not self._warned:
                log.warning(msg, jump_s, self.resets)
                self._warned = True
            else:
                log.debug(msg, jump_s, self.resets)
            self.offset_ns = implied
        elif implied < self.offset_ns:
            self.offset_ns = implied
        return self.offset_ns

    def reset(self) -> None:
        """Forget the estimate (new sensor, new decoder); counters stay."""
        self.offset_ns = None
