"""What every crossspec node shares: parameters declared from one spec, QoS, time and
message conversions, a bounded work queue and a diagnostics publisher."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import rclpy
from builtin_interfaces.msg import Time
from crossspec import msg as cs_msg
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from crossspec_ros.params import Param, ParameterError, check_value, validate
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.worker import Worker  # noqa: F401 (the nodes')
from crossspec_ros.stamps import join_ns, split_ns
from crossspec_ros.sync.captions import WindowCaption
from crossspec_ros.sync.synchronizer import sync_from_params  # noqa: F401 (the nodes')


def declare_params(node: Node, spec: list[Param],
                   on_change: Callable[[dict[str, Any]], None] | None = None,
                   live_check: Callable[[dict[str, Any]], str | None] | None = None
                   ) -> dict[str, Any]:
    """Declare ``spec`` on the node (defaults, docs and ranges from one place), validate the
    values it was started with (ParameterError naming the node and the parameter), and keep
    validating at runtime: ``ros2 param set`` of a read-only parameter is refused by rclpy, a
    live one is checked like at startup and refused with the same message when invalid.
    Integers given to float parameters are taken as floats, at startup (a file's
    ``window_length_s: 2``) and at runtime (``ros2 param set ... temperature 2``).
    Returns the values; live changes update that dict in place, then call ``on_change`` with
    the changed names and values (executor thread; what it raises refuses the change, which is
    undone). ``live_check(values)``: what the node itself refuses at runtime (its reason),
    beyond the spec (e.g. more tokens than the caches allocated at configure hold)."""
    where = f"node '{node.get_name()}' parameters"
    by_name = {param.name: param for param in spec}
    values = {}
    for param in spec:  # untyped first: rclpy would raise at `2` for a float, or at "fast"
        declared = node.declare_parameter(param.name, param.default,
                                          descriptor(param, final=False))
        values[param.name] = declared.value
    params = validate(values, spec, where=where)
    for param in spec:  # then typed, ranged, read-only: the int given for a float is a float
        value = Parameter(param.name, value=params[param.name]).get_parameter_value()
        node.set_descriptor(param.name, descriptor(param), alternative_value=value)

    before_set = _pre_set_callback(node, by_name, where)
    on_set = _on_set_callback(node, spec, params, where, on_change, live_check)
    node.add_pre_set_parameters_callback(before_set)
    node.add_on_set_parameters_callback(on_set)
    return params


def _pre_set_callback(node: Node, by_name: dict[str, Param], where: str
                      ) -> Callable[[list], list]:
    """The node's pre-set callback: each change as crossspec takes it, before rclpy checks."""

    def before_set(changes: list) -> list:
        # rclpy checks the descriptors (type, range) before any on-set callback and says only
        # "out of range". This runs first: an int for a float becomes the float, and a value
        # crossspec refuses stands in the list as the current value (which passes rclpy's
        # checks) until on_set refuses the change with crossspec's reason.
        out = []
        for change in changes:
            param = by_name.get(change.name)
            if param is None or change.type_ == Parameter.Type.NOT_SET or \
                    node.describe_parameter(change.name).read_only:
                out.append(change)  # rclpy's own answer (read-only) is the right one
                continue
            try:
                value = check_value(param, change.value, where)
            except ParameterError as err:
                out.append(_RefusedChange(node.get_parameter(change.name), str(err)))
                continue
            out.append(Parameter(change.name, value=value))
        return out

    return before_set


