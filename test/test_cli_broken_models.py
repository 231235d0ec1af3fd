"""A damaged model directory given to a command: one line naming the file and what to do,
exit 2, no traceback (issue 36, fault 7). The library side: test_models_loading.py."""

from __future__ import annotations

import shutil

import pytest

from crossspec_ros.cli.main import main
from crossspec_ros.paths import BUNDLED_PAIR


def _damaged_copy(tmp_path, part: str, damage: str):
    directory = tmp_path / part
    shutil.copytree(BUNDLED_PAIR / part, directory)
    if damage == "config.json array":
        broken = directory / "config.json"
        broken.write_text("[1, 2]")
    else:
        broken = directory / "model.safetensors"
        data = broken.read_bytes()
        broken.write_bytes(data[:len(data) // 2])
    return directory, broken


@pytest.mark.parametrize("damage", ["config.json array", "model.safetensors cut short"])
@pytest.mark.parametrize("part", ["verifier", "drafter"])
@pytest.mark.parametrize("command", ["caption", "drive"])
def test_a_broken_model_directory_on_the_command_line_is_one_line_and_exit_2(
        command, part, damage, tmp_path, capsys):
    directory, broken = _damaged_copy(tmp_path, part, damage)
    argv = [command, f"--{part}-model", str(directory), "--max-windows", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"crossspec {command}: {broken} ") and "\n" not in err
    assert "copy it again" in err


def test_a_broken_model_in_a_pair_directory_is_one_line_and_exit_2_too(tmp_path, capsys):
    # caption --models DIR reaches the loaders without the command-line check
    pair = tmp_path / "pair"
    pair.mkdir()
    shutil.copytree(BUNDLED_PAIR / "verifier", pair / "verifier")
    _, broken = _damaged_copy(pair, "drafter", "config.json array")
    assert main(["caption", "--models", str(pair), "--max-windows", "1"]) == 2
    # (the verifier loaded first; in-process, its progress bar may show above)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"crossspec caption: {broken} must hold a JSON object")


@pytest.mark.parametrize("command", ["eval-draft", "bench engine"])
def test_every_command_that_loads_a_user_model_says_so_in_one_line(command, tmp_path,
                                                                    capsys):
    # commands without their own handling: main's, for every ModelLoadError
    head = tmp_path / "head"
    shutil.copytree(BUNDLED_PAIR / "distilled_head" / "head", head)
    (head / "head.json").write_text("[]")
    argv = {"eval-draft": ["eval-draft", "--head", str(head), "--windows", "1"],
            "bench engine": ["bench", "engine", "--head", str(head), "--windows", "3",
                             "--warmup", "1", "--no-prompt-lookup"]}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"crossspec {command}: {head / 'head.json'} must hold a JSON object")
