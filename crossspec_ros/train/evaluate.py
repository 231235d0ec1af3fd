"""How good the tiny pair is, on held-out scenes (seeds never used in training).

- verifier attribute accuracy: its greedy caption, parsed back to attributes, against the
  scene's ground truth (every attribute the scene has);
- drafter visible-attribute accuracy: the same for the drafter, on the attributes an event
  camera can see in that window (colours, a static scene... are excluded);
- token agreement: with the verifier's own caption as the prefix, how often the drafter's
  next token equals the verifier's (teacher-forced: exactly the per-token acceptance a
  re-synced speculative round sees), and the fraction of positions where the two free-running
  greedy captions agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple, dataclass, replace
from typing import Any

import torch

from crossspec_ros.train.data import caption_ids


def attribute_accuracy(predicted: dict, truth: dict, names: set[str] | None = None,
                       per_attribute: dict[str, list[int]] | None = None) -> tuple[int, int]:
    """(correct, total) over ``names`` (default: every ground-truth attribute); adds
    [correct, total] per attribute name to ``per_attribute`` when given."""
    keys = sorted(truth if names is None else names & set(truth))
    for k in keys if per_attribute is not None else ():
        counts = per_attribute.setdefault(k, [0, 0])
        counts[0] += predicted.get(k) == truth[k]
        counts[1] += 1
    return sum(predicted.get(k) == truth[k] for k in keys), len(keys)


def _rates(counts: dict[str, list[int]]) -> dict[str, float]:
    return {k: round(ok / n, 4) for k, (ok, n) in sorted(counts.items()) if n}


@torch.inference_mode()
def teacher_forced_agreement(drafter: Any, window: Any, verifier_tokens: list[int]
                             ) -> tuple[int, int]:
    """(matches, positions): drafter argmax vs the verifier's next token along its caption."""
    session = drafter.prefill(drafter.prepare(window))
    rows = [session.last_logits]
    if len(verifier_tokens) > 1:
        rows.extend(session.feed(verifier_tokens[:-1]).unbind(0))
    predicted = [int(torch.argmax(r)) for r in rows]
    return sum(p == t for p, t in zip(predicted, verifier_tokens, strict=True)), len(rows)


def evaluate_pair(verifier: Any, drafter: Any, windows: list[Any], parse: Callable[[str], dict],
                  max_new_tokens: int = 48, progress: Callable[[int], None] | None = None
                  ) -> dict[str, Any]:
    v_ok = v_n = d_ok = d_n = tf_ok = tf_n = pos_ok = pos_n = exact = 0
    examples = []
    v_per: dict[str, list[int]] = {}
    d_per: dict[str, list[int]] = {}
    for window in windows:
        frames = [getattr(f, "image", f) for f in window.frames]
        v_tokens = verifier.generate_greedy(verifier.prepare_frames(frames), max_new_tokens)
        d_tokens = drafter.generate_greedy(drafter.prepare(window), max_new_tokens)
        v_text = verifier.tokenizer.decode(v_tokens, skip_special_tokens=True)
        d_text = drafter.tokenizer.decode(d_tokens, skip_special_tokens=True)
        ok, n = attribute_accuracy(parse(v_text), window.attributes, per_attribute=v_per)
        v_ok, v_n = v_ok + ok, v_n + n
        ok, n = attribute_accuracy(parse(d_text), window.attributes,
                                   set(window.visible_attributes), per_attribute=d_per)
        d_ok, d_n = d_ok + ok, d_n + n
        ok, n = teacher_forced_agreement(drafter, window, v_tokens)
        tf_ok, tf_n = tf_ok + ok, tf_n + n
        pos_ok += sum(a == b for a, b in zip(v_tokens, d_tokens, strict=False))
        pos_n += max(len(v_tokens), len(d_tokens))
        reference = caption_ids(verifier.tokenizer, window.caption_verifier,
                                verifier.info.eos_token_id)
        exact += v_tokens == reference
        if len(examples) < 5:
            examples.append({"truth": window.caption_verifier, "verifier": v_text,
                             "drafter": d_text})
        if progress:
            progress(1)
    return {
        "windows": len(windows),
        "verifier_attribute_accuracy": round(v_ok / max(v_n, 1), 4),
        "drafter_visible_attribute_accuracy": round(d_ok / max(d_n, 1), 4),
        "token_agreement": round(tf_ok / max(tf_n, 1), 4),
        "positional_agreement": round(pos_ok / max(pos_n, 1), 4),
        "verifier_exact_caption_rate": round(exact / max(len(windows), 1), 4),
        "verifier_per_attribute": _rates(v_per),
        "drafter_per_visible_attribute": _rates(d_per),
        "examples": examples,
    }


