"""The model options `crossspec drive` and `crossspec caption` share with the launch file:
the same names as the node parameters (params.MODEL_PARAMS), validated the same way."""

from __future__ import annotations

import argparse
from typing import Any

# flag -> node parameter
MODEL_FLAGS = {"--verifier-model": "verifier_model", "--drafter-model": "drafter_model",
               "--draft-head": "draft_head", "--device": "device", "--dtype": "dtype",
               "--quantization": "quantization"}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    from crossspec_ros.params import MODEL_PARAMS

    docs = {p.name: p.doc for p in MODEL_PARAMS}
    group = parser.add_argument_group("models (as the node parameters of the same names)")
    for flag, name in MODEL_FLAGS.items():
        group.add_argument(flag, dest=name, default=None, help=docs[name])


def model_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The model parameters given on the command line, validated (ParameterError if not)."""
    from crossspec_ros.params import MODEL_PARAMS, validate

    given = {name: getattr(args, name) for name in MODEL_FLAGS.values()
             if getattr(args, name, None) is not None}
    validate(given, MODEL_PARAMS, where="command line")
    return given
