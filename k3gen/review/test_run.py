"""`k3gen test [REV]`: print the tests a change touches (k3gen.review.impact), then run them with pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from k3gen.review.impact import SCOPE_ENV, TestImpact


def describe(impact: TestImpact, base: str) -> str:
    lines = [f"k3gen test: {base} → work tree: {len(impact.changed)} changed paths"]
    lines += [f"  families touched: {', '.join(impact.families) or 'none'}"]
    if impact.everything:
        lines += [f"  every test runs: {impact.everything}"]
    lines += ["selected:"] + [f"  {s.path}: {s.why}" for s in impact.selected]
    if impact.unaffected:
        lines += ["unaffected:"] + [f"  {path}: {why}" for path, why in impact.unaffected]
    return "\n".join(lines) + "\n"


def run(root: Path, impact: TestImpact, pytest_args: list[str]) -> int:
    """pytest on the selected files, in root; its exit code (0 when nothing is selected)."""
    if not impact.selected:
        print("k3gen test: no test reads what changed; nothing to run")
        return 0
    env = {**os.environ, SCOPE_ENV: impact.scope()}
    cmd = [sys.executable, "-m", "pytest", *[s.path for s in impact.selected], *pytest_args]
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=root, env=env, check=False).returncode
