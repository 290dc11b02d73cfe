"""Every edit the README and docs/ describe, applied together to a copy of the whole project, leaves
the project's own tests green: the tests pin no committed spec text, they read what they expect.

The edits (README "Adding a dtype and a router", docs/spec-reference.md, docs/tuning.md,
docs/serving.md): a dtype on a router's score axis, an arch on per_token_group_quant's CUDA targets
(sm_89: no PDL) and on situ_and_mul's (the newest, PDL on), a group size, a runner in
specs/runners.yaml, a new router spec, a tuning bucket, a tuning fallback. Each is made by field
(tests/spec_yaml.py), on whatever the specs hold. Then `k3gen build` (the README's and docs'
figures too), `k3gen check`, and `k3gen test` on the copy: the tests of tests/ that read what the
edits changed, and the edited families' generated tests, with pytest, as a contributor's PR runs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import spec_yaml
from support import ROOT

INSIDE = "K3GEN_EDITED_COPY"  # set in the copy's run: this test does not run itself again there
pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="k3gen test needs git"),
    pytest.mark.skipif(bool(os.environ.get(INSIDE)), reason="the run inside the edited copy"),
]


def _arch_on_quant(root: Path) -> str:
    spec = root / "specs/per_token_group_quant.yaml"
    if "sm_89" not in spec_yaml.get(spec, ("targets", "cuda")):  # Ada: fp8 conversions, no PDL
        spec_yaml.add(spec, ("targets", "cuda"), "sm_89", first=True)
    return "per_token_group_quant: targets.cuda has sm_89"


def _newest_arch_on_situ(root: Path) -> str:
    """The newest CUDA arch situ_and_mul lacks, with PDL on it as on the others."""
    from k3gen.runtime.archs import known

    spec = root / "specs/situ_and_mul.yaml"
    arch = next((a for a in reversed(known("cuda")) if a not in spec_yaml.get(spec, ("targets", "cuda"))), None)
    if arch is None:
        return "situ_and_mul: every CUDA arch already"
    spec_yaml.add(spec, ("targets", "cuda"), arch)
    spec_yaml.add(spec, ("flags", "pdl", "archs"), arch)
    return f"situ_and_mul: targets.cuda and flags.pdl have {arch}"


def _group_size(root: Path) -> str:
    """group_size 256 beside the others, the budget it needs (a new value adds units), and test
    sizes of K that every group size divides (the totality check asks for them)."""
    spec = root / "specs/per_token_group_quant.yaml"
    values = spec_yaml.get(spec, ("params", "group_size", "values"))
    if 256 not in values:
        spec_yaml.add(spec, ("params", "group_size", "values"), 256)
        budget = spec_yaml.get(spec, ("budget",))
        spec_yaml.put(spec, ("budget",), {k: v * 2 for k, v in budget.items()})
    ks = spec_yaml.get(spec, ("tests", "dims", "K"))
    spec_yaml.put(spec, ("tests", "dims", "K"), sorted({-(-k // 256) * 256 for k in ks}))
    return "per_token_group_quant: group_size 256"


def _router_dtype(root: Path) -> str:
    spec = root / "specs/route_mixtral.yaml"
    if "fp16" not in spec_yaml.get(spec, ("dtypes", "axes", "score")):
        spec_yaml.add(spec, ("dtypes", "axes", "score"), "fp16")
    return "route_mixtral: score fp16"


def _runner(root: Path) -> str:
    spec = root / "specs/runners.yaml"
    row = {"name": "k3_edit_runner", "archs": ["sm_90a"], "consumes": "dense_bf16", "summary": "a runner added"}
    spec_yaml.add(spec, ("runners",), row)
    return "specs/runners.yaml: runner k3_edit_runner"


def _new_router(root: Path) -> str:
    spec = root / "specs/route_e16_k2.yaml"
    shutil.copy(root / "specs/route_mixtral.yaml", spec)
    spec_yaml.put(spec, ("kernel",), "route_e16_k2")
    spec_yaml.put(spec, ("constants", "num_experts"), 16)
    return "specs/route_e16_k2.yaml: a new router (16 experts, top-2)"


def _bucket(root: Path) -> str:
    """A bucket between the last two, and a test size in it (every bucket is tested)."""
    spec = root / "specs/situ_and_mul.yaml"
    buckets = spec_yaml.get(spec, ("tuning", "buckets"))
    new = (buckets[-2] + buckets[-1]) // 2
    spec_yaml.put(spec, ("tuning", "buckets"), [*buckets[:-1], new, buckets[-1]])
    spec_yaml.put(spec, ("tests", "dims", "M"), sorted({*spec_yaml.get(spec, ("tests", "dims", "M")), new}))
    return f"situ_and_mul: bucket M <= {new}"


def _fallback(root: Path) -> str:
    """A declared nearest device (docs/tuning.md, A table per device): route_topk's first table serves a
    GPU with none of its own."""
    tables = sorted((root / "specs/tuning").glob("route_topk.*.yaml"))
    if not tables:
        return "route_topk: no table to fall back on"
    device = tables[0].name.split(".")[1]
    spec = root / "specs/route_topk.yaml"
    spec_yaml.put(spec, ("tuning",), {**spec_yaml.get(spec, ("tuning",)), "fallback": device})
    return f"route_topk: tuning.fallback {device}"


EDITS = (
    _arch_on_quant,
    _newest_arch_on_situ,
    _group_size,
    _router_dtype,
    _runner,
    _new_router,
    _bucket,
    _fallback,
)
# Left out of the copy's run: they compile (10 minutes for these edits' units on CI's 2 cores), and
# what they compile is the plan's cells, which pin nothing. tests/test_spec_edits.py compiles the
# units such edits add; the committed tree's run compiles every unit.
COMPILERS = (
    "tests/test_compile.py",
    "tests/test_route_host.py",
    "tests/test_package.py",
    "tests/test_hub.py",
    "tests/test_farm.py",
)


def _sh(root: Path, *cmd: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "generated")]), **{INSIDE: "1"})
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def _copy(dest: Path) -> Path:
    """The tracked files of the project (as a clean clone has them), committed in a repository of its own."""
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    git = ["git", "-C", str(dest), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "bundled"], check=True)
    return dest


def test_every_documented_edit_leaves_the_tests_green(tmp_path):
    root = _copy(tmp_path / "project")
    made = [edit(root) for edit in EDITS]
    for step in (("k3gen", "build"), ("k3gen", "check")):
        done = _sh(root, sys.executable, "-m", *step)
        assert done.returncode == 0, f"{' '.join(step)} after {made}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    skip = [arg for module in COMPILERS for arg in ("--deselect", module)]
    done = _sh(root, sys.executable, "-m", "k3gen", "test", "HEAD", "--", "-q", "-p", "no:cacheprovider", *skip)
    tail = done.stdout[-6000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"after {made}:\n{tail}"
    assert "every test runs" not in done.stdout, tail  # the edits touch specs only: a selection, not all
    assert " passed" in done.stdout.splitlines()[-1], tail
