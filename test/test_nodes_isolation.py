"""One ROS graph per run: its namespace, its clock, and the guard against a second graph."""

from types import SimpleNamespace

import pytest

from crossspec_ros.nodes.isolation import (
    ForeignPublishers,
    check_namespace,
    own_topics,
    private_namespace,
    run_ros_args,
)


def _node(publishes=(), subscribes=()):
    return SimpleNamespace(publishers=[SimpleNamespace(topic_name=t) for t in publishes],
                           subscriptions=[SimpleNamespace(topic_name=t) for t in subscribes])


def test_two_runs_in_one_process_get_different_namespaces():
    first, second = private_namespace("drive"), private_namespace("drive")
    assert first != second
    assert check_namespace(first) == first


def test_a_runs_ros_arguments_move_every_node_its_clock_and_diagnostics_into_its_namespace():
    assert run_ros_args("/robot1/") == ["--ros-args", "-r", "__ns:=/robot1", "-r",
                                        "/clock:=clock", "-r", "/diagnostics:=diagnostics"]


@pytest.mark.parametrize("bad", ["", "/", "robot 1", "1robot", "robot-1", "a//b"])
def test_a_name_that_is_no_ros_namespace_is_refused_saying_what_is_allowed(bad):
    with pytest.raises(ValueError, match="is not a ROS namespace"):
        check_namespace(bad)


def test_a_whole_runs_own_topics_are_every_topic_it_reads_with_its_own_publishers_counted():
    player = _node(publishes=["/ns/events", "/ns/rgb", "/ns/clock", "/rosout"])
    draft = _node(publishes=["/ns/draft", "/parameter_events"],
                  subscribes=["/ns/events", "/ns/confirmed", "/ns/clock", "/parameter_events"])
    verifier = _node(publishes=["/ns/confirmed", "/ns/caption"],
                     subscribes=["/ns/rgb", "/ns/draft", "/ns/clock"])
    watcher = _node(subscribes=["/ns/caption"])
    nodes = [player, draft, verifier, watcher]
    assert own_topics(nodes, inputs_too=True) == {
        "/ns/events": 1, "/ns/rgb": 1, "/ns/clock": 1, "/ns/draft": 1, "/ns/confirmed": 1,
        "/ns/caption": 1}
    # a composed graph's camera inputs come from drivers outside: not its own
    assert own_topics(nodes[1:], inputs_too=False) == {
        "/ns/draft": 1, "/ns/confirmed": 1, "/ns/caption": 1}


def test_a_topic_read_but_published_by_nobody_in_the_run_is_watched_for_any_publisher():
    # the verifier alone reads drafts nobody in its run writes: another graph's would reach it
    assert own_topics([_node(subscribes=["/ns/draft"])], inputs_too=True) == {"/ns/draft": 0}


def test_another_graphs_publisher_is_said_once_per_topic_naming_every_publisher():
    guard = ForeignPublishers({"/a/caption": 1, "/a/draft": 0})
    assert guard.check({"/a/caption": ["/a/crossspec_verifier"], "/a/draft": []}) == []
    lines = guard.check({"/a/caption": ["/a/crossspec_verifier", "/a/crossspec_verifier"],
                         "/a/draft": ["/a/crossspec_draft"]})
    assert len(lines) == 2
    assert lines[0].startswith("/a/caption has 2 publishers, 1 of them this graph's "
                               "(/a/crossspec_verifier, /a/crossspec_verifier)")
    assert "own namespace or ROS_DOMAIN_ID" in lines[0]
    assert lines[1].startswith("/a/draft has 1 publishers, 0 of them")
    assert guard.check({"/a/caption": ["x", "y", "z"]}) == []  # said already
    assert guard.seen == {"/a/caption": ["/a/crossspec_verifier", "/a/crossspec_verifier"],
                          "/a/draft": ["/a/crossspec_draft"]}


@pytest.mark.ros
def test_a_composed_graph_sees_another_graphs_publisher_on_its_caption_topic_in_the_ros_graph():
    """Real nodes, two processes' worth of contexts: ours publishes and reads its captions, the
    other's publishes on the same topic; the poll names the topic once discovery shows both."""
    import time

    import rclpy
    from std_msgs.msg import String

    from crossspec_ros.nodes.isolation import guard_for

    ours, theirs = rclpy.Context(), rclpy.Context()
    for context in (ours, theirs):
        rclpy.init(context=context)
    try:
        verifier = rclpy.create_node("crossspec_verifier", namespace="robot", context=ours)
        verifier.create_publisher(String, "crossspec/caption", 10)
        viz = rclpy.create_node("crossspec_viz", namespace="robot", context=ours)
        viz.create_subscription(String, "crossspec/caption", lambda _m: None, 10)
        viz.create_subscription(String, "camera/image_raw", lambda _m: None, 10)  # an input
        other = rclpy.create_node("crossspec_verifier", namespace="robot", context=theirs)
        other.create_publisher(String, "/robot/crossspec/caption", 10)
        other.create_publisher(String, "/robot/camera/image_raw", 10)  # a camera: not foreign
        guard, poll = guard_for([verifier, viz], inputs_too=False)
        lines: list[str] = []
        deadline = time.monotonic() + 20
        while not lines and time.monotonic() < deadline:
            lines = poll()
            time.sleep(0.1)
        assert len(lines) == 1 and lines[0].startswith(
            "/robot/crossspec/caption has 2 publishers, 1 of them this graph's "
            "(/robot/crossspec_verifier, /robot/crossspec_verifier)")
        assert guard.own == {"/robot/crossspec/caption": 1}
    finally:
        for context in (ours, theirs):
            rclpy.shutdown(context=context)


def test_a_report_waits_a_few_polls_for_a_publishers_node_name_then_says_it_is_unnamed():
    guard = ForeignPublishers({"/a/caption": 1})
    unknown = "_NODE_NAMESPACE_UNKNOWN_/_NODE_NAME_UNKNOWN_"
    early = {"/a/caption": ["/a/crossspec_verifier", unknown]}
    assert guard.check(early) == guard.check(early) == guard.check(early) == []
    (line,) = guard.check(early)
    assert "(/a/crossspec_verifier, a node not yet named)" in line
    named = ForeignPublishers({"/a/caption": 1})
    assert named.check(early) == []
    assert "(/a/crossspec_verifier, /b/x)" in named.check(
        {"/a/caption": ["/a/crossspec_verifier", "/b/x"]})[0]
