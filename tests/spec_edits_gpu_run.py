"""Run the generated tests of every prepared spec edit (tests/spec_edits_gpu.py) on a GPU machine.

Needs python, torch, pytest, ninja and nvcc: no k3gen build dependencies. Copied to
build/spec_edits/run.py; run from anywhere:

    python build/spec_edits/run.py [EDIT ...] [--json FILE] [--logs DIR] [--timeout SECONDS]

Each edit's copy is its own project (its own k3kernels package, k3gen runtime and oracles): pytest
runs in it, in a fresh interpreter, on the edit's generated tests. One line per edit with the counts,
then a total; exit 1 if any test failed or errored (or a run timed out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_edit(edit_dir: Path, timeout: int) -> dict:
    meta = json.loads((edit_dir / "EDIT.json").read_text())
    junit = edit_dir / "junit.xml"
    junit.unlink(missing_ok=True)
    # The copy first: its k3gen package and k3kernels shadow any installed ones.
    path = [str(edit_dir), str(edit_dir / "generated"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfE",
        f"--junitxml={junit}",
        *meta["tests"],
    ]
    start = time.time()
    try:
        done = subprocess.run(cmd, cwd=edit_dir, env=env, capture_output=True, text=True, timeout=timeout)
        rc, log = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, log = "timeout", f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout}s"
    (edit_dir / "pytest.log").write_text(log if isinstance(log, str) else log.decode(errors="replace"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if junit.is_file():
        for suite in ET.parse(junit).getroot().iter("testsuite"):
            for key in counts:
                counts[key] += int(suite.get(key, 0))
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {
        "edit": meta["name"],
        "family": meta["family"],
        "passed": passed,
        "failed": counts["failures"],
        "errors": counts["errors"],
        "skipped": counts["skipped"],
        "rc": rc,
        "seconds": round(time.time() - start),
        "ok": rc == 0 and counts["failures"] == 0 and counts["errors"] == 0 and passed > 0,
        "log": str(edit_dir / "pytest.log"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("edits", nargs="*", help="edit names (default: every prepared edit)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--logs", type=Path, help="copy each edit's pytest log here, as EDIT.log")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per edit")
    args = parser.parse_args(argv)
    dirs = sorted(d for d in HERE.iterdir() if (d / "EDIT.json").is_file())
    if args.edits:
        missing = sorted(set(args.edits) - {d.name for d in dirs})
        if missing:
            print(f"not prepared: {', '.join(missing)}", file=sys.stderr)
            return 2
        dirs = [d for d in dirs if d.name in args.edits]
    results = []
    for d in dirs:
        r = run_edit(d, args.timeout)
        results.append(r)
        print(
            f"{'PASS' if r['ok'] else 'FAIL'} {r['edit']:<32} {r['family']:<28} passed={r['passed']} "
            f"failed={r['failed']} errors={r['errors']} skipped={r['skipped']} rc={r['rc']} ({r['seconds']}s)",
            flush=True,
        )
    bad = [r for r in results if not r["ok"]]
    total = {k: sum(r[k] for r in results) for k in ("passed", "failed", "errors", "skipped")}
    print(f"{len(results) - len(bad)}/{len(results)} edits pass: " + ", ".join(f"{k}={v}" for k, v in total.items()))
    for r in bad:
        print(f"  see {r['log']}")
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
        for r in results:
            (args.logs / f"{r['edit']}.log").write_text(Path(r["log"]).read_text())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
