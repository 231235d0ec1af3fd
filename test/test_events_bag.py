"""Reading event topics from ROS 2 bags (sqlite3 and MCAP), time ranges, clear errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from crossspec_ros.events.bag import EventBagError, EventBagReader, read_events
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.encode import encode_evt3_packets

ROS_T0 = 1_700_000_000_000_000_000


def two_topic_batches() -> tuple[EventBatch, EventBatch]:
    rng = np.random.default_rng(0)

    def batch(n: int, w: int, h: int) -> EventBatch:
        t = ROS_T0 + np.sort(rng.integers(0, 2_000_000, n)) * 1000  # 2 s
        return EventBatch(t, rng.integers(0, w, n), rng.integers(0, h, n),
                          rng.integers(0, 2, n), w, h)

    return batch(5000, 640, 480), batch(3000, 346, 260)


@pytest.fixture(params=["mcap", "sqlite3"])
def bag(request: pytest.FixtureRequest, tmp_path: Path,
        write_event_bag: Callable[..., Path]) -> tuple[Path, EventBatch, EventBatch]:
    left, right = two_topic_batches()
    msgs = [("/left/events", p) for p in encode_evt3_packets(left, 2_000_000)]
    msgs += [("/right/events", p) for p in encode_evt3_packets(right, 5_000_000)]
    msgs.sort(key=lambda m: m[1].stamp_ns)
    return write_event_bag(tmp_path / "bag", msgs, storage=request.param), left, right


def test_all_event_topics_are_found_and_decoded_exactly(bag: tuple) -> None:
    path, left, right = bag
    with EventBagReader(path) as reader:
        assert reader.topics == ["/left/events", "/right/events"]
        got: dict[str, list[EventBatch]] = {t: [] for t in reader.topics}
        for topic, batch in reader.batches():
            got[topic].append(batch)
        assert all(d.stats.events > 0 for d in reader.decoders.values())
    assert EventBatch.concat(got["/left/events"]).equals(left)
    assert EventBatch.concat(got["/right/events"]).equals(right)


def test_time_range_selects_packets_by_bag_time(bag: tuple) -> None:
    path, left, _ = bag
    t0, t1 = ROS_T0 + 700_000_000, ROS_T0 + 1_300_000_000  # on the 2 ms packet grid
    out = read_events(path, "/left/events", start_ns=t0, stop_ns=t1)
    assert out.equals(left.between(t0, t1))
    assert read_events(path, "/left/events").equals(left)


def test_single_mcap_file_can_be_read(tmp_path: Path,
                                      write_event_bag: Callable[..., Path]) -> None:
    left, _ = two_topic_batches()
    path = write_event_bag(tmp_path / "bag", [("/ev", p) for p in encode_evt3_packets(left)])
    assert read_events(next(path.glob("*.mcap"))).equals(left)


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EventBagError, match="no such file or directory"):
        EventBagReader(tmp_path / "nope")


def test_not_a_bag_is_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not a bag at all")
    with pytest.raises(EventBagError, match=r"junk\.mcap: cannot open as a ROS 2 bag"):
        EventBagReader(junk)
    with pytest.raises(EventBagError, match="cannot open"):
        EventBagReader(tmp_path)  # a directory without metadata.yaml


def test_a_truncated_bag_is_read_up_to_the_damage_or_is_a_clear_error(bag: tuple) -> None:
    path, left, _ = bag
    data = next(f for f in path.iterdir() if f.suffix in (".mcap", ".db3"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])
    if data.suffix == ".db3":  # opening or reading fails, wherever the cut falls: clearly
        with pytest.raises(EventBagError, match=str(path.name)), EventBagReader(path) as r:
            list(r.batches())
        return
    with EventBagReader(path) as reader:  # an MCAP keeps what precedes the cut
        got = EventBatch.concat([b for topic, b in reader.batches()
                                 if topic == "/left/events" and len(b)])
    assert 0 < len(got) < len(left)
    assert np.array_equal(got.t, left.t[:len(got)]) and np.array_equal(got.x, left.x[:len(got)])


def test_bag_without_event_topic_is_a_clear_error(tmp_path: Path) -> None:
    from rosbags.rosbag2 import Writer

    from crossspec_ros.bags.typestore import typestore

    store = typestore()
    path = tmp_path / "strings"
    with Writer(path, version=9) as writer:
        conn = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=store)
        msg = store.types["std_msgs/msg/String"](data="hi")
        writer.write(conn, 1, store.serialize_cdr(msg, "std_msgs/msg/String"))
    with pytest.raises(EventBagError, match=r"no event topic \(event_camera_msgs/EventPacket, "
                       r"dvs_msgs/EventArray or prophesee_event_msgs/EventArray\).*chatter"):
        EventBagReader(path)


def test_unknown_topic_names_the_available_ones(bag: tuple) -> None:
    path, _, _ = bag
    with pytest.raises(EventBagError, match=r"/left/events"):
        EventBagReader(path, ["/nope"])


def test_bad_packets_in_a_bag_are_counted_not_raised(
        tmp_path: Path, write_event_bag: Callable[..., Path]) -> None:
    left, _ = two_topic_batches()
    packets = encode_evt3_packets(left, 2_000_000)
    packets[3] = replace(packets[3], encoding="libcaer")
    path = write_event_bag(tmp_path / "bag", [("/ev", p) for p in packets])
    with EventBagReader(path) as reader:
        out = EventBatch.concat([b for _, b in reader.batches() if len(b)])
        stats = reader.decoders["/ev"].stats
    assert stats.unsupported_encoding == 1
    lost = (left.t >= packets[3].stamp_ns) & (left.t < packets[4].stamp_ns)
    assert out.equals(left.take(~lost))
