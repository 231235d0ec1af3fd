"""The crossspec ROS graph, defined once: which nodes exist, what runs them, what they get.

``launch/drive.launch.py`` turns ``GRAPH`` into launch_ros actions (one process per node, or
all in one with ``composed``); ``crossspec node`` and ``crossspec drive`` build the same nodes
in-process with ``create_nodes``. Topics come from the parameters (config/drive.yaml), so the
graph needs no remappings by default.

  events  --> [crossspec_draft]    --draft-->   [crossspec_verifier] <-- RGB
                     ^-------------confirmed-------------|
                                    caption --> [crossspec_viz] --> Marker, annotated Image
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossspec_ros.process_tuning import tune_process_for_models  # noqa: F401 (the graph's)

if TYPE_CHECKING:
    from crossspec_ros.speculative.verifier_first import VerifierFirst

EXECUTABLE = "crossspec"  # installed in lib/crossspec (ros2 run) and on PATH


@dataclass(frozen=True)
class NodeSpec:
    kind: str        # the `crossspec node KIND` that runs it
    name: str        # the ROS node name (parameter file sections use it)
    summary: str

    @property
    def arguments(self) -> list[str]:
        return ["node", self.kind]


GRAPH = (
    NodeSpec("draft", "crossspec_draft", "event drafter: EventPacket -> DraftTokens"),
    NodeSpec("verifier", "crossspec_verifier",
             "video verifier: Image + DraftTokens -> ConfirmedTokens, Caption"),
    NodeSpec("viz", "crossspec_viz", "Caption + Image -> Marker, annotated Image, Foxglove"),
)
KINDS = tuple(spec.kind for spec in GRAPH)
COMPOSED = NodeSpec("composed", "crossspec_composed", "all of the above in one process")


def node_parameters() -> dict[str, list]:
    """Node name -> the parameters it declares (for checking parameter files)."""
    from crossspec_ros.params import (
        DRAFT_NODE_PARAMS,
        FOXGLOVE_PARAMS,
        VERIFIER_NODE_PARAMS,
        VIZ_NODE_PARAMS,
    )

    declared = {"draft": DRAFT_NODE_PARAMS, "verifier": VERIFIER_NODE_PARAMS,
                "viz": [*VIZ_NODE_PARAMS, *FOXGLOVE_PARAMS]}
    return {item.name: declared[item.kind] for item in GRAPH}


def spec(kind: str) -> NodeSpec:
    for item in GRAPH:
        if item.kind == kind:
            return item
    raise ValueError(f"unknown node kind '{kind}'; known: {', '.join(KINDS)}")


def default_config() -> Path:
    """config/drive.yaml from the source tree or the installed share/crossspec."""
    here = Path(__file__).resolve().parents[2] / "config" / "drive.yaml"
    if here.is_file():
        return here
    from crossspec_ros.paths import package_share_dir

    return package_share_dir("crossspec") / "config" / "drive.yaml"


def parameter_overrides(config: str | Path | None, node_name: str,
                        extra: dict[str, Any] | None = None) -> list:
    """rclpy Parameters for ``node_name`` from a ROS parameter YAML (``/**`` and the node's
    own section) plus ``extra``: the in-process equivalent of ``--params-file``."""
    from rclpy.parameter import Parameter

    from crossspec_ros.params import load_yaml_params

    values = load_yaml_params(config, node_name) if config else {}
    values.update(extra or {})
    return [Parameter(name, value=value) for name, value in values.items()]


def launch_parameter_file(config: str | Path, overrides: dict[str, Any], namespace: str,
                          out: str | Path) -> Path:
    """Write ``out``: one parameter file holding each crossspec node's parameters as that node
    gets them (``config``'s sections merged for it, as ``params.load_yaml_params`` merges
    them) with the launch's ``overrides`` over them, under the node's own name. A launch
    argument always wins over the file it names: passed under ``/**`` beside the config, it
    lost to the config's node sections (``foxglove:=true`` started no server)."""
    import yaml

    from crossspec_ros.param_files import fully_qualified_name
    from crossspec_ros.params import RCLPY_PARAMS, load_yaml_params

    doc = {}
    for name, spec in node_parameters().items():
        declared = {p.name for p in (*spec, *RCLPY_PARAMS)}
        values = load_yaml_params(config, name, namespace or "/")
        values.update({key: value for key, value in overrides.items() if key in declared})
        doc[fully_qualified_name(name, namespace or "/")] = {"ros__parameters": values}
    path = Path(out)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def input_topic_parameters(config: str | Path | None, event_topic: str | None,
                           image_topic: str | None, image_type: str | None = None
                           ) -> dict[str, dict[str, str]]:
    """Per node kind, the ``event_topic``/``rgb_topic`` values that point the node at a bag's
    inputs where ``config`` (or the default) names other topics; {} when they agree.

    A replayed bag publishes on its own topic names (a DAVIS bag's /dvs/events), and the
    commands that read bags find their inputs by type: `drive` points its nodes the same way.
    A CompressedImage topic must be <rgb_topic>/compressed (what the nodes subscribe to). The
    names come back relative (dvs/events): the player publishes relative to its namespace, so
    a graph in a namespace of its own (`drive`'s) hears its own player.
    """
    from crossspec_ros.params import SYNC_PARAMS, load_yaml_params

    defaults = {p.name: p.default for p in SYNC_PARAMS}
    rgb = image_topic
    if image_topic and image_type == "sensor_msgs/msg/CompressedImage":
        rgb = image_topic.removesuffix("/compressed") if \
            image_topic.endswith("/compressed") else None
    wanted = {"event_topic": event_topic, "rgb_topic": rgb}
    out: dict[str, dict[str, str]] = {}
    for item in GRAPH:
        values = {**defaults, **(load_yaml_params(config, item.name) if config else {})}
        changed = {name: topic.lstrip("/") for name, topic in wanted.items()
                   if topic and "/" + str(values[name]).lstrip("/") != topic}
        if changed:
            out[item.kind] = changed
    return out


def make_executor() -> Any:
    """The executor that spins the graph's nodes: rclpy's EventsExecutor (its wait loop in
    C++) where rclpy has it, else a MultiThreadedExecutor. Callbacks only move messages (models
    run on worker threads), so one callback thread suffices; the Python wait loop of the
    classic executors took a third of the process's GIL time at 500 event packets a second."""
    try:
        from rclpy.experimental import EventsExecutor
    except ImportError:  # rclpy before Jazzy
        from rclpy.executors import MultiThreadedExecutor

        return MultiThreadedExecutor(num_threads=4)
    return EventsExecutor()


def spin_in_thread(executor: Any) -> Callable[[], None]:
    """Spin ``executor`` on a daemon thread; returns ``stop()``, which ends the loop and joins
    the thread. spin_once in a loop, so a shutdown after stop() never races a running spin."""
    import threading

    stopped = threading.Event()

    def spin() -> None:
        while not stopped.is_set():
            executor.spin_once(timeout_sec=0.1)

    thread = threading.Thread(target=spin, name="crossspec_spin", daemon=True)
    thread.start()

    def stop() -> None:
        stopped.set()
        thread.join(timeout=5.0)

    return stop


def _verifier_first_for(kinds: tuple[str, ...]) -> VerifierFirst | None:
    """The VerifierFirst the nodes of ``kinds`` share in this process, or None without a
    verifier or with it alone."""
    from crossspec_ros.speculative.verifier_first import VerifierFirst

    # the verifier and other nodes in this process: their work that can wait waits while the
    # verifier works on a closed window (speculative/verifier_first.py; the verifier node
    # sets the bound, yield_to_verifier_ms)
    return VerifierFirst(0.0) if "verifier" in kinds and len(kinds) > 1 else None


def create_nodes(kinds: tuple[str, ...] = KINDS, *, config: str | Path | None = None,
                 extra: dict[str, dict[str, Any]] | None = None,
                 models: tuple[Any, Any] | None = None,
                 on_result: Callable[[Any, Any], None] | None = None,
                 use_overrides: bool = True, state: str = "active",
                 foxglove: Any = None) -> list:
    """The graph's nodes in this process (composed mode: one CUDA context, the models loaded
    once; each model runs on its own worker thread and CUDA stream), brought to ``state``:
    "active", "inactive" (configured: models loaded) or "unconfigured" (a lifecycle manager
    drives them; the drafter object is then not shared with the verifier).

    ``extra``: per-kind parameter values over the config's. ``models``: (verifier, drafter)
    already loaded; None loads them from the draft/verifier parameters on configure.
    ``use_overrides``: False leaves parameters to the process's --ros-args (``crossspec
    node``). ``foxglove``: a FoxgloveOutput the viz node logs to and leaves open (``crossspec
    drive`` keeps one server over all its passes). Raises what made a node's configure fail
    (e.g. ModelLoadError).
    """
    from crossspec_ros.nodes.draft_node import DraftNode
    from crossspec_ros.nodes.lifecycle import bring_up
    from crossspec_ros.nodes.verifier_node import VerifierNode

    extra = extra or {}

    def overrides(kind: str) -> list:
        if not use_overrides:
            return []
        return parameter_overrides(config, spec(kind).name, extra.get(kind))

    def started(node: Any) -> Any:
        nodes.append(node)  # first: destroyed below if it does not come up
        if state != "unconfigured":
            bring_up(node, activate=state == "active")
        return node

    verifier, drafter = models if models is not None else (None, None)
    nodes: list = []
    verifier_first = _verifier_first_for(kinds)
    try:
        if "draft" in kinds:
            drafter = started(DraftNode(drafter, parameter_overrides=overrides("draft"),
                                        verifier_first=verifier_first)).drafter
        if "verifier" in kinds:
            # the drafter object (if here) lets the verifier bridge vocabularies exactly
            started(VerifierNode(verifier, drafter if "draft" in kinds else None,
                                 parameter_overrides=overrides("verifier"), on_result=on_result,
                                 verifier_first=verifier_first))
        if "viz" in kinds:
            from crossspec_ros.nodes.viz_node import VizNode

            started(VizNode(parameter_overrides=overrides("viz"), verifier_first=verifier_first,
                            foxglove=foxglove))
    except BaseException:
        for node in nodes:  # what started is stopped again: no worker outlives the error
            node.destroy_node()
        raise
    return nodes


# -- what launch/drive.launch.py does around the graph: decided here, where it is tested
#    without ROS 2 launch (not on PyPI), and used by the launch file as it stands

@dataclass(frozen=True)
class LifecycleFollowUp:
    """A transition launch triggers when a node it manages reports ``start_state`` ->
    ``goal_state`` on its transition_event topic (lifecycle_msgs State labels)."""

    start_state: str
    goal_state: str
    transition: str  # a lifecycle_msgs Transition label


# Launch configures each managed node and activates it once that configure has finished:
# on configuring -> inactive, and only that once (launch_ros handle_once), so afterwards the
# transitions are the user's (`ros2 lifecycle set`). A deactivate ends in "inactive" too
# (deactivating -> inactive): matched on the goal state alone, launch re-activated a node the
# user had just deactivated (issue 36, fault 9).
BRING_UP = (LifecycleFollowUp("configuring", "inactive", "activate"),)


def bring_up_follow_up(start_state: str, goal_state: str) -> str | None:
    """The transition launch triggers when a node it is bringing up reports ``start_state``
    -> ``goal_state``, or None (leave the node where it is)."""
    for rule in BRING_UP:
        if (rule.start_state, rule.goal_state) == (start_state, goal_state):
            return rule.transition
    return None


def exit_shuts_down_launch(name: str, returncode: int, shutting_down: bool) -> str | None:
    """Why launch shuts down when the crossspec process ``name`` exits with ``returncode``, or
    None. A process that fails (a node that could not configure; its own line says why) ends
    the launch instead of leaving the rest of the graph and the player waiting for it. An exit
    while launch is already shutting down is part of that shutdown, whatever its code: a
    second Shutdown makes launch_ros' ROS adapter raise "Cannot shutdown a ROS adapter that is
    not running", and launch exit 1 (issue 45, fault 5)."""
    if returncode == 0 or shutting_down:
        return None
    if returncode < 0:  # killed: the process wrote nothing about it
        import signal

        try:
            what = signal.Signals(-returncode).name
        except ValueError:
            what = f"signal {-returncode}"
        return (f"{name} was killed by {what} (it could not log why: the kernel's out-of-memory "
                "killer, or someone's kill; see dmesg)")
    return f"{name} exited with code {returncode} (its log above says why)"


def launch_flag(name: str, value: str) -> bool:
    """A true/false launch argument (``composed:=true``); ValueError, in one line naming it,
    for anything else (``composed:=maybe`` was taken as false)."""
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{name}:={value}: give true or false")
    return text == "true"


def sim_time_parameters(use_sim_time: str, replayed_here: bool | None) -> dict[str, bool]:
    """The clock parameters a launch gives every node: ``use_sim_time`` (the launch argument:
    auto, true or false) and ``follow_clock``. ``replayed_here``: whether this launch replays
    a bag (True) or reads live cameras (False); None when its robot is elsewhere (the server
    of a split). auto is then decided at run time: the nodes follow /clock, on while someone
    publishes it (the robot replays a bag), off while nobody does (live cameras)."""
    value = use_sim_time.strip().lower()
    if value in ("true", "false"):
        return {"use_sim_time": value == "true", "follow_clock": False}
    if value != "auto":
        raise ValueError(f"use_sim_time:={use_sim_time}: give auto, true or false")
    if replayed_here is None:
        return {"use_sim_time": False, "follow_clock": True}
    return {"use_sim_time": replayed_here, "follow_clock": False}


# After the bag's last message the last window still closes (on the steady clock, at most
# window_length_s + max_lateness_s later) and the verifier finishes its caption.
CAPTION_FINISH_S = 5.0


def bag_end_grace_s(config: str | Path | None) -> float:
    """Seconds from the end of a bag replay until its last window has its final caption, for
    the verifier node's parameters in ``config`` (None: the defaults): how long launch waits
    before shutting down with ``exit_when_bag_ends:=true``."""
    from crossspec_ros.params import VERIFIER_NODE_PARAMS, load_yaml_params, validate

    values = load_yaml_params(config, spec("verifier").name) if config else {}
    params = validate(values, VERIFIER_NODE_PARAMS, allow_unknown=True)
    return params["window_length_s"] + params["max_lateness_s"] + CAPTION_FINISH_S
