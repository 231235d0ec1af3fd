"""`crossspec bench exactness`: does verifying k tokens in one pass give the one-token logits?

Speculative decoding is lossless when the verifier's logits for a position do not depend on
how many tokens the forward pass held. On a CPU and, on a GPU, in float32 they do not; in
bfloat16 a k-token pass runs other matrix-product and attention kernels than a one-token
step and rounds differently, so where the verifier's top two tokens are within that rounding
the argmax can flip (seen on an H100 with random weights, whose logits are nearly flat).

Per window the verifier decodes greedily, one token per pass; the same caption is then fed
k tokens per pass after a fresh prefill. The report gives, per window, the positions whose
argmax differs, the top-2 margin of the one-token logits there, and the largest logit
difference anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from crossspec_ros.paths import sample_bag


def window_exactness(verifier: Any, window: Any, max_new_tokens: int, k: int
                     ) -> dict[str, Any]:
    """One window: one-token decoding against k-token feeding of the same tokens."""
    import torch

    inputs = verifier.prepare(window)
    session = verifier.prefill(inputs)
    tokens: list[int] = []
    single: list[Any] = []
    for _ in range(max_new_tokens):
        row = session.last_logits.float().cpu()
        single.append(row)
        tokens.append(int(row.argmax()))
        if tokens[-1] == verifier.info.eos_token_id:
            break
        session.feed([tokens[-1]])
    chunked = verifier.prefill(inputs)
    rows = [chunked.last_logits.float().cpu()]
    for start in range(0, len(tokens) - 1, k):
        rows.extend(chunked.feed(tokens[start:min(start + k, len(tokens) - 1)]).float().cpu())
    differ = [i for i, row in enumerate(rows) if int(row.argmax()) != tokens[i]]
    margins = [float(t[0] - t[1]) for t in (row.topk(2).values for row in single)]
    return {"window": int(getattr(window, "id", 0)), "tokens": len(tokens),
            "argmax_differs_at": differ,
            "margin_where_differs": [round(margins[i], 4) for i in differ],
            "top2_margin_median": round(float(torch.tensor(margins).median()), 4),
            "max_logit_difference": round(max(float((a - b).abs().max())
                                              for a, b in zip(rows, single, strict=True)), 6)}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "exactness", help="is k-token verification exact on this device and float type?",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", choices=("bundled", "tiny-random", "full-size"),
                        default="bundled")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                        help="float type of the full-size verifier (default bfloat16)")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("-k", type=int, default=8, help="tokens per verification pass")
    parser.add_argument("--bag", type=Path, default=sample_bag())
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from crossspec_ros.bench import engine as bench
    from crossspec_ros.models.full_size import full_size_verifier
    from crossspec_ros.models.loading import resolve_device
    from crossspec_ros.process_tuning import tune_process_for_models

    if args.windows < 1 or args.max_new_tokens < 1 or args.k < 1:
        print("crossspec bench exactness: need --windows, --max-new-tokens and -k >= 1",
              file=sys.stderr)
        return 2
    from crossspec_ros.events.errors import EventSourceError

    try:  # before any model is built; and "exact" over no window would say nothing
        windows = bench.bag_windows(args.bag, args.windows)
    except EventSourceError as err:
        print(f"crossspec bench exactness: {err}", file=sys.stderr)
        return 2
    if not windows:
        print(f"crossspec bench exactness: {args.bag} has no window with RGB frames; the "
              "verifier needs them", file=sys.stderr)
        return 2
    device = str(resolve_device(args.device))
    tune_process_for_models(device)
    if args.models == "full-size":
        if not device.startswith("cuda"):
            print("crossspec bench exactness: --models full-size needs --device cuda",
                  file=sys.stderr)
            return 2
        verifier = full_size_verifier(device, getattr(torch, args.dtype))
    else:
        build = {"bundled": bench.bundled_pair, "tiny-random": bench.tiny_random_pair}
        verifier = build[args.models](device)[0]
    results = []
    for window in windows:
        result = window_exactness(verifier, window, args.max_new_tokens, args.k)
        results.append(result)
        print(f"window {result['window']}: {len(result['argmax_differs_at'])}/"
              f"{result['tokens']} positions differ {result['argmax_differs_at'][:5]}, "
              f"top-2 margin there {result['margin_where_differs'][:5]} "
              f"(median {result['top2_margin_median']}), largest logit difference "
              f"{result['max_logit_difference']}")
    exact = all(not r["argmax_differs_at"] for r in results)
    dtype = str(next(verifier.model.parameters()).dtype).removeprefix("torch.")
    print(f"{args.models} verifier, {dtype}, {device}, k={args.k}: "
          + ("exact (every argmax the same)" if exact else "NOT exact"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"models": args.models, "dtype": dtype,
                                         "device": device, "k": args.k, "exact": exact,
                                         "windows": results}, indent=2))
    return 0 if exact else 1
