"""The crossspec/CaptionWindow action: "caption the next window" (or the window holding a
time), with the window's captions as feedback and its last caption as the result, like
llama_ros's GenerateResponse.

Served by the verifier node, which owns the caption protocol: every caption it publishes is
also offered to the goals waiting for that window. Goals run as coroutines on the executor
(the single-threaded EventsExecutor is never blocked); captions cross from the worker thread
through a locked queue that an executor timer drains, so every rclpy Future is touched by
the executor thread only.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from crossspec.action import CaptionWindow
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.task import Future

from crossspec_ros.nodes.common import msg_to_ns
from crossspec_ros.stamps import seconds_to_ns
from crossspec_ros.sync.captions import CaptionStatus
from crossspec_ros.sync.window import window_id

DEFAULT_TIMEOUT_S = 30.0
TERMINAL = (int(CaptionStatus.FINAL), int(CaptionStatus.UNVERIFIED))
REMEMBERED_FINALS = 64  # finished captions kept to answer a goal for a past window at once
REMEMBERED_WINDOWS = 4096  # windows whose first caption was seen (a "next window" goal's test)

WindowKey = tuple[int, int]  # (epoch, window id): a replayed or looped bag repeats its ids


@dataclass
class _Watch:
    """One goal: which window it wants and the captions that came for it. Windows are told
    apart by epoch too: a second replay of a bag (or a loop) repeats the window ids."""

    target: int | None     # window id; None: the first window first seen after acceptance
    epoch: int             # captions of earlier epochs are another pass's
    after_seq: int         # with target None: windows first seen before this are not next
    deadline: float
    captions: deque = field(default_factory=deque)
    wake: Future | None = None
    cancel: bool = False
    done: Any = None       # the window was captioned before the goal came: its caption
    bound: bool = False    # ``epoch`` is its window's (once its first caption came)

    def wants(self, caption: Any, first_seen: int) -> bool:
        """Whether ``caption`` is of this goal's window (``first_seen``: the order in which
        its window's first caption came). The first pass of the window heard from the goal's
        epoch on is the goal's; a later pass repeating its id is not."""
        epoch, wid = int(caption.epoch), int(caption.window_id)
        if epoch < self.epoch or (self.bound and epoch != self.epoch):
            return False
        if self.target is None:
            if first_seen < self.after_seq:
                return False  # known before the goal: not the next window
            self.target = wid
        if wid != self.target:
            return False
        self.epoch, self.bound = epoch, True
        return True


