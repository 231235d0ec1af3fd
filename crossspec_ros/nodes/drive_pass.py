"""One pass of `crossspec drive`: the bag replayed through a compared graph in this process,
its ROS side (rclpy is imported only while a pass runs).

``run_pass`` brings the graph up (the nodes, composed on one executor, the bag player on
/clock, the drive's own subscription to the captions), waits until the bag is replayed and
every window is finished (or --max-windows, a stop signal, a part of the graph that died),
takes the graph down in order and hands back what the pass left (``PassResult``): its rows
(run_rows.py), the verifier's engine for the lossless check, what the busy nodes dropped,
what the draft node decided, and what of the graph died.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from crossspec_ros.comparison import CROSSSPEC, ComparedGraph, summary_graph
from crossspec_ros.run_rows import WindowRows, add_draft_timings, checker_as_they_finish
from crossspec_ros.run_summary import DroppedWindows
from crossspec_ros.streaming import signals_deferred


@dataclass
class PassResult:
    """What one replay left: its rows (window order; none under --loop, which wrote them out
    as they finished), its ``WindowRows`` (the windows awaiting the lossless check, --loop's
    tally), the verifier node's engine, windows dropped by busy nodes, whether a stop signal
    ended it, and what of the graph died (one line each)."""

    rows: list[dict]
    window_rows: WindowRows | None
    engine: Any
    dropped: DroppedWindows
    interrupted: bool
    died: list[str] = field(default_factory=list)
    # topics another graph published on too (topic -> every publishing node): the rows may
    # hold its captions, so the run does not pass
    foreign: dict[str, list[str]] = field(default_factory=dict)
    # the draft node's decisions: windows per reason (DraftSchedule) and its lead, {} without
    drafter: dict[str, Any] = field(default_factory=dict)


@dataclass
class _RunningGraph:
    """A pass's graph as far as it came up: what its shutdown (in ``finally``) takes down, so
    that a graph which failed halfway is taken down too."""

    executor: Any
    nodes: list = field(default_factory=list)
    verifier_node: Any = None
    stop_spinning: Callable[[], None] | None = None
    foreign: dict[str, list[str]] = field(default_factory=dict)  # ForeignPublishers.seen


def summarized_graph(args: argparse.Namespace) -> ComparedGraph:
    """The graph of drive's passes whose windows are checked and summed up: crossspec's
    without --compare, else ``summary_graph`` of the compared ones."""
    return summary_graph(args.graphs) if getattr(args, "compare", False) else CROSSSPEC


def run_pass(args: argparse.Namespace, graph: ComparedGraph, models: dict[str, Any],
             on_row: Callable[[dict], None] | None = None, label: str = "",
             caught: dict[str, int] | None = None) -> int | PassResult:
    """One replay of the bag through ``graph``, or an exit code when the graph could not
    start. ``models``: "verifier" and "drafter" once loaded (updated here; later passes reuse
    them). ``on_row``: called with each window's row once it is finished; ``label`` prefixes
    the live view's lines; ``caught``: the run's stop signal (``sigterm_as_interrupt``), held
    off while the graph shuts down."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.nodes.graph import default_config, make_executor
    from crossspec_ros.nodes.isolation import run_ros_args
    from crossspec_ros.params import ParameterError

    config = args.config or default_config()
    loop = getattr(args, "loop", False)
    # the viz node is crossspec's: it runs beside crossspec's graph only, never slowing a
    # baseline (and --record / --foxglove show the crossspec pass)
    kinds = graph.kinds + (() if args.no_viz or graph is not CROSSSPEC else ("viz",))
    # a pass that ends keeps its rows (and, to check them after it, its verified windows);
    # --loop writes each row out as it finishes and keeps none
    window_rows = WindowRows(on_row=on_row, label=label, keep_rows=not loop,
                         hold_windows=args.check_lossless and not loop and
                         graph is summarized_graph(args))
    # Ctrl-C stays Python's KeyboardInterrupt: drive shuts the graph down itself, in order
    # the run's graph in its own namespace: another graph on this domain cannot mix in
    rclpy.init(args=run_ros_args(args.namespace), signal_handler_options=SignalHandlerOptions.NO)
    running = _RunningGraph(executor=make_executor())
    interrupted = False
    deaths = NodeDeaths()
    with deaths:
        try:
            _run_graph(args, graph, models, running, kinds, config, window_rows, deaths)
        except (ParameterError, ModelLoadError) as err:
            print(f"crossspec drive: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            interrupted = True
            print("interrupted: shutting down", file=sys.stderr)
        finally:
            # a stop signal now waits for the shutdown's end: nodes destroyed, the recording
            # finished (one that came 0.2 s after "recorded N messages" lost the JSON)
            with signals_deferred(caught) if caught is not None else nullcontext():
                # before the shutdown ends threads and processes; a replay that ended on
                # damage it could not pass stops the graph as a death does
                died = deaths.found() + _replay_failures(running.nodes)
                engine = _shut_down(running)
    interrupted = interrupted or bool(caught is not None and caught["signal"])
    rows = window_rows.in_order() if window_rows.keep_rows else []
    add_draft_timings(rows, _draft_timings(running.nodes))
    return PassResult(rows, window_rows, engine, _dropped_windows(running.nodes),
                      interrupted, died, dict(running.foreign), _draft_decisions(running.nodes))


def _replay_failures(nodes: list) -> list[str]:
    """The bag replay's end on an error (a damaged chunk), one line, when it ended so."""
    from crossspec_ros.nodes.player import BagPlayer

    return [f"the bag replay ended early: {node.error}" for node in nodes
            if isinstance(node, BagPlayer) and node.error]


def _node_extra(args: argparse.Namespace, graph: ComparedGraph) -> dict[str, dict[str, Any]]:
    """Each node's parameters over the config's: the models and input topics asked for, the
    graph's own verifier parameters, and sim time."""
    # the run's Foxglove server, if any, is given to the viz node: it outlives the pass
    # the recording and Foxglove name the graph's topics as in the root namespace: the
    # run's own namespace only keeps it apart from other graphs
    viz = {"foxglove": False, "record_bag": str(args.record or ""), "outputs_in_root": True}
    models_given = getattr(args, "model_params", {})
    topics = getattr(args, "topic_params", {})
    sim_time = {"use_sim_time": True}  # the bag's /clock, as drive.launch.py sets it
    return {"viz": {**viz, **topics.get("viz", {}), **sim_time},
            "draft": {**models_given, **topics.get("draft", {}), **sim_time},
            "verifier": {**models_given, **graph.verifier_params,
                         **topics.get("verifier", {}), **sim_time}}


def _run_graph(args: argparse.Namespace, graph: ComparedGraph, models: dict[str, Any],
               running: _RunningGraph, kinds: tuple[str, ...], config: Any,
               window_rows: WindowRows, deaths: NodeDeaths) -> None:
    """Bring ``graph`` up into ``running`` (which holds each part as it comes up), replay the
    bag through it and wait until its windows are finished."""
    import rclpy

    from crossspec_ros.nodes.draft_node import DraftNode
    from crossspec_ros.nodes.graph import create_nodes, spin_in_thread
    from crossspec_ros.nodes.isolation import guard_for
    from crossspec_ros.nodes.player import BagPlayer
    from crossspec_ros.nodes.verifier_node import VerifierNode
    from crossspec_ros.sync.agreement import text_to_ids

    loop = getattr(args, "loop", False)
    running.nodes = create_nodes(kinds, config=config, extra=_node_extra(args, graph),
                                 models=(models.get("verifier"), models.get("drafter")),
                                 on_result=window_rows.on_result,
                                 foxglove=getattr(args, "foxglove_output", None))
    verifier_node = next(n for n in running.nodes if isinstance(n, VerifierNode))
    running.verifier_node = verifier_node
    models["verifier"] = verifier_node.loop.engine.verifier
    window_rows.tokenize = text_to_ids(models["verifier"].tokenizer)
    if loop and args.check_lossless and graph is CROSSSPEC:
        window_rows.check = checker_as_they_finish(verifier_node.loop.engine)
    for node in running.nodes:
        if isinstance(node, DraftNode):
            models["drafter"] = node.drafter
            if node.loop.process is not None:
                deaths.watch_process("the draft node's drafter process",
                                     lambda process=node.loop.process: process.alive)
    watcher = rclpy.create_node("crossspec_drive_monitor")
    watch_captions(watcher, verifier_node.params["caption_topic"], window_rows.on_caption)
    player = BagPlayer(args.bag, rate=args.rate, loop=loop,
                       max_duration_s=getattr(args, "duration", None))
    running.nodes += [watcher, player]
    for node in running.nodes:
        running.executor.add_node(node)
    running.stop_spinning = spin_in_thread(running.executor)
    print(f"crossspec drive: {args.bag} at rate {args.rate}, config {config}, graph "
          f"{' + '.join(n.get_name() for n in running.nodes[:len(kinds)])} in namespace "
          f"/{args.namespace} (ROS_DOMAIN_ID {os.environ.get('ROS_DOMAIN_ID', '0')})",
          file=sys.stderr)
    guard, poll = guard_for(running.nodes, inputs_too=True)
    running.foreign = guard.seen
    wait_for_windows(player, verifier_node, window_rows, args.max_windows, deaths, _said(poll))


def _shut_down(running: _RunningGraph) -> Any:
    """Take down what of the graph came up, in order; return the verifier node's engine (or
    None where there was none)."""
    import rclpy

    if running.stop_spinning is not None:
        running.stop_spinning()
    running.executor.shutdown(timeout_sec=2.0)
    # kept past the nodes: the lossless check and the next pass use the models
    engine = running.verifier_node.loop.engine if running.verifier_node is not None else None
    for node in running.nodes:
        node.destroy_node()  # the viz node closes its recording here
    if rclpy.ok():
        rclpy.shutdown()
    return engine


def _draft_timings(nodes: list) -> dict[tuple[int, int], Any]:
    """The draft node's timing of each window it drafted, by window key."""
    from crossspec_ros.nodes.draft_node import DraftNode

    return {t.key: t for node in nodes if isinstance(node, DraftNode)
            for t in node.loop.timings}


def _draft_decisions(nodes: list) -> dict[str, Any]:
    """What the draft node decided for the pass's windows (speculative/draft_schedule.py):
    windows per reason, and the lead it ended with."""
    from crossspec_ros.nodes.draft_node import DraftNode
    from crossspec_ros.speculative.draft_schedule import REASONS

    for node in nodes:
        if isinstance(node, DraftNode):
            schedule = node.loop.schedule
            return {"lead_ms": round(schedule.lead_wall_ms(), 1),
                    **{reason: schedule.counts[reason] for reason in REASONS
                       if schedule.counts[reason]}}
    return {}


def _dropped_windows(nodes: list) -> DroppedWindows:
    """The windows the pass's busy nodes let go."""
    from crossspec_ros.nodes.draft_node import DraftNode
    from crossspec_ros.nodes.verifier_node import VerifierNode

    return DroppedWindows(
        verifier=sum(_dropped(n) for n in nodes if isinstance(n, VerifierNode)),
        drafter=sum(_dropped(n) for n in nodes if isinstance(n, DraftNode)),
        late_drafts=sum(n.loop.book.counters["late_drafts"] for n in nodes
                        if isinstance(n, VerifierNode)))


def _dropped(node: Any) -> int:
    """Windows ``node``'s queue let go because it was full."""
    return node.loop.queue.dropped


class NodeDeaths:
    """What of the graph died while it ran, one line each: a thread that ended on an
    exception (the executor's spin thread, when a callback raised; a node's worker) and a
    child process that is gone (a drafter process, ``watch_process``). Within the ``with``
    block ``threading.excepthook`` notes such threads, and still prints their traceback
    unless ``quiet``."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._lock = threading.Lock()
        self._threads: list[str] = []
        self._processes: list[tuple[str, Callable[[], bool]]] = []
        self._previous_hook: Callable[[Any], Any] | None = None

    def __enter__(self) -> NodeDeaths:
        self._previous_hook = threading.excepthook
        threading.excepthook = self._note
        return self

    def __exit__(self, *_exc: object) -> None:
        threading.excepthook = self._previous_hook

    def _note(self, args: Any) -> None:
        name = args.thread.name if args.thread is not None else "?"
        with self._lock:
            self._threads.append(f"thread {name} ended on {args.exc_type.__name__}: "
                                 f"{args.exc_value}")
        if not self.quiet and self._previous_hook is not None:
            self._previous_hook(args)

    def watch_process(self, name: str, alive: Callable[[], bool]) -> None:
        """Report ``name`` as gone once ``alive()`` says False."""
        self._processes.append((name, alive))

    def found(self) -> list[str]:
        with self._lock:
            lines = list(self._threads)
        return lines + [f"{name} is gone" for name, alive in self._processes if not alive()]


def watch_captions(node: Any, topic: str, on_caption: Callable[[Any], None]) -> Any:
    """The drive's own subscription to the captions, with the QoS the graph's readers have
    (reliable, OUTAGE_DEPTH deep): a burst that comes while the executor is busy elsewhere is
    taken whole. (100 deep, the oldest captions of a burst were overwritten before the
    executor took them: at --rate 8 the live view and the JSON missed windows the recording
    had.)"""
    from crossspec import msg as cs_msg

    from crossspec_ros.nodes.common import reliable_qos

    return node.create_subscription(cs_msg.Caption, topic, on_caption, reliable_qos())


GRAPH_CHECK_S = 1.0  # how often the wait looks at the ROS graph for another graph's publishers


def _said(poll: Callable[[], list[str]]) -> Callable[[], bool]:
    """``poll`` with its lines said on stderr; True once it has said any."""
    said = False

    def check() -> bool:
        nonlocal said
        for line in poll():
            said = True
            print(f"crossspec drive: {line}", file=sys.stderr)
        return said
    return check


def wait_for_windows(player: Any, verifier: Any, window_rows: WindowRows, max_windows: int,
                     deaths: NodeDeaths | None = None,
                     check_graph: Callable[[], bool] | None = None) -> None:
    """Until the bag is replayed and every window is finished (or ``max_windows``, or a part
    of the graph died: nothing more would come). ``check_graph``, every GRAPH_CHECK_S: whether
    another graph publishes on the run's topics; its captions then never let the run settle,
    so only the verifier's own work counts."""
    settle = verifier.params["max_lateness_s"] + verifier.params["window_length_s"] + 2.5
    checked, mixed, idle_since = -math.inf, False, math.inf
    while True:
        time.sleep(0.1)
        now = time.monotonic()
        if check_graph is not None and now - checked >= GRAPH_CHECK_S:
            checked, mixed = now, check_graph()
        if deaths is not None and deaths.found():
            return
        if max_windows and window_rows.finished() >= max_windows:
            player.stop()
            return
        if player.done.is_set():
            busy = len(verifier.loop.queue) or any(
                w.verifying for w in list(verifier.loop.book.windows.values()))
            idle_since = math.inf if busy else min(idle_since, now)
            last = idle_since if mixed else max(idle_since, window_rows.last_activity)
            if not busy and now - last > settle:
                return
