"""The graphs a comparison runs, one meaning each, and how their passes are paired window by
window (pure: `crossspec drive --compare` and `crossspec bench engine --live` read it).

    alone       the verifier node alone, prefill after the close, no speculation: what a user
                without crossspec runs
    live_alone  the same with live prefill and early start: crossspec's verifier, no proposals
    text_only   crossspec without the drafter: live prefill, early start, and proposals from
                earlier captions and the caption corpus only (what crossspec's text parts give
                alone: the graph a user would build from them)
    crossspec   draft and verifier nodes: the event drafter's caption, complete at the close,
                and every proposer

The step-shape rule, stated once here and kept by every runner (drive's nodes and the bench's
replay alike): the baselines decode in one-row steps (on the static runtime the fastest plain
decoder: what a user without crossspec runs, never slowed by crossspec's step shape); the
speculative graphs' passes hold ``step_rows`` rows, for exactness. A comparison pairs each
window with itself across graphs within one round, over every window and over the
**scene-change windows** (whose reference caption differs from the window before's: where a
robot needs a caption soonest and earlier captions cannot predict it).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crossspec_ros import summaries
from crossspec_ros.summaries import against_close as _where
from crossspec_ros.summaries import median_ms, shown_ms

TEXT_PROPOSERS = "history_ngram,corpus_ngram"  # every proposer that reads no drafter


@dataclass(frozen=True)
class ComparedGraph:
    """One graph of a comparison: whether a drafter feeds it, the verifier node's parameters
    over its defaults, and what it is, in words."""

    name: str
    drafter: bool
    verifier_params: dict[str, Any] = field(default_factory=dict)
    about: str = ""

    @property
    def one_row_steps(self) -> bool:
        """A baseline: it decodes in one-row steps, not in the speculative step shape."""
        return self.verifier_params.get("step_rows") == 1

    @property
    def kinds(self) -> tuple[str, ...]:
        """The graph's nodes (`crossspec drive` adds the viz node to crossspec's)."""
        return ("draft", "verifier") if self.drafter else ("verifier",)


ALONE = ComparedGraph("alone", False, {"max_proposal": 0, "live_prefill": False,
                                       "step_rows": 1},
                      "the verifier node alone, prefill after the close, no speculation (what "
                      "a user without crossspec runs)")
LIVE_ALONE = ComparedGraph("live_alone", False, {"max_proposal": 0, "step_rows": 1},
                           "the verifier node alone with live prefill and early start, no "
                           "speculation")
TEXT_ONLY = ComparedGraph("text_only", False, {"proposers": TEXT_PROPOSERS},
                          "crossspec without the drafter: live prefill, early start, proposals "
                          "from earlier captions and the corpus only")
CROSSSPEC = ComparedGraph("crossspec", True, {},
                          "draft and verifier nodes: the event drafter's caption, live "
                          "prefill, early start and speculation")
COMPARED = (ALONE, LIVE_ALONE, TEXT_ONLY, CROSSSPEC)
BY_NAME = {graph.name: graph for graph in COMPARED}


def graphs_named(names: Iterable[str]) -> tuple[ComparedGraph, ...]:
    """The compared graphs of ``names``, in the table's order; ValueError naming an unknown
    one."""
    wanted = set(names)
    unknown = wanted - set(BY_NAME)
    if unknown:
        raise ValueError(f"unknown graph(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(BY_NAME)}")
    return tuple(graph for graph in COMPARED if graph.name in wanted)


def summary_graph(graphs: Sequence[ComparedGraph]) -> ComparedGraph:
    """The graph whose passes carry a run's lossless check and summary: crossspec, or where
    a comparison leaves it out (``--graphs text_only,live_alone``), the last graph named."""
    return CROSSSPEC if CROSSSPEC in graphs or not graphs else graphs[-1]


def pass_order(rounds: int, graphs: Sequence[ComparedGraph] = COMPARED
               ) -> list[tuple[int, ComparedGraph]]:
    """(round, graph) in the order they run: every other round reversed, so a machine whose
    load drifts during the run favours no graph (alone, live_alone, ..., crossspec,
    crossspec, ..., alone, ...)."""
    return [(r, g) for r in range(rounds)
            for g in (graphs if r % 2 == 0 else tuple(reversed(graphs)))]


# -- the windows -----------------------------------------------------------------------------

Results = Mapping[tuple[str, int], list[dict]]  # (graph, round) -> the pass's rows


def final_latencies(rows: Iterable[dict]) -> dict[int, float | None]:
    """Window -> confirmed latency after the close, for a pass's FINAL windows."""
    return {r["window"]: r.get("confirmed_done_ms") for r in rows if r["status"] == "FINAL"}


