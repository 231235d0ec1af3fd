"""The speculative engine: one window in, a draft caption at once and the verifier's own
caption sooner.

The whole loop, readable in one sitting:

  drafter thread                         verifier thread (the caller's worker)
  --------------                         -------------------------------------
  prepare + prefill (events)             prepare + prefill (8 RGB frames: the long part)
  greedy-decode draft tokens, publish    token 0 = verifier's own first token
  each one (the speculative caption)     loop: pick the proposer that pays best
  on a re-sync request: roll back to           (draft stream, draft n-gram, history n-gram)
  the confirmed prefix + correction,         feed [pending, p1..pg] in ONE forward
  keep drafting                              accept by the rule (greedy / sampling),
                                             publish confirmed tokens, roll back the cache
                                             past the accepted prefix, ask the drafter to
                                             re-sync if it disagreed

Losslessness does not depend on the proposals: every confirmed token is either a proposal the
verification rule accepted or the verifier's own token, so the output equals the verifier's
plain decoding (greedy) or its sampling distribution (sampling).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from crossspec_ros.models.base import CaptionModel, ModelSession
from crossspec_ros.speculative.adaptive import (
    AcceptanceTracker,
    CostModel,
    best_proposal_length,
    expected_tokens,
)
from crossspec_ros.speculative.drafting import DraftChannel, run_drafter
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.speculative.proposers import DraftStreamProposer, NgramProposer
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.verify import sample_token, verify_greedy, verify_sampling
from crossspec_ros.speculative.vocab import SharedVocabulary, TextBridge

EXPLORE_EVERY = 6            # plain rounds in a row before a short probing proposal
EXPLORE_LENGTH = 2           # tokens in a probing proposal; also the least draft lookahead
MIN_DRAFT_ACCEPTANCE = 0.1   # below this per-token acceptance the drafter pauses


@dataclass
class EngineConfig:
    """How the engine decodes and proposes (validated in __post_init__)."""

    max_new_tokens: int = 48
    mode: str = "greedy"                 # "greedy" or "sampling"
    temperature: float = 1.0             # sampling only
    seed: int = 0                        # sampling only: per-window generator seed base
    max_proposal: int = 8                # longest proposal per round
    adaptive: bool = True                # choose proposal length from acceptance and cost
    proposers: tuple[str, ...] = ("draft_stream", "draft_ngram", "history_ngram")
    history_windows: int = 4             # previous confirmed captions searched by n-gram
    ngram_max: int = 4
    draft_lookahead: int = 48            # how far the drafter runs ahead during the prefill
    keep_sessions: bool = False          # keep both KV caches on the result (tests, debugging)

    def __post_init__(self) -> None:
        if self.mode not in ("greedy", "sampling"):
            raise ValueError(f"mode must be 'greedy' or 'sampling', got '{self.mode}'")
        if self.mode == "sampling" and self.temperature <= 0:
            raise ValueError("sampling needs temperature > 0")
        if self.max_new_tokens < 1 or self.max_proposal < 0:
            raise ValueError("max_new_tokens must be >= 1 and max_proposal >= 0")
        unknown = set(self.proposers) - {"draft_stream", "draft_ngram", "history_ngram"}
        if unknown:
            raise ValueError(f"unknown proposers {sorted(unknown)}")


@dataclass
class WindowResult:
    """What a window produced: the verifier's caption, the draft, and the statistics."""

    window_id: int
    tokens: list[int]
    text: str
    draft_tokens: list[int]
    draft_text: str
    stats: WindowStats
    events: list[EngineEvent] = field(default_factory=list)
    sessions: dict[str, ModelSession] = field(default_factory=dict)  # keep_sessions only