class CaptionWindowServer:
    """The action server on ``node`` (a VerifierNode); ``offer`` is called with every
    published Caption, from any thread."""

    def __init__(self, node: Any, name: str, window_length_s: float) -> None:
        self.node = node
        self.window_len_ns = seconds_to_ns(window_length_s)
        self._lock = threading.Lock()
        self._watches: dict[bytes, _Watch] = {}  # by goal id
        self._finals: OrderedDict[WindowKey, Any] = OrderedDict()
        self._first_seen: OrderedDict[WindowKey, int] = OrderedDict()  # window -> its order
        self._seen = 0  # windows first seen so far
        self._epoch = 0  # the newest epoch a caption came in
        # A goal watches from its goal callback on, before the client hears "accepted": a
        # caption published right after acceptance (before the goal executes) is not missed.
        # rclpy runs a request's goal callback and its accepted callback with nothing in
        # between on the executor, so one slot carries the watch from one to the other.
        self._accepting: _Watch | None = None
        self.server = ActionServer(node, CaptionWindow, name, execute_callback=self._execute,
                                   goal_callback=self._accept,
                                   handle_accepted_callback=self._accepted,
                                   cancel_callback=self._cancel)
        self.timer = node.add_timer(0.05, self._wake_goals)

    def offer(self, caption: Any) -> None:
        with self._lock:
            key = (int(caption.epoch), int(caption.window_id))
            self._epoch = max(self._epoch, key[0])
            first_seen = self._first_seen.get(key)
            if first_seen is None:
                first_seen = self._first_seen[key] = self._seen
                self._seen += 1
                while len(self._first_seen) > REMEMBERED_WINDOWS:
                    self._first_seen.popitem(last=False)
            if caption.status in TERMINAL:
                self._finals[key] = caption
                while len(self._finals) > REMEMBERED_FINALS:
                    self._finals.popitem(last=False)
            watches = list(self._watches.values())
            if self._accepting is not None:
                watches.append(self._accepting)
            for watch in watches:
                if watch.done is None and watch.wants(caption, first_seen):
                    watch.captions.append(caption)

    def destroy(self) -> None:
        self.server.destroy()

    # ------------------------------------------------------------ executor thread
    def _cancel(self, goal_handle: Any) -> CancelResponse:
        with self._lock:
            watch = self._watches.get(_goal_key(goal_handle))
            if watch is not None:
                watch.cancel = True  # seen by the goal at its next wake-up
        return CancelResponse.ACCEPT

    def _wake_goals(self) -> None:
        now = time.monotonic()
        with self._lock:
            ready = [w.wake for w in self._watches.values()
                     if w.wake is not None and not w.wake.done()
                     and (w.captions or w.cancel or now > w.deadline)]
        for future in ready:
            future.set_result(True)

    def _accept(self, goal: Any) -> GoalResponse:
        timeout = goal.timeout_s if goal.timeout_s > 0 else DEFAULT_TIMEOUT_S
        stamp = msg_to_ns(goal.stamp)
        target = window_id(stamp, self.window_len_ns) if stamp else None
        with self._lock:  # a window of the newest pass: an earlier pass's is not its caption
            self._accepting = _Watch(target, self._epoch, self._seen,
                                     time.monotonic() + timeout,
                                     done=self._finals.get((self._epoch, target))
                                     if target is not None else None)
        return GoalResponse.ACCEPT

    def _accepted(self, goal_handle: Any) -> None:
        with self._lock:
            watch, self._accepting = self._accepting, None
            if watch is not None:
                self._watches[_goal_key(goal_handle)] = watch
        goal_handle.execute()

    async def _execute(self, goal_handle: Any) -> Any:
        with self._lock:
            watch = self._watches.get(_goal_key(goal_handle))
        if watch is None:  # not accepted through _accept (cannot happen with rclpy's order)
            goal_handle.abort()
            return CaptionWindow.Result(success=False, message="goal not registered")
        try:
            if watch.done is not None:  # that window is already captioned
                goal_handle.succeed()
                return CaptionWindow.Result(caption=watch.done, success=True)
            return await self._follow(goal_handle, watch)
        finally:
            with self._lock:
                self._watches.pop(_goal_key(goal_handle), None)

    async def _follow(self, goal_handle: Any, watch: _Watch) -> Any:
        while True:
            with self._lock:
                captions = list(watch.captions)
                watch.captions.clear()
            for caption in captions:
                if caption.status in TERMINAL:
                    goal_handle.succeed()
                    return CaptionWindow.Result(caption=caption, success=True)
                goal_handle.publish_feedback(CaptionWindow.Feedback(caption=caption))
            if watch.cancel or goal_handle.is_cancel_requested:
                goal_handle.canceled()
                return CaptionWindow.Result(success=False, message="canceled")
            if time.monotonic() > watch.deadline:
                goal_handle.abort()
                which = f"window {watch.target}" if watch.target is not None else "a window"
                return CaptionWindow.Result(
                    success=False, message=f"no caption for {which} within the timeout: is "
                    "the camera (or bag) publishing, and the verifier node active?")
            with self._lock:
                watch.wake = Future()
                wake = watch.wake
            await wake


def _goal_key(goal_handle: Any) -> bytes:
    return bytes(goal_handle.goal_id.uuid)
