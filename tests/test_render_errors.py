"""A template that fails to render is a located error, not a traceback: the spec's file and the line
of its `template:` key, the template file and line, and what failed; every family's at once (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3gen.cli import main

from support import SPEC_FILE, copy_project

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/
# (its projects are copies of tests/data's frozen specs and of templates/).
READS = ("templates/**",)

KERNEL = "templates/situ_and_mul/kernel.cuh.j2"
HEAD = 'specs/situ_and_mul.yaml:4 (kernel "situ_and_mul", template): rendering '


def break_line(project: Path, line: str) -> int:
    """Append `line` to the family's kernel template; return its line number there."""
    path = project / KERNEL
    text = path.read_text()
    path.write_text(text + line + "\n")
    return text.count("\n") + 1


@pytest.mark.parametrize(
    "line, what",
    [
        (
            "{{ fam.no_such_field }}",
            "UndefinedError: 'k3gen.render.views.FamilyView object' has no attribute 'no_such_field'",
        ),
        (
            '{{ fam.constants["no_such_constant"] }}',
            "UndefinedError: 'dict object' has no attribute 'no_such_constant'",
        ),
    ],
    ids=["undefined", "undefined key"],
)
def test_a_render_failure_names_spec_template_and_line(tmp_path, capsys, line, what):
    project = copy_project(tmp_path / "proj", (SPEC_FILE, "specs/route_topk.yaml"))
    n = break_line(project, line)
    assert main(["--root", str(project), "build"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("1 spec error:\n")
    assert f"  {HEAD}{KERNEL}:{n} failed: {what}; the spec asks for something" in err
    assert "Traceback" not in err
    assert not (project / "generated").exists()  # nothing written


def test_a_template_syntax_error_is_located_too(tmp_path, capsys):
    project = copy_project(tmp_path / "proj")
    n = break_line(project, "{% if %}")
    assert main(["--root", str(project), "check"]) == 2
    assert f"{HEAD}{KERNEL}:{n} failed: TemplateSyntaxError: " in capsys.readouterr().err


def test_a_plan_failure_is_located_at_the_spec(tmp_path, capsys, monkeypatch):
    """What the loader's checks miss and the plan trips on names the spec, not a traceback."""
    import k3gen.plan.resolve

    def broken(spec):
        raise KeyError("bf61")

    monkeypatch.setattr(k3gen.plan.resolve, "_arg_fields", broken)  # read by the plan alone, after every load check
    project = copy_project(tmp_path / "proj")
    assert main(["--root", str(project), "build"]) == 2
    assert capsys.readouterr().err == (
        '1 spec error:\n  specs/situ_and_mul.yaml:2 (kernel "situ_and_mul", kernel): k3gen cannot resolve this spec '
        "(KeyError: 'bf61'); a rule k3gen.spec.rules lacks: report it with this spec\n"
    )
