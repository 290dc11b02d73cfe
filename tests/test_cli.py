"""The command line: help texts, unknown families, and what a family import says without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from k3gen.cli import COMMANDS, main, make_parser

from support import ROOT, SPEC_FILE, copy_project


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_a_description_and_an_example(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    help_line = COMMANDS[command][1]
    assert f"k3gen {command}: {help_line}." in " ".join(out.split())
    examples = out.split("\nexample", 1)[1]
    assert f"  k3gen {command}" in examples or "  k3gen --root" in examples


def test_the_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--family", "nosuch"],
        ["list", "--family", "situ_and_mul,nosuch"],
        ["compile", "--family", "nosuch"],
        ["diff", "--family", "nosuch"],
    ],
    ids=["list", "list, one of two", "compile", "diff"],
)
def test_an_unknown_family_exits_2_listing_the_families(tmp_path, capsys, argv):
    project = copy_project(tmp_path / "proj", (SPEC_FILE, "specs/route_topk.yaml"))
    if argv[0] != "list":  # compile refuses a stale tree first; diff needs git
        assert main(["--root", str(project), "build"]) == 0
        for git in (
            ["init", "-q", "-b", "main"],
            ["add", "-A"],
            ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base"],
        ):
            subprocess.run(["git", "-C", str(project), *git], check=True)
    capsys.readouterr()
    assert main(["--root", str(project), *argv]) == 2
    assert capsys.readouterr().err == (
        f"k3gen {argv[0]}: unknown family 'nosuch'; families: route_topk, situ_and_mul\n"
    )


def test_list_of_one_family(capsys):
    assert main(["--root", str(ROOT), "list", "--family", "route_topk"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("route_topk__") for line in lines[1:-1]) and lines[-1] == "12 specializations"


def test_importing_a_family_without_torch_says_how_to_install_it():
    code = "import sys\nsys.modules['torch'] = None\nimport k3kernels.situ_and_mul\n"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{ROOT}:{ROOT / 'generated'}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: k3kernels needs torch, which is not installed here; from the k3gen checkout run "
        "pip install -e '.[runtime]' (torch and ninja)"
    )


def test_diff_family_leaves_the_revision_alone():
    args = make_parser().parse_args(["diff", "--family", "a,b", "HEAD~1", "--family", "c"])
    assert (args.rev, args.family) == ("HEAD~1", ["a,b", "c"])
