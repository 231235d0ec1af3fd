"""One ROS graph per run: a namespace of its own, its clock inside it, and a guard that says
when another graph publishes on its topics.

Two graphs on one ROS domain hear each other: two `crossspec drive` runs started together on
``ROS_DOMAIN_ID=91`` swapped captions (in one run's JSON 14 of 18 FINAL captions were the other
run's), and two robots replaying bags in ``robot1`` and ``robot2`` followed each other's /clock.
Every topic of crossspec's graph is relative (the parameters' defaults, the player's replayed
topics), so a namespace moves the whole graph; /clock, which ROS makes absolute, is remapped into
the namespace too (``/clock:=clock``: a relative replacement resolves in each node's namespace, so
in the root namespace it is /clock as before). A namespace per run needs no lock and no
coordination, keeps the user's domain (``ros2 topic list`` shows the run) and costs nothing per
message; rclpy's MessageInfo (the publisher of each message) would have allowed filtering
instead, but the EventsExecutor the graph spins on refuses callbacks that take it.

What a namespace cannot prevent, two graphs told to share one, ``ForeignPublishers`` detects from
the ROS graph: a topic with more publishers than the run's own nodes.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field


def private_namespace(tool: str) -> str:
    """A namespace no other run on this domain has: the tool, this process and 16 random bits
    (a pid alone repeats across the hosts of one domain)."""
    return f"crossspec_{tool}_{os.getpid()}_{secrets.token_hex(2)}"


def check_namespace(namespace: str) -> str:
    """``namespace`` without its leading and trailing slashes, or ValueError saying why it is
    not a ROS namespace (letters, digits and underscores in tokens separated by '/', no token
    starting with a digit)."""
    tokens = namespace.strip("/").split("/")
    for token in tokens:
        if not token or not (token[0].isalpha() or token[0] == "_") or \
                not all(c.isalnum() or c == "_" for c in token):
            raise ValueError(f"'{namespace}' is not a ROS namespace: use letters, digits and "
                             "'_' in names separated by '/', none starting with a digit")
    return "/".join(tokens)


# absolute topics a run of its own keeps inside its namespace: its clock (a second run's
# would move its stamps) and its diagnostics (a recording of the run holds only its own)
PRIVATE_TOPICS = ("/clock", "/diagnostics")


def run_ros_args(namespace: str) -> list[str]:
    """The ROS arguments (rclpy.init's, global to a process's nodes) that make the process's
    graph a run of its own: every node in ``namespace``, /clock and /diagnostics with it."""
    remaps = [arg for topic in PRIVATE_TOPICS for arg in ("-r", f"{topic}:={topic[1:]}")]
    return ["--ros-args", "-r", f"__ns:=/{check_namespace(namespace)}", *remaps]


@dataclass(frozen=True)
class Endpoint:
    """A publisher the ROS graph reports on a topic."""

    node: str       # fully qualified node name
    topic: str


UNKNOWN_NODE = "_NODE_NAME_UNKNOWN_"  # rmw's name for an endpoint whose node is not known yet
NAME_WAIT_POLLS = 3  # polls a topic's report waits for its publishers' names to be discovered


@dataclass
class ForeignPublishers:
    """Which of a graph's topics have publishers beyond the graph's own.

    ``own``: topic -> how many publishers the run's own nodes have on it (a run knows what it
    started). ``check(publishers)`` is fed what the ROS graph reports (topic -> the publishing
    nodes' full names) and returns the lines to say now: one per topic the first time it has
    more publishers than its own, naming them (nodes of one name in one namespace cannot be
    told apart, so all of a topic's publishers are named). Discovery may show an endpoint
    before its node's name: such a report waits up to NAME_WAIT_POLLS polls for the name.
    ``seen`` keeps every topic found, for the run's summary.
    """

    own: Mapping[str, int]  # fully qualified topic -> the run's own publishers on it
    seen: dict[str, list[str]] = field(default_factory=dict)
    waited: dict[str, int] = field(default_factory=dict)  # polls a report waited for names

    def check(self, publishers: Mapping[str, Iterable[str]]) -> list[str]:
        lines = []
        for topic, nodes in publishers.items():
            nodes = sorted(nodes)
            if len(nodes) <= self.own.get(topic, 0) or topic in self.seen:
                continue
            if any(UNKNOWN_NODE in n for n in nodes) and \
                    self.waited.get(topic, 0) < NAME_WAIT_POLLS:
                self.waited[topic] = self.waited.get(topic, 0) + 1
                continue
            nodes = [("a node not yet named" if UNKNOWN_NODE in n else n) for n in nodes]
            self.seen[topic] = nodes
            lines.append(f"{topic} has {len(nodes)} publishers, {self.own.get(topic, 0)} of "
                         f"them this graph's ({', '.join(nodes)}): another graph publishes in "
                         "this namespace on this ROS domain, and its messages mix with this "
                         "one's; give each graph its own namespace or ROS_DOMAIN_ID")
        return lines


# every ROS node publishes and subscribes these: not a graph's own topics
ROS_INFRASTRUCTURE = frozenset({"/parameter_events", "/rosout"})


def own_topics(nodes: Iterable[object], *, inputs_too: bool) -> dict[str, int]:
    """The topics a second graph in the same namespace would feed the run's ``nodes``, each
    with how many publishers the nodes have on it: every topic they subscribe to where the
    run is the whole graph (``inputs_too``: `drive`, its player in the process), else those
    they also publish (a composed node's drafts, confirmed tokens and captions; its camera
    inputs come from drivers outside)."""
    published: dict[str, int] = {}
    subscribed: set[str] = set()
    for node in nodes:
        for publisher in node.publishers:
            published[publisher.topic_name] = published.get(publisher.topic_name, 0) + 1
        subscribed.update(s.topic_name for s in node.subscriptions)
    return {topic: published.get(topic, 0) for topic in subscribed - ROS_INFRASTRUCTURE
            if inputs_too or topic in published}


def graph_publishers(node: object, topics: Iterable[str]) -> dict[str, list[str]]:
    """Topic -> the fully qualified names of the nodes publishing on it, as ``node`` sees the
    ROS graph (topics fully qualified)."""
    return {topic: [f"{info.node_namespace.rstrip('/')}/{info.node_name}"
                    for info in node.get_publishers_info_by_topic(topic)]
            for topic in topics}


def guard_for(nodes: list, *, inputs_too: bool
              ) -> tuple[ForeignPublishers, Callable[[], list[str]]]:
    """A ForeignPublishers for a run's own ``nodes`` and the poll that feeds it the ROS graph
    as the first of them sees it. The run's own topics are read again at each poll: a
    lifecycle node makes its publishers and subscriptions only once configured."""
    guard = ForeignPublishers({})

    def poll() -> list[str]:
        guard.own = own_topics(nodes, inputs_too=inputs_too)
        return guard.check(graph_publishers(nodes[0], guard.own))

    return guard, poll
