"""The `crossspec` command: every subcommand answers --help, and the installed entry works."""

import argparse
import subprocess
import sys
from pathlib import Path

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


def test_node_kind_help_prints_help_instead_of_starting_the_node(capsys):
    assert main(["node", "composed", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: crossspec node")


def test_building_the_command_line_imports_no_model_or_ros_library():
    # what keeps `crossspec --help` and every subcommand's help well under a second
    code = ("import sys; from crossspec_ros.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'transformers', 'rclpy') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]"


def _caption_process(*args: str) -> subprocess.CompletedProcess:
    """`crossspec caption ARGS` in a fresh process whose environment leaves transformers'
    and the hub's verbosity unset (main() in this process may have set them)."""
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    return subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "caption", *args],
                          capture_output=True, text=True, timeout=120, env=env)


# Two caption runs, each read by two tests (loading the models is most of a run): the sample
# bag with a drafter given on the command line, quiet; a bag without ground truth, --verbose.
@pytest.fixture(scope="module")
def caption_another_drafter() -> subprocess.CompletedProcess:
    from crossspec_ros.paths import BUNDLED_PAIR, sample_bag

    return _caption_process(str(sample_bag()), "--max-windows", "2", "--drafter-model",
                            str(BUNDLED_PAIR / "distilled" / "drafter"), "--check-lossless")


@pytest.fixture(scope="module")
def pattern_bag(tmp_path_factory) -> Path:
    """A bag of moving test patterns (events and RGB, no ground truth), as a user makes it."""
    bag = tmp_path_factory.mktemp("patterns") / "patterns"
    assert main(["make-test-bag", str(bag), "--duration", "3"]) == 0
    return bag


@pytest.fixture(scope="module")
def caption_patterns_verbose(pattern_bag) -> subprocess.CompletedProcess:
    return _caption_process(str(pattern_bag), "--max-windows", "1", "--verbose")


def test_model_loading_is_quiet_unless_verbose(caption_another_drafter,
                                               caption_patterns_verbose):
    quiet, loud = caption_another_drafter, caption_patterns_verbose
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "Loading weights" not in quiet.stderr and "model of type" not in quiet.stderr
    assert loud.returncode == 0 and "Loading weights" in loud.stderr


def _bag_of_strings(tmp: Path) -> Path:
    from rosbags.rosbag2 import Writer

    from crossspec_ros.bags.typestore import typestore

    store = typestore()
    with Writer(tmp / "strings", version=9) as writer:
        conn = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=store)
        msg = store.types["std_msgs/msg/String"](data="hi")
        writer.write(conn, 1, store.serialize_cdr(msg, "std_msgs/msg/String"))
    return tmp / "strings"


BAD_BAGS = {
    "topics of other types": _bag_of_strings,
    "missing": lambda tmp: tmp / "nope",
    "empty folder": lambda tmp: (tmp / "empty").mkdir() or tmp / "empty",
    "text named .mcap": lambda tmp: (tmp / "notes.mcap").write_text("hello") and
    tmp / "notes.mcap",
}


def bag_argv(command: str, bag: Path) -> list[str]:
    return {"caption": [command, str(bag)], "drive": [command, "--bag", str(bag)],
            "corpus": [command, str(bag), "--out", str(bag.parent / "captions.txt")]}[command]


@pytest.mark.parametrize("command", ["caption", "drive", "corpus"])
@pytest.mark.parametrize("kind", sorted(BAD_BAGS))
def test_a_bad_bag_is_one_line_and_exit_2_before_any_model_loads(command, kind, tmp_path,
                                                                  capsys):
    bag = BAD_BAGS[kind](tmp_path)
    argv = bag_argv(command, bag)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"crossspec {command}: {bag}") and "\n" not in err
    if kind == "topics of other types":  # says what the bag has and what it needs
        assert "/chatter (std_msgs/msg/String)" in err and "EventPacket" in err


@pytest.mark.parametrize("command", ["caption", "drive", "corpus"])
def test_a_bad_bag_is_refused_before_torch_is_even_imported(command, tmp_path):
    argv = bag_argv(command, tmp_path)
    code = ("import sys; from crossspec_ros.cli.main import main; "
            f"rc = main({argv!r}); print(rc, 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.stdout.split() == ["2", "False"], result.stderr


def test_caption_runs_on_a_bag_without_ground_truth(caption_patterns_verbose):
    run = caption_patterns_verbose
    assert run.returncode == 0, run.stderr[-2000:]
    assert "confirmed" in run.stdout and "Traceback" not in run.stderr
    # whether or not the draft beat the verifier (load decides), the summary is printed
    assert run.stdout.strip().splitlines()[-1].startswith("1 windows captioned")


def test_a_closed_pipe_ends_the_output_quietly():
    # `crossspec windows BAG --json | head -1`
    from crossspec_ros.paths import sample_bag

    proc = subprocess.Popen([sys.executable, "-m", "crossspec_ros.cli.main", "windows",
                             str(sample_bag()), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("{")
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert "BrokenPipe" not in err and "Traceback" not in err
    assert proc.returncode == 0


def test_corpus_writes_the_verifiers_caption_of_every_window_one_per_line(pattern_bag,
                                                                           tmp_path):
    from crossspec_ros.bags.inputs import iter_bag_windows
    from crossspec_ros.models.pair import load_verifier
    from crossspec_ros.sync.synchronizer import WindowSynchronizer

    out = tmp_path / "captions.txt"
    assert main(["corpus", str(pattern_bag), "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    windows = [w for w in iter_bag_windows(pattern_bag, WindowSynchronizer()) if w.has_rgb]
    assert len(lines) == len(windows) >= 3
    verifier = load_verifier()  # each line is the verifier's greedy caption of its window
    for line, window in zip(lines, windows, strict=True):
        own = verifier.generate_greedy(verifier.prepare(window), 48)
        assert line == verifier.tokenizer.decode(own, skip_special_tokens=True).strip()


def test_corpus_without_bags_or_simulated_windows_says_what_to_give(tmp_path, capsys):
    assert main(["corpus", "--out", str(tmp_path / "c.txt")]) == 2
    assert "give bags, --sim-windows N, or both" in capsys.readouterr().err


def test_train_tiny_never_writes_into_the_package_by_default(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train-tiny"])
    assert exit_info.value.code == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["caption", "drive"])
def test_model_options_are_checked_like_the_node_parameters(command, capsys):
    assert main([command, "--device", "tpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"crossspec {command}: command line: 'device' = 'tpu' is invalid: must be "
                   "cpu, cuda or cuda:N (cpu, cuda or cuda:N (cuda without a GPU is an error "
                   "at startup))")


def test_caption_runs_another_drafter_given_on_the_command_line(caption_another_drafter):
    run = caption_another_drafter
    assert run.returncode == 0, run.stderr[-2000:]
    assert "2 windows captioned" in run.stdout and "lossless 2/2" in run.stdout