def _on_set_callback(node: Node, spec: list[Param], params: dict[str, Any], where: str,
                     on_change: Callable[[dict[str, Any]], None] | None,
                     live_check: Callable[[dict[str, Any]], str | None] | None
                     ) -> Callable[[list], Any]:
    """The node's on-set callback: validates a live change, applies it to ``params`` in place
    and tells ``on_change``; refuses (and undoes) what fails."""
    from rcl_interfaces.msg import SetParametersResult

    names = {param.name for param in spec}

    def on_set(changes: list) -> Any:
        refused = [c.reason for c in changes if isinstance(c, _RefusedChange)]
        if refused:
            return SetParametersResult(successful=False, reason=refused[0])
        changed = {p.name: p.value for p in changes if p.name in names}
        try:
            checked = validate({**params, **changed}, spec, where=where)
        except ParameterError as err:
            return SetParametersResult(successful=False, reason=str(err))
        reason = live_check(checked) if live_check is not None else None
        if reason:
            return SetParametersResult(successful=False, reason=f"{where}: {reason}")
        previous = {name: params[name] for name in changed}
        params.update({name: checked[name] for name in changed})
        if changed and on_change is not None:
            try:
                on_change(changed)
            except Exception as err:  # raised in the services callback, it would end the
                params.update(previous)  # executor: refused, the node carries on as it was
                node.get_logger().error(f"applying {', '.join(sorted(changed))} failed: {err}")
                return SetParametersResult(
                    successful=False, reason=f"{where}: {', '.join(map(repr, sorted(changed)))} "
                    f"could not be applied ({type(err).__name__}: {err}); the node keeps its "
                    "previous values")
        return SetParametersResult(successful=True)

    return on_set


class _RefusedChange(Parameter):
    """A change crossspec refused, standing in a set_parameters list as the parameter's
    current value; ``reason`` is what on_set answers."""

    def __init__(self, current: Parameter, reason: str) -> None:
        super().__init__(current.name, current.type_, current.value)
        self.reason = reason


def descriptor(param: Param, final: bool = True) -> Any:
    """The ROS ParameterDescriptor of ``param``: its doc and requirement, then (``final``)
    its type, whether it is read-only and its range. Not final: dynamically typed, so that
    rclpy takes whatever value the node was started with and crossspec's check judges it."""
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

    out = ParameterDescriptor(description=param.doc, read_only=final and not param.live,
                              additional_constraints=param.requirement)
    if not final:
        out.dynamic_typing = True
        return out
    out.type = Parameter.Type.from_parameter_value(param.default).value
    bounds = param.range
    if bounds is not None and param.type is int:
        out.integer_range = [IntegerRange(from_value=int(bounds[0]), to_value=int(bounds[1]),
                                          step=1)]
    elif bounds is not None:
        out.floating_point_range = [FloatingPointRange(from_value=float(bounds[0]),
                                                       to_value=float(bounds[1]), step=0.0)]
    return out


def steady_timer(node: Node, period_s: float, callback: Callable[[], None]) -> Any:
    """A timer on the steady clock: window closing, expiry and diagnostics keep running when
    /clock stops (a bag player paused or ended under ``use_sim_time``), where a timer on the
    node's own clock would stop with it."""
    return node.create_timer(period_s, callback, clock=Clock(clock_type=ClockType.STEADY_TIME))


class ClockFollow:
    """Whether a node should run on /clock (``use_sim_time``), from whether anyone publishes
    it: at once when a publisher appears, and only after ``grace_s`` without one when it goes
    (a looping player re-creating its publisher must not flap the node's clock)."""

    def __init__(self, grace_s: float = 5.0) -> None:
        self.grace_s = grace_s
        self.on_clock = False
        self._silent_since: float | None = None

    def update(self, clock_published: bool, now: float) -> bool | None:
        """The new ``use_sim_time`` when it should change now, else None."""
        if clock_published:
            self._silent_since = None
            if not self.on_clock:
                self.on_clock = True
                return True
            return None
        if not self.on_clock:
            return None
        if self._silent_since is None:
            self._silent_since = now
        if now - self._silent_since >= self.grace_s:
            self.on_clock, self._silent_since = False, None
            return False
        return None


def follow_clock(node: Any) -> Callable[[], None]:
    """A timer callback that keeps ``node``'s ``use_sim_time`` following /clock
    (``ClockFollow``; parameter follow_clock), saying so in the log at every change."""
    import time

    follow = ClockFollow()

    def tick() -> None:
        # the clock the node's time source follows: /clock, or its namespace's under the
        # remapping /clock:=clock (two robots replaying on one domain)
        clock = node.resolve_topic_name("/clock")
        wanted = follow.update(node.count_publishers(clock) > 0, time.monotonic())
        if wanted is None:
            return
        node.set_parameters([Parameter("use_sim_time", value=wanted)])
        node.get_logger().info(f"{clock} is published: use_sim_time true (a bag is replayed)"
                               if wanted else f"{clock} has stopped: use_sim_time false")

    return tick


