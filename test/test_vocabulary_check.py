"""A parameter that cannot run on the verifier's vocabulary is refused before any model loads
(issue 53, item 6: `acceptance: top_k:1000` on the bundled 240-token verifier was refused only
after the drafter had loaded and compiled, 14.5 s in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossspec_ros.models.vocabulary import vocabulary_size
from crossspec_ros.params import ParameterError, check_against_vocabulary

BUNDLED_VOCABULARY = 240


def test_the_vocabulary_is_read_from_the_verifiers_files_or_left_to_the_model(tmp_path):
    assert vocabulary_size("") == BUNDLED_VOCABULARY  # the bundled tiny verifier
    assert vocabulary_size(str(tmp_path)) is None  # a directory without config.json
    (tmp_path / "config.json").write_text("{not json")
    assert vocabulary_size(str(tmp_path)) is None
    assert vocabulary_size("no-such-org/no-such-model") is None  # not in the local cache


def test_top_k_past_the_vocabulary_is_one_line_naming_it_and_what_to_do():
    check_against_vocabulary({"acceptance": f"top_k:{BUNDLED_VOCABULARY}"}, "here")
    with pytest.raises(ParameterError) as refused:
        check_against_vocabulary({"acceptance": "top_k:1000"}, "cfg.yaml: node 'v'")
    text = str(refused.value)
    assert "\n" not in text and text.startswith("cfg.yaml: node 'v': 'acceptance'")
    assert f"K <= {BUNDLED_VOCABULARY}" in text


def test_drive_refuses_it_from_its_config_before_a_model_loads(tmp_path, capsys, monkeypatch):
    import crossspec_ros.models.pair as pair
    from crossspec_ros.cli.main import main

    def no_loading(*_a, **_k):
        raise AssertionError("a model loaded before the parameters were checked")

    monkeypatch.setattr(pair, "load_from_params", no_loading)
    config = tmp_path / "drive.yaml"
    config.write_text("/**:\n  ros__parameters:\n    acceptance: top_k:1000\n")
    assert main(["drive", "--config", str(config), "--no-viz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{config}: node 'crossspec_verifier': 'acceptance'" in err[0]


def test_a_directory_verifier_is_read_too(tmp_path: Path):
    (tmp_path / "config.json").write_text('{"text_config": {"vocab_size": 32064}}')
    assert vocabulary_size(str(tmp_path)) == 32064
    with pytest.raises(ParameterError, match="K <= 32064"):
        check_against_vocabulary({"verifier_model": str(tmp_path),
                                  "acceptance": "top_k:40000"}, "here")
