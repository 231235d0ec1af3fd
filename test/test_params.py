"""Parameters: ROS-style YAML sections, defaults, and clear validation errors."""

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
    with pytest.raises(ParameterError, match=r"'frames_per_window' must be int, got 'x'"):
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


# ---- parameter files: a name no node reads is an error, not a silent default -------------
from crossspec_ros.nodes.graph import default_config, node_parameters  # noqa: E402
from crossspec_ros.params import check_param_file  # noqa: E402


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