def sensor_qos(depth: int) -> QoSProfile:
    """Camera inputs: best effort (matches both reliable and best-effort publishers), a queue
    deep enough for a burst of event packets."""
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.BEST_EFFORT)


# crossspec's own topics carry ~25 messages per window (a caption per draft revision and per
# verification round): a writer keeps this many for readers it cannot reach, so a link that
# drops for up to ~20 s (edge-cloud split) loses none, and a reader keeps as many to take the
# burst that follows. With 50, a 3 s outage lost a window's UNVERIFIED caption (bench split).
OUTAGE_DEPTH = 500


def reliable_qos(depth: int = OUTAGE_DEPTH) -> QoSProfile:
    """crossspec's own topics: every token message matters (a lost draft only costs speed,
    a lost confirmation would leave a caption unfinished)."""
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE)


def latched_qos() -> QoSProfile:
    """The latest value of a topic for late joiners: reliable, transient local, depth 1."""
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)


def ns_to_msg(t_ns: int) -> Time:
    sec, nanosec = split_ns(t_ns)
    return Time(sec=sec, nanosec=nanosec)


def msg_to_ns(t: Any) -> int:
    return join_ns(t.sec, t.nanosec)


def _f(x: float) -> float:
    return float(x) if x == x else math.nan


def stats_msg(stats: WindowStats, prefill_slowdown: float = math.nan) -> Any:
    """crossspec/WindowStats from the engine's per-window statistics."""
    names = list(stats.proposer_names)
    return cs_msg.WindowStats(
        rounds=stats.rounds, proposed=stats.total_proposed, accepted=stats.total_accepted,
        acceptance=_f(stats.acceptance), acceptance_rule=stats.acceptance_rule,
        mean_accepted_length=_f(stats.mean_accepted_length),
        proposer_names=names,
        proposer_proposed=[stats.proposed.get(n, 0) for n in names],
        proposer_accepted=[stats.accepted.get(n, 0) for n in names],
        verifier_prefill_ms=_f(stats.verifier_prefill_ms), prefill_slowdown=_f(prefill_slowdown),
        draft_first_token_ms=_f(stats.draft_first_token_ms),
        draft_done_ms=_f(stats.draft_done_ms),
        confirmed_first_ms=_f(stats.confirmed_first_ms),
        confirmed_done_ms=_f(stats.confirmed_done_ms))


def caption_msg(caption: WindowCaption) -> Any:
    """crossspec/Caption for one window's caption (header stamp left to the publisher)."""
    return cs_msg.Caption(
        window_id=caption.window_id, epoch=caption.epoch,
        window_start=ns_to_msg(caption.t0), window_end=ns_to_msg(caption.t1),
        status=int(caption.status), confirmed_text=caption.confirmed_text,
        unconfirmed_text=caption.unconfirmed_text, draft_text=caption.draft_text,
        draft_first_token_ms=caption.draft_first_token_ms,
        draft_done_ms=caption.draft_done_ms, confirmed_first_ms=caption.confirmed_first_ms,
        confirmed_done_ms=caption.confirmed_done_ms, acceptance=caption.acceptance,
        unverified_reason=int(caption.unverified_reason), draft_state=int(caption.draft_state),
        acceptance_rule=caption.acceptance_rule)


def diagnostics(node: Node, name: str, values: dict[str, Any], level: int = 0,
                message: str = "ok") -> DiagnosticArray:
    """One DiagnosticArray with a status named ``name`` holding ``values``."""
    return diagnostic_array(node, [(name, values, level, message)])


def diagnostic_array(node: Node, statuses: list[tuple[str, dict[str, Any], int, str]]
                     ) -> DiagnosticArray:
    """One DiagnosticArray with a status per (name, values, level, message)."""
    array = DiagnosticArray(status=[
        DiagnosticStatus(level=bytes([level]), name=name, message=message,
                         hardware_id=node.get_fully_qualified_name(),
                         values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])
        for name, values, level, message in statuses])
    array.header.stamp = node.get_clock().now().to_msg()
    return array


def init_once(args: list[str] | None = None) -> None:
    """rclpy.init unless already initialised (composed mode starts several nodes)."""
    if not rclpy.ok():
        rclpy.init(args=args)


__all__ = ["ParameterError", "declare_params"]
