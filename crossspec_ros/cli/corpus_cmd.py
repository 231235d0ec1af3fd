"""`crossspec corpus`: the verifier's captions of recordings, for the corpus_ngram proposer.

Runs the verifier alone (greedy, as the engine confirms) over every window of the given bags
and/or of simulated drives and writes its captions, one per line, repeats kept. Point the
``caption_corpus`` parameter at the file, or save it as ``captions.txt`` in the verifier's
directory. The bundled tiny verifier's corpus came from
``crossspec corpus --sim-windows 600 --out crossspec_ros/data/tiny_pair/verifier/captions.txt``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from crossspec_ros.cli.model_args import add_model_arguments, model_overrides


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "corpus", help="write the verifier's captions of bags (or simulated drives) as a "
        "caption corpus", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bags", nargs="*", type=Path, help="bags (ROS 2 or ROS 1) with RGB frames")
    parser.add_argument("--sim-windows", type=int, default=0, metavar="N",
                        help="also N windows of simulated drives, one per drive (training "
                        "seeds, never the bundled sample bag's drive)")
    parser.add_argument("--seed", type=int, default=0, help="which simulated drives")
    parser.add_argument("--out", type=Path, required=True, help="the corpus file to write")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--workers", type=int, default=2, help="simulation processes")
    add_model_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.bags.inputs import check_bag
    from crossspec_ros.events.errors import EventSourceError
    from crossspec_ros.params import MODEL_PARAMS, RUNTIME_PARAMS, ParameterError, validate

    if not args.bags and args.sim_windows <= 0:
        return _fail("give bags, --sim-windows N, or both")
    try:
        for bag in args.bags:
            check_bag(bag, need_rgb=True)  # the verifier alone: windows without RGB give nothing
        params = validate(model_overrides(args), [*MODEL_PARAMS, *RUNTIME_PARAMS],
                          where="command line")
    except (EventSourceError, ParameterError) as err:
        return _fail(str(err))
    if not args.out.parent.is_dir():
        return _fail(f"cannot write {args.out}: {args.out.parent} is not a directory")
    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.models.pair import load_verifier

    try:
        verifier = load_verifier(params.get("verifier_model", ""), device=params["device"],
                                 dtype=params["dtype"], quantization=params["quantization"])
    except ModelLoadError as err:
        return _fail(str(err))
    captions: list[str] = []
    skipped: Counter[str] = Counter()
    try:
        for source, windows, total in _window_sources(args):
            _caption(verifier, windows, total, source, args.max_new_tokens, captions, skipped)
    except EventSourceError as err:
        return _fail(str(err))
    from crossspec_ros.speculative.corpus import write_corpus

    written = write_corpus(args.out, captions)
    left_out = ", ".join(f"{n} {why}" for why, n in skipped.items()) or "none"
    print(f"wrote {args.out}: {written} captions ({len(set(captions))} distinct); left out: "
          f"{left_out}")
    return 0 if written else 1


def _window_sources(args: argparse.Namespace):
    """(name, windows, how many to expect) per bag, then the simulated windows. A bag's
    windows are read as they are captioned (a long recording's frames never all in memory);
    its count is estimated from its duration, for the progress line only."""
    from crossspec_ros.bags.inputs import iter_bag_windows
    from crossspec_ros.sync.synchronizer import WindowSynchronizer

    for bag in args.bags:
        sync = WindowSynchronizer()
        yield str(bag), iter_bag_windows(bag, sync), _expected_windows(bag, sync.window_len_ns)
    if args.sim_windows > 0:
        from crossspec_ros.bags.sample import SAMPLE_DRIVE_SEED
        from crossspec_ros.train.data import training_keys
        from crossspec_ros.train.pipeline import simulated_windows

        keys = [k for k in training_keys(args.sim_windows + 1, seed=args.seed)
                if k[0] != SAMPLE_DRIVE_SEED][:args.sim_windows]
        yield "simulated drives", simulated_windows(keys, args.workers, "simulating windows",
                                                    None), len(keys)


def _expected_windows(bag: Path, window_len_ns: int) -> int:
    """The window ids the bag's time spans (every topic's: an estimate, since a topic the
    windows do not come from, e.g. ground truth logged at a window's end, can reach into
    one more; the progress line ends at the true count)."""
    from crossspec_ros.bagfile import any_reader

    try:
        with any_reader(bag) as reader:
            if not reader.message_count:
                return 0
            last = reader.end_time - 1  # rosbags: the time after the latest message
            return last // window_len_ns - reader.start_time // window_len_ns + 1
    except Exception:  # only the progress line's total; reading reports real damage
        return 0


def _caption(verifier: Any, windows: Iterable[Any], total: int, source: str,
             max_new_tokens: int, captions: list[str], skipped: Counter[str]) -> None:
    from crossspec_ros.progress import progress_bar

    with progress_bar(total, f"verifier captions ({source})") as bar:
        for window in windows:
            bar.update(1)
            if not getattr(window, "frames", None):
                skipped["windows without RGB frames"] += 1
                continue
            tokens = verifier.generate_greedy(verifier.prepare(window), max_new_tokens)
            text = verifier.tokenizer.decode(tokens, skip_special_tokens=True).strip()
            if text:
                captions.append(text)
            else:
                skipped["empty captions"] += 1
        bar.total = bar.n  # the estimate was the bag's time span: end at what was done
        bar.refresh()


def _fail(message: str) -> int:
    print(f"crossspec corpus: {message}", file=sys.stderr)
    return 2
