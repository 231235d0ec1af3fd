"""Shared pytest fixtures."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pytest
import torch
from rosbags.rosbag2 import StoragePlugin, Writer

from crossspec_ros.bags.typestore import EVENT_PACKET_TYPE, typestore
from crossspec_ros.events.packet import EventPacketData

# One intra-op thread per process, as every model-running command sets it
# (process_tuning.tune_process_for_models): two test workers on two cores, each with a
# two-thread OpenMP pool, spin against each other and against any other load (a live-prefill
# test file measured 195 s beside a busy loop with the default pools, 27 s with one thread).
# Subprocesses the tests start inherit the environment.
for _pool in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")
torch.set_num_threads(1)


def _event_packet_msg(packet: EventPacketData):
    types = typestore().types
    sec, nanosec = divmod(packet.stamp_ns, 1_000_000_000)
    header = types["std_msgs/msg/Header"](
        stamp=types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec),
        frame_id=packet.frame_id)
    return types[EVENT_PACKET_TYPE](
        header=header, height=packet.height, width=packet.width, seq=packet.seq,
        time_base=packet.time_base, encoding=packet.encoding,
        is_bigendian=packet.is_bigendian,
        events=np.frombuffer(bytes(packet.events), dtype=np.uint8))


@pytest.fixture
def write_event_bag() -> Callable[..., Path]:
    """write_event_bag(path, [(topic, packet), ...], storage="mcap"|"sqlite3") -> path.

    Log time = header stamp, as crossspec's bag writer does.
    """
    def write(path: Path, messages: Iterable[tuple[str, EventPacketData]],
              storage: str = "mcap") -> Path:
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        store = typestore()
        with Writer(path, version=9, storage_plugin=plugin) as writer:
            conns = {}
            for topic, packet in messages:
                if topic not in conns:
                    conns[topic] = writer.add_connection(topic, EVENT_PACKET_TYPE,
                                                         typestore=store)
                data = store.serialize_cdr(_event_packet_msg(packet), EVENT_PACKET_TYPE)
                writer.write(conns[topic], packet.stamp_ns, data)
        return path

    return write


@pytest.fixture(scope="module")
def distill_pair():
    """A tiny verifier and drafter that disagree (random weights): distillation's subjects."""
    from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier

    return tiny_verifier(seed=1, init_range=0.3), tiny_eventgpt_drafter(seed=2, init_range=0.3)


@pytest.fixture(scope="module")
def distill_labels(distill_pair):
    """18 random windows captioned by ``distill_pair``'s verifier (6 tokens at most)."""
    from synthetic_windows import random_window

    from crossspec_ros.train.distill import label_windows

    verifier, drafter = distill_pair
    return label_windows(verifier, drafter, [random_window(s) for s in range(18)],
                         max_new_tokens=6)


# The bundled tiny pair and the sample bag's first three windows (the static-runtime and lanes
# tests'; a module that defines its own of either name uses its own)
@pytest.fixture(scope="module")
def bundled():
    from crossspec_ros.models.pair import BUNDLED_PAIR

    if not (BUNDLED_PAIR / "verifier").is_dir():
        pytest.skip("no bundled pair (run crossspec train-tiny)")
    from crossspec_ros.train.tiny_pair import load_pair

    return load_pair()


@pytest.fixture(scope="module")
def windows():
    from crossspec_ros.bench.engine import bag_windows
    from crossspec_ros.paths import sample_bag

    return bag_windows(sample_bag(), 3)
