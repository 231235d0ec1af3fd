"""The drafter's side of a window: decode a speculative caption, re-sync after rejections.

A ``DraftChannel`` is all the drafter and the verifier share for one window. In one process
(the engine, composed nodes) both sides touch it directly; across processes the draft node
feeds it confirmed tokens from a topic and the verifier node feeds it draft tokens from a
topic, so the same loop serves both modes.

``run_drafter`` is the drafter's loop: prefill on the events, greedy-decode draft tokens and
announce each, and whenever the verifier confirms tokens that disagree with the draft, roll
the drafter's cache back to the agreeing prefix, feed the confirmed correction and keep
drafting from there.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import torch

from crossspec_ros.models.base import CaptionModel, ModelSession
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.speculative.stats import WindowStats


class DraftChannel:
    """The draft of one window and the confirmed tokens the drafter re-syncs to.

    All fields are guarded by ``cond``. Token lists are in the *drafter's* ids; a verifier
    with another vocabulary converts before ``push_confirmed`` (see the engine's bridge).
    """

    def __init__(self, lookahead: int = 0) -> None:
        self.cond = threading.Condition()
        self.session: ModelSession | None = None  # the drafter's, once prefilled (local only)
        self.tokens: list[int] = []      # the draft, caption positions 0..
        self.log_probs: list[float] = []  # drafter log-probability per token (NaN: a
        # confirmed token the drafter took over on a re-sync rather than drafted)
        self.revision = 0                # +1 whenever draft tokens were replaced
        self.done = False                # the drafter finished (EOS, length limit or error)
        self.confirmed: list[int] = []   # confirmed caption in drafter ids, for re-sync
        self.confirmed_version = 0
        self.stopped = False
        # How far past the confirmed caption the drafter may run: free while the verifier is
        # in its prefill, afterwards what the verifier would propose (0 pauses the drafter).
        self.lookahead = lookahead
        # the drafter's view of the window (a draft head's input), once its prefill made it
        self.window_state: torch.Tensor | None = None

    # ------------------------------------------------------------ verifier side
    def snapshot(self) -> tuple[list[int], bool]:
        """(draft tokens, drafter done) as of now."""
        with self.cond:
            return list(self.tokens), self.done

    def push_confirmed(self, confirmed_draft_ids: list[int], lookahead: int | None = None
                       ) -> None:
        """The confirmed caption so far (drafter ids): the drafter re-syncs to it."""
        with self.cond:
            self.confirmed = list(confirmed_draft_ids)
            self.confirmed_version += 1
            if lookahead is not None:
                self.lookahead = lookahead
            self.cond.notify_all()

    def set_draft(self, tokens: list[int], revision: int, done: bool) -> None:
        """Replace the draft with one received from elsewhere (a remote draft node).

        Older revisions than the one held are ignored: messages may arrive out of order.
        """
        with self.cond:
            if revision < self.revision:
                return
            self.tokens, self.revision, self.done = list(tokens), revision, done
            self.cond.notify_all()

    def set_lookahead(self, lookahead: int) -> None:
        """How far past the confirmed caption the drafter may run from now on (0 pauses it,
        before its prefill too: ``VerifierFirst``)."""
        with self.cond:
            self.lookahead = lookahead
            self.cond.notify_all()

    def set_window_state(self, state: torch.Tensor | None) -> None:
        """The drafter's window state (from its prefill here, or from a draft node)."""
        with self.cond:
            self.window_state = state
            self.cond.notify_all()

    def wait_window_state(self) -> torch.Tensor | None:
        """The drafter's window state once there; None if the window ends (``stop``) or the
        drafter finishes without one (a draft node that does not publish it)."""
        with self.cond:
            while self.window_state is None and not self.stopped and not self.done:
                self.cond.wait()
            return self.window_state

    def stop(self) -> None:
        """End the drafter's loop for this window (the verifier is done, or a newer window
        needs the drafter)."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


def run_drafter(drafter: CaptionModel, window: Any, channel: DraftChannel,
                emit: Callable[..., EngineEvent], stats: WindowStats, max_new_tokens: int
                ) -> None:
    """The drafter's loop for one window; returns when the channel is stopped.

    Never raises: a failing drafter is reported (DRAFT_ERROR) and marks the draft done, so the
    verifier goes on alone and its output stays exactly its own.
    """
    try:
        _draft(drafter, window, channel, emit, stats, max_new_tokens)
    except Exception as err:
        emit(EventKind.DRAFT_ERROR, text=f"{type(err).__name__}: {err}")
    finally:
        with channel.cond:
            channel.done = True
            channel.cond.notify_all()


def _draft(drafter: CaptionModel, window: Any, channel: DraftChannel,
           emit: Callable[..., EngineEvent], stats: WindowStats, max_new_tokens: int) -> None:
    info = drafter.info
    with channel.cond:  # a paused drafter does not start its prefill either
        while channel.lookahead <= 0 and not channel.stopped:
            channel.cond.wait()
        if channel.stopped:
            return
    session = drafter.prefill(drafter.prepare(window))
    channel.session = session
    channel.set_window_state(getattr(session, "window_state", None))
    logits = session.last_logits
    seen_version = 0
    while True:
        with channel.cond:
            while not channel.stopped and not _has_work(channel, seen_version, max_new_tokens):
                channel.cond.wait()
            if channel.stopped:
                return
            version, confirmed = channel.confirmed_version, list(channel.confirmed)
        if version != seen_version:
            seen_version = version
            resynced = _resync(drafter, session, channel, confirmed)
            if resynced is not None:
                logits = resynced
            continue  # re-check the budget with the re-synced draft
        token = draft_token(logits, info)
        log_prob = float(torch.log_softmax(logits.float(), dim=-1)[token])
        with channel.cond:
            channel.tokens.append(token)
            channel.log_probs.append(log_prob)
            # finished at EOS or at the length limit (a caption cut by the limit is whole)
            channel.done = token == info.eos_token_id or len(channel.tokens) >= max_new_tokens
            tokens, revision, done = list(channel.tokens), channel.revision, channel.done
            log_probs = list(channel.log_probs)
            channel.cond.notify_all()
        text = drafter.tokenizer.decode(tokens, skip_special_tokens=True)
        event = emit(EventKind.DRAFT, tokens=tokens, revision=revision, done=done, text=text,
                     log_probs=log_probs)
        if stats.draft_first_token_ms != stats.draft_first_token_ms:  # NaN: the first one
            # (not "len(tokens) == 1": a re-sync may have taken over confirmed tokens first)
            stats.draft_first_token_ms = event.t_ms
        if done:
            if stats.draft_done_ms != stats.draft_done_ms:  # NaN: first time
                stats.draft_done_ms = event.t_ms
            continue  # nothing more to draft: no need for the next logits
        logits = session.feed([token])[-1]


def _has_work(channel: DraftChannel, seen_version: int, max_new_tokens: int) -> bool:
    """Called under the channel lock. With no budget the drafter pauses entirely (not even
    re-syncing): its work would only compete with the verifier."""
    if channel.lookahead <= 0:
        return False
    if channel.confirmed_version != seen_version:
        return True
    ahead = len(channel.tokens) - len(channel.confirmed)
    return (not channel.done and ahead < channel.lookahead
            and len(channel.tokens) < max_new_tokens)


def _resync(drafter: CaptionModel, session: ModelSession, channel: DraftChannel,
            target: list[int]) -> torch.Tensor | None:
    """Roll the draft back to agree with the confirmed caption; new logits or None."""
    with channel.cond:
        draft = list(channel.tokens)
    common = 0
    # tokens the session has consumed (a final EOS or the last allowed token is not fed)
    limit = min(len(draft), len(target), session.n_generated)
    while common < limit and draft[common] == target[common]:
        common += 1
    if common == len(target):
        return None  # the confirmed caption is a prefix of the draft: nothing to do
    # Roll back to the agreeing prefix and feed the rest of the confirmed caption (the
    # correction, or tokens the verifier confirmed beyond the draft) in one forward.
    session.rollback(common)
    logits = session.feed(target[common:])[-1]
    with channel.cond:
        if common < len(draft):  # tokens were replaced: a new revision of the draft
            channel.revision += 1
        channel.tokens = list(target)
        kept = channel.log_probs[:common]  # drafted and confirmed: the drafter's own
        channel.log_probs = kept + [math.nan] * (len(target) - len(kept))
        channel.done = bool(target) and target[-1] == drafter.info.eos_token_id
    return logits


def draft_token(logits: torch.Tensor, info: Any) -> int:
    """Greedy draft token among ids the verifier may see (plus the drafter's EOS)."""
    allowed = logits[: info.proposable_ids]
    token = int(torch.argmax(allowed))
    eos = info.eos_token_id
    if eos >= info.proposable_ids and logits[eos] > allowed[token]:
        return eos
    return token
