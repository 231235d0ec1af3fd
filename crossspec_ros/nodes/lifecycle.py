"""The lifecycle every crossspec node follows (ROS 2 managed nodes, as ros2/demos lifecycle_py).

    unconfigured --configure--> inactive --activate--> active
                 <--cleanup---           <--deactivate--

- constructor: parameters only (declared and checked; cheap, nothing loads);
- ``configure``: models load, publishers, subscriptions and timers are created;
- ``activate``: model workers start; inputs are taken from now on;
- ``deactivate``: workers stop (the window in progress ends first), inputs are ignored;
- ``cleanup``: everything ``configure`` made is destroyed and the models are let go.

Subclasses implement ``configure_node``, ``start``, ``stop`` and ``release``, and create their
ROS entities with ``add_publisher`` / ``add_subscription`` / ``add_timer`` so cleanup finds
them. ``bring_up`` is what ``crossspec node``, ``crossspec drive`` and composed mode call;
``ros2 lifecycle set`` and launch drive the same transitions from outside.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

from crossspec_ros.nodes.common import steady_timer
from crossspec_ros.process_tuning import settle_heap

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
ASK_AGAIN_S = 5.0  # wait_until_active: a get_state request unanswered this long is sent again


class NodeStartError(RuntimeError):
    """A node could not be configured or activated; the message says why."""


class ManagedNode(LifecycleNode):
    """See the module docstring."""

    # until __init__ sets them: a Ctrl-C can land between the node joining its context and
    # those lines, and rclpy.shutdown then destroys the half-made node (it raised
    # AttributeError there, and the process exited 1)
    active = False
    configured = False

    def __init__(self, node_name: str, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.active = False
        self.configured = False  # configure ran (maybe in part) and cleanup did not yet
        self.failure: BaseException | None = None  # why the last configure or activate failed
        self.failed_transition = ""  # which of them: "configure" or "activate"
        self.callback_errors = 0  # exceptions caught in its callbacks (``_guarded``)
        self.configuring = False  # in ``configure`` now (loading models, compiling)
        self.shutting_down = False  # in the shutdown transition: nothing published after it
        self.finalized = False  # shut down: the node is done for good
        self._entities: list[tuple[Callable[[Any], Any], Any]] = []

    # ------------------------------------------------------------ for subclasses
    def configure_node(self) -> None:
        """Load models, create publishers, subscriptions and timers."""

    def start(self) -> None:
        """Start the workers (activate)."""

    def stop(self) -> None:
        """Stop the workers; return once they are stopped (deactivate)."""

    def release(self) -> None:
        """Let go of what ``configure_node`` loaded beyond ROS entities (cleanup)."""

    def publish_last(self) -> None:
        """Shutting down: publish what is still open, nothing comes after (the verifier's
        windows waiting for their drafts end UNVERIFIED now)."""

    def add_publisher(self, *args: Any, **kwargs: Any) -> Any:
        return self._keep(self.destroy_publisher, self.create_publisher(*args, **kwargs))

    def add_subscription(self, msg_type: Any, topic: str, callback: Callable[[Any], None],
                         *args: Any, **kwargs: Any) -> Any:
        return self._keep(self.destroy_subscription, self.create_subscription(
            msg_type, topic, self._guarded(callback, f"a message on {topic}"), *args,
            **kwargs))

    def add_timer(self, period_s: float, callback: Callable[[], None]) -> Any:
        """A steady-clock timer (see ``steady_timer``)."""
        name = getattr(callback, "__name__", "callback")
        return self._keep(self.destroy_timer, steady_timer(
            self, period_s, self._guarded(callback, f"timer {name}", takes_message=False)))

    def _guarded(self, callback: Callable[..., None], what: str, takes_message: bool = True
                 ) -> Callable[..., None]:
        """``callback`` that logs and counts (``callback_errors``) what it raises instead of
        raising it: an exception leaving a callback ends the executor's spin, and with it
        every node of the process (one odd message must not stop the graph)."""

        def failed(err: Exception) -> None:
            self.callback_errors += 1
            self.get_logger().error(
                f"handling {what} failed ({where_raised(err)}): {type(err).__name__}: {err}; "
                f"the node carries on ({self.callback_errors} such errors so far)",
                throttle_duration_sec=5.0)

        # two fixed signatures: rclpy hands a timer callback that takes an argument a TimerInfo
        def guarded_message(msg: Any) -> None:
            try:
                callback(msg)
            except Exception as err:
                failed(err)

        def guarded_timer() -> None:
            try:
                callback()
            except Exception as err:
                failed(err)

        return guarded_message if takes_message else guarded_timer

    def _keep(self, destroy: Callable[[Any], Any], entity: Any) -> Any:
        self._entities.append((destroy, entity))
        return entity

    # ------------------------------------------------------------ transitions
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.failure, self.failed_transition = None, ""
        self.configured = self.configuring = True
        # loading and compiling can take minutes: say it began (a signal stops it)
        self.get_logger().info("configuring: loading and preparing the models")
        try:
            self.configure_node()
        except Exception as err:  # a model that does not load: the node stays unconfigured
            self.failure, self.failed_transition = err, "configure"
            self.get_logger().error(f"configure failed: {err}")
            self._release_all()
            return FAILURE
        except KeyboardInterrupt as interrupt:  # a signal cut the loading short (`crossspec
            # node`): answered here, it does not leave the executor's callback as an error
            self.failure = interrupt
            self.get_logger().info("configure interrupted by a signal: stopping")
            self._release_all()
            return FAILURE
        finally:
            self.configuring = False
        settle_heap()  # the models just loaded stay out of the collector's full walks
        return SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.failure, self.failed_transition = None, ""
        try:
            self.start()
        except Exception as err:  # rclpy would turn it into an ERROR that silently ends
            # the node unconfigured: it stays inactive instead, saying why
            self.failure, self.failed_transition = err, "activate"
            self.get_logger().error(f"activate failed: {err}")
            try:
                self.stop()  # what did start is stopped again
            except Exception as also:
                self.get_logger().error(f"stopping after the failed activate: {also}")
            return FAILURE
        self.active = True
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        self.stop()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_all()
        return SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        # nothing is published after this transition: the open work is said now, and the
        # process that runs the node ends once every node of it is finalized (node_cmd)
        self.shutting_down = True
        if self.active:
            self.active = False
            self.stop()
        if self.configured:
            self.publish_last()
        self._release_all()
        self.finalized = True
        return SUCCESS

    def destroy_node(self) -> None:
        self._stop_and_release()
        super().destroy_node()

    def _stop_and_release(self) -> None:
        if self.active:
            self.active = False
            self.stop()
        self._release_all()

    def _release_all(self) -> None:
        if not self.configured:
            return  # e.g. the constructor failed on a parameter: nothing was made
        self.configured = False
        for destroy, entity in reversed(self._entities):
            destroy(entity)
        self._entities.clear()
        self.release()
        settle_heap()  # model tensors go now, not at the next collection
        _empty_cuda_cache()


def where_raised(err: BaseException) -> str:
    """file:line of the innermost frame ``err`` was raised in (one line, for logs)."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return "unknown place"
    last = frames[-1]
    return f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name}"