def reference_captions(results: Results) -> dict[int, str]:
    """Window -> its caption (every lossless pass gives the verifier's own: the first FINAL
    one found, the baselines' first)."""
    out: dict[int, str] = {}
    for (_name, _), rows in sorted(results.items(), key=lambda item: _BASELINE_FIRST.get(
            item[0][0], len(_BASELINE_FIRST))):
        for r in rows:
            if r["status"] == "FINAL" and not r.get("acceptance_rule"):
                out.setdefault(r["window"], r["confirmed_text"])
    return out


_BASELINE_FIRST = {ALONE.name: 0, LIVE_ALONE.name: 1, TEXT_ONLY.name: 2, CROSSSPEC.name: 3}


def scene_changes(captions: Mapping[int, str]) -> set[int]:
    """The windows whose caption differs from the window before's (the first window, and
    one whose predecessor has no caption, are not counted)."""
    return {w for w, text in captions.items() if w - 1 in captions and captions[w - 1] != text}


# -- pairing ---------------------------------------------------------------------------------

def compare_graphs(results: Results, rounds: range,
                   graphs: Sequence[ComparedGraph] = COMPARED) -> dict[str, Any]:
    """The passes of ``graphs`` paired window by window within each round, over all windows
    and over the scene-change windows: each graph's confirmed latency after the close, its
    draft (graphs with a drafter: how many windows got one, when it was complete against the
    close, in how many before the confirmed caption), crossspec against each other graph
    (ms, paired) and the ratios of publication times against the verifier alone."""
    names = [g.name for g in graphs]
    changes = scene_changes(reference_captions(results))
    passes = {g.name: _pass_summary(g, [results[(g.name, k)] for k in rounds], changes)
              for g in graphs}
    out: dict[str, Any] = {"baseline": names[0], "graphs": names, "rounds": len(rounds),
                           "scene_changes": sorted(changes), "passes": passes}
    ours = CROSSSPEC.name
    for base in (name for name in names if ours in names and name != ours):
        out[f"crossspec_minus_{base}"] = {**_minus(results, rounds, base, ours),
                                          "changes": _minus(results, rounds, base, ours,
                                                            changes)}
        out[f"crossspec_vs_{base}"] = {**_paired(results, rounds, base, ours),
                                       "changes": _paired(results, rounds, base, ours,
                                                          changes)}
    if ALONE.name in names and LIVE_ALONE.name in names:
        out["live_alone_vs_alone"] = _paired(results, rounds, ALONE.name, LIVE_ALONE.name)
    same = [r["confirmed_text"] == other.get(r["window"]) for k in rounds
            for name in names if name != CROSSSPEC.name
            for other in [{o["window"]: o["confirmed_text"] for o in results[(name, k)]
                           if o["status"] == "FINAL"}]
            for r in results.get((CROSSSPEC.name, k), [])
            if r["status"] == "FINAL" and r["window"] in other]
    out.update(same_captions=sum(same), compared_captions=len(same))
    return out