@torch.inference_mode()
def draft_rounds(drafter: Any, window: Any, reference: list[int], proposal: int
                 ) -> tuple[int, int, int]:
    """(proposed, accepted, verifier passes) when the drafter's greedy draft is proposed in
    rounds against ``reference`` (the verifier's caption, drafter ids), as the engine's draft
    stream is: up to ``proposal`` draft tokens after the confirmed prefix, the agreeing ones
    accepted plus the verifier's own next token, then the drafter re-syncs to that."""
    if proposal < 1:
        raise ValueError("proposal must be >= 1")
    session = drafter.prefill(drafter.prepare(window))
    eos = drafter.info.eos_token_id
    confirmed = proposed = accepted = passes = 0
    row = session.last_logits
    while confirmed < len(reference):
        draft: list[int] = []
        while len(draft) < proposal and confirmed + len(draft) < len(reference):
            draft.append(int(torch.argmax(row)))
            if draft[-1] == eos or len(draft) == proposal:
                break
            row = session.feed([draft[-1]])[-1]
        n = 0
        while n < len(draft) and draft[n] == reference[confirmed + n]:
            n += 1
        proposed, accepted, passes = proposed + len(draft), accepted + n, passes + 1
        keep = min(len(session.generated), confirmed + n)  # the agreeing draft tokens
        session.rollback(keep)
        confirmed = min(confirmed + n + 1, len(reference))
        if confirmed < len(reference):  # re-sync: the verifier's tokens after them
            row = session.feed(reference[keep:confirmed])[-1]
    return proposed, accepted, passes


