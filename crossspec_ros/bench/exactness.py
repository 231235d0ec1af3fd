"""`crossspec bench exactness`: does verifying k tokens in one pass give the one-token logits?

Speculative decoding is lossless when the verifier's logits for a position do not depend on
how many tokens the forward pass held. Where a k-token pass runs other matrix-product and
attention kernels than a one-token step, it rounds differently: in bfloat16 (and 4-bit) the
argmax can flip where the verifier's top two tokens lie within that rounding (seen on an H100
with random weights, whose logits are nearly flat), and even in float32 the logits differ in
their last bits. The static runtime with one step shape (``models/static_runtime.py``) runs
every pass in the same shape, so its rows are the same bits whatever the pass holds.

Per runtime and window the verifier decodes greedily, one token per pass; the same caption is
then fed k tokens per pass after a fresh prefill. The report gives, per runtime, the positions
whose argmax differs (flips), the rows that are not bit-identical, the top-2 margin of the
one-token logits where it flips, and the largest logit difference anywhere; ``exact`` is the
exact runtime's verdict (0 flips and every row bit-identical).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from crossspec_ros.bench.arguments import bench_float_type
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
            "rows_bit_identical": sum(bool(torch.equal(a, b))
                                      for a, b in zip(rows, single, strict=True)),
            "top2_margin_median": round(float(torch.tensor(margins).median()), 4),
            "max_logit_difference": round(max(float((a - b).abs().max())
                                              for a, b in zip(rows, single, strict=True)), 6)}


def runtime_exactness(verifier: Any, windows: list[Any], max_new_tokens: int, k: int
                      ) -> dict[str, Any]:
    """``window_exactness`` over ``windows``, summed: flips, rows, bit-identical rows."""
    results = [window_exactness(verifier, w, max_new_tokens, k) for w in windows]
    return {"flips": sum(len(r["argmax_differs_at"]) for r in results),
            "positions": sum(r["tokens"] for r in results),
            "rows_bit_identical": sum(r["rows_bit_identical"] for r in results),
            "max_logit_difference": max(r["max_logit_difference"] for r in results),
            "windows": results}


def exactness_runtimes(verifier: Any, step_rows: int, compile: bool, max_new_tokens: int
                       ) -> dict[str, Any]:
    """The runtimes compared, by name (each a twin of ``verifier`` on the same weights):
    transformers (today's eager path), static (one step shape: exact by construction),
    static_compiled (the same compiled, with ``compile``) and static_two_shapes (one-row and
    k-row steps in their own shapes: what the single shape avoids)."""
    from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime

    def twin(options: Any) -> Any:
        model = verifier.with_runtime(None)
        use_static_runtime(model, options, max_new_tokens)
        return model

    out = {"transformers": verifier.with_runtime(None),
           "static": twin(RuntimeOptions(compile=False, step_rows=(step_rows,)))}
    if compile:
        out["static_compiled"] = twin(RuntimeOptions(compile=True, step_rows=(step_rows,)))
    out["static_two_shapes"] = twin(RuntimeOptions(compile=False, step_rows=(1, step_rows)))
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "exactness", help="is k-token verification exact, per runtime and float type?",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", choices=("bundled", "tiny-random", "full-size"),
                        default="bundled")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", type=bench_float_type, choices=("bfloat16", "float32"),
                        default="bfloat16",
                        help="float type of the verifier's weights (default bfloat16; the "
                        "bundled and tiny verifiers are cast to it)")
    parser.add_argument("--quantization", choices=("none", "4bit"), default="none",
                        help="4bit: the verifier's layers in NF4 (bitsandbytes, as crossspec "
                        "loads 4-bit checkpoints)")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("-k", type=int, default=8, help="tokens per verification pass")
    parser.add_argument("--step-rows", type=int, default=32,
                        help="rows of the static runtime's passes (node parameter step_rows)")
    parser.add_argument("--no-compile", action="store_true",
                        help="leave out static_compiled (compiling takes a while)")
    parser.add_argument("--bag", type=Path, default=sample_bag())
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.bench import engine as bench
    from crossspec_ros.models.loading import resolve_device
    from crossspec_ros.models.static_runtime import compile_allowed
    from crossspec_ros.process_tuning import tune_process_for_models

    if args.windows < 1 or args.max_new_tokens < 1 or args.k < 1 or args.step_rows <= args.k:
        print("crossspec bench exactness: need --windows, --max-new-tokens and -k >= 1, and "
              "--step-rows > -k (a pass holds the pending token and k proposals)",
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
    verifier = _load_verifier(args, device)
    if verifier is None:
        return 2
    compile_steps = not args.no_compile and compile_allowed()
    runtimes = exactness_runtimes(verifier, args.step_rows, compile_steps, args.max_new_tokens)
    report: dict[str, Any] = {"models": args.models, "dtype": args.dtype, "device": device,
                              "quantization": args.quantization, "k": args.k,
                              "step_rows": args.step_rows, "runtimes": {}}
    for name, model in runtimes.items():
        result = runtime_exactness(model, windows, args.max_new_tokens, args.k)
        report["runtimes"][name] = result
        print(f"{name:18s} {result['flips']}/{result['positions']} argmax flips, "
              f"{result['rows_bit_identical']}/{result['positions']} rows bit-identical, "
              f"largest logit difference {result['max_logit_difference']}")
    exact_name = "static_compiled" if "static_compiled" in runtimes else "static"
    exact = report["runtimes"][exact_name]
    report["exact_runtime"] = exact_name
    report["exact"] = exact["flips"] == 0 and exact["rows_bit_identical"] == exact["positions"]
    weights = args.dtype + (", 4-bit NF4" if args.quantization == "4bit" else "")
    print(f"{args.models} verifier, {weights}, {device}, k={args.k}, {exact_name} "
          f"(every pass {args.step_rows} rows): "
          + ("exact (every row the same bits, every argmax the same)" if report["exact"]
             else "NOT exact"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["exact"] else 1


def _load_verifier(args: argparse.Namespace, device: str) -> Any:
    """The verifier of --models in --dtype, quantized as asked; None (said on stderr) when
    full-size has no CUDA device."""
    import torch

    from crossspec_ros.bench import engine as bench
    from crossspec_ros.models.full_size import full_size_verifier

    dtype = getattr(torch, args.dtype)
    if args.models == "full-size":
        if not device.startswith("cuda"):
            print("crossspec bench exactness: --models full-size needs --device cuda",
                  file=sys.stderr)
            return None
        verifier = full_size_verifier(device, dtype)
    else:
        build = {"bundled": bench.bundled_pair, "tiny-random": bench.tiny_random_pair}
        verifier = build[args.models](device)[0]
        verifier.model.to(dtype)
    if args.quantization == "4bit":
        from crossspec_ros.models.quantize import quantize_caption_model_4bit

        quantize_caption_model_4bit(verifier)
    return verifier
