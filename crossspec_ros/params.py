"""crossspec's parameters: one declaration per parameter (name, type, default, doc, check),
and the one validation of values, whoever gives them: a parameter file read for the CLI
(``load_yaml_params``), checked before a node starts (``check_param_file``), the values rclpy
hands a node at startup and ``ros2 param set`` at runtime (nodes/common.py
``declare_params``). Parameter files are read as rcl reads them (param_files.py). ROS 2's
rules: an integer where a float is declared is taken as that float; a wrong type, a number
that is not finite, a value out of range is refused with a message naming where it came
from, the parameter, what is expected and what was found.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossspec_ros.param_files import (
    ParameterError,
    Section,
    fully_qualified_name,
    read_sections,
)
from crossspec_ros.speculative.proposers import PROPOSERS as _PROPOSERS
from crossspec_ros.speculative.proposers import DraftHeadChain, reading


@dataclass(frozen=True)
class Param:
    """One parameter. ``live``: a running node applies a new value (``ros2 param set``);
    the others are read-only once the node started. ``bounds``: (low, high) for the ROS
    descriptor's range (inferred for ``positive`` and ``non_negative``)."""

    name: str
    default: Any
    doc: str
    check: Callable[[Any], bool] | None = None
    requirement: str = ""  # shown when check fails, e.g. "> 0"
    live: bool = False
    bounds: tuple[float, float] | None = None

    @property
    def type(self) -> type:
        return type(self.default)

    @property
    def range(self) -> tuple[float, float] | None:
        """The inclusive range a ROS descriptor shows (the check may be stricter: > 0)."""
        if self.bounds is not None or self.type not in (int, float):
            return self.bounds
        low = {positive: 1 if self.type is int else 0.0, non_negative: 0}.get(self.check)
        if low is None:
            return None
        return (low, INT_MAX) if self.type is int else (float(low), FLOAT_MAX)


INT_MAX = 2**31 - 1
FLOAT_MAX = 1e9  # descriptors need a finite end


def positive(x: Any) -> bool:
    return x > 0


def non_negative(x: Any) -> bool:
    return x >= 0


SYNC_PARAMS = [
    Param("event_topic", "event_camera/events", "event_camera_msgs/EventPacket input"),
    Param("rgb_topic", "camera/image_raw", "sensor_msgs/Image or CompressedImage input"),
    Param("window_length_s", 1.0, "caption window length [s]; ids = floor(t / length)",
          positive, "> 0"),
    Param("frames_per_window", 8, "RGB frames sampled uniformly per window", positive, ">= 1"),
    Param("max_lateness_s", 1.0, "a window closes this long after its end even if the other "
          "stream is silent [s]", non_negative, ">= 0"),
    Param("reorder_slack_s", 0.02, "tolerated reordering within a stream [s]", non_negative,
          ">= 0"),
    Param("reset_threshold_s", 2.0, "a jump back in time larger than this resets the "
          "synchronizer (bag loop) once the stream's next data confirms it; a single frame or "
          "packet this far from its stream's time is an outlier, dropped and counted [s]",
          positive, "> 0"),
    Param("max_pending_windows", 16, "windows buffered before the oldest is dropped", positive,
          ">= 1"),
]


def load_yaml_params(path: str | Path, node_name: str, namespace: str = "/"
                     ) -> dict[str, Any]:
    """The parameters the node ``node_name`` in ``namespace`` gets from a parameter file, as
    rclpy merges them: every section whose name matches the node (``/**``, ``/name``,
    ``name``, ``/**/name``, ``/ns/name``, ...), a later section overriding an earlier one.
    Values as rcl types them (not yet checked: ``validate``)."""
    fqn = fully_qualified_name(node_name, namespace)
    merged: dict[str, Any] = {}
    for section in read_sections(path):
        if section.applies_to(fqn):
            merged.update(section.params)
    return merged