@dataclass(frozen=True)
class DraftCounts:
    """What ``draft_quality`` adds up over windows (``+`` sums two), so one pass over the
    windows can report several subsets of them."""

    proposed: int = 0
    accepted: int = 0
    passes: int = 0
    agreeing: int = 0      # teacher-forced positions where the drafter's argmax agrees
    positions: int = 0
    exact: int = 0         # whole captions drafted exactly
    windows: int = 0

    def __add__(self, other: DraftCounts) -> DraftCounts:
        return DraftCounts(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def quality(self, proposal: int) -> dict[str, Any]:
        return _quality(self.proposed, self.accepted, self.passes, self.agreeing,
                        self.positions, self.exact, self.windows, proposal)


def window_draft_counts(drafter: Any, window: Any, reference: list[int], proposal: int
                        ) -> DraftCounts:
    """One window's ``DraftCounts`` against ``reference`` (the verifier's caption, drafter
    ids)."""
    proposed, accepted, passes = draft_rounds(drafter, window, reference, proposal)
    agreeing, positions = teacher_forced_agreement(drafter, window, reference)
    exact = drafter.generate_greedy(drafter.prepare(window), len(reference)) == reference
    return DraftCounts(proposed, accepted, passes, agreeing, positions, int(exact), 1)


def draft_quality(drafter: Any, windows: list[Any], references: list[list[int]],
                  proposal: int = 8, progress: Callable[[int], None] | None = None
                  ) -> dict[str, Any]:
    """How well a drafter predicts the verifier: acceptance (accepted / proposed in rounds,
    ``draft_rounds``), accepted tokens per verifier pass, teacher-forced token agreement
    (the per-token acceptance after a re-sync) and the rate of whole captions drafted
    exactly. ``references``: the verifier's captions in the drafter's ids."""
    total = DraftCounts()
    for window, reference in zip(windows, references, strict=True):
        total += window_draft_counts(drafter, window, reference, proposal)
        if progress:
            progress(1)
    return total.quality(proposal)


def events_before_lead(window: Any, lead_ms: float) -> Any:
    """``window`` with only its events stamped before ``t1 - lead_ms``: what a draft begun
    ``lead_ms`` before the window's close reads (its frames and bounds unchanged). A lead
    of the window's length or more leaves an empty batch (the sensor size kept)."""
    if lead_ms <= 0:
        return window
    cut_ns = window.t1 - round(lead_ms * 1e6)
    events = window.events
    kept = events.take(events.t < cut_ns)  # a mask: right whether sorted or not
    return replace(window, events=kept)


def scene_changes(keys: list[tuple[int, int]], references: list[list[int]]
                  ) -> list[bool | None]:
    """Per window (in time order, ``keys`` their (epoch, id)): True where its reference
    caption differs from the previous window's, False where it is the same, None where the
    previous window is not in the list (the first one, or after a gap of ids or an epoch
    change): no change can be told there."""
    if len(keys) != len(references):
        raise ValueError(f"{len(keys)} window keys for {len(references)} references")
    out: list[bool | None] = [None] * len(keys)
    for i in range(1, len(keys)):
        (epoch, wid), (prev_epoch, prev_wid) = keys[i], keys[i - 1]
        if epoch == prev_epoch and wid == prev_wid + 1:
            out[i] = references[i] != references[i - 1]
    return out


def lead_quality(drafter: Any, windows: list[Any], references: list[list[int]],
                 lead_ms: float, proposal: int = 8, changes: list[bool | None] | None = None,
                 progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """``draft_quality`` of drafts begun ``lead_ms`` before each window's close (its events
    before ``t1 - lead``) against the references of the whole windows; over all windows and,
    when ``changes`` is given (``scene_changes``), over the scene-change windows alone
    ("changes", None without them). A window left with no events is drafted as it is where
    the drafter takes an empty batch (counted in "no_events"); one it refuses is left out
    (counted in "skipped")."""
    every, changed = DraftCounts(), DraftCounts()
    no_events = skipped = changed_no_events = 0
    flags = changes if changes is not None else [None] * len(windows)
    for window, reference, is_change in zip(windows, references, flags, strict=True):
        cut = events_before_lead(window, lead_ms)
        empty = len(cut.events) == 0
        if empty and not _takes(drafter, cut):
            skipped += 1
        else:
            counts = window_draft_counts(drafter, cut, reference, proposal)
            every += counts
            no_events += empty
            if is_change:
                changed += counts
                changed_no_events += empty
        if progress:
            progress(1)
    row: dict[str, Any] = {"lead_ms": lead_ms, "windows": every.windows,
                           **_subset_quality(every, proposal), "no_events": no_events,
                           "skipped": skipped}
    row["changes"] = None if changes is None else {
        "windows": changed.windows, **_subset_quality(changed, proposal),
        "no_events": changed_no_events}
    return row


def _subset_quality(counts: DraftCounts, proposal: int) -> dict[str, Any]:
    """``counts.quality``, with None for the rates of a subset without windows (a 0 would
    read as a measured one)."""
    quality = counts.quality(proposal)
    if counts.windows == 0:
        quality.update(dict.fromkeys(("acceptance", "accepted_per_pass", "token_agreement",
                                      "exact_caption_rate")))
    return quality


def _takes(drafter: Any, window: Any) -> bool:
    """Whether ``drafter`` prepares ``window`` (an empty batch without a sensor size is
    refused with ValueError)."""
    try:
        drafter.prepare(window)
    except ValueError:
        return False
    return True


@torch.inference_mode()
def head_quality(head: Any, drafter: Any, windows: list[Any], references: list[list[int]],
                 proposal: int = 8, progress: Callable[[int], None] | None = None
                 ) -> dict[str, Any]:
    """``draft_quality`` for a draft head (``references`` in the verifier's ids): its
    chains proposed in rounds, its teacher-forced agreement and whole captions."""
    proposed = accepted = passes = tf_ok = tf_n = exact = 0
    for window, reference in zip(windows, references, strict=True):
        context = drafter.window_state(drafter.prepare(window))
        confirmed, state = 0, None
        while confirmed < len(reference):
            chain, state = head.propose(context, reference[:confirmed],
                                        min(proposal, len(reference) - confirmed), state)
            n = 0
            while n < len(chain) and chain[n] == reference[confirmed + n]:
                n += 1
            proposed, accepted, passes = proposed + len(chain), accepted + n, passes + 1
            confirmed = min(confirmed + n + 1, len(reference))
        logits = head(context[None], torch.tensor([reference]))[0]
        tf_ok += int((logits.argmax(-1) == torch.tensor(reference)).sum())
        tf_n += len(reference)
        whole, _ = head.propose(context, [], len(reference))
        exact += whole == reference
        if progress:
            progress(1)
    return _quality(proposed, accepted, passes, tf_ok, tf_n, exact, len(windows), proposal)


def _quality(proposed: int, accepted: int, passes: int, tf_ok: int, tf_n: int, exact: int,
             windows: int, proposal: int) -> dict[str, Any]:
    return {
        "acceptance": round(accepted / max(proposed, 1), 4),
        "accepted_per_pass": round(accepted / max(passes, 1), 3),
        "token_agreement": round(tf_ok / max(tf_n, 1), 4),
        "exact_caption_rate": round(exact / max(windows, 1), 4),
        "proposal": proposal,
    }
