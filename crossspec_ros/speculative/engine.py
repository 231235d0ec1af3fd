"""The speculative engine: one window in, a draft caption at once and the verifier's own
caption sooner.

The whole loop, readable in one sitting:

  drafter thread                         verifier thread (the caller's worker)
  --------------                         -------------------------------------
  prepare + prefill (events)             prepare (8 RGB frames)
  greedy-decode draft tokens, publish    prefill + the likeliest caption start, one pass:
  each one (the speculative caption)       verified like any chain (token 0 on)
                                         loop: propose  a draft tree from every proposer
  on a re-sync request: roll back to                    (live draft, suffix matches in the
  the confirmed prefix + correction,                    draft and in earlier captions)
  keep drafting                                feed     [pending, tree] in ONE forward
                                               verify   walk the tree by the rule
                                               rollback keep the accepted path in the cache
                                               confirm  publish; the drafter re-syncs
                                         between rounds: the caller's hook (the next
                                               window's frames, one per round)

The policy (what to propose, how much, whether the drafter runs ahead) lives in
``adaptive.ProposalPolicy``; this file is the loop.

Losslessness does not depend on the proposals: every confirmed token is either a proposal the
verification rule accepted or the verifier's own token, so the output equals the verifier's
plain decoding (greedy) or its sampling distribution (sampling).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from crossspec_ros.events.change import EVENT_CHOICES, ChangeDetector
from crossspec_ros.models.base import CaptionModel, ModelSession
from crossspec_ros.models.draft_head import DraftHead
from crossspec_ros.models.streams import assign_cuda_streams
from crossspec_ros.speculative.adaptive import BRANCH_SOURCE, ProposalPolicy
from crossspec_ros.speculative.draft_schedule import Action, DraftSchedule
from crossspec_ros.speculative.drafting import DraftChannel, run_drafter
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.speculative.head import HeadRun
from crossspec_ros.speculative.proposers import (
    DEFAULT_PROPOSERS,
    PROPOSERS,
    DraftHeadChain,
    reading,
)
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.suffix import SuffixIndex
from crossspec_ros.speculative.tree import DraftTree
from crossspec_ros.speculative.verify import (
    AcceptanceRule,
    Verdict,
    sample_token,
    token_features,
    verify_greedy,
    verify_greedy_tree,
    verify_relaxed,
    verify_sampling,
)
from crossspec_ros.speculative.vocab import VocabularyBridge, make_bridge

if TYPE_CHECKING:  # the Video-LLaVA backend imports transformers: only when used
    from crossspec_ros.models.live_prefill import LivePrefill


@dataclass
class EngineConfig:
    """How the engine decodes and proposes (validated in __post_init__)."""

    max_new_tokens: int = 48
    mode: str = "greedy"                 # "greedy" or "sampling"
    temperature: float = 1.0             # sampling only
    seed: int = 0                        # sampling only: per-window generator seed base
    max_proposal: int = 24               # deepest proposal per round (tokens past the pending)
    max_tree_nodes: int = 48             # most proposed tokens per round (all branches)
    adaptive: bool = True                # proposal size from acceptance and cost
    proposers: tuple[str, ...] = DEFAULT_PROPOSERS
    history_windows: int = 16            # previous confirmed captions in the suffix trie
    draft_lookahead: int = 48            # how far the drafter runs ahead during the prefill
    drafter_gate: bool = True            # with adaptive: a local drafter runs only while it
    #                                      measurably pays (DrafterGate)
    keep_sessions: bool = False          # keep both KV caches on the result (tests, debugging)
    # greedy: exact (lossless), or a lossy relaxed rule top_k:K / typical:EPS / cosine:T;
    # parsed once where the config is made (AcceptanceRule.parse, params.engine_config)
    acceptance: AcceptanceRule = field(default_factory=AcceptanceRule)
    visual_keep: float = 1.0             # < 1: lossy, the verifier reads that share of each
    #                                      frame's patches, where events fired
    #                                      (models/pruning.py; static runtime, no live prefill)
    event_aware: tuple[str, ...] = ()    # choices a window's change level, read from its
    #                                      events (events/change.py), makes: EVENT_CHOICES

    def __post_init__(self) -> None:
        if self.mode not in ("greedy", "sampling"):
            raise ValueError(f"mode must be 'greedy' or 'sampling', got '{self.mode}'")
        if self.mode == "sampling" and not self.temperature > 0:  # NaN too
            raise ValueError(f"sampling needs temperature > 0, got {self.temperature}")
        if self.max_new_tokens < 1 or self.max_proposal < 0 or self.max_tree_nodes < 0:
            raise ValueError("max_new_tokens must be >= 1, max_proposal and max_tree_nodes "
                             ">= 0")
        unknown = set(self.proposers) - set(PROPOSERS)
        if unknown:
            raise ValueError(f"unknown proposers {sorted(unknown)}")
        unknown = set(self.event_aware) - set(EVENT_CHOICES)
        if unknown:
            raise ValueError(f"unknown event-aware choices {sorted(unknown)}; known: "
                             f"{', '.join(EVENT_CHOICES)}")
        if not 0.0 < self.visual_keep <= 1.0:
            raise ValueError(f"visual_keep must be in (0, 1], got {self.visual_keep}")
        if not isinstance(self.acceptance, AcceptanceRule):  # the text is parsed where the
            # config is made, never again at each read
            raise TypeError(f"acceptance must be an AcceptanceRule (AcceptanceRule.parse of "
                            f"the text), got {self.acceptance!r}")

    @property
    def lossy_mode(self) -> str:
        """How its captions are marked: "" (lossless: the verifier's own), else each lossy
        choice, joined by "+" (``top_k:5``, ``visual_keep:0.5``)."""
        parts = [self.acceptance.name,
                 f"visual_keep:{self.visual_keep:g}" if self.visual_keep < 1.0 else ""]
        return "+".join(p for p in parts if p)


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
                 config: EngineConfig | None = None, head: DraftHead | None = None,
                 corpus: Sequence[Sequence[int]] = ()) -> None:
        """``drafter``: run locally, or only its tokenizer and info are used when drafts come
        through ``run_window(draft=...)`` from a draft node; None: drafts from elsewhere share
        the verifier's ids (the EventGPT family does). ``head``: a draft head reading the
        drafter's window state (proposer ``draft_head``). ``corpus``: the verifier's captions
        of earlier drives, in its ids (proposer ``corpus_ngram``; ``speculative/corpus.py``)."""
        self.verifier, self.drafter, self.head = verifier, drafter, head
        self.config = config or EngineConfig()
        self._check_fits(self.config)
        self.features = self._features(self.config.acceptance)
        assign_cuda_streams(verifier, drafter)
        self.bridge: VocabularyBridge = make_bridge(verifier, drafter)
        cfg = self.config
        self.history = SuffixIndex(max_sources=cfg.history_windows)
        self.corpus = SuffixIndex.of_captions(corpus) if corpus else None
        self.policy = ProposalPolicy(cfg.proposers, max_depth=cfg.max_proposal,
                                     max_nodes=cfg.max_tree_nodes, adaptive=cfg.adaptive,
                                     corpus=self.corpus)
        # whether the local drafter drafts a window: the one decision object the draft loop
        # uses too (speculative/draft_schedule.py): the cascade and a gate per change level
        self.schedule = DraftSchedule(lead_ms=0.0)
        self.detector = ChangeDetector()
        self.last_result: WindowResult | None = None  # of the latest window (run or stream)
        self.current_stats: WindowStats | None = None

    def reconfigure(self, config: EngineConfig) -> None:
        """Use ``config`` from the next window on (call between windows: a window keeps the
        config it started with). What the policy measured is kept unless the proposers
        change. Raises ValueError, keeping its config, for one its verifier cannot run."""
        self._check_fits(config)
        if tuple(config.proposers) != tuple(self.config.proposers):
            self.policy = ProposalPolicy(config.proposers, max_depth=config.max_proposal,
                                         max_nodes=config.max_tree_nodes,
                                         adaptive=config.adaptive, corpus=self.corpus)
        self.policy.max_depth, self.policy.max_nodes = config.max_proposal, config.max_tree_nodes
        self.policy.adaptive = config.adaptive
        self.history.max_sources = config.history_windows
        self.config = config
        self.features = self._features(config.acceptance)

    def _check_fits(self, config: EngineConfig) -> None:
        """ValueError for a config this verifier cannot run (a relaxed rule with sampling;
        top_k beyond its vocabulary: every window would fail), before any window runs."""
        refusal = config.acceptance.refusal(config.mode, self.verifier.info.vocab_size)
        if refusal is not None:
            raise ValueError(refusal)

    def _features(self, rule: AcceptanceRule) -> torch.Tensor | None:
        """The verifier's token features, for cosine acceptance only."""
        if rule.kind != "cosine":
            return None
        model = getattr(self.verifier, "model", None)
        if model is None or not hasattr(model, "get_output_embeddings"):
            raise ValueError(f"{rule.name} acceptance needs a transformers verifier (its "
                             "output embedding holds the token features)")
        return token_features(model.get_output_embeddings().weight)

    # ---------------------------------------------------------------- public API
    def run_window(self, window: Any, on_event: Callable[[EngineEvent], None] | None = None,
                   t_close: float | None = None, draft: DraftChannel | None = None,
                   look: Callable[[], torch.Tensor] | None = None,
                   live: LivePrefill | None = None,
                   between_rounds: Callable[[], None] | None = None) -> WindowResult:
        """Decode one window; ``on_event`` sees draft/confirmed events as they happen (from
        the engine's threads). Times are ms after ``t_close`` (time.monotonic(), default now).

        ``draft``: a channel fed by a drafter elsewhere (a draft node); no local drafter runs
        then, and ``self.drafter`` only needs ``tokenizer`` and ``info`` (for bridging).
        ``look``: where the draft head's window state comes from (default: the local
        drafter's prefill when it drafts, else the local drafter looking on a thread; e.g.
        ``DrafterProcess.look`` or, in the verifier node, ``draft.wait_window_state``).
        ``live``: the window's prefill begun while it was open (models/live_prefill.py); its
        missing frames are added and the prompt finished with the first proposal. A live
        prefill whose frames are not the window's is set aside for the one-shot prefill
        (``stats.live_prefill_frames`` -1).
        ``between_rounds``: called on this thread after each round's tokens are confirmed
        and before the next round (the verifier node prefills one frame of the next window
        there: the windows pipeline, and a round waits for at most that one frame's work).
        """
        t_close = time.monotonic() if t_close is None else t_close
        window_id = int(getattr(window, "id", 0))
        events: list[EngineEvent] = []
        emit = self._emitter(window_id, t_close, events, on_event)
        stats = WindowStats(proposer_names=list(self.config.proposers),
                            acceptance_rule=self.config.lossy_mode)
        level = self._apply_change_level(window, stats)
        self.current_stats = stats  # readable while the window runs (nodes report progress)
        channel = draft if draft is not None else DraftChannel(self.config.draft_lookahead)
        drafter_thread = None
        cascade = "cascade" in self.config.event_aware
        local_draft = draft is None and self._drafts_locally(level, cascade)
        head_run = self._head_run(window, channel, look, local_draft)
        if local_draft:
            drafter_thread = threading.Thread(
                target=run_drafter, name=f"crossspec-drafter-{window_id}", daemon=True,
                args=(self.drafter, window, channel, emit, stats, self.config.max_new_tokens))
            drafter_thread.start()
        sessions: dict[str, ModelSession] = {}
        try:
            tokens = self._verify(window, channel, emit, stats, sessions, head_run, live,
                                  between_rounds)
        finally:
            channel.stop()
            if drafter_thread is not None:
                drafter_thread.join()
            if head_run is not None:
                head_run.join()
        if head_run is not None and head_run.error is not None:
            emit(EventKind.DRAFT_ERROR, text=f"draft head: {head_run.error}")
        if math.isnan(stats.confirmed_done_ms):  # no final confirm came
            stats.confirmed_done_ms = (time.monotonic() - t_close) * 1e3
        if self.drafter is not None and draft is None:
            self.schedule.gate(level if cascade else None).observe(
                local_draft, stats.confirmed_done_ms, len(tokens))
        if channel.session is not None:
            sessions["drafter"] = channel.session
        return self._result(window_id, tokens, channel, stats, events, sessions, emit)

    def _drafts_locally(self, level: str | None, cascade: bool) -> bool:
        """Whether this engine's own drafter drafts the window (no draft node feeds it): a
        proposer reads the draft, and the schedule lets the drafter compute."""
        return self.drafter is not None and bool(reading(self.config.proposers, "draft")) \
            and self.schedule.local_draft(
                level, cascade=cascade,
                gated=self.config.adaptive and self.config.drafter_gate).action is Action.START

    def _head_run(self, window: Any, channel: DraftChannel,
                  look: Callable[[], torch.Tensor] | None, local_draft: bool
                  ) -> HeadRun | None:
        """The draft head's run over the window, where a head proposes and something can
        look at the window (None otherwise)."""
        if self.head is None or not reading(self.config.proposers, "head") or (
                look is None and self.drafter is None):
            return None
        # the local drafter's prefill leaves the window state on the channel for free
        return HeadRun(self.head, look or (
            channel.wait_window_state if local_draft
            else HeadRun.local_look(self.drafter, window)))

    def _result(self, window_id: int, tokens: list[int], channel: DraftChannel,
                stats: WindowStats, events: list[EngineEvent],
                sessions: dict[str, ModelSession], emit: Callable[..., Any]) -> WindowResult:
        """The window's result, kept as ``last_result`` before its FINAL event leaves."""
        text = self.verifier.tokenizer.decode(tokens, skip_special_tokens=True)
        self.policy.observe_caption(tokens)  # before it becomes the last caption
        self.history.add_source(tokens)  # with its EOS: a proposal may end the caption
        draft_tokens, _ = channel.snapshot()
        draft_text = self.bridge.draft_tokenizer.decode(draft_tokens, skip_special_tokens=True)
        result = WindowResult(window_id, tokens, text, draft_tokens, draft_text, stats, events,
                              sessions if self.config.keep_sessions else {})
        # the result first: whoever sees FINAL (stream's consumer) reads last_result at once
        self.last_result = result
        emit(EventKind.FINAL, tokens=tokens, text=text)  # appended to result.events too
        return result

    def _apply_change_level(self, window: Any, stats: WindowStats) -> str | None:
        """The window's change level (``event_aware``; else None), set on the policy and the
        stats."""
        aware = self.config.event_aware
        level = self.detector.level(int(getattr(window, "id", 0)),
                                    getattr(window, "events", None)) if aware else None
        stats.change_level = level or ""
        self.policy.set_level(level if "acceptance" in aware else None)
        return level

    @staticmethod
    def _emitter(window_id: int, t_close: float, events: list[EngineEvent],
                 on_event: Callable[[EngineEvent], None] | None) -> Callable[..., EngineEvent]:
        lock = threading.Lock()

        def emit(kind: EventKind, **fields: Any) -> EngineEvent:
            with lock:  # timed under the lock: events are appended (and handed on) in time order
                event = EngineEvent(kind, window_id, (time.monotonic() - t_close) * 1e3,
                                    **fields)
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

    def verifier_only(self, window: Any, max_new_tokens: int | None = None,
                      stats: WindowStats | None = None) -> list[int]:
        """The verifier alone, plain decoding (greedy or sampling with the same seed rule).
        ``stats``: filled with its prepare/prefill times and one round per token."""
        limit = max_new_tokens or self.config.max_new_tokens
        stats = stats if stats is not None else WindowStats()
        t0 = time.perf_counter()
        inputs = self.verifier.prepare(window)
        t1 = time.perf_counter()
        session = self.verifier.prefill(inputs)
        stats.verifier_prepare_ms = (t1 - t0) * 1e3
        stats.verifier_prefill_ms = (time.perf_counter() - t1) * 1e3
        generator = self._generator(window)
        tokens: list[int] = []
        logits = session.last_logits
        while len(tokens) < limit:
            tokens.append(self._own_token(logits, generator))
            if tokens[-1] == self.verifier.info.eos_token_id:
                break
            logits = session.feed([tokens[-1]])[-1]
            stats.record_round(None, 0, 0)
            stats.fed_tokens += 1
        stats.confirmed_done_ms = (time.perf_counter() - t0) * 1e3
        return tokens

    # ---------------------------------------------------------------- verifier
    def _verify(self, window: Any, channel: DraftChannel, emit: Callable[..., None],
                stats: WindowStats, sessions: dict[str, ModelSession],
                head_run: HeadRun | None = None, live: LivePrefill | None = None,
                between_rounds: Callable[[], None] | None = None) -> list[int]:
        """The prefill round, then decoding rounds until EOS or the length limit."""
        generator = self._generator(window)
        session, confirmed = self._prefill_round(window, channel, emit, stats, head_run, live,
                                                 generator)
        sessions["verifier"] = session
        eos, limit = self.verifier.info.eos_token_id, self.config.max_new_tokens
        while confirmed[-1] != eos and len(confirmed) < limit:
            if between_rounds is not None:
                between_rounds()
            base = len(confirmed)
            confirmed.extend(self._decode_round(session, confirmed, channel, stats, head_run,
                                                generator))
            self._confirm(confirmed, base, confirmed[base:], channel, emit, stats)
        return confirmed

    def _prefill_round(self, window: Any, channel: DraftChannel, emit: Callable[..., None],
                       stats: WindowStats, head_run: HeadRun | None, live: LivePrefill | None,
                       generator: torch.Generator | None) -> tuple[ModelSession, list[int]]:
        """The prefill (what a live prefill left, or all of it) with the first proposal in
        its own last pass: a window captioned like an earlier one is confirmed in that one
        pass. Returns the session and the confirmed tokens (the verifier's own last)."""
        cfg = self.config
        t0 = time.perf_counter()
        before_close = live.frames if live is not None else 0
        pruned = cfg.visual_keep < 1.0  # a live prefill read every token: set aside
        live_finish = live is not None and not pruned and live.extend_to(window.frames)
        if live_finish:
            stats.live_prefill_frames = before_close
            prefill = live.finish  # only the frames still missing and the question are left
        else:
            stats.live_prefill_frames = -1 if live is not None else 0
            inputs = self.verifier.prepare(window, visual_keep=cfg.visual_keep) if pruned \
                else self.verifier.prepare(window)
            prefill = partial(self.verifier.prefill_with_proposal, inputs)
        t1 = time.perf_counter()
        stats.verifier_prepare_ms = (t1 - t0) * 1e3
        draft, base = self._draft_in_verifier_ids(channel, [])
        # A tree needs the greedy rule and a verifier that masks attention in its prefill,
        # and only a live prefill's finish (the question after the cached frames) checks
        # one: in a one-shot prefill the mask takes every prompt row off attention's causal
        # fast path (bundled pair: +0.3-0.5 ms a window on 146 rows, while make bench saw
        # 0 of 38 branch tokens taken there), and the search for branches costs ~0.3 ms
        branches = live_finish and cfg.mode == "greedy" and cfg.acceptance.lossless and \
            self.verifier.supports_tree_prefill
        first = self.policy.propose_first(draft, base, self.history, cfg.max_new_tokens,
                                          self.verifier.info.proposable_ids,
                                          self._model_chains(head_run, []), branches)
        room = self.verifier.first_proposal_room()
        if room is not None and len(first) > room:  # what the prefill's last pass holds
            first = first.chain_head(room)
        chain = first.is_chain()
        session, rows = prefill(first.tokens) if chain else prefill(first.tokens,
                                                                    first.parents)
        stats.verifier_prefill_ms = (time.perf_counter() - t1) * 1e3
        stats.prefill_fed = len(first)
        emit(EventKind.VERIFIER_PREFILL_DONE, prefill_ms=stats.verifier_prefill_ms)
        accepted, tokens = self._verify_and_keep(session, first, rows, generator, kept=0,
                                                 pending=False)
        if not chain:
            self.policy.observe_branches(any(first.sources[n] == BRANCH_SOURCE
                                             for n in accepted))
        confirmed = _strip_after_eos(tokens, self.verifier.info.eos_token_id)
        self.policy.observe_acceptance(confirmed)
        stats.record_proposals(first.sources, accepted)
        stats.prefill_accepted = len(accepted)
        self._confirm(confirmed, 0, list(confirmed), channel, emit, stats)
        return session, confirmed

    def _decode_round(self, session: ModelSession, confirmed: list[int],
                      channel: DraftChannel, stats: WindowStats, head_run: HeadRun | None,
                      generator: torch.Generator | None) -> list[int]:
        """One pass over the pending token and this round's proposals (a tree where the
        session checks trees and the rule is greedy, else its best chain, no longer than a
        pass holds). Returns the newly confirmed tokens."""
        room = self.config.max_new_tokens - len(confirmed)
        draft, base = self._draft_in_verifier_ids(channel, confirmed)
        tree = self.policy.propose(confirmed, draft, base, self.history, room,
                                   self._model_chains(head_run, confirmed))
        t_round = time.perf_counter()
        branching = session.supports_tree and self.config.mode == "greedy" and \
            self.config.acceptance.lossless and not tree.is_chain()
        if not branching:
            tree = tree.best_path()
            if session.max_rows is not None:
                tree = tree.chain_head(session.max_rows - 1)  # beside the pending token
        if branching:
            # each node sees the prefix and its ancestors; the cache keeps one path after
            rows = session.feed_tree([confirmed[-1], *tree.tokens],
                                     [-1, *(p + 1 for p in tree.parents)])
        else:  # row i: the distribution after confirmed + p1..pi
            rows = session.feed([confirmed[-1], *tree.tokens])
        accepted, tokens = self._verify_and_keep(session, tree, rows, generator,
                                                 kept=len(confirmed), pending=True)
        new = _strip_after_eos(tokens[:room], self.verifier.info.eos_token_id)
        self.policy.observe(len(rows), time.perf_counter() - t_round, new)
        stats.record_tree_round(tree.sources, accepted, fed=len(rows), branching=branching)
        return new

    def _verify_and_keep(self, session: ModelSession, tree: DraftTree, rows: torch.Tensor,
                         generator: torch.Generator | None, kept: int, pending: bool
                         ) -> tuple[list[int], list[int]]:
        """Verify ``tree`` against ``rows`` (after the pending token first, when it was fed)
        and keep what the rule accepted in the session's cache (``kept``: generated tokens
        held before the proposal, the pending one included). Returns the accepted nodes and
        the tokens this verification confirms (the accepted ones, then the verifier's own)."""
        if tree.is_chain():
            verdict = self._verify_chain(tree.tokens, rows, generator)
            session.rollback(kept + verdict.n_accepted)
            return list(range(verdict.n_accepted)), verdict.confirmed(tree.tokens)
        walk = verify_greedy_tree(tree.tokens, tree.parents, rows)
        shift = 1 if pending else 0  # fed row 0 is the pending token's
        session.keep_path([0] * pending + [n + shift for n in walk.path])
        return list(walk.path), walk.confirmed(tree.tokens)

    def _verify_chain(self, proposal: list[int], rows: torch.Tensor,
                      generator: torch.Generator | None) -> Verdict:
        rule = self.config.acceptance
        if self.config.mode == "greedy":
            return verify_greedy(proposal, rows) if rule.lossless else \
                verify_relaxed(proposal, rows, rule, self.verifier.info.eos_token_id,
                               self.features)
        return verify_sampling(proposal, rows, temperature=self.config.temperature,
                               generator=generator)

    def _model_chains(self, head_run: HeadRun | None, confirmed: list[int]
                      ) -> dict[str, list[int]]:
        """Continuations of ``confirmed`` from proposers that run a model in this thread."""
        if head_run is None:
            return {}
        return {DraftHeadChain.name: head_run.chain(confirmed, self.config.max_proposal)}

    def _draft_in_verifier_ids(self, channel: DraftChannel, confirmed: list[int]
                               ) -> tuple[list[int] | None, int]:
        """This window's draft so far in verifier ids and its caption position base."""
        draft, done = channel.snapshot()
        return self.bridge.to_target(draft, confirmed, done)

    def _confirm(self, confirmed: list[int], base: int, new: list[int], channel: DraftChannel,
                 emit: Callable[..., None], stats: WindowStats) -> None:
        text = self.verifier.tokenizer.decode(confirmed, skip_special_tokens=True)
        done = confirmed[-1] == self.verifier.info.eos_token_id or \
            len(confirmed) >= self.config.max_new_tokens
        event = emit(EventKind.CONFIRMED, base=base, tokens=list(new), text=text, done=done)
        if base == 0:
            stats.confirmed_first_ms = event.t_ms
        if done:  # the caption is published whole now (the drafter's wind-down comes after)
            stats.confirmed_done_ms = event.t_ms
        channel.push_confirmed(self.bridge.to_drafter(confirmed, text),
                               lookahead=self.policy.draft_lookahead())

    def _own_token(self, logits: torch.Tensor, generator: torch.Generator | None) -> int:
        if self.config.mode == "greedy":
            return int(torch.argmax(logits))
        return sample_token(logits, self.config.temperature, generator)

    def _generator(self, window: Any) -> torch.Generator | None:
        if self.config.mode == "greedy":
            return None
        return torch.Generator().manual_seed(self.config.seed + int(getattr(window, "id", 0)))


def _strip_after_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens

