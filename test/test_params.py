"""Parameters: ROS-style YAML sections, defaults, and clear validation errors."""

import argparse

import pytest

from crossspec_ros.params import (
    DRAFT_NODE_PARAMS,
    SYNC_PARAMS,
    VERIFIER_NODE_PARAMS,
    VIZ_NODE_PARAMS,
    ParameterError,
    load_yaml_params,
    validate,
)

ROOT_CONFIG = "config/drive.yaml"


def test_node_section_overrides_the_wildcard_section(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("/**:\n  ros__parameters:\n    frames_per_window: 4\n    window_length_s: 2.0\n"
                    "/crossspec_draft:\n  ros__parameters:\n    frames_per_window: 6\n")
    assert load_yaml_params(path, "crossspec_draft") == {"frames_per_window": 6,
                                                          "window_length_s": 2.0}
    assert load_yaml_params(path, "other")["frames_per_window"] == 4


def test_shipped_config_validates_and_documents_every_node_parameter():
    from crossspec_ros.nodes.viz_node import FOXGLOVE_PARAMS

    shared = load_yaml_params(ROOT_CONFIG, "any_node")
    assert set(shared) == {p.name for p in DRAFT_NODE_PARAMS}
    assert validate(shared, DRAFT_NODE_PARAMS)["frames_per_window"] == 8
    assert validate(shared, VERIFIER_NODE_PARAMS)["max_new_tokens"] == 48
    viz_spec = [*VIZ_NODE_PARAMS, *FOXGLOVE_PARAMS]
    viz = load_yaml_params(ROOT_CONFIG, "crossspec_viz")
    assert {p.name for p in viz_spec} <= set(viz)
    known = {p.name for p in viz_spec}
    assert validate({k: v for k, v in viz.items() if k in known}, viz_spec)["foxglove"] is False


def test_validation_names_the_parameter_the_problem_and_the_fix():
    with pytest.raises(ParameterError, match=r"did you mean 'window_length_s'"):
        validate({"window_lenght_s": 1.0}, SYNC_PARAMS)
    with pytest.raises(ParameterError,
                       match=r"'frames_per_window' must be an integer, got 'x' \(a string\)"):
        validate({"frames_per_window": "x"}, SYNC_PARAMS)
    with pytest.raises(ParameterError, match=r"'frames_per_window' = 0 is invalid: must be >= 1"):
        validate({"frames_per_window": 0}, SYNC_PARAMS)
    assert validate({"window_length_s": 2}, SYNC_PARAMS)["window_length_s"] == 2.0


def test_broken_yaml_files_are_reported_with_their_path(tmp_path):
    with pytest.raises(ParameterError, match="does not exist"):
        load_yaml_params(tmp_path / "missing.yaml", "n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("/**: [unclosed\n")
    with pytest.raises(ParameterError, match="not valid YAML"):
        load_yaml_params(bad, "n")
    bad.write_text("/**:\n  ros__parameters: 3\n")
    with pytest.raises(ParameterError, match="needs a 'ros__parameters' mapping"):
        load_yaml_params(bad, "n")


@pytest.mark.parametrize("text", [
    "/**:\n  ros__parameters:\n    max_new_tokens: 8\n    max_new_tokens: 16\n",
    "/**:\n  ros__parameters:\n    max_new_tokens: 8\n/**:\n  ros__parameters:\n"
    "    max_proposal: 4\n"])
def test_a_key_given_twice_in_a_parameter_file_is_refused_naming_it(tmp_path, text):
    # issue 53, item 8: PyYAML kept the last value silently
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(ParameterError, match=r"is given twice in one mapping") as caught:
        load_yaml_params(path, "crossspec_verifier")
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("line", ['rgb_topic: "bad topic name!"', 'event_topic: ""',
                                  "draft_topic: crossspec//draft", "caption_action: 9lives"])
def test_a_topic_name_ros_would_refuse_is_refused_with_the_parameters_before_models_load(
        tmp_path, line):
    # issue 53, item 6: rclpy refused them only after the drafter loaded, in a traceback
    path = tmp_path / "topics.yaml"
    path.write_text(f"/**:\n  ros__parameters:\n    {line}\n")
    with pytest.raises(ParameterError, match="is not a ROS topic name"):
        check_param_file(path, node_parameters())


# ---- parameter files: a name no node reads is an error, not a silent default -------------
from crossspec_ros.nodes.graph import default_config, node_parameters  # noqa: E402
from crossspec_ros.params import RCLPY_PARAMS, check_param_file  # noqa: E402


def _file(tmp_path, text: str):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_the_shipped_drive_config_passes_the_check():
    check_param_file(default_config(), node_parameters())


def test_parameters_rclpy_declares_itself_pass_the_check(tmp_path):
    # what drive.launch.py writes for every node (it broke every `ros2 launch` once)
    check_param_file(_file(tmp_path, "/**:\n  ros__parameters:\n    use_sim_time: true\n"
                           "    qos_overrides./clock.subscription.depth: 5\n"),
                     node_parameters())


@pytest.mark.parametrize("text, message", [
    ("/**:\n  ros__parameters:\n    window_lenght_s: 2.0\n",
     r"section '/\*\*': unknown parameter 'window_lenght_s' \(did you mean 'window_length_s'"),
    ("/crossspec_verfier:\n  ros__parameters:\n    max_new_tokens: 8\n",
     r"unknown node section '/crossspec_verfier' \(did you mean 'crossspec_verifier'"),
    ("crossspec_viz:\n  ros__parameters:\n    max_new_tokens: 8\n",
     r"section 'crossspec_viz': unknown parameter 'max_new_tokens'.*node 'crossspec_viz'"),
])
def test_a_misspelt_or_misplaced_name_names_section_parameter_and_closest(tmp_path, text,
                                                                          message):
    with pytest.raises(ParameterError, match=message):
        check_param_file(_file(tmp_path, text), node_parameters())


@pytest.mark.parametrize("argv", [["windows", "BAG", "--config", "FILE"],
                                  ["drive", "--config", "FILE"],
                                  ["node", "viz", "--ros-args", "--params-file", "FILE"]])
def test_every_command_refuses_a_misspelt_parameter_in_one_line(argv, tmp_path, capsys):
    from crossspec_ros.cli.main import main
    from crossspec_ros.paths import sample_bag

    path = _file(tmp_path, "/**:\n  ros__parameters:\n    max_new_tokns: 8\n")
    argv = [str(path) if a == "FILE" else str(sample_bag()) if a == "BAG" else a
            for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown parameter 'max_new_tokns' (did you mean 'max_new_tokens'?)" in err
    assert "\n" not in err


# ---- issue 36, fault 4: one typed reading of parameter files, ROS 2's rules ---------------
@pytest.mark.parametrize("line, message", [
    ('window_length_s: "fast"', r"'window_length_s' must be a float, got 'fast' \(a string\)"),
    ("max_new_tokens: 4.5", r"'max_new_tokens' must be an integer, got 4.5 \(a float\)"),
    ("window_length_s: 1e999", r"'window_length_s' must be a float, got '1e999' \(a string\): "
     r"a number beyond a double's range, which ROS 2 reads as text"),
    ("window_length_s: .inf", r"'window_length_s' = inf is not a finite number"),
    ("reorder_slack_s: nan", r"'reorder_slack_s' = nan is not a finite number"),
    ("use_sim_time: 1", r"'use_sim_time' must be true or false, got 1 \(an integer\)"),
    ("frames_per_window: 0x10000000000", r"'frames_per_window' = 1099511627776 is out of range"),
])
def test_a_wrong_value_in_a_file_names_file_section_parameter_expected_and_found(
        tmp_path, line, message):
    path = _file(tmp_path, f"/**:\n  ros__parameters:\n    {line}\n")
    with pytest.raises(ParameterError, match=message) as refused:
        check_param_file(path, node_parameters())
    assert str(refused.value).startswith(f"{path}: section '/**': ")


def test_an_int_for_a_float_is_that_float_and_numbers_are_typed_as_rcl_types_them(tmp_path):
    path = _file(tmp_path, "/**:\n  ros__parameters:\n    window_length_s: 2\n"
                           "    max_lateness_s: 1e0\n    frames_per_window: 010\n"
                           "    adaptive: on\n    caption_corpus: '5'\n")
    check_param_file(path, node_parameters())
    values = load_yaml_params(path, "crossspec_verifier")
    assert values == {"window_length_s": 2, "max_lateness_s": 1.0, "frames_per_window": 8,
                      "adaptive": True, "caption_corpus": "5"}
    params = validate(values, VERIFIER_NODE_PARAMS)
    assert params["window_length_s"] == 2.0 and isinstance(params["window_length_s"], float)


@pytest.mark.parametrize("argv", [["windows", "BAG", "--config", "FILE"],
                                  ["drive", "--config", "FILE"],
                                  ["node", "viz", "--ros-args", "--params-file", "FILE"]])
def test_every_command_refuses_a_wrong_type_in_one_line(argv, tmp_path, capsys):
    from crossspec_ros.cli.main import main
    from crossspec_ros.paths import sample_bag

    path = _file(tmp_path, "/**:\n  ros__parameters:\n    window_length_s: fast\n")
    argv = [str(path) if a == "FILE" else str(sample_bag()) if a == "BAG" else a
            for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"{path}: section '/**': 'window_length_s' must be a float, got 'fast'" in err
    assert "\n" not in err


# ---- issue 36, fault 5: every section form rclpy accepts; nothing it would skip ----------
@pytest.mark.parametrize("section", [
    "/**", "/crossspec_verifier", "crossspec_verifier", "/**/crossspec_verifier",
    "/*/crossspec_verifier", "/robot1/crossspec_verifier", "/robot1/*", "/*",
    "/fleet/**/crossspec_verifier", "robot1:\n  crossspec_verifier",
])
def test_every_section_form_rclpy_accepts_is_accepted(tmp_path, section):
    indent = "    " if "\n" in section else "  "
    text = f"{section}:\n{indent}ros__parameters:\n{indent}  max_new_tokens: 8\n"
    check_param_file(_file(tmp_path, text), node_parameters())


@pytest.mark.parametrize("text, message", [
    ("/crossspec_verifier:\n  max_new_tokens: 8\n",
     r"section '/crossspec_verifier' has 'max_new_tokens' outside 'ros__parameters'"),
    ("/crossspec_verifier: {}\n", r"section '/crossspec_verifier' has no 'ros__parameters'"),
    ("/crossspec_verifier:\n", r"section '/crossspec_verifier' has no 'ros__parameters'"),
    ("/robot1:\n  crossspec_verifier:\n    max_new_tokens: 8\n",
     r"section '/robot1/crossspec_verifier' has 'max_new_tokens' outside"),
    ("/crossspec-verifier:\n  ros__parameters:\n    max_new_tokens: 8\n",
     r"section '/crossspec-verifier' is not a node name ROS 2 accepts"),
    ("/robot1:\n  /crossspec_verifier:\n    ros__parameters:\n      max_new_tokens: 8\n",
     r"section '/robot1//crossspec_verifier' is not a node name ROS 2 accepts: it repeats '/'"),
    ("/**:\n  ros__parameters:\n    max_new_tokens:\n", r"'max_new_tokens' has no value"),
    ("/robot1/crossspec_verfier:\n  ros__parameters:\n    max_new_tokens: 8\n",
     r"unknown node section '/robot1/crossspec_verfier' \(did you mean 'crossspec_verifier'"),
])
def test_a_section_rclpy_would_skip_or_refuse_is_refused_saying_how_to_write_it(
        tmp_path, text, message):
    with pytest.raises(ParameterError, match=message):
        check_param_file(_file(tmp_path, text), node_parameters())


def test_sections_apply_by_namespace_and_a_later_section_wins_as_in_rclpy(tmp_path):
    path = _file(tmp_path, "/crossspec_verifier:\n  ros__parameters:\n    max_new_tokens: 1\n"
                           "/**:\n  ros__parameters:\n    max_new_tokens: 2\n"
                           "/robot1/crossspec_verifier:\n  ros__parameters:\n"
                           "    max_new_tokens: 3\n")
    assert load_yaml_params(path, "crossspec_verifier") == {"max_new_tokens": 2}
    assert load_yaml_params(path, "crossspec_verifier", "/robot1") == {"max_new_tokens": 3}
    assert load_yaml_params(path, "crossspec_verifier", "robot2") == {"max_new_tokens": 2}


RCLPY_PROBE = """/**:
  ros__parameters:
    a: 1e3
    b: 0x10
    c: "017"
    d: 017
    e: yes
    f: 2.
    g: 1e999
    h: -.inf
    i: 1_000
    j: y
    k: 99999999999999999999
    m: 08
    n: 0x1p3
    o: 1e-999
    p: ~
    q: null
    r: [1, 2]
    s: !!str 12
    nested:
      x: 1
/**/probe:
  ros__parameters:
    t: any_namespace
/robot1/probe:
  ros__parameters:
    u: robot1
robot2:
  probe:
    ros__parameters:
      u: robot2
/*/probe:
  ros__parameters:
    v: one_token
/robot1/*:
  ros__parameters:
    w: any_node_in_robot1
/robot1/**/probe:
  ros__parameters:
    x: robot1_or_below
"""


@pytest.mark.ros
@pytest.mark.parametrize("namespace", ["/", "/robot1", "/robot2", "/robot1/arm", "/a/b"])
def test_files_are_read_and_matched_exactly_as_rclpy_reads_and_matches_them(tmp_path,
                                                                             namespace):
    rclpy = pytest.importorskip("rclpy")
    path = _file(tmp_path, RCLPY_PROBE)
    rclpy.init(args=["--ros-args", "--params-file", str(path)])
    try:
        node = rclpy.create_node("probe", namespace=namespace,
                                 automatically_declare_parameters_from_overrides=True)
        own = {p.name for p in RCLPY_PARAMS}
        by_rclpy = {name: param.value for name, param in node._parameters.items()
                    if name not in own}
        node.destroy_node()
    finally:
        rclpy.shutdown()
    assert load_yaml_params(path, "probe", namespace) == by_rclpy


@pytest.mark.ros
def test_a_node_started_on_such_a_file_by_rclpy_takes_an_int_for_a_float(tmp_path):
    # issue 36, fault 4 through rclpy itself (`crossspec node ... --params-file`, launch)
    rclpy = pytest.importorskip("rclpy")
    from crossspec_ros.nodes.viz_node import VizNode

    path = _file(tmp_path, "/**/crossspec_viz:\n  ros__parameters:\n    event_image_hz: 5\n"
                           "/robot1/crossspec_viz:\n  ros__parameters:\n"
                           "    annotate_every_n_frames: 3\n")
    check_param_file(path, node_parameters())
    rclpy.init(args=["--ros-args", "--params-file", str(path)])
    try:
        node = VizNode(namespace="/robot1")
        try:
            assert node.params["event_image_hz"] == 5.0
            assert node.get_parameter("event_image_hz").type_.name == "DOUBLE"
            assert node.params["annotate_every_n_frames"] == 3
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown()


@pytest.mark.ros
@pytest.mark.parametrize("ros_args, message", [
    (["-p", "event_image_hz:=fast"], "crossspec node viz: node 'crossspec_viz' parameters: "
     "'event_image_hz' must be a float, got 'fast' (a string)"),
    (["-p", "event_image_hz"], "crossspec node viz: ROS arguments refused: failed to "
     "initialize rcl: Couldn't parse parameter override rule: '-p event_image_hz'"),
])
def test_a_node_refuses_a_bad_value_rclpy_hands_it_in_one_line(ros_args, message):
    # past the file check: a -p value, or arguments rcl itself cannot parse
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "node", "viz",
                           "--ros-args", *ros_args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    ours = [line for line in done.stderr.splitlines() if not line.startswith("[ERROR] [")]
    assert len(ours) == 1 and ours[0].startswith(message), done.stderr


@pytest.mark.parametrize("name", ["fp32", "bf16", "fp16", "float32", "bfloat16", "float16"])
def test_the_dtype_parameter_takes_the_short_and_the_long_float_type_names(name):
    from crossspec_ros.models.loading import resolve_dtype
    from crossspec_ros.params import MODEL_PARAMS

    assert validate({"dtype": name}, MODEL_PARAMS)["dtype"] == name
    assert resolve_dtype(name).is_floating_point


def test_the_benchmarks_take_the_node_parameters_float_type_names_and_report_torchs():
    from crossspec_ros.bench.exactness import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["exactness", "--dtype", "bf16"]).dtype == "bfloat16"
    assert parser.parse_args(["exactness", "--dtype", "float32"]).dtype == "float32"
    with pytest.raises(SystemExit):
        parser.parse_args(["exactness", "--dtype", "int8"])


# ---- issue 45: combinations validated like single values; NaN; acceptance arguments -------
def test_a_relaxed_acceptance_with_sampling_is_refused_by_validation_with_the_fix():
    # item 16: EngineConfig refused it, after `ros2 param set` had been accepted
    for spec in (VERIFIER_NODE_PARAMS, DRAFT_NODE_PARAMS):
        with pytest.raises(ParameterError) as refused:
            validate({"acceptance": "top_k:3", "decoding": "sampling"}, spec, where="here")
        assert str(refused.value).startswith(
            "here: 'acceptance' = 'top_k:3' cannot run with 'decoding' = 'sampling': ")
        assert "needs greedy decoding" in str(refused.value)
        assert str(refused.value).endswith("set decoding to greedy or acceptance to exact")
    assert validate({"acceptance": "top_k:3"}, VERIFIER_NODE_PARAMS)["decoding"] == "greedy"
    assert validate({"decoding": "sampling"}, VERIFIER_NODE_PARAMS)["acceptance"] == "exact"


def test_every_combination_the_engine_refuses_validation_refuses_first():
    # item 16: one statement of the invalid combinations (AcceptanceRule.refusal), asked by
    # both; nothing validation passes makes the engine refuse its config
    from crossspec_ros.params import engine_config

    for acceptance in ("exact", "top_k:2", "typical:0.3", "cosine:0.5"):
        for decoding in ("greedy", "sampling"):
            values = {"acceptance": acceptance, "decoding": decoding}
            try:
                params = validate(values, VERIFIER_NODE_PARAMS)
            except ParameterError:
                continue
            config = engine_config(params)
            assert config.acceptance.refusal(config.mode) is None  # what the engine asks


def test_a_config_made_from_parameters_carries_the_acceptance_rule_parsed_once():
    # the house, item 4: the text is parsed where the config is made; every later reader
    # (the engine, its captions' mark, the verification) reads the rule the config carries
    from crossspec_ros.params import engine_config
    from crossspec_ros.speculative.acceptance import AcceptanceRule

    config = engine_config(validate({"acceptance": "typical:.30"}, VERIFIER_NODE_PARAMS))
    assert config.acceptance == AcceptanceRule("typical", epsilon=0.3)
    assert config.acceptance.text == "typical:0.3" and config.lossy_mode == "typical:0.3"
    assert engine_config(validate({}, VERIFIER_NODE_PARAMS)).acceptance == AcceptanceRule()


def test_an_acceptance_rule_reads_back_from_its_own_text():
    from crossspec_ros.speculative.acceptance import AcceptanceRule

    for text in ("exact", "top_k:3", "typical:0.3", "cosine:0.8"):
        rule = AcceptanceRule.parse(text)
        assert rule.text == text and AcceptanceRule.parse(rule.text) == rule


def test_top_k_beyond_the_verifiers_vocabulary_is_a_combination_refused_once_it_is_known():
    # item 17: the vocabulary is known once the verifier is loaded (configure, live changes)
    from crossspec_ros.params import combination_problem

    values = validate({"acceptance": "top_k:1000"}, VERIFIER_NODE_PARAMS)
    assert combination_problem(values) is None
    assert combination_problem(values, vocab_size=1000) is None
    problem = combination_problem(values, vocab_size=240)
    assert problem.startswith("'acceptance' = 'top_k:1000' cannot run on this verifier: ")
    assert "vocabulary holds 240" in problem and "K <= 240" in problem


@pytest.mark.parametrize("value", ["exact:", "top_k:٣", "top_k:2_0", "top_k:", "cosine:"])
def test_an_acceptance_argument_must_be_a_plain_ascii_number(value):
    # item 28
    with pytest.raises(ParameterError, match=f"'acceptance' = '{value}' is invalid"):
        validate({"acceptance": value}, VERIFIER_NODE_PARAMS)


@pytest.mark.parametrize("value", ["nan", "NaN", float("nan")])
def test_nan_for_a_temperature_is_refused_as_not_a_finite_number(value):
    # item 12: `ros2 param set ... temperature nan` sends the text 'nan' (YAML reads it as a
    # string), which was refused as "a number beyond a double's range"
    with pytest.raises(ParameterError) as refused:
        validate({"temperature": value}, VERIFIER_NODE_PARAMS, where="here")
    assert str(refused.value) == ("here: 'temperature' = nan is not a finite number: must be "
                                  "> 0 (sampling temperature)")


@pytest.mark.parametrize("value, shown", [("inf", "inf"), ("-Infinity", "-inf")])
def test_infinity_as_text_is_refused_as_not_a_finite_number(value, shown):
    with pytest.raises(ParameterError, match=f"'window_length_s' = {shown} is not a finite "
                       "number: must be > 0"):
        validate({"window_length_s": value}, SYNC_PARAMS)


def test_a_relaxed_acceptance_with_sampling_across_sections_is_refused_by_the_file_check(
        tmp_path):
    path = _file(tmp_path, "/**:\n  ros__parameters:\n    acceptance: top_k:3\n"
                           "/crossspec_verifier:\n  ros__parameters:\n    decoding: sampling\n")
    with pytest.raises(ParameterError) as refused:
        check_param_file(path, node_parameters())
    assert str(refused.value).startswith(
        f"{path}: node 'crossspec_verifier': 'acceptance' = 'top_k:3' cannot run with "
        "'decoding' = 'sampling'")


def test_drive_refuses_a_relaxed_acceptance_with_sampling_before_loading_in_one_line(
        tmp_path, capsys, monkeypatch):
    # item 17: it loaded the models, then died with a ValueError traceback (rc 1)
    import crossspec_ros.models.pair as pair
    from crossspec_ros.cli.main import main

    def no_loading(*args, **kwargs):
        raise AssertionError("models loaded before the parameters were checked")

    monkeypatch.setattr(pair, "load_from_params", no_loading)
    path = _file(tmp_path, "/**:\n  ros__parameters:\n    acceptance: top_k:3\n"
                           "    decoding: sampling\n")
    assert main(["drive", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "'acceptance' = 'top_k:3' cannot run with 'decoding' = 'sampling'" in err
    assert "\n" not in err


@pytest.mark.ros
def test_a_node_refuses_a_relaxed_acceptance_with_sampling_from_ros_args_in_one_line():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "node", "verifier",
                           "--ros-args", "-p", "acceptance:=top_k:3", "-p",
                           "decoding:=sampling"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    ours = [line for line in done.stderr.splitlines() if not line.startswith("[ERROR] [")]
    assert len(ours) == 1 and ours[0].startswith(
        "crossspec node verifier: node 'crossspec_verifier' parameters: 'acceptance' = "
        "'top_k:3' cannot run with 'decoding' = 'sampling'"), done.stderr


def test_checking_a_parameter_file_with_a_relaxed_acceptance_rule_imports_no_torch():
    # a launch file checks the config in launch's own process: torch cost it 3.6 s there, and
    # its exit hooks ran inside launch's shutdown (issue 45, fault 5)
    import subprocess
    import sys

    code = ("import sys\n"
            "from crossspec_ros.nodes.graph import default_config, node_parameters\n"
            "from crossspec_ros.params import check_param_file, validate, VERIFIER_NODE_PARAMS\n"
            "check_param_file(default_config(), node_parameters())\n"
            "validate({'acceptance': 'top_k:3'}, VERIFIER_NODE_PARAMS)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