class SpeculativeEngine:
    """Runs drafter and verifier on one window at a time; see the module docstring."""

    def __init__(self, verifier: CaptionModel, drafter: CaptionModel | None = None,
                 config: EngineConfig | None = None, remote_drafter: bool = False) -> None:
        """``remote_drafter``: drafts arrive through ``run_window(draft=...)`` from a drafter
        this process does not hold, in the verifier's ids (the EventGPT family shares them)."""
        self.verifier, self.drafter = verifier, drafter
        self.config = config or EngineConfig()
        self.remote_drafter = remote_drafter
        assign_cuda_streams(verifier, drafter)
        self.bridge = self._make_bridge()
        self.history = NgramProposer("history_ngram", max_ngram=self.config.ngram_max,
                                     min_ngram=0, max_sources=self.config.history_windows)
        self.trackers = {name: AcceptanceTracker() for name in self.config.proposers}
        self.cost = CostModel()
        self._plain_streak = 0
        self.last_result: WindowResult | None = None  # of the latest window (run or stream)
        self.current_stats: WindowStats | None = None

    def _make_bridge(self) -> SharedVocabulary | TextBridge | None:
        if self.drafter is None:
            return SharedVocabulary(self.verifier.info.proposable_ids) \
                if self.remote_drafter else None
        if _same_vocabulary(self.drafter, self.verifier):
            return SharedVocabulary(self.verifier.info.proposable_ids)
        return TextBridge(self.drafter.tokenizer, self.verifier.tokenizer,
                          self.verifier.info.proposable_ids)

    # ---------------------------------------------------------------- public API
    def run_window(self, window: Any, on_event: Callable[[EngineEvent], None] | None = None,
                   t_close: float | None = None, draft: DraftChannel | None = None
                   ) -> WindowResult:
        """Decode one window; ``on_event`` sees draft/confirmed events as they happen (from
        the engine's threads). Times are ms after ``t_close`` (time.monotonic(), default now).

        ``draft``: a channel fed by a drafter elsewhere (a draft node); no local drafter runs
        then, and ``self.drafter`` only needs ``tokenizer`` and ``info`` (for bridging).
        """
        t_close = time.monotonic() if t_close is None else t_close
        window_id = int(getattr(window, "id", 0))
        events: list[EngineEvent] = []
        emit = self._emitter(window_id, t_close, events, on_event)
        stats = WindowStats(proposer_names=list(self.config.proposers))
        self.current_stats = stats  # readable while the window runs (nodes report progress)
        channel = draft if draft is not None else DraftChannel(self.config.draft_lookahead)
        drafter_thread = None
        if self.drafter is not None and draft is None:
            drafter_thread = threading.Thread(
                target=run_drafter, name=f"crossspec-drafter-{window_id}", daemon=True,
                args=(self.drafter, window, channel, emit, stats, self.config.max_new_tokens))
            drafter_thread.start()
        sessions: dict[str, ModelSession] = {}
        try:
            tokens = self._verify(window, channel, emit, stats, sessions)
        finally:
            channel.stop()
            if drafter_thread is not None:
                drafter_thread.join()
        text = self.verifier.tokenizer.decode(tokens, skip_special_tokens=True)
        self.history.add_source(_strip_eos(tokens, self.verifier.info.eos_token_id))
        draft_tokens, _ = channel.snapshot()
        draft_text = ""
        if self.bridge is not None:  # remote drafts without a drafter share the verifier's ids
            tokenizer = (self.drafter or self.verifier).tokenizer
            draft_text = tokenizer.decode(draft_tokens, skip_special_tokens=True)
        stats.confirmed_done_ms = (time.monotonic() - t_close) * 1e3
        emit(EventKind.FINAL, tokens=tokens, text=text)
        if channel.session is not None:
            sessions["drafter"] = channel.session
        self.last_result = WindowResult(window_id, tokens, text, draft_tokens, draft_text,
                                        stats, events,
                                        sessions if self.config.keep_sessions else {})
        return self.last_result

    def draft_window(self, window: Any, channel: DraftChannel,
                     on_event: Callable[[EngineEvent], None] | None = None,
                     t_close: float | None = None) -> WindowStats:
        """The drafter alone on one window (a draft node): drafts, re-syncs to whatever the
        caller pushes into ``channel`` (confirmed tokens from a topic), returns once the
        channel is stopped. Runs in the caller's thread."""
        if self.drafter is None:
            raise ValueError("draft_window needs a drafter")
        t_close = time.monotonic() if t_close is None else t_close
        window_id = int(getattr(window, "id", 0))
        stats = WindowStats(proposer_names=["draft_stream"])
        emit = self._emitter(window_id, t_close, [], on_event)
        run_drafter(self.drafter, window, channel, emit, stats, self.config.max_new_tokens)
        return stats

    def confirmed_for_drafter(self, confirmed: list[int], text: str | None = None) -> list[int]:
        """The confirmed caption (verifier ids) in the drafter's ids, for its re-sync."""
        if self.drafter is None or isinstance(self.bridge, SharedVocabulary):
            return list(confirmed)
        if text is None:
            text = self.verifier.tokenizer.decode(confirmed, skip_special_tokens=True)
        return list(self.drafter.tokenizer.encode(text, add_special_tokens=False))

    @staticmethod
    def _emitter(window_id: int, t_close: float, events: list[EngineEvent],
                 on_event: Callable[[EngineEvent], None] | None) -> Callable[..., EngineEvent]:
        lock = threading.Lock()

        def emit(kind: EventKind, **fields: Any) -> EngineEvent:
            event = EngineEvent(kind, window_id, (time.monotonic() - t_close) * 1e3, **fields)
            with lock:
                events.append(event)
                if on_event is not None:
                    on_event(event)
            return event

        return emit

    def stream(self, window: Any, t_close: float | None = None) -> Iterator[EngineEvent]:
        """The same as run_window, as an iterator of events (ends after FINAL)."""
        q: queue.Queue[EngineEvent | BaseException] = queue.Queue()

        def run() -> None:
            try:
                self.run_window(window, on_event=q.put, t_close=t_close)
            except BaseException as err:  # handed to the consumer, raised there
                q.put(err)

        threading.Thread(target=run, name="crossspec-engine", daemon=True).start()
        while True:
            item = q.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.kind is EventKind.FINAL:
                return

    def verifier_only(self, window: Any, max_new_tokens: int | None = None) -> list[int]:
        """The verifier alone, plain decoding (greedy or sampling with the same seed rule)."""
        limit = max_new_tokens or self.config.max_new_tokens
        session = self.verifier.prefill(self.verifier.prepare(window))
        generator = self._generator(window)
        tokens: list[int] = []
        logits = session.last_logits
        while len(tokens) < limit:
            tokens.append(self._own_token(logits, generator))
            if tokens[-1] == self.verifier.info.eos_token_id:
                break
            logits = session.feed([tokens[-1]])[-1]
        return tokens

    # ---------------------------------------------------------------- verifier
    def _verify(self, window: Any, channel: DraftChannel, emit: Callable[..., None],
                stats: WindowStats, sessions: dict[str, ModelSession]) -> list[int]:
        cfg, eos = self.config, self.verifier.info.eos_token_id
        draft_stream = DraftStreamProposer()
        draft_ngram = NgramProposer("draft_ngram", max_ngram=cfg.ngram_max)
        generator = self._generator(window)
        t0 = time.perf_counter()
        inputs = self.verifier.prepare(window)
        t1 = time.perf_counter()
        session = self.verifier.prefill(inputs)
        sessions["verifier"] = session
        stats.verifier_prepare_ms = (t1 - t0) * 1e3
        stats.verifier_prefill_ms = (time.perf_counter() - t1) * 1e3
        emit(EventKind.VERIFIER_PREFILL_DONE, prefill_ms=stats.verifier_prefill_ms)
        # token 0 is the verifier's own: it comes out of the prefill for free
        confirmed = [self._own_token(session.last_logits, generator)]
        self._confirm(confirmed, 0, list(confirmed), channel, emit, stats)
        while confirmed[-1] != eos and len(confirmed) < cfg.max_new_tokens:
            room = cfg.max_new_tokens - len(confirmed)
            name, proposal = self._choose_proposal(confirmed, channel, draft_stream,
                                                   draft_ngram, room)
            # One forward over [pending, p1..pg]: row i is the distribution after
            # confirmed + p1..pi, exactly what the verification rule needs.
            t_round = time.perf_counter()
            rows = session.feed([confirmed[-1], *proposal])
            self.cost.observe(len(proposal) + 1, time.perf_counter() - t_round)
            if cfg.mode == "greedy":
                verdict = verify_greedy(proposal, rows)
            else:
                verdict = verify_sampling(proposal, rows, temperature=cfg.temperature,
                                          generator=generator)
            new = verdict.confirmed(proposal)[:room]
            new = _strip_after_eos(new, eos)
            # the cache holds confirmed + proposal; keep confirmed + accepted ones
            session.rollback(len(confirmed) + verdict.n_accepted)
            stats.record_round(name, len(proposal), verdict.n_accepted)
            if name is not None:
                self.trackers[name].observe(len(proposal), verdict.n_accepted)
            if name != "draft_stream" and "draft_stream" in self.trackers:
                self._judge_unproposed_draft(draft_stream, confirmed, new)
            base = len(confirmed)
            confirmed.extend(new)
            self._confirm(confirmed, base, new, channel, emit, stats)
        return confirmed

    def _choose_proposal(self, confirmed: list[int], channel: DraftChannel,
                         draft_stream: DraftStreamProposer, draft_ngram: NgramProposer,
                         room: int) -> tuple[str | None, list[int]]:
        """The candidate with the best expected tokens per second, or (None, []) = plain."""
        cfg = self.config
        limit = min(cfg.max_proposal, room - 1)
        if limit <= 0:
            return None, []
        candidates: dict[str, list[int]] = {}
        if self.bridge is not None:
            draft, done = channel.snapshot()
            target, base = self.bridge.to_target(draft, confirmed, done)
            if "draft_stream" in self.trackers:
                draft_stream.update(target, base)
                candidates["draft_stream"] = draft_stream.propose(confirmed, limit)
            if "draft_ngram" in self.trackers and target:
                draft_ngram.set_sources([target])
                candidates["draft_ngram"] = draft_ngram.propose(confirmed, limit)
        if "history_ngram" in self.trackers:
            candidates["history_ngram"] = self.history.propose(confirmed, limit)
        best: tuple[str | None, list[int]] = (None, [])
        if not cfg.adaptive:  # the longest proposal; ties go to the earlier proposer
            for name, proposal in candidates.items():
                if len(proposal) > len(best[1]):
                    best = (name, proposal)
            return best
        best_rate = 1.0 / self.cost.predict(1)  # plain decoding: one token per pass
        for name, proposal in candidates.items():
            g = best_proposal_length(self.trackers[name].rate, self.cost, max_len=len(proposal))
            if g == 0:
                continue
            rate = expected_tokens(self.trackers[name].rate, g) / self.cost.predict(g + 1)
            if rate > best_rate:
                best, best_rate = (name, proposal[:g]), rate
        if best[0] is None and self._plain_streak >= EXPLORE_EVERY:
            # Measured costs are noisy (the drafter competes for the device); probe with a
            # short proposal now and then so a wrong estimate cannot shut proposing off.
            name = max(candidates, key=lambda n: (bool(candidates[n]), self.trackers[n].rate))
            if candidates[name]:
                best = (name, candidates[name][:EXPLORE_LENGTH])
        self._plain_streak = 0 if best[0] is not None else self._plain_streak + 1
        return best

    def _confirm(self, confirmed: list[int], base: int, new: list[int], channel: DraftChannel,
                 emit: Callable[..., None], stats: WindowStats) -> None:
        text = self.verifier.tokenizer.decode(confirmed, skip_special_tokens=True)
        event = emit(EventKind.CONFIRMED, base=base, tokens=list(new), text=text,
                     done=confirmed[-1] == self.verifier.info.eos_token_id
                     or len(confirmed) >= self.config.max_new_tokens)
        if base == 0:
            stats.confirmed_first_ms = event.t_ms
        channel.push_confirmed(self.confirmed_for_drafter(confirmed, text),
                               lookahead=self._draft_budget())

    def _judge_unproposed_draft(self, draft: DraftStreamProposer, confirmed: list[int],
                                new: list[int]) -> None:
        """Score the draft on tokens confirmed without it (it was not proposed, or had not
        got there yet), so a drafter that keeps being wrong is noticed and paused."""
        offset = len(confirmed) - draft.base
        if offset < 0 or draft.tokens[:offset] != confirmed[draft.base:]:
            return  # the draft already disagreed earlier: judged then, re-syncing now
        predicted = draft.tokens[offset:offset + len(new)]
        if not predicted:
            return
        matched = 0
        while matched < len(predicted) and predicted[matched] == new[matched]:
            matched += 1
        self.trackers["draft_stream"].observe(len(predicted), matched)

    def _draft_budget(self) -> int:
        """Tokens worth drafting past the confirmed caption: the proposal length the draft
        stream would get now (0 pauses the drafter; it still re-syncs)."""
        if "draft_stream" not in self.trackers:
            return 0
        if not self.config.adaptive:
            return self.config.max_proposal
        rate = self.trackers["draft_stream"].rate
        if rate < MIN_DRAFT_ACCEPTANCE:
            return 0  # the drafter is mostly wrong: pause it
        return max(EXPLORE_LENGTH,
                   best_proposal_length(rate, self.cost, max_len=self.config.max_proposal))

    def _own_token(self, logits: torch.Tensor, generator: torch.Generator | None) -> int:
        if self.config.mode == "greedy":
            return int(torch.argmax(logits))
        return sample_token(logits, self.config.temperature, generator)

    def _generator(self, window: Any) -> torch.Generator | None:
        if self.config.mode == "greedy":
            return None
        return torch.Generator().manual_seed(self.config.seed + int(getattr(window, "id", 0)))


def _same_vocabulary(a: CaptionModel, b: CaptionModel) -> bool:
    shared = min(a.info.proposable_ids, b.info.proposable_ids)
    va, vb = a.tokenizer.get_vocab(), b.tokenizer.get_vocab()
    ids_a = {i: t for t, i in va.items() if i < shared}
    ids_b = {i: t for t, i in vb.items() if i < shared}
    return ids_a == ids_b


def _strip_after_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def _strip_eos(tokens: list[int], eos: int) -> list[int]:
    return [t for t in tokens if t != eos]


def assign_cuda_streams(*models: CaptionModel | None) -> None:
    """Give each CUDA model its own stream (kept if it has one), so the drafter's kernels
    overlap the verifier's on one GPU. Backends run their work on ``model.stream``."""
    for model in models:
        device = getattr(model, "device", None)
        if model is not None and device is not None and torch.device(device).type == "cuda" \
                and getattr(model, "stream", None) is None:
            model.stream = torch.cuda.Stream(device=device)
