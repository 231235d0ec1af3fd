"""The `crossspec` command: every subcommand answers --help, and the installed entry works."""

import argparse
import subprocess
import sys

import pytest

from crossspec_ros.cli.main import build_parser, main


def subcommand_paths(parser: argparse.ArgumentParser, prefix=()) -> list[tuple[str, ...]]:
    paths = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths.append((*prefix, name))
                paths.extend(subcommand_paths(sub, (*prefix, name)))
    return paths


PATHS = subcommand_paths(build_parser())


def test_the_cli_has_the_documented_subcommands():
    names = {" ".join(p) for p in PATHS}
    assert {"events", "windows", "make-test-bag", "bench", "bench decode",
            "bench engine"} <= names


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) for p in PATHS])
def test_every_subcommand_has_help(path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: crossspec " + " ".join(path))
    assert len(out.splitlines()) > 3


def test_no_subcommand_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_installed_console_script_runs():
    result = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "--version"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("crossspec ")
