"""The model options `crossspec drive` and `crossspec caption` share with the launch file:
the same names as the node parameters (params.MODEL_PARAMS), validated the same way."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

# flag -> node parameter
MODEL_FLAGS = {"--verifier-model": "verifier_model", "--drafter-model": "drafter_model",
               "--draft-head": "draft_head", "--device": "device", "--dtype": "dtype",
               "--quantization": "quantization"}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    from crossspec_ros.params import ATTENTION_CHOICES, MODEL_PARAMS, RUNTIME_PARAMS

    docs = {p.name: p.doc for p in [*MODEL_PARAMS, *RUNTIME_PARAMS]}
    group = parser.add_argument_group("models (as the node parameters of the same names)")
    for flag, name in MODEL_FLAGS.items():
        group.add_argument(flag, dest=name, default=None, help=docs[name])
    group.add_argument("--runtime", dest="runtime", default=None,
                       choices=("static", "transformers"), help=docs["runtime"])
    group.add_argument("--no-compile", dest="compile", action="store_const", const=False,
                       default=None, help="static runtime: eager steps, nothing compiled "
                       "(node parameter compile: false)")
    group.add_argument("--step-rows", dest="step_rows", type=int, default=None,
                       help=docs["step_rows"])
    group.add_argument("--attention", dest="attention", default=None,
                       choices=ATTENTION_CHOICES, help=docs["attention"])
    group.add_argument("--emulate", dest="emulate", default=None, metavar="PROFILE",
                       help=docs["emulate"])


RUNTIME_FLAG_PARAMS = ("runtime", "compile", "step_rows", "attention", "emulate")

# the parameters that name a model directory (or a hub id, checked when it loads)
MODEL_DIRECTORY_PARAMS = ("verifier_model", "drafter_model", "draft_head")


def model_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The model parameters given on the command line, validated (ParameterError if not),
    their model directories included: a damaged one fails here in one line, before any model
    (or the ROS graph) starts loading."""
    from crossspec_ros.params import MODEL_PARAMS, RUNTIME_PARAMS, validate

    given = {name: getattr(args, name) for name in [*MODEL_FLAGS.values(), *RUNTIME_FLAG_PARAMS]
             if getattr(args, name, None) is not None}
    validate(given, [*MODEL_PARAMS, *RUNTIME_PARAMS], where="command line")
    check_model_directories(given)
    return given


def check_model_directories(params: dict[str, Any]) -> None:
    """``models.loading.check_model_directory`` on each local model directory in
    ``params``; its error (naming the file and what to do) as a ParameterError."""
    directories = [params[name] for name in MODEL_DIRECTORY_PARAMS
                   if params.get(name) and Path(params[name]).is_dir()]
    if not directories:
        return
    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.models.loading import check_model_directory
    from crossspec_ros.params import ParameterError

    for directory in directories:
        try:
            check_model_directory(directory)
        except ModelLoadError as err:
            raise ParameterError(str(err)) from err
