"""The ninja edges of one family's library for one arch: shared by the JIT cache and `k3gen compile`.

One writer for both means an AOT library is compiled by exactly the commands a JIT build would run,
each compile behind $K3GEN_COMPILER_LAUNCHER when it is set (sccache: a compile cache shared across
machines; it changes no output, so no key hashes it).

Every command is the same bytes in every checkout and on every machine with the same toolkit: a unit
compiles from its staged copy (k3gen.runtime.stage: a path named by the bytes of the unit and the
headers it includes) with -I that copy, into a path relative to the build folder ninja runs in, and
links relative paths. So a shared compile cache serves any checkout, and ninja needs no depfile: an
edited header is a new staged copy, so a new command, for exactly the units that include it. (A
depfile would also cost sccache one more nvcc run per unit, `nvcc -M`, hit or miss.) The toolkit is
named in each command by a digest of the compiler's version text ($toolkit, set as K3GEN_TOOLKIT for
the compiler, which ignores it), so an upgraded compiler at the same path rebuilds everything too.
A library is linked to a temporary name and renamed, so a process that already loaded the previous
one never sees its file change under it.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from pathlib import Path

from .toolchain import compiler_version, find_ninja, launcher

RULES = """ninja_required_version = 1.3

rule compile
  command = K3GEN_TOOLKIT=$toolkit $cxx $cflags -c $in -o $out
  description = compile $desc

rule link
  command = K3GEN_TOOLKIT=$toolkit $cxx $ldflags $in -o $out.tmp && mv -f $out.tmp $out
  description = link $desc
"""


def path(p: str | Path) -> str:
    """A path in a build or input list: ninja needs '$', ' ' and ':' escaped."""
    return str(p).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def command(args: list[str]) -> str:
    """Arguments in a command variable: quoted for the shell ninja runs, '$' escaped for ninja."""
    return " ".join(shlex.quote(a) for a in args).replace("$", "$$")


def toolkit(compiler: str) -> str:
    """The compiler's identity in a command: a digest of its own version text."""
    return hashlib.sha256(compiler_version(compiler).encode()).hexdigest()[:16]


def library_edges(
    units: list[tuple[Path, list[str]]],
    compiler: str,
    lflags: list[str],
    prefix: str,
    label: str,
    obj_dir: str | None = None,
    have: set | None = None,
) -> tuple[list[str], str]:
    """(lines, library path): one compile edge per (source, compile flags) of `units` (as
    BuildRequest.units gives them: staged) into <prefix>obj/ (or obj_dir), one link into <prefix>lib.so.
    Objects in `have` already have their edge (a variant library links the object its family's
    library compiles); the objects emitted here are added to it."""
    from .artifact import LIB

    lines, objs, have = [], [], set() if have is None else have
    cc, cxx, lf, tk = command([*launcher(), compiler]), command([compiler]), command(lflags), toolkit(compiler)
    for src, cflags in units:
        obj = f"{obj_dir or prefix + 'obj/'}{src.stem}.o"
        objs.append(obj)
        if obj in have:
            continue
        have.add(obj)
        lines += [
            f"build {path(obj)}: compile {path(src)}",
            f"  cxx = {cc}",
            f"  cflags = {command(cflags)}",
            f"  toolkit = {tk}",
            f"  desc = {label} {src.name}",
        ]
    lib = f"{prefix}{LIB}"
    lines += [
        f"build {path(lib)}: link {' '.join(path(o) for o in objs)}",
        f"  cxx = {cxx}",
        f"  ldflags = {lf}",
        f"  toolkit = {tk}",
        f"  desc = {label}",
        "",
    ]
    return lines, lib


def run(
    build_dir: Path, jobs: int | str | None, *, capture: bool, keep_going: bool = False, targets: list[str] = ()
) -> subprocess.CompletedProcess:
    cmd = [find_ninja(), "-C", str(build_dir)]
    cmd += ["-j", str(jobs)] if jobs else []
    cmd += ["-k", "0"] if keep_going else []
    return subprocess.run([*cmd, *targets], capture_output=capture, text=True)


def up_to_date(build_dir: Path, target: str) -> bool:
    """Whether ninja would do nothing for target: after a failed run, which libraries are current."""
    proc = subprocess.run([find_ninja(), "-C", str(build_dir), "-n", target], capture_output=True, text=True)
    return proc.returncode == 0 and "no work to do" in proc.stdout