def bring_up(node: ManagedNode, activate: bool = True) -> ManagedNode:
    """Configure (and activate) ``node``; raises what made configure fail (KeyboardInterrupt
    when a signal cut it short)."""
    if node.trigger_configure() != SUCCESS:
        failure = node.failure
        if failure is not None:
            raise failure
        raise NodeStartError(f"node '{node.get_name()}' could not be configured")
    if activate and node.trigger_activate() != SUCCESS:
        why = f": {node.failure}" if node.failure is not None else ""
        raise NodeStartError(f"node '{node.get_name()}' could not be activated{why}")
    return node


def _empty_cuda_cache() -> None:
    import sys

    torch = sys.modules.get("torch")  # only if a model was ever loaded
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def wait_until_active(client: Any, names: list[str], spin_once: Callable[[float], None],
                      timeout_s: float, report: Callable[[str], None] | None = None) -> None:
    """Spin until every lifecycle node in ``names`` (a relative name resolved in
    ``client``'s namespace, an absolute one as it is) answers ``get_state`` with active;
    raises NodeStartError naming the late ones after ``timeout_s``. What `crossspec play
    --wait-active` does before the first message."""
    import time

    from lifecycle_msgs.msg import State
    from lifecycle_msgs.srv import GetState

    clients = {name: client.create_client(GetState, f"{name.rstrip('/')}/get_state")
               for name in names}
    waiting, pending = set(names), {}
    deadline = time.monotonic() + timeout_s
    next_report = 0.0
    try:
        while waiting:
            for name in list(waiting):
                future, asked_at = pending.get(name, (None, 0.0))
                if future is None and clients[name].service_is_ready():
                    pending[name] = (clients[name].call_async(GetState.Request()),
                                     time.monotonic())
                elif future is not None and future.done():
                    del pending[name]
                    result = future.result()
                    if result is not None and \
                            result.current_state.id == State.PRIMARY_STATE_ACTIVE:
                        waiting.discard(name)
                elif future is not None and time.monotonic() - asked_at > ASK_AGAIN_S:
                    # a request sent as discovery was still matching can be lost for good
                    # (seen under load): ask again rather than wait for it to the deadline
                    clients[name].remove_pending_request(future)
                    del pending[name]
            now = time.monotonic()
            if waiting and now > deadline:
                raise NodeStartError(f"not active after {timeout_s:g} s: "
                                     f"{', '.join(sorted(waiting))}")
            if waiting and report is not None and now >= next_report:
                report(f"waiting for {', '.join(sorted(waiting))} to become active")
                next_report = now + 10.0
            if waiting:
                spin_once(0.1)
    finally:
        for c in clients.values():
            client.destroy_client(c)
