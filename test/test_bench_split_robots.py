"""`crossspec bench split --robots N`'s plan, arguments and outage comparison, without network
namespaces (the run itself: test_bench_split.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from crossspec_ros.bench import split
from crossspec_ros.bench.split_outage import effect_line, outage_effects
from crossspec_ros.paths import sample_bag

SECOND_NS = 1_000_000_000


def _args(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"robots": 1, "duration": None, "node_timeout": 300.0,
                                 **given})


def test_several_robots_replay_disjoint_stretches_a_window_apart(tmp_path):
    # the sample bag: 24 s of 1-s windows
    one, two = split.plan_robots(sample_bag(), _args(robots=2), tmp_path)
    assert [(r.name, r.namespace, r.start_s, r.seconds) for r in (one, two)] == \
        [("robot1", "robot1", 0.0, 11.0), ("robot2", "robot2", 12.0, 11.0)]
    assert len(one.windows) >= 11 and len(two.windows) >= 11
    assert not set(one.windows) & set(two.windows)
    three = split.plan_robots(sample_bag(), _args(robots=3, duration=5.0), tmp_path)
    assert [r.start_s for r in three] == [0.0, 6.0, 12.0]
    assert not set(three[0].windows) & set(three[1].windows)


def test_one_robot_replays_the_bag_from_its_start_on_todays_topics(tmp_path):
    (robot,) = split.plan_robots(sample_bag(), _args(duration=8.0), tmp_path)
    assert (robot.name, robot.namespace, robot.start_s, robot.seconds, robot.windows) == \
        ("robot", "", 0.0, 8.0, None)
    assert (robot.seen.name, robot.player_log.name) == ("robot.jsonl", "player.log")
    assert split.monitor_topics(robot) == []
    assert split.draft_ros_args("", robot) == ["--ros-args", "-p", "use_sim_time:=true"]
    assert split.verifier_ros_args("", [robot]) == ["--ros-args", "-p", "use_sim_time:=true"]
    player = split._player_argv(["py", "-m"], Path("b"), _args(duration=8.0), robot)
    assert player[player.index("--wait-active"):] == \
        ["--wait-active", "crossspec_draft", "crossspec_verifier", "--duration", "8.0"]


def test_each_robot_runs_in_its_namespace_and_the_verifier_takes_them_as_streams(tmp_path):
    one, two = split.plan_robots(sample_bag(), _args(robots=2, duration=4.0), tmp_path)
    assert (two.seen.name, two.player_log.name, two.file("draft")) == \
        ("robot2.jsonl", "robot2-player.log", "robot2-draft")
    assert split.monitor_topics(two) == [
        "--caption-topic=/robot2/crossspec/caption", "--draft-topic=/robot2/crossspec/draft",
        "--confirmed-topic=/robot2/crossspec/confirmed"]
    # its own clock (the player publishes robot2/clock), its own namespace
    assert split.draft_ros_args("", two) == ["--ros-args", "-p", "use_sim_time:=true", "-r",
                                             "__ns:=/robot2", "-r", "/clock:=clock"]
    assert split.verifier_ros_args("", [one, two]) == \
        ["--ros-args", "-p", "streams:=robot1,robot2"]
    player = split._player_argv(["py", "-m"], Path("b"), _args(robots=2, duration=4.0), two)
    assert player[player.index("--namespace"):] == [
        "--namespace", "robot2", "--start", "5.0", "--duration", "4.0", "--wait-active",
        "crossspec_draft", "/crossspec_verifier"]  # its draft node, the server's verifier


@pytest.mark.parametrize(("given", "why"), [
    (["--robots", "2", "--duration", "12"], "--robots 2: 2 robots need 2 disjoint stretches "
     "of the bag a window apart: 24.0 s of bag do not hold 2 x 12.0 s; pass a shorter "
     "--duration or a longer --bag"),
    (["--robots", "2", "--emulate", "h200-bf16-static-2026-11-27"], "--emulate with --robots "
     "> 1 is not built: the lossless check has no laned reference yet; run the robots "
     "unemulated")])
def test_a_plan_that_cannot_run_is_refused_in_one_line_before_any_host_is_made(
        given, why, monkeypatch, capsys):
    from crossspec_ros.bench import netns
    from crossspec_ros.cli.main import main

    made = []
    monkeypatch.setattr(netns, "available", lambda: (True, ""))
    monkeypatch.setattr(netns.SplitHosts, "__enter__", lambda self: made.append(self))
    assert main(["bench", "split", *given]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"crossspec bench split: {why}"
    assert made == []


def _row(robot: str, fault: str, repeat: int, at_robot: dict[int, float], here=False) -> dict:
    return {"robot": robot, "fault": fault, "fault_here": here, "repeat": repeat,
            "link_mbit": 20.0, "images": "compressed", "_at_robot": at_robot}


def test_the_outage_effect_pairs_the_other_robots_windows_run_by_run():
    rows = [_row("robot1", "none", 1, {0: 50.0}), _row("robot2", "none", 1, {12: 40.0, 13: 60.0}),
            _row("robot1", "link-down", 1, {0: 90.0}, here=True),
            _row("robot2", "link-down", 1, {12: 42.0, 13: 63.0, 14: 500.0}),
            _row("robot2", "none", 2, {12: 40.0}), _row("robot2", "link-down", 2, {12: 40.0})]
    (effect,) = outage_effects(rows)
    # window 14 has no partner; the faulted robot is not compared with itself
    assert (effect["robot"], effect["outage_on"], effect["windows_paired"],
            effect["repeats"]) == ("robot2", "robot1", 3, 2)
    assert (effect["without_ms_median"], effect["with_ms_median"], effect["ratio"]) == \
        (40.0, 42.0, 1.05)
    assert effect["paired_diff_ms"]["median"] == 2.0
    assert effect["within_10pct"] and not effect["slower_by_over_10pct"]
    assert "x1.05: within 10%" in effect_line(effect)
    slower = outage_effects([_row("robot2", "none", 1, {12: 40.0}),
                             _row("robot2", "link-down", 1, {12: 60.0})])[0]
    assert slower["slower_by_over_10pct"] and "slower by more than 10%" in effect_line(slower)
    faster = outage_effects([_row("robot2", "none", 1, {12: 60.0}),
                             _row("robot2", "link-down", 1, {12: 40.0})])[0]
    assert not faster["within_10pct"] and not faster["slower_by_over_10pct"]
    assert "faster by more than 10%" in effect_line(faster)


def test_no_run_without_the_outage_means_no_effect_is_claimed():
    assert outage_effects([_row("robot2", "link-down", 1, {12: 40.0})]) == []
    assert outage_effects([{**_row("robot", "none", 1, {0: 1.0})}]
                          ) == outage_effects([])  # one robot's rows carry no fault_here


def test_another_robots_outage_counts_the_captions_that_came_meanwhile():
    records = [{"kind": "draft", "window": 12, "t": 10.0, "first_token_ms": -50.0},
               {"kind": "draft", "window": 13, "t": 11.0, "first_token_ms": -50.0},
               *[{"kind": "caption", "window": w, "t": t, "status": split.FINAL,
                  "confirmed_text": "a", "draft_text": "a", "confirmed_done_ms": 10.0}
                 for w, t in ((12, 10.1), (13, 11.1))]]
    fault = {"kind": "link-down", "fault_start": 10.5, "fault_end": 13.5}
    row = split.summarize(records, fault, hit=False)
    assert row["final_during_fault"] == 1 and "fault_s" not in row
    assert "fault_s" in split.summarize(records, fault, hit=True)
