"""The README and docs/: links that resolve, quoted paths, parameters, launch arguments and
commands that exist, and the generated parameter page kept current."""

import ast
import re
from pathlib import Path

import pytest

from crossspec_ros.cli.main import build_parser
from crossspec_ros.nodes.graph import node_parameters
from crossspec_ros.params import RCLPY_PARAMS, parameters_markdown

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REPO_DIRS = ("crossspec_ros/", "config/", "scripts/", "test/", "docs/", "launch/", "rosbags/",
             "msg/", "action/")


def _ids(pages):
    return [str(p.relative_to(ROOT)) for p in pages]


def _launch_arguments() -> set[str]:
    tree = ast.parse((ROOT / "launch" / "drive.launch.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ARGUMENTS":
            return {key.value for key in node.value.keys}
    raise AssertionError("launch/drive.launch.py has no ARGUMENTS")


def test_the_parameter_page_is_what_the_declarations_generate():
    page = (ROOT / "docs" / "parameters.md").read_text()
    assert page == parameters_markdown(node_parameters()) + "\n", \
        "docs/parameters.md is stale: crossspec params --markdown > docs/parameters.md"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_relative_link_resolves(page):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name}: link to missing {target}"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_repository_path_quoted_exists(page):
    for quoted in re.findall(r"`([^`\s]+)`", page.read_text()):
        path = quoted.rstrip(".,:;")
        if not path.startswith(REPO_DIRS) or any(c in path for c in "*<>{}$"):
            continue
        assert (ROOT / path).exists(), f"{page.name}: `{quoted}` does not exist"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_parameter_set_on_a_command_line_is_declared(page):
    declared = {p.name for spec in node_parameters().values() for p in spec}
    declared |= {p.name for p in RCLPY_PARAMS} | _launch_arguments()
    # a remap (-r FROM:=TO) names a topic, not a parameter
    for name in re.findall(r"(?<![\w-])(?<!-r )(?<!--remap )([a-z][a-z0-9_]*):=",
                           page.read_text()):
        assert name in declared, f"{page.name}: {name}:= is no parameter or launch argument"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_crossspec_command_quoted_exists(page):
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    text = page.read_text()
    code = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S))
    # quoted inline, or a command line of a code block
    names = re.findall(r"`crossspec ([a-z][a-z0-9-]*)", text)
    names += re.findall(r"^\s*crossspec ([a-z][a-z0-9-]*)", code, re.M)
    assert names or page.name not in ("cli.md", "README.md"), "no command found"
    for name in names:
        assert name in commands, f"{page.name}: `crossspec {name}` is no command"


def test_the_front_page_fits_on_two_screens():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 100, f"README.md has {len(lines)} lines"


def test_crossspec_params_lists_every_parameter_of_every_node(capsys):
    from crossspec_ros.cli.main import main

    assert main(["params"]) == 0
    out = capsys.readouterr().out
    for node, spec in node_parameters().items():
        assert f"{node}:" in out
        for p in spec:
            assert f"  {p.name} = {p.default!r}" in out


def test_the_live_parameters_in_ros_md_are_what_the_declarations_generate():
    # issue 45, item 11: a hand-written list there left out `acceptance`
    from crossspec_ros.params import LIVE_PARAMETERS_MARK, live_parameters_markdown

    page = (ROOT / "docs" / "ros.md").read_text()
    begin, end = LIVE_PARAMETERS_MARK
    assert page.count(begin) == 1 and page.count(end) == 1, "docs/ros.md lost its markers"
    block = page.split(begin, 1)[1].split(end, 1)[0]
    assert block.strip() == live_parameters_markdown(node_parameters()), \
        "docs/ros.md's live parameters are stale: crossspec params --live"
    assert "`acceptance`" in block