def _pass_summary(graph: ComparedGraph, rounds: list[list[dict]], changes: set[int]
                  ) -> dict[str, Any]:
    finals = [r for rows in rounds for r in rows if r["status"] == "FINAL"]
    values = [final_latencies(rows) for rows in rounds]
    drafted = [r for r in finals if r.get("draft_first_token_ms") is not None]
    summary: dict[str, Any] = {
        "graph": list(graph.kinds), "about": graph.about, "final": len(finals),
        "confirmed_ms_median": median_ms(v for d in values for v in d.values()),
        "confirmed_ms_median_rounds": [median_ms(d.values()) for d in values],
        "changes": {"windows": sum(len(changes & set(d)) for d in values),
                    "confirmed_ms_median": median_ms(v for d in values for w, v in d.items()
                                                   if w in changes),
                    **_passes(r for r in finals if r["window"] in changes)},
        **_passes(finals),
        # early start: how long before the close the captions complete before it were (one
        # that started early and completed after the close is not among them)
        "ready_before_close_ms_median": median_ms(
            r["ready_before_close_ms"] for r in finals
            if (r.get("ready_before_close_ms") or 0) > 0),
        "draft_first_token_ms_median": median_ms(r["draft_first_token_ms"] for r in drafted),
        "draft_came_first": sum(
            r["draft_first_token_ms"] < r["confirmed_done_ms"] for r in drafted
            if r.get("confirmed_done_ms") is not None)}
    if graph.drafter:
        rows = [r for rows in rounds for r in rows]
        summary["draft"] = draft_summary(rows)
        summary["changes"]["draft"] = draft_summary(r for r in rows if r["window"] in changes)
    return summary


def _passes(finals: Iterable[dict]) -> dict[str, int]:
    """How the verifier's passes went over the FINAL rows ``finals``: the windows whose caption
    was confirmed whole in the prefill's own pass (its first proposal right to the end), and
    the decoding rounds the others took after it, in all (what a wrong proposal costs)."""
    rounds = [r["rounds"] for r in finals if r.get("rounds") is not None]
    return {"one_pass": sum(n == 0 for n in rounds), "decoding_rounds": sum(rounds)}


def draft_summary(rows: Iterable[dict]) -> dict[str, Any]:
    """What a user saw of the drafts of ``rows``: how many windows got one, when it was
    complete against the window's close (the drafter's; < 0: before it), in how many it was
    complete before the confirmed caption, and how much of the confirmed caption it had."""
    rows = list(rows)
    with_draft = [r for r in rows if r.get("draft_text")]
    complete = [r.get("draft_complete_ms") for r in with_draft]
    return {"windows": len(with_draft),
            "complete_ms_median": median_ms(complete),
            "complete_before_close": sum(ms is not None and ms <= 0 for ms in complete),
            "before_confirmed": sum(bool(r.get("draft_before_confirmed")) for r in rows
                                    if r["status"] == "FINAL"),
            "token_agreement_median": summaries.rounded(summaries.median(
                r.get("draft_token_agreement") for r in with_draft), 3)}


def _paired(results: Results, rounds: range, base: str, mode: str,
            windows: set[int] | None = None) -> dict[str, Any]:
    """The ratios base / mode of the windows' latencies (``windows`` only, when given),
    pooled over the rounds, with each round's median."""
    per_round = [summaries.paired_ratios(_only(final_latencies(results[(base, k)]), windows),
                                         _only(final_latencies(results[(mode, k)]), windows))
                 for k in rounds]
    pooled = [x for ratios in per_round for x in ratios.values()]
    return {**{f"paired_speedup_{k}": v for k, v in summaries.spread(pooled).items()},
            "pairs": len(pooled),
            "rounds": [summaries.spread(ratios.values())["median"] for ratios in per_round]}


def _minus(results: Results, rounds: range, base: str, mode: str,
           windows: set[int] | None = None) -> dict[str, Any]:
    """``mode``'s confirmed latency minus ``base``'s, window by window (ms; < 0: sooner)."""
    diffs: list[float] = []
    for k in rounds:
        base_ms = _only(final_latencies(results[(base, k)]), windows)
        mode_ms = _only(final_latencies(results[(mode, k)]), windows)
        diffs += [ms - base_ms[w] for w, ms in mode_ms.items()
                  if ms is not None and base_ms.get(w) is not None]
    return {**{f"ms_{k}": v for k, v in summaries.spread(diffs).items()}, "pairs": len(diffs)}


