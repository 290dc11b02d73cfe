"""`k3gen new NAME`: a scaffolded family builds, its oracle says what to fill in, bad names are refused."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from k3gen.cli import main

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/
# (its projects are copies of tests/data's frozen specs and of templates/).
READS = ("templates/**",)

NAME = "my_copy"
SCAFFOLDED = [
    f"specs/{NAME}.yaml",
    f"templates/{NAME}/kernel.cuh.j2",
    f"k3gen/oracles/{NAME}.py",
    f"templates/{NAME}/limits.yaml",
]


def k3gen(project: Path, *args: str) -> int:
    return main(["--root", str(project), *args])


@pytest.fixture
def scaffolded(project: Path, capsys) -> Path:
    assert k3gen(project, "new", NAME) == 0
    out = capsys.readouterr().out
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("  wrote")] == SCAFFOLDED
    assert "run `k3gen build`" in out
    return project


def oracle_of(project: Path):
    """The scaffolded oracle, imported from its file (the package's k3gen.oracles is the real project's)."""
    spec = importlib.util.spec_from_file_location(f"scaffolded_{NAME}", project / f"k3gen/oracles/{NAME}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scaffold_builds_with_a_test_module(scaffolded: Path, capsys):
    assert all((scaffolded / f).is_file() for f in SCAFFOLDED)
    assert k3gen(scaffolded, "build") == 0
    assert "2 families" in capsys.readouterr().out.splitlines()[-1]
    gen = scaffolded / "generated"
    assert (gen / f"tests/test_{NAME}.py").is_file()
    assert (gen / f"k3kernels/{NAME}.py").is_file()
    assert (gen / f"docs/{NAME}.md").is_file()
    assert sorted(p.name for p in (gen / f"k3kernels/csrc/{NAME}").glob("*.cu")) == [
        "dispatch.cu",
        f"{NAME}__in_bf16.cu",
        f"{NAME}__in_fp32.cu",
    ]
    assert f"import k3gen.oracles.{NAME} as oracle" in (gen / f"tests/test_{NAME}.py").read_text()


def test_the_oracle_fails_until_filled_in(scaffolded: Path):
    oracle = oracle_of(scaffolded)
    variant = {"in": "bf16", "fast_math": False, "vec": 8}
    args = oracle.make_args(variant, {"M": 3, "N": 256}, "strided", 0, device="cpu")
    assert args["x"].shape == (3, 256) and args["x"].dtype == torch.bfloat16 and args["x"].stride(0) == 320
    with pytest.raises(NotImplementedError, match=f"^fill in the oracle: k3gen/oracles/{NAME}.py$"):
        oracle.reference(variant, **args)


@pytest.mark.parametrize("name", ["My-Kernel", "2fast", "snake-case", "class", "csrc", "common", ""])
def test_invalid_names_are_refused(project: Path, name: str, capsys):
    before = sorted(p for p in project.rglob("*"))
    assert k3gen(project, "new", name) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"k3gen new: '{name}' is ")
    assert "is not a valid name" in err or "is reserved" in err
    assert sorted(p for p in project.rglob("*")) == before


def test_existing_names_are_refused(scaffolded: Path, capsys):
    spec = (scaffolded / SCAFFOLDED[0]).read_text()
    assert k3gen(scaffolded, "new", NAME) == 2
    assert capsys.readouterr().err == (
        f"k3gen new: family '{NAME}' already exists: {', '.join(SCAFFOLDED)}; pick another name, or edit that spec\n"
    )
    assert (scaffolded / SCAFFOLDED[0]).read_text() == spec
    assert k3gen(scaffolded, "new", "situ_and_mul") == 2
    assert "family 'situ_and_mul' already exists: specs/situ_and_mul.yaml" in capsys.readouterr().err


def test_a_kernel_declared_under_another_file_name_is_taken(project: Path, capsys):
    shutil.move(project / "specs/situ_and_mul.yaml", project / "specs/activations.yaml")
    shutil.rmtree(project / "templates/situ_and_mul")
    (project / "k3gen/oracles/situ_and_mul.py").unlink()
    assert k3gen(project, "new", "situ_and_mul") == 2
    assert "specs/activations.yaml (kernel: situ_and_mul)" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_the_scaffolded_kernel_compiles(scaffolded: Path, capsys, tmp_path: Path):
    from k3gen.runtime.toolchain import compile_flags

    assert k3gen(scaffolded, "build") == 0
    csrc = scaffolded / f"generated/k3kernels/csrc/{NAME}"
    done = subprocess.run(
        [
            "nvcc",
            *compile_flags("sm_90a", [], csrc.parent),
            "-c",
            f"{NAME}__in_bf16.cu",
            "-o",
            str(tmp_path / "unit.o"),
        ],
        cwd=csrc,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