def validate(values: dict[str, Any], spec: list[Param], where: str = "parameters",
             allow_unknown: bool = False) -> dict[str, Any]:
    """Defaults overlaid by ``values``, each checked; raises ParameterError on the first
    problem with what is wrong, where, and what is expected. An integer for a float
    parameter comes back as that float (as ROS 2 users expect of `2` for 2.0)."""
    by_name = {p.name: p for p in spec}
    out = {p.name: p.default for p in spec}
    for name, value in values.items():
        param = by_name.get(name)
        if param is None:
            if allow_unknown:
                continue
            close = difflib.get_close_matches(name, by_name, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ParameterError(f"{where}: unknown parameter '{name}'{hint}; known: "
                                 f"{', '.join(sorted(by_name))}")
        out[name] = check_value(param, value, where)
    problem = combination_problem(out)
    if problem is not None:
        raise ParameterError(f"{where}: {problem}")
    return out


def combination_problem(values: dict[str, Any], vocab_size: int | None = None) -> str | None:
    """Why parameter values, each valid alone, cannot run together (None: they can), with
    what to do: ``acceptance`` with ``decoding`` and, once the verifier is loaded, with its
    vocabulary (``vocab_size`` tokens). The rule says what it needs
    (``AcceptanceRule.refusal``, which the engine asks too): whatever passes here, the
    engine runs."""
    if values.get("emulate") and values.get("drafter_process"):
        return (f"'emulate' = '{values['emulate']}' cannot run with 'drafter_process' = true: "
                "the emulated device is shared by the models of one process; set "
                "drafter_process false")
    if "acceptance" not in values:
        return None
    from crossspec_ros.speculative.acceptance import AcceptanceRule

    rule = AcceptanceRule.parse(values["acceptance"])
    return rule.refusal(values.get("decoding", "greedy"), vocab_size)


def check_value(param: Param, value: Any, where: str = "parameters") -> Any:
    """``value`` for ``param`` after ROS 2's typing (int -> float) and crossspec's checks
    (type, finite, check, range); raises ParameterError naming ``where`` and the parameter."""
    name = param.name
    if param.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if param.type in (int, float) and isinstance(value, str) and _names_non_finite(value):
        value = float(value)  # `ros2 param set ... nan` sends text: refused for what it says
    if isinstance(value, float) and not math.isfinite(value):
        must = f": must be {param.requirement}" if param.requirement else ""
        raise ParameterError(f"{where}: '{name}' = {value!r} is not a finite number{must} "
                             f"({param.doc})")
    if not isinstance(value, param.type) or (param.type is int and isinstance(value, bool)):
        raise ParameterError(f"{where}: '{name}' must be {_TYPE_NAMES[param.type]}, got "
                             f"{value!r} ({_kind(value)}){_number_note(param, value)}")
    if param.check is not None and not param.check(value):
        raise ParameterError(f"{where}: '{name}' = {value!r} is invalid: must be "
                             f"{param.requirement} ({param.doc})")
    bounds = param.range  # what the ROS descriptor shows: refused here in the same words
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise ParameterError(f"{where}: '{name}' = {value!r} is out of range: must be "
                             f"{bounds[0]}..{bounds[1]} ({param.doc})")
    if name.endswith(TOPIC_SUFFIXES) and not ROS_NAME.fullmatch(value):
        # rclpy would refuse it only once the models had loaded, in a 4-7 line traceback
        raise ParameterError(f"{where}: '{name}' = {value!r} is not a ROS topic name: names "
                             "of letters, digits and '_' (not starting with a digit) "
                             "separated by '/', optionally after a leading '/' or '~/'")
    return value


# the parameters that name a topic or an action (ROS 2's naming rules, design article
# "Topic and Service name mapping to DDS": tokens of letters, digits and underscores, none
# starting with a digit, no empty token; {substitutions} allowed)
TOPIC_SUFFIXES = ("_topic", "_action")
ROS_NAME = re.compile(r"(?:/|~/)?(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})"
                      r"(?:/(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\}))*")


_TYPE_NAMES = {float: "a float", int: "an integer", str: "a string",
               bool: "true or false"}


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _names_non_finite(text: str) -> bool:
    """'nan', 'inf', '-Infinity': what YAML (and so ``ros2 param set``) reads as text."""
    return text.strip().lstrip("+-").lower() in ("nan", "inf", "infinity")


def _number_note(param: Param, value: Any) -> str:
    """Why a number-looking string is a string: a double's range ends near 1.8e308."""
    if param.type not in (int, float) or not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    if math.isfinite(number):
        return ""
    return ": a number beyond a double's range, which ROS 2 reads as text"


def one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda x: x in choices


def _acceptance_rule(x: Any) -> bool:
    from crossspec_ros.speculative.acceptance import AcceptanceRule

    try:
        AcceptanceRule.parse(x)
    except (ValueError, AttributeError):
        return False
    return True


# Models: empty paths mean the bundled tiny pair (crossspec train-tiny).
MODEL_PARAMS = [
    Param("verifier_model", "", "Video-LLaVA: local directory or hub id in the local cache "
          "(empty: the bundled tiny verifier)"),
    Param("drafter_model", "", "EventGPT: local directory in the released layout (empty: the "
          "bundled tiny drafter distilled on the verifier's captions from windows cut before "
          "their close, as it drafts them, crossspec_ros/data/tiny_pair/distilled_leads/"
          "drafter)"),
    Param("draft_head", "", "a draft head directory (crossspec distill --method head; empty: "
          "none): the verifier node adds the proposer draft_head, fed by the window state the "
          "draft node publishes, and the draft node runs the drafter the head reads unless "
          "drafter_model names one"),
    Param("device", "cpu", "cpu, cuda or cuda:N (cuda without a GPU is an error at startup)",
          lambda x: x == "cpu" or x == "cuda" or x.startswith("cuda:"), "cpu, cuda or cuda:N"),
    Param("dtype", "fp32", "weights dtype (float32, bfloat16, float16 are the same types)",
          one_of("fp32", "bf16", "fp16", "float32", "bfloat16", "float16"),
          "fp32, bf16 or fp16 (or float32, bfloat16, float16)"),
    Param("quantization", "none", "bitsandbytes quantization (GPU)", one_of("none", "4bit", "8bit"),
          "none, 4bit or 8bit"),
]

# the parameter attention's values: static_runtime.ATTENTIONS and "auto", which
# runtime_setup.resolve_attention picks from
ATTENTION_CHOICES = ("auto", "sdpa", "split_kv")

RUNTIME_PARAMS = [
    Param("runtime", "static", "how the language models step: static (KV caches allocated "
          "once, fixed-shape steps, compiled with the parameter compile; rollback is a "
          "position counter) or transformers (the model's own forward with a DynamicCache "
          "per window; checks proposal trees in one pass, exact only where the kernels do "
          "not change with the pass's size)", one_of("static", "transformers"),
          "static or transformers"),
    Param("compile", True, "static runtime: compile the steps at configure (torch.compile: "
          "inductor on CPU, CUDA graphs on a GPU; kernels cached on disk, "
          "TORCHINDUCTOR_CACHE_DIR, default ~/.cache/crossspec/inductor)"),
    Param("step_rows", 32, "static runtime, verifier: rows of every pass after the prompt: "
          "one-token decoding and verification run this one shape, so the confirmed caption "
          "is bit for bit the same runtime's own greedy output in any dtype; the first "
          "proposal rides in the question's pass, so it holds the question's tail and most "
          "of a caption (1: the fastest plain decoder, nothing to verify)", positive, ">= 1",
          bounds=(1, 512)),
    Param("attention", "auto", "static runtime: how each decoding step attends over its "
          "cache: split_kv (the cache cut along its length into blocks, each block its own "
          "work; the verifier's step on an H200 x0.75 in bf16) or sdpa (PyTorch's fused "
          "kernels), for both models; auto: split_kv for a compiled verifier on a GPU, sdpa "
          "elsewhere and for the drafter. Exact either way: the confirmed caption is the "
          "chosen runtime's own greedy output, and may differ between the two at a near-tie",
          one_of(*ATTENTION_CHOICES), "auto, sdpa or split_kv"),
    Param("emulate", "", "the target's costs on this machine (opt-in): every model call lasts "
          "what this cost profile says it costs there (h100-bf16-eager-2026-11-24, "
          "h100-bf16-limit or a profile file; models/emulated.py), the tokens still computed "
          "here; steps eager; every output says emulated (empty: the machine's own costs)",
          lambda x: x == "" or _is_profile(x),
          "empty, h100-bf16-eager-2026-11-24, h100-bf16-limit or a cost profile file"),
]


def _is_profile(value: str) -> bool:
    from crossspec_ros.models.emulated import CostProfile, ProfileError

    try:
        CostProfile.load(value)
    except ProfileError:
        return False
    return True

# the engine's proposers, registered where they are defined (speculative/proposers.py)
PROPOSERS = _PROPOSERS

ENGINE_PARAMS = [
    Param("max_new_tokens", 48, "longest caption in tokens", positive, ">= 1", live=True,
          bounds=(1, 4096)),
    Param("max_proposal", 24, "deepest proposal checked in one verifier pass (0: plain "
          "decoding, no speculation)", non_negative, ">= 0", live=True, bounds=(0, 512)),
    Param("max_tree_nodes", 48, "most proposed tokens in one verifier pass, all branches of "
          "the draft tree together", non_negative, ">= 0", live=True, bounds=(0, 4096)),
    Param("adaptive", True, "choose proposal lengths from measured acceptance and costs",
          live=True),
    Param("decoding", "greedy", "greedy (token-identical) or sampling (same distribution)",
          one_of("greedy", "sampling"), "greedy or sampling", live=True),
    Param("temperature", 1.0, "sampling temperature", positive, "> 0", live=True,
          bounds=(0.0, 100.0)),
    Param("proposers", "draft_stream,draft_ngram,history_ngram,corpus_ngram",
          "comma-separated proposers the verifier may use",
          lambda x: bool(x) and set(x.split(",")) <= set(PROPOSERS),
          "a comma-separated subset of " + ", ".join(PROPOSERS) + " (draft_head: with the "
          "parameter draft_head; added by it when missing)", live=True),
    Param("acceptance", "exact", "which proposed tokens the verifier accepts: exact (its own "
          "argmax: lossless, the default) or a relaxed, LOSSY rule for a latency budget: "
          "top_k:K (within its K likeliest tokens, K at most its vocabulary), typical:EPS "
          "(probability at least min(EPS, sqrt(EPS) * exp(-entropy))) or cosine:T "
          "(feature-level: its output embedding within cosine T of the argmax's); greedy "
          "decoding only; every caption made under a relaxed rule names it "
          "(Caption.acceptance_rule)", _acceptance_rule,
          "exact, top_k:K (K >= 2), typical:EPS (0 < EPS < 1) or cosine:T (0 < T < 1); K, "
          "EPS and T in ASCII digits", live=True),
    Param("history_windows", 16, "previous confirmed captions in the suffix trie",
          non_negative, ">= 0", live=True, bounds=(0, 4096)),
    Param("caption_corpus", "", "the verifier's captions of earlier drives, one per line "
          "(crossspec corpus writes one), proposed by corpus_ngram: a file path; empty: the "
          "verifier directory's captions.txt if it has one (the bundled verifier does); none: "
          "no corpus"),
    Param("drafter_process", False, "draft node on CPU: run the drafter the model "
          "parameters name in a child process (in a composed graph a drafter thread shares "
          "the interpreter with the verifier and both slow down; a drafter handed to the node "
          "then only lends its tokenizer; on a GPU the drafter has its own CUDA stream)"),
    Param("yield_to_verifier_ms", 100.0, "composed graph (the nodes in one process): while "
          "the verifier works on a closed window, the draft node's drafting and event "
          "decoding and the viz node's drawing wait, at most this long at a time [ms] (0: "
          "never); in one process they share the cores and the interpreter lock, and the "
          "verifier's step after the close is the latency that counts", non_negative, ">= 0",
          bounds=(0.0, 60_000.0)),
    Param("step_aside_ms", 30.0, "draft node, a window drafted at its close (not before it: "
          "draft_lead_ms): while at most one of the verifier's last 4 "
          "captions took longer after its window closed than this or the drafter's own first "
          "token, whichever is longer (the verifier is ahead of the drafter; nothing heard yet "
          "counts as ahead), wait up to 3 times that after a window closes for its caption "
          "before drafting it, and draft nothing for a window the verifier finished "
          "meanwhile: a draft would only come after its caption [ms] (0: always draft at "
          "once)", non_negative, ">= 0", bounds=(0.0, 10_000.0)),
    Param("draft_lead_ms", -1.0, "draft node: start each window's draft this long before "
          "the window closes, from the events seen so far, so that the draft is complete at "
          "the close (the events after its start are counted, not drafted again) [ms]; -1: "
          "measured, 1.25 times the drafter's median time per caption on this machine (or "
          "emulated device) plus 5 ms, adapted as it runs, at most 60% of the window; 0: "
          "draft at the close, from all the window's events", lambda x: x == -1.0 or x >= 0,
          "-1 or >= 0", bounds=(-1.0, 60_000.0)),
    Param("live_prefill", True, "verifier node: encode and prefill each frame as soon as it is "
          "selected, while the window is still open (Video-LLaVA verifiers; false: the whole "
          "prefill after the window closes)"),
    Param("early_start", True, "verifier node, with live prefill: caption a window as soon as "
          "every frame it reads is decided (usually tens of ms before it closes) and publish "
          "the caption at the close when the closed window reads the same frames (else it is "
          "discarded and the window captioned again); false: start at the close"),
]

TOPIC_PARAMS = [
    Param("draft_topic", "crossspec/draft", "crossspec/DraftTokens: draft -> verifier, UIs"),
    Param("confirmed_topic", "crossspec/confirmed",
          "crossspec/ConfirmedTokens: verifier -> draft (re-sync), UIs"),
    Param("caption_topic", "crossspec/caption", "crossspec/Caption: for consumers"),
    Param("diagnostics_topic", "/diagnostics", "diagnostic_msgs/DiagnosticArray"),
    Param("diagnostics_period_s", 1.0, "how often health is published [s]", positive, "> 0"),
    Param("max_queued_windows", 2, "windows waiting for a busy model; beyond, the oldest "
          "is dropped and counted", positive, ">= 1"),
    Param("sensor_qos_depth", 50, "queue depth of the RGB camera subscriptions (sensor-data "
          "QoS)", positive, ">= 1"),
    Param("event_qos_depth", 500, "queue depth of the event subscription (sensor-data QoS): "
          "packets a busy draft node can fall behind by before DDS drops them (drivers send "
          "one per ms; gaps are counted in /diagnostics missing_packets)", positive, ">= 1"),
    Param("latest_caption_topic", "crossspec/caption/latest",
          "crossspec/Caption: the latest FINAL or UNVERIFIED caption, latched (reliable, "
          "transient local, depth 1): a late subscriber gets it at once"),
    Param("caption_action", "crossspec/caption_window",
          "crossspec/CaptionWindow action (verifier node): caption the next window or the one "
          "holding a time; feedback streams its captions, the result is the last"),
]

VIZ_PARAMS = [
    Param("annotated_image_topic", "crossspec/annotated_image",
          "sensor_msgs/Image: the RGB frame with the caption drawn on it"),
    Param("marker_topic", "crossspec/caption_marker",
          "visualization_msgs/Marker TEXT_VIEW_FACING with the caption"),
    Param("marker_frame", "camera", "frame_id of the caption marker until an RGB frame gives "
          "its own"),
    Param("annotate_every_n_frames", 2, "annotate one RGB frame in n (drawing costs CPU)",
          positive, ">= 1", live=True, bounds=(1, 10_000)),
    Param("event_image_topic", "crossspec/event_image",
          "sensor_msgs/Image mono8: a dv-processing time surface of the latest events (what "
          "the drafter sees), for RViz and Foxglove"),
    Param("event_image_hz", 10.0, "how often the event image is published (0: never, and the "
          "viz node does not subscribe to the events)", non_negative, ">= 0",
          bounds=(0.0, 100.0)),
]

FOXGLOVE_PARAMS = [
    Param("foxglove", False, "serve captions and annotated frames on a Foxglove WebSocket"),
    Param("foxglove_host", "127.0.0.1", "Foxglove server address (loopback unless you mean it)"),
    Param("foxglove_port", 8765, "Foxglove server port (0: any free port)",
          lambda x: 0 <= x <= 65535, "0..65535", bounds=(0, 65535)),
    Param("record_bag", "", "record captions, annotated images, the marker and diagnostics to "
          "this rosbag2 directory (MCAP, on the graph's clock; empty: no)"),
    Param("outputs_in_root", False, "the recording and Foxglove name topics as in the root "
          "namespace, without the node's own (crossspec drive sets it: its namespace only "
          "keeps the run apart from other graphs, and layouts and replays stay the same)"),
]

CLOCK_PARAMS = [
    Param("follow_clock", False, "use_sim_time follows the graph: true while some node "
          "publishes /clock (a bag replayed, on this host or the robot), false after none has "
          "for 5 s (live cameras); what server.launch.py sets, since the server cannot know "
          "what its robot replays"),
]

STREAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def stream_names(text: str) -> list[str]:
    """The verifier's ``streams`` parameter as names ("front, left" -> [front, left]; "": no
    names, one stream on the topics as given); ValueError saying what is wrong."""
    names = [part.strip() for part in text.split(",")] if text.strip() else []
    bad = [n for n in names if not STREAM_NAME.fullmatch(n)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not a stream name (a ROS name token: letters, digits "
                         "and '_', not starting with a digit)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"stream {twice[0]!r} is named twice")
    return names


def stream_graph(p: Mapping[str, Any]) -> str:
    """How the verifier parameters ``p`` run several streams' steps: "batched" (lanes) or
    "separate" (``stream_steps``; auto: lanes where a step's cost hardly grows with its rows,
    a GPU or an emulated one, on the static runtime)."""
    steps = p["stream_steps"]
    if steps == "auto":
        on_gpu = str(p["device"]).startswith("cuda") or bool(p["emulate"])
        steps = "lanes" if on_gpu and p["runtime"] == "static" else "separate"
    return "batched" if steps == "lanes" else "separate"


def stream_prompts_batched(p: Mapping[str, Any], graph: str) -> bool:
    """Whether the verifier parameters ``p`` batch several streams' prompt work (their frames'
    vision calls and prompt chunks, models/prompt_lanes.py) in the streams ``graph``
    (``stream_graph``): ``stream_prompts`` batched, or auto with lanes. Batched prompts
    need lanes: ValueError otherwise."""
    prompts = p.get("stream_prompts", "auto")
    if prompts == "batched" and graph != "batched":
        raise ValueError("stream_prompts batched needs the streams' steps in lanes "
                         "(stream_steps: lanes, or auto on a GPU or an emulated one)")
    return prompts == "batched" or (prompts == "auto" and graph == "batched")


def _stream_names_ok(text: str) -> bool:
    try:
        stream_names(text)
    except ValueError:
        return False
    return True


STREAM_PARAMS = [
    Param("streams", "", "several camera streams on this one verifier (and GPU): their names, "
          "comma-separated, each a namespace under which the RGB, draft and caption topics and "
          "the caption action are resolved (front,rear: front/camera/image_raw -> "
          "front/crossspec/caption, ...), each stream's captions exact as verified alone on "
          "the same runtime (stream_steps). Empty: one stream on the topics as given",
          _stream_names_ok, "comma-separated names of letters, digits and '_', each once"),
    Param("stream_steps", "auto", "several streams: lanes (the streams' decoding steps run "
          "together as one step of the static runtime: on a GPU a step of several streams' "
          "rows costs little more than one stream's), separate (each stream's steps alone, "
          "taking turns: on a CPU a step costs its rows, so lanes only add the idle lanes' "
          "rows) or auto (lanes on a GPU or an emulated one, separate on the CPU)",
          one_of("auto", "lanes", "separate"), "auto, lanes or separate"),
    Param("stream_prompts", "auto", "several streams with lanes: batched (the streams' frames "
          "that arrive together are encoded in one vision call and prefilled in one prompt "
          "step: a rig's cameras trigger together, and on the H200 profile a window's prompt "
          "work, not its decoding, fills the device), separate (each stream's frames alone) "
          "or auto (batched with lanes)", one_of("auto", "batched", "separate"),
          "auto, batched or separate"),
    Param("shed_late_ms", 0.0, "several streams, an overloaded device: a closed window still "
          "waiting this long past its due time (stream_budget_ms after its close) is given up "
          "UNVERIFIED (VERIFIER_BUSY, counted windows_shed), so the device serves windows that "
          "can still be in time instead of every window late [ms] (0: never)", non_negative,
          ">= 0"),
    Param("stream_budget_ms", 100.0, "several streams: a closed window's device calls are due "
          "this long after its close, and the device serves the call due first (an open "
          "window's live prefill is due a window later)", positive, "> 0"),
]

DRAFT_NODE_PARAMS = [*SYNC_PARAMS, *MODEL_PARAMS, *RUNTIME_PARAMS, *ENGINE_PARAMS,
                     *TOPIC_PARAMS, *CLOCK_PARAMS]
VERIFIER_NODE_PARAMS = [*DRAFT_NODE_PARAMS, *STREAM_PARAMS]
VIZ_NODE_PARAMS = [*SYNC_PARAMS[:2], *TOPIC_PARAMS[:4], *VIZ_PARAMS,
                   *CLOCK_PARAMS]  # + FOXGLOVE_PARAMS


# What rclpy itself declares on every node (a launch file passes use_sim_time to all).
RCLPY_PARAMS = [
    Param("use_sim_time", False, "follow /clock (a bag player's time) instead of the system "
          "clock"),
    Param("start_type_description_service", True, "serve the node's message type "
          "descriptions"),
]


def check_against_vocabulary(values: dict[str, Any], where: str) -> None:
    """Raise ParameterError where the verifier parameters ``values`` cannot run on the
    verifier they name, as far as its files tell before it loads (models/vocabulary.py): one
    line, before any model loads or compiles. The check after loading stays for verifiers
    whose files do not tell."""
    from crossspec_ros.models.vocabulary import vocabulary_size

    vocab = vocabulary_size(str(values.get("verifier_model", "")))
    problem = combination_problem(values, vocab) if vocab is not None else None
    if problem is not None:
        raise ParameterError(f"{where}: {problem}")


def _declared_by_rclpy(name: str) -> bool:
    return name.startswith("qos_overrides.")  # rclpy checks these itself


def check_param_file(path: str | Path, nodes: dict[str, list[Param]]) -> None:
    """Raise ParameterError for a file rcl would refuse, a part rclpy would skip silently
    (a section without ros__parameters; a name no node declares: rclpy drops undeclared
    overrides, so a misspelt name would just keep its default) and a value the node would
    refuse (wrong type, not finite, invalid, out of range; values that cannot run together,
    from one section or several, as the node gets them). ``nodes``: node name -> the
    parameters it declares. A section for any node (``/**``, ``/robot1/*``) may hold any
    node's parameters; a node's own section (``/crossspec_verifier``, ``/**/crossspec_viz``,
    ``/robot1/crossspec_draft``) only that node's. The message names the file, the section,
    the parameter and what is expected (or the closest valid name)."""
    path = Path(path)
    every: dict[str, Param] = {p.name: p for p in RCLPY_PARAMS}
    for spec in nodes.values():
        every.update({p.name: p for p in spec if p.name not in every})
    for section in read_sections(path):
        spec, who = _section_spec(path, section, nodes, every)
        where = f"{path}: section '{section.name}'"
        for name, value in section.params.items():
            if name in spec:
                check_value(spec[name], value, where)
            elif not _declared_by_rclpy(name):
                raise ParameterError(f"{where}: unknown parameter '{name}'"
                                     f"{_hint(name, spec)} ({who})")
    for node, spec in nodes.items():  # values from several sections must also go together
        validate(load_yaml_params(path, node), spec, where=f"{path}: node '{node}'",
                 allow_unknown=True)


def _section_spec(path: Path, section: Section, nodes: dict[str, list[Param]],
                  every: dict[str, Param]) -> tuple[dict[str, Param], str]:
    """The parameters a section may hold, and what to say about a name outside them."""
    if section.for_any_node:
        return every, "no crossspec node declares it"
    if section.node not in nodes:
        raise ParameterError(f"{path}: unknown node section '{section.name}'"
                             f"{_hint(section.node, nodes)}; crossspec nodes: "
                             f"{', '.join(sorted(nodes))}")
    own = {p.name: p for p in RCLPY_PARAMS}
    own.update({p.name: p for p in nodes[section.node]})
    return own, f"node '{section.node}' declares no such name"


def _hint(name: str, choices: Any) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


# docs/ros.md's list of the parameters that change live lies between these (a test checks it)
LIVE_PARAMETERS_MARK = ("<!-- generated by `crossspec params --live` -->",
                        "<!-- end of generated -->")


def live_parameters_markdown(nodes: dict[str, list[Param]]) -> str:
    """The parameters a running node applies (``ros2 param set``), per node (nodes with the
    same ones together), as docs/ros.md lists them between ``LIVE_PARAMETERS_MARK``."""
    import textwrap

    groups: dict[tuple[str, ...], list[str]] = {}
    for node, spec in nodes.items():
        live = tuple(p.name for p in spec if p.live)
        if live:
            groups.setdefault(live, []).append(node)
    parts = [f"{' and '.join(f'`{n}`' for n in names)}: {', '.join(f'`{p}`' for p in live)}"
             for live, names in groups.items()]
    return textwrap.fill("; ".join(parts) + ".", width=95)


def parameters_markdown(nodes: dict[str, list[Param]]) -> str:
    """docs/parameters.md: the parameters of ``nodes`` (node name -> its declarations, as
    ``nodes.graph.node_parameters`` gives them): default, accepted values, whether a running
    node applies a change, meaning. A parameter shared by several nodes is listed once."""
    lines = ["# Node parameters", "",
             "Generated by `crossspec params --markdown` from `crossspec_ros/params.py` (a test "
             "checks that this page is current). Set them in a parameter file "
             "(`config/drive.yaml`, `--params-file`), with `-p NAME:=VALUE`, or at runtime with "
             "`ros2 param set` where the live column says yes. An integer where a float is "
             "declared is taken as that float.", ""]
    seen: dict[str, list[str]] = {}
    for node, spec in nodes.items():
        for param in spec:
            seen.setdefault(param.name, []).append(node)
    done: set[str] = set()
    for node, spec in nodes.items():
        rows = [p for p in spec if p.name not in done]
        if not rows:
            continue
        same = [n for n, other in nodes.items() if n != node and other is spec]
        lines += [f"## {' and '.join([node, *same])}", "",
                  "| parameter | default | accepts | live | meaning |",
                  "|---|---|---|---|---|"]
        for p in rows:
            done.add(p.name)
            accepts = p.requirement or _TYPE_NAMES.get(p.type, p.type.__name__)
            also = [n for n in seen[p.name] if n != node and nodes[n] is not spec]
            note = f" (also {', '.join(also)})" if also else ""
            doc = p.doc.replace("|", "\\|")
            lines.append(f"| `{p.name}` | `{p.default!r}` | {accepts} | "
                         f"{'yes' if p.live else 'no'} | {doc}{note} |")
        lines.append("")
    return "\n".join(lines)


def engine_config(p: dict[str, Any], verifier: Any = None,
                  where: str = "parameters") -> Any:
    """The engine's config from the node's parameters (each checked, and checked together, by
    ``validate``); ``verifier``: the loaded model, whose vocabulary they must fit too, else
    ParameterError naming ``where`` (configure fails in one line, before compiling). The one
    way an engine's config is made from parameters: the verifier node's, the bench's live
    graphs. ``acceptance`` is parsed here, once: the config carries the rule."""
    from crossspec_ros.speculative.acceptance import AcceptanceRule
    from crossspec_ros.speculative.engine import EngineConfig  # it reads this module's tables

    rule = AcceptanceRule.parse(p["acceptance"])
    if verifier is not None:
        problem = rule.refusal(p["decoding"], verifier.info.vocab_size)
        if problem is not None:
            raise ParameterError(f"{where}: {problem}")
    proposers = tuple(p["proposers"].split(","))
    if p["draft_head"] and not reading(proposers, "head"):  # the head is asked for: use it
        proposers += (DraftHeadChain.name,)
    return EngineConfig(max_new_tokens=p["max_new_tokens"], mode=p["decoding"],
                        temperature=p["temperature"], max_proposal=p["max_proposal"],
                        max_tree_nodes=p["max_tree_nodes"], adaptive=p["adaptive"],
                        proposers=proposers, history_windows=p["history_windows"],
                        acceptance=rule)