def _only(latencies: dict[int, float | None], windows: set[int] | None
          ) -> dict[int, float | None]:
    return latencies if windows is None else {w: v for w, v in latencies.items()
                                              if w in windows}


# -- what a user reads -----------------------------------------------------------------------

def compare_line(compare: dict[str, Any]) -> str:
    """The comparison in one line, what a user sees first: when the draft caption was
    complete and in how many windows it came before the confirmed caption, each graph's
    confirmed latency after the close, crossspec against the others (paired ms), at the
    scene changes too; the ratios of publication times last."""
    passes = compare["passes"]
    parts = []
    ours = passes.get(CROSSSPEC.name)
    if ours is not None and "draft" in ours:
        draft = ours["draft"]
        parts.append(f"crossspec's draft caption: in {draft['windows']} windows, complete "
                     f"{_where(draft['complete_ms_median'])} the close (median), before the "
                     f"confirmed caption in {draft['before_confirmed']} of {ours['final']}")
    parts.append("confirmed after the close (median): " + ", ".join(
        f"{name} {shown_ms(p['confirmed_ms_median'])}" for name, p in passes.items()))
    changes = compare["scene_changes"]
    if changes:
        parts.append(f"at the {len(changes)} scene changes: " + ", ".join(
            f"{name} {shown_ms(p['changes']['confirmed_ms_median'])}"
            for name, p in passes.items()))
    for base in passes:
        minus = compare.get(f"crossspec_minus_{base}")
        if minus is None or base == ALONE.name:
            continue
        text = (f"crossspec minus {base}, paired: {shown_ms(minus['ms_median'])} (IQR "
                f"{shown_ms(minus['ms_q25'])} to {shown_ms(minus['ms_q75'])}, "
                f"{minus['pairs']} windows")
        if changes:
            text += f"; at scene changes {shown_ms(minus['changes']['ms_median'])}"
        parts.append(text + ")")
    ahead = {name: p["ready_before_close_ms_median"] for name, p in passes.items()
             if p.get("ready_before_close_ms_median") is not None}
    if ahead:
        parts.append("complete before the close (early start, median): " + ", ".join(
            f"{name} {ms} ms" for name, ms in ahead.items()))
    parts.append(f"same captions {compare['same_captions']}/{compare['compared_captions']}")
    main = compare.get(f"crossspec_vs_{ALONE.name}")
    if main is not None:
        parts.append(
            f"paired speedup (ratio of publication times) vs the verifier node alone "
            f"{_x(main['paired_speedup_median'])} (IQR {_x(main['paired_speedup_q25'])}-"
            f"{_x(main['paired_speedup_q75'])}, rounds {', '.join(_x(m) for m in main['rounds'])}"
            f"; {main['pairs']} window pairs)")
    return "; ".join(parts)


def print_comparison(results: Results, compare: dict[str, Any], out: Any = sys.stdout
                     ) -> None:
    """Per window, each graph's confirmed latency after the close (median over the rounds),
    a scene change marked *."""
    names = list(compare["passes"])
    changes = set(compare["scene_changes"])
    per_window: dict[int, dict[str, list[float]]] = {}
    for (name, _), rows in results.items():
        for w, ms in final_latencies(rows).items():
            if ms is not None:
                per_window.setdefault(w, {}).setdefault(name, []).append(ms)
    print(f"\nconfirmed caption latency after the window closed (ms; median of "
          f"{compare['rounds']} round(s); * a scene change):", file=out)
    print(f"{'window':>13} " + " ".join(f"{n:>10}" for n in names), file=out)
    for w in sorted(per_window):
        cells = [median_ms(per_window[w].get(n, [])) for n in names]
        shown = [f"{'--':>10}" if c is None else f"{c:>10.1f}" for c in cells]
        print(f"{w:>12}{'*' if w in changes else ' '} " + " ".join(shown), file=out)
    for name in names:
        print(f"{name}: {BY_NAME[name].about if name in BY_NAME else ''}", file=out)


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"
