"""`crossspec corpus` on bags that lack RGB, and its progress count (issue 36, fault 8)."""

from __future__ import annotations

import subprocess
import sys

from bag_helpers import write_bag_with_ground_truth

from crossspec_ros.cli.main import main


def test_corpus_on_a_bag_without_rgb_is_one_line_and_exit_2_before_any_model_loads(
        tmp_path, write_event_bag):
    from crossspec_ros.events.batch import EventBatch
    from crossspec_ros.events.encode import encode_evt3_packets

    batch = EventBatch([1_000, 2_000], [1, 2], [1, 2], [0, 1], 8, 8)
    bag = write_event_bag(tmp_path / "events_only",
                          [("/event_camera/events", p) for p in encode_evt3_packets(batch)])
    out = tmp_path / "captions.txt"
    code = ("import sys; from crossspec_ros.cli.main import main; "
            f"rc = main(['corpus', {str(bag)!r}, '--out', {str(out)!r}]); "
            "print(rc, 'torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert run.stdout.split() == ["2", "False"], run.stderr
    err = run.stderr.strip()
    assert err.startswith(f"crossspec corpus: {bag}: no RGB images") and "\n" not in err
    assert not out.exists()


def test_corpus_progress_ends_at_the_number_of_windows_captioned(tmp_path, capsys):
    # the ground truth of the last window is logged at its end, the next window's start:
    # the bag's time span counts one window more than the synchronizer emits
    bag = write_bag_with_ground_truth(tmp_path / "truth", unreadable=set())
    out = tmp_path / "captions.txt"
    assert main(["corpus", str(bag), "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2
    progress = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("verifier captions")]
    assert progress and progress[-1].split(": ")[1].startswith("2/2 "), progress
