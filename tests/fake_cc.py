"""A fake device compiler for cache and AOT tests: no GPU, no nvcc, milliseconds per call.

It accepts the runtime's command shapes (`--version`, `... -MD -MF dep -c src -o obj`,
`-shared objs -o lib`), writes deterministic outputs (a hash of the flags and every input byte), a
depfile that lists the `#include "..."` closure like nvcc's, and appends one line per compile or
link to $FAKE_CC_LOG so tests can count builds. $FAKE_CC_VERSION is its version text;
$FAKE_CC_FAIL=compile|link makes that step fail; $FAKE_CC_SLEEP_LINK holds a link open.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = r"""
import hashlib, os, re, sys, time

args = sys.argv[1:]
if args == ["--version"]:
    print(os.environ.get("FAKE_CC_VERSION", "fake-cc release 1.0"))
    sys.exit(0)
out = args[args.index("-o") + 1]
kind = "compile" if "-c" in args else "link"
with open(os.environ["FAKE_CC_LOG"], "a") as log:  # one short O_APPEND write: safe across processes
    log.write(f"{kind} {os.getcwd()}/{out}\n")
time.sleep(float(os.environ.get("FAKE_CC_SLEEP_" + kind.upper(), "0")))
if os.environ.get("FAKE_CC_FAIL") == kind:
    print(f"fake-cc: error: {kind} of {out} failed on purpose", file=sys.stderr)
    sys.exit(1)
h = hashlib.sha256(" ".join(a for a in args if a not in (out,) and not a.endswith(".d")).encode())
if kind == "compile":
    src = args[args.index("-c") + 1]
    incs = [a[2:] for a in args if a.startswith("-I")]
    deps, todo = [], [os.path.abspath(src)]
    while todo:
        f = todo.pop()
        if f in deps:
            continue
        deps.append(f)
        for name in re.findall(r'#include\s+"([^"]+)"', open(f).read()):
            for d in [os.path.dirname(f), *incs]:
                cand = os.path.normpath(os.path.join(d, name))
                if os.path.isfile(cand):
                    todo.append(cand)
                    break
    for f in deps:
        h.update(open(f, "rb").read())
    if "-MF" in args:
        with open(args[args.index("-MF") + 1], "w") as d:
            d.write(out + " : " + " \\\n    ".join(deps) + "\n")
else:
    for obj in (a for a in args if a.endswith(".o")):
        h.update(open(obj, "rb").read())
with open(out, "w") as f:
    f.write(f"fake {kind} {h.hexdigest()}\n")
"""


def clear_toolchain_caches() -> None:
    from k3gen.runtime import toolchain

    for fn in (toolchain.find_compiler, toolchain.find_ninja, toolchain.compiler_version):
        fn.cache_clear()


def build_in_child(req, barrier, results) -> None:
    """A spawned process's work in the concurrency test; here, so the child imports little."""
    from k3gen.runtime.cache import ensure_built

    barrier.wait()  # every process calls ensure_built at the same moment
    results.put(str(ensure_built(req)))


@dataclass
class FakeCC:
    path: Path
    log: Path
    monkeypatch: pytest.MonkeyPatch

    def calls(self, kind: str | None = None) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if kind is None or line.startswith(kind + " ")]

    def count(self, kind: str) -> int:
        return len(self.calls(kind))

    def set(self, name: str, value: str | None) -> None:
        """Set (None: unset) a FAKE_CC_* or K3GEN_* variable; the toolchain caches are cleared."""
        if value is None:
            self.monkeypatch.delenv(name, raising=False)
        else:
            self.monkeypatch.setenv(name, value)
        clear_toolchain_caches()


@pytest.fixture
def fake_cc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The fake as both compilers, and a private cache and (empty) AOT directory for the test."""
    script = tmp_path / "fake-cc"
    script.write_text(f"#!{sys.executable} -S\n{SCRIPT}")
    script.chmod(0o755)
    log = tmp_path / "fake-cc.log"
    for name, value in {
        "K3GEN_NVCC": script,
        "K3GEN_HIPCC": script,
        "FAKE_CC_LOG": log,
        "K3GEN_CACHE_DIR": tmp_path / "cache",
        "K3GEN_AOT_DIR": tmp_path / "no-aot",
        "K3GEN_JOBS": "2",
    }.items():
        monkeypatch.setenv(name, str(value))
    for name in ("K3GEN_NO_JIT", "K3GEN_ROCM_PATH", "FAKE_CC_VERSION", "FAKE_CC_FAIL", "FAKE_CC_SLEEP_LINK"):
        monkeypatch.delenv(name, raising=False)
    clear_toolchain_caches()
    yield FakeCC(script, log, monkeypatch)
    clear_toolchain_caches()
