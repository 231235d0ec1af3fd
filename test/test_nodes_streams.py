"""The verifier node serving several camera streams (parameter ``streams``): each stream's
topics and caption action under its name, its own windows and captions, every stream's
captions its own lane's greedy decoding; one stream is today's node."""

from __future__ import annotations

import pytest

rclpy = pytest.importorskip("rclpy")

from crossspec import msg as cs_msg  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from recording_publisher import RecordingPublisher  # noqa: E402
from synthetic_windows import random_window  # noqa: E402

from crossspec_ros.models.tiny import tiny_verifier  # noqa: E402
from crossspec_ros.nodes.lifecycle import bring_up  # noqa: E402
from crossspec_ros.nodes.verifier_node import VerifierNode  # noqa: E402
from crossspec_ros.params import ParameterError  # noqa: E402

pytestmark = pytest.mark.ros
FINAL = cs_msg.Caption.STATUS_FINAL


@pytest.fixture()
def ros():
    rclpy.init()
    yield
    rclpy.shutdown()


def streams_node(names: str, on_result=None, **more):
    overrides = [Parameter("streams", value=names), Parameter("compile", value=False),
                 *(Parameter(k, value=v) for k, v in more.items())]
    return VerifierNode(tiny_verifier(seed=1), parameter_overrides=overrides,
                        on_result=on_result)


def test_each_stream_verifies_its_own_windows_on_its_own_topics_losslessly(ros):
    results = {}
    node = bring_up(streams_node("front,rear", on_result=lambda w, r: results.update(
        {w.id: list(r.tokens)}), stream_steps="lanes"))
    try:
        front, rear = node.streams
        assert [s.name for s in node.streams] == ["front", "rear"] and node.stream is front
        assert front.pub_caption.topic_name == "/front/crossspec/caption"
        assert rear.pub_latest.topic_name == "/rear/crossspec/caption/latest"
        subscribed = dict(node.get_subscriber_names_and_types_by_node(
            node.get_name(), node.get_namespace()))
        assert {"/front/camera/image_raw", "/rear/camera/image_raw",
                "/front/crossspec/draft", "/rear/crossspec/draft"} <= set(subscribed)
        assert node.shared is not None and node.shared.graph == "batched"
        for stream in node.streams:
            stream.worker.stop()  # the test steps the loops itself
            stream.pub_caption = RecordingPublisher()
            stream.pub_confirmed = RecordingPublisher()
        # each stream its own windows (another content under the same ids)
        for k, stream in enumerate(node.streams):
            for wid in (1, 2):
                stream.loop.queue.put(random_window(wid + 10 * k), 0.0)
        for _ in range(2):
            for stream in node.streams:
                stream.loop.step()
        lanes = node.shared.counters()  # each window's prompt adopted into its lane once
        assert lanes["lane_copies"] == 4 and lanes["lane_steps"] > 0
        for k, stream in enumerate(node.streams):
            ids = [1 + 10 * k, 2 + 10 * k]
            assert [c.window_id for c in stream.pub_caption.sent if c.status == FINAL] == ids
            model = node.shared.models[k]  # the stream's lane, every other lane idle
            for wid in ids:
                assert results[wid] == model.generate_greedy(
                    model.prepare(random_window(wid)), node.params["max_new_tokens"])
    finally:
        node.destroy_node()


def test_one_stream_is_todays_node_and_an_absolute_topic_with_streams_is_refused(ros):
    node = bring_up(streams_node(""))
    try:
        assert [s.name for s in node.streams] == [""] and node.shared is None
        assert node.stream.pub_caption.topic_name == "/crossspec/caption"
    finally:
        node.destroy_node()
    node = streams_node("front,rear", rgb_topic="/camera/image_raw")
    try:
        with pytest.raises(ParameterError, match="'rgb_topic' = '/camera/image_raw' is not "
                           "relative: with streams"):
            node.configure_node()
        assert node.loop.engine is None  # refused before any model work
    finally:
        node.destroy_node()


@pytest.mark.parametrize("bad", ["front,front", "front,2nd", "front/left"])
def test_stream_names_that_are_not_ros_names_or_repeat_are_refused(ros, bad):
    with pytest.raises(ParameterError, match="'streams'"):
        streams_node(bad)


def test_streams_run_in_lanes_on_a_gpu_or_an_emulated_one_and_separately_on_the_cpu():
    from crossspec_ros.params import VERIFIER_NODE_PARAMS, stream_graph, validate

    def graph(**given):
        return stream_graph(validate(given, VERIFIER_NODE_PARAMS))

    assert graph() == "separate"  # a CPU step costs its rows: idle lanes' rows are waste
    assert graph(device="cuda") == "batched" and graph(emulate="h100-bf16-limit") == "batched"
    assert graph(device="cuda", runtime="transformers") == "separate"
    assert graph(stream_steps="lanes") == "batched"
    assert graph(device="cuda", stream_steps="separate") == "separate"
