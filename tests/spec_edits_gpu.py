"""Prepare the GPU half of the spec-edit suite (tests/spec_edits.py) on a machine with k3gen's build
dependencies (pydantic, jinja2): for every valid edit, a copy of the frozen project with the edit,
built, and reduced to what its generated tests need on a GPU machine that has torch, pytest, ninja
and nvcc only:

    build/spec_edits/<edit>/generated/                     the copy's k3gen build output
    build/spec_edits/<edit>/k3gen/{__init__,dtypes,testing}.py   the package root, dtype table, test helpers
    build/spec_edits/<edit>/k3gen/{runtime,oracles}/
    build/spec_edits/<edit>/EDIT.json                      what the edit is, and which tests to run
    build/spec_edits/run.py                                runs them there (tests/spec_edits_gpu_run.py)

    python tests/spec_edits_gpu.py [--out build/spec_edits] [EDIT ...]     # here
    python build/spec_edits/run.py                                        # on the GPU machine

build/ is git-ignored; the copies are rebuilt from scratch each time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/: spec_edits, support

from spec_edits import EDITS, make_copy
from support import ROOT

RUNNER = Path(__file__).resolve().parent / "spec_edits_gpu_run.py"
# What a generated test imports besides torch and pytest: the runtime and the oracles (with the harness).
K3GEN_FILES = ["__init__.py"]
K3GEN_DIRS = ["runtime", "oracles"]


def prepare(out: Path, names: list[str]) -> list[str]:
    from k3gen.cli import main

    edits = [e for e in EDITS if e.valid and (not names or e.name in names)]
    unknown = sorted(set(names) - {e.name for e in EDITS if e.valid})
    if unknown:
        raise SystemExit(f"not valid edits of tests/spec_edits.py: {', '.join(unknown)}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for edit in edits:
        with tempfile.TemporaryDirectory() as tmp:
            project = make_copy(edit, Path(tmp) / "proj")
            with contextlib.redirect_stdout(io.StringIO()) as said:  # one line per edit is enough
                if main(["--root", str(project), "build"]):
                    raise SystemExit(f"{edit.name}: k3gen build failed\n{said.getvalue()}")
            dest = out / edit.name
            shutil.copytree(project / "generated", dest / "generated", ignore=shutil.ignore_patterns("docs"))
            for name in K3GEN_FILES:
                (dest / "k3gen").mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / "k3gen" / name, dest / "k3gen" / name)
            for name in K3GEN_DIRS:  # the copy's oracles are the work tree's: edits change specs only
                shutil.copytree(
                    ROOT / "k3gen" / name, dest / "k3gen" / name, ignore=shutil.ignore_patterns("__pycache__")
                )
        (dest / "pytest.ini").write_text("[pytest]\n")  # the copy is its own rootdir: no outer config
        (dest / "EDIT.json").write_text(
            json.dumps(
                {
                    "name": edit.name,
                    "why": edit.why,
                    "family": edit.family,
                    "tests": edit.test_files(),
                    "notes": edit.notes,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"  {edit.name}: {edit.why} ({edit.family})")
    shutil.copy(RUNNER, out / "run.py")
    return [e.name for e in edits]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "spec_edits")
    parser.add_argument("edits", nargs="*", help="valid edits to prepare (default: all)")
    args = parser.parse_args(argv)
    names = prepare(args.out, args.edits)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"prepared {len(names)} edits in {args.out} ({size / 2**20:.1f} MiB): {', '.join(names)}")
    print(
        f"on the GPU machine: python {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}/run.py"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
