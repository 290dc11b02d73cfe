"""Compile every generated translation unit, for every arch the specs declare.

CUDA: each family's units (FamilyPlan.sources) with nvcc and the runtime's flags
(k3gen.runtime.toolchain.compile_flags) for each CUDA arch of the spec; the archs of a family whose
flags differ only in their -gencode are compiled by the same nvcc calls, every arch's -gencode in
each: the same device code for each arch, the host side once (a third less time on CI's 2 cores, where
this fixture is the longest step). HIP: device code only
(k3gen.runtime.toolchain.device_only_flags: no ROCm here), each HIP arch with the first clang of
HIP_CLANGS that knows it; an arch none of them knows is a skip that says so, never a pass.

Unity build: each compiler call takes up to UNITY_CHUNK units of one family, backend and arch group,
as a source that #includes each of them, with the flags each would have alone; every unit is still
compiled for every declared arch. An nvcc call spends ~2.7 s before its unit's own code (gcc
preprocesses thrice, cudafe++, the host gcc, cicc's start), and a per_token_group_quant unit's own
is ~0.7 s of its ~3.2 s: 12 such units took 10.1 s in one call against ~37 s apart, 12 HIP units
5.0 s against ~16 s. This fixture, every cell on 2 cores: 243 s one call per unit; 115-117 s in
chunks of 12, 113 s of 24, 110-111 s with a cell's units in one call. Smaller chunks keep more
cores busy (a one-family `k3gen test` on a bigger machine: per_token_group_quant's 55 CUDA units
in one call would be its whole wall time) and a failure lists fewer units (those the compiler's
messages name are marked), for ~5% more on 2 cores than one call per cell.

Why a unit compiles in its chunk as it would alone: the generated units are written to be joined
(each defines its variant's function and extern "C" entries, named uniquely in the family, and no
macro or namespace-scope static; every csrc/ header has #pragma once), and a name two units did
define would be a redefinition error, never a pass. What joining could hide is a unit that compiles
only because an earlier unit of its chunk included a header it forgot:
test_no_unit_leans_on_an_earlier_units_includes rules that out without a compiler (each unit
reaches by its own #include lines every header its chunk's earlier units reach: a dispatch unit,
which reads only the ABI header, goes first). Not ruled out here: a unit using a name only an
earlier unit's own code declares; each chunk's first unit is compiled alone, and
tests/test_edit_spec_alone.py compiles units one nvcc call each.

One ninja run per session builds every cell on all cores; each (family, backend, arch) is then its
own test, whose failure names the failing chunk's units and shows the compiler's output.

No compiler: skip, except under CI (env CI set), where a missing compiler is a failure, and so is a
HIP arch compiled otherwise than the support matrix says (k3gen.render.support.HIP_COMPILED_IN_CI).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from k3gen.plan import resolve_all
from k3gen.render.support import HIP_COMPILED_IN_CI
from k3gen.runtime.errors import K3ToolchainMissing
from k3gen.runtime.toolchain import compile_flags, device_only_flags, find_compiler, find_ninja
from k3gen.spec.load import load_specs

# What `k3gen test` reads to select this module (k3gen.review.impact): only the touched families' cells run.
READS = ("specs/**", "templates/**", "generated/k3kernels/csrc/**")
FAMILY_SCOPED = True

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "generated" / "k3kernels" / "csrc"
# In order: each HIP arch is compiled by the first that knows it (clang-19 predates gfx950); each is
# the Debian package named without "++", which .ci/run installs.
HIP_CLANGS = ("clang++-19", "clang++-22")
# What clang says when --offload-arch names a processor it was not built to know.
UNKNOWN_ARCH = re.compile(r"invalid target ID|unknown target|unsupported .*gpu architecture", re.I)
# Units per compiler call at most (the unity build: the module docstring says what it trades).
UNITY_CHUNK = 12
INCLUDE = re.compile(r'\s*#\s*include\s*([<"])([^>"]+)[>"]')
NINJA_TIMEOUT_S = 1800  # a hung compiler fails the session instead of eating CI's 90 minutes
_XDIST = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1


def _compile_jobs() -> str:
    """Serial: $K3GEN_JOBS or every core, as the runtime's builds. Under pytest-xdist, every core at the
    lowest priority (_lowest_priority): the compile is the run's critical path, and with only its
    worker's share of the cores its setup took 1,036 s of a 1,088 s run on CI's 2 cores."""
    cores = str(os.cpu_count() or 1)
    return cores if _XDIST else os.environ.get("K3GEN_JOBS") or cores


def _lowest_priority() -> None:
    """nice 19 for ninja and its compilers: they take what the other workers leave idle, so those
    workers' time bounds (a hostile spec answers within 2 s) hold as beside a compile of their share."""
    os.nice(19)


IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")

PLANS = {p.name: p for p in resolve_all(load_specs(ROOT), ROOT)}
# (family, backend, arch): one test each.
CELLS = [(p.name, backend, arch) for p in PLANS.values() for backend in p.backends for arch in p.archs(backend)]


class CompileWarning(UserWarning):
    """A generated unit compiled, but the compiler said something: shown in pytest's warning summary."""


@dataclass
class Chunk:
    """One compiler call: a unity source that #includes `units`, compiled with their flags."""

    units: list[Path]
    source: Path
    output: Path
    command: list[str]
    log: Path = field(init=False)
    rc: Path = field(init=False)

    def __post_init__(self):
        self.log = self.output.with_name(self.output.name + ".log")
        self.rc = self.output.with_name(self.output.name + ".rc")


@dataclass
class Cell:
    chunks: list[Chunk] = field(default_factory=list)
    skip: str | None = None  # why this cell was not compiled
    missing: bool = False  # the skip is a missing compiler (a failure under CI)
    error: str | None = None  # the toolchain failed before any unit was compiled
    archs: tuple[str, ...] = ()  # the archs its chunks compile for (CUDA: one nvcc call may build several)


def _cell_id(cell: tuple[str, str, str]) -> str:
    return "-".join(cell)


def _nvcc() -> str | None:
    try:
        return find_compiler("cuda")  # the runtime's own search: K3GEN_NVCC, PATH, CUDA_HOME
    except K3ToolchainMissing:
        return None


def _clang_name(clang: str) -> str:
    """clang-19 for any clang++-19 build: the name the skip reason uses."""
    out = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"clang version (\d+)", out)
    return f"clang-{m.group(1)}" if m else Path(clang).name


def _probe_hip_arch(clang: str, arch: str, work: Path) -> Cell | None:
    """None if clang compiles HIP device code for arch, else the cell: a skip if clang does not
    know arch, a failure for any other error (a broken toolchain must never pass as a skip)."""
    src = work / "probe.hip"
    src.write_text("__global__ void k3_probe(int* p) { *p = 1; }\n")
    cmd = [clang, *device_only_flags(arch), "-S", str(src), "-o", str(work / f"probe_{arch}_{Path(clang).name}.s")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    if UNKNOWN_ARCH.search(proc.stderr):
        return Cell(skip=f"{_clang_name(clang)} does not know {arch}")
    return Cell(error=f"probing {arch}: {shlex.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")


def _pick_hip_clang(arch: str, work: Path) -> tuple[str | None, Cell | None]:
    """(the first clang of HIP_CLANGS that compiles device code for arch, None), or (None, the cell
    saying why none does): a clang that might know arch but is not installed makes it `missing`."""
    skips, absent = [], []
    for name in HIP_CLANGS:
        clang = shutil.which(name)
        if clang is None:
            absent.append(f"{name} not found (apt-get install {name.replace('++', '')})")
            continue
        cell = _probe_hip_arch(clang, arch, work)
        if cell is None:
            return clang, None
        if cell.error:
            return None, cell
        skips.append(cell.skip)
    return None, Cell(skip="; ".join(skips + absent), missing=bool(absent))


def _as_claimed(arch: str, clang: str | None, why: Cell | None) -> Cell | None:
    """Under CI, a cell failing when the support matrix says otherwise than what compiled arch."""
    claimed, used = HIP_COMPILED_IN_CI.get(arch), Path(clang).name if clang else None
    if not IN_CI or claimed == used or (why and (why.missing or why.error)):  # those fail on their own
        return None
    here = used or f"nothing ({why.skip})"
    return Cell(
        error=f"k3gen/render/support.py says CI compiles {arch} with {claimed or 'nothing'}, but here it is "
        f"{here}: fix .ci/run or HIP_COMPILED_IN_CI (and the README's support matrix)"
    )


def _cuda_groups(p) -> list[tuple[str, ...]]:
    """The family's CUDA archs, grouped where their flags differ only in the -gencode (one nvcc call
    per unit compiles each group)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for arch in p.archs("cuda"):
        rest = tuple(f for f in compile_flags(arch, list(p.defines[arch]), CSRC) if not f.startswith("-gencode="))
        groups.setdefault(rest, []).append(arch)
    return [tuple(archs) for archs in groups.values()]


def _cuda_flags(p, archs: tuple[str, ...]) -> list[str]:
    """The first arch's flags with every arch's -gencode (the others' flags are the same: _cuda_groups)."""
    first = compile_flags(archs[0], list(p.defines[archs[0]]), CSRC)
    more = [f for a in archs[1:] for f in compile_flags(a, list(p.defines[a]), CSRC) if f.startswith("-gencode=")]
    return [*first, *more]


def _reached(path: Path) -> frozenset[str]:
    """What a generated file reads: the csrc/ headers its #include lines reach, followed through those
    headers (its own directory first, then -I csrc, as the compilers look), and its own other includes
    (a system header a csrc/ header includes is part of that header)."""
    reached, todo = set(), [(path, True)]
    while todo:
        f, own = todo.pop()
        depth = 0
        for line in f.read_text().splitlines():
            depth += line.lstrip().startswith("#if") - line.lstrip().startswith("#endif")
            if not (m := INCLUDE.match(line)):
                continue
            local = next((d / m[2] for d in (f.parent, CSRC) if m[1] == '"' and (d / m[2]).is_file()), None)
            if local is None:
                reached |= {f"{m[1]}{m[2]}"} if own else set()
                continue
            assert depth == 0, f"{f.relative_to(ROOT)}: #include {m[2]} under an #if: what it reaches is a guess"
            if str(local.resolve()) not in reached:
                reached.add(str(local.resolve()))
                todo.append((local, False))
    return frozenset(reached)


def _unity_chunks(p, backend: str) -> list[list[Path]]:
    """The family's units in chunks of at most UNITY_CHUNK, as even as that allows (2 cores finish
    together); those that reach fewer headers first (the dispatch unit, which reads only the ABI
    header, before the variants): test_no_unit_leans_on_an_earlier_units_includes says why."""
    units = sorted((CSRC / p.name / n for n in p.sources[backend]), key=lambda u: len(_reached(u)))
    n = -(-len(units) // UNITY_CHUNK)
    return [units[i::n] for i in range(n)]


def _c_string(path: Path) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _chunks(p, backend: str, archs: tuple[str, ...], compiler: str, out_dir: Path) -> list[Chunk]:
    """One compiler call per chunk: the command a unit alone would have, its source the chunk's
    unity file (in out_dir), which #includes each unit by absolute path."""
    chunks = []
    for i, units in enumerate(_unity_chunks(p, backend)):
        src = out_dir / f"unity{i}{units[0].suffix}"
        src.write_text("".join(f"#include {_c_string(u)}\n" for u in units))
        if backend == "cuda":
            out = out_dir / f"unity{i}.o"
            cmd = [compiler, *_cuda_flags(p, archs), "-c", str(src), "-o", str(out)]
        else:
            (arch,) = archs
            defines = list(p.defines[arch])
            out = out_dir / f"unity{i}.s"
            cmd = [compiler, *device_only_flags(arch), *defines, f"-I{CSRC}", "-S", str(src), "-o", str(out)]
        chunks.append(Chunk(units, src, out, cmd))
    return chunks


def _ninja_escape_path(s: str) -> str:
    return s.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _write_ninja(chunks: list[Chunk], build_dir: Path) -> Path:
    # Each edge records its own output and exit status, so one failing chunk neither hides the
    # others' results nor mixes its messages with theirs.
    lines = [
        "ninja_required_version = 1.3",
        "",
        "rule cc",
        "  command = $cmd > $log 2>&1; echo $$? > $out",
        "  description = $desc",
        "",
    ]
    for c in chunks:
        lines += [
            f"build {_ninja_escape_path(str(c.rc))}: cc {_ninja_escape_path(str(c.source))}",
            f"  cmd = {shlex.join(c.command).replace('$', '$$')}",
            f"  log = {shlex.quote(str(c.log)).replace('$', '$$')}",
            f"  desc = {c.source.name} ({len(c.units)} units) -> {c.output.parent.name}",
        ]
    path = build_dir / "build.ninja"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def compiled(request, tmp_path_factory) -> dict[str, Cell]:
    """Compile every cell this run tests (`-k route_topk`, `k3gen test`: only theirs) in one ninja run;
    map each cell id to its chunks or its skip reason."""
    work = tmp_path_factory.mktemp("k3gen-compile")
    nvcc = _nvcc()
    hip: dict[str, tuple[str | None, Cell | None]] = {}  # arch -> (its clang, or the cell saying why none)
    cells: dict[str, Cell] = {}
    wanted = {i.callspec.params["cell"] for i in request.session.items if i.originalname == "test_compiles"}
    for cell in (c for c in CELLS if c in wanted):
        family, backend, arch = cell
        cid = _cell_id(cell)
        if cid in cells:  # compiled with another arch of its family, by the same nvcc calls
            continue
        if backend == "cuda":
            if nvcc is None:
                cells[cid] = Cell(skip="nvcc (the CUDA toolkit) not found", missing=True)
                continue
            (archs,) = [g for g in _cuda_groups(PLANS[family]) if arch in g]
            out_dir = work / f"{family}-cuda-{'+'.join(archs)}"
            out_dir.mkdir()
            group = Cell(chunks=_chunks(PLANS[family], backend, archs, nvcc, out_dir), archs=archs)
            for a in archs:
                cells[_cell_id((family, backend, a))] = group
            continue
        if arch not in hip:
            clang, why = _pick_hip_clang(arch, work)
            hip[arch] = (clang, _as_claimed(arch, clang, why) or why)
        compiler, why = hip[arch]
        if why:
            cells[cid] = why
            continue
        out_dir = work / cid
        out_dir.mkdir()
        cells[cid] = Cell(chunks=_chunks(PLANS[family], backend, (arch,), compiler, out_dir), archs=(arch,))
    chunks = list({id(c): c for cell in cells.values() for c in cell.chunks}.values())  # a group's once
    chunks.sort(key=lambda c: -len(c.units))  # the longest first: no long chunk left alone at the end
    if chunks:
        _write_ninja(chunks, work)
        proc = subprocess.run(
            [find_ninja(), "-C", str(work), "-j", _compile_jobs()],
            capture_output=True,
            text=True,
            timeout=NINJA_TIMEOUT_S,
            preexec_fn=_lowest_priority if _XDIST else None,
        )
        if proc.returncode != 0:  # edges always exit 0, so this is ninja itself failing
            raise RuntimeError(f"ninja failed in {work}:\n{proc.stdout}{proc.stderr}")
    return cells


def test_cells_cover_every_generated_unit():
    """Every .cu/.hip file in a family's csrc/ is one that FamilyPlan.sources lists, and vice versa."""
    for p in PLANS.values():
        for backend in p.backends:
            ext = {"cuda": "cu", "hip": "hip"}[backend]
            on_disk = sorted(f.name for f in (CSRC / p.name).glob(f"*.{ext}"))
            assert on_disk == sorted(p.sources[backend]), (
                f"{p.name}/{backend}: generated/ and the plan disagree; run `k3gen check`"
            )


def test_no_unit_leans_on_an_earlier_units_includes():
    """In its chunk a unit sees the headers the units before it read; alone, it would not. So each
    unit reaches, by its own #include lines, every header its chunk's earlier units reach, and holds no
    directive but #include (a unit's macro would reach the units after it, and an #if would make its
    reach a guess); each csrc/ header has #pragma once (read twice, it would redefine its contents)."""
    for p in PLANS.values():
        for backend in p.backends:
            for chunk in _unity_chunks(p, backend):
                before: set[str] = set()
                for unit in chunk:
                    name = unit.relative_to(ROOT)
                    directives = [line for line in unit.read_text().splitlines() if line.lstrip().startswith("#")]
                    assert all(INCLUDE.match(d) for d in directives), f"{name}: a directive besides #include"
                    reached = _reached(unit)
                    lacks = sorted(os.path.relpath(h, ROOT) for h in before - reached)
                    assert not lacks, (
                        f"{name} does not include {lacks}, which an earlier unit of its chunk reaches: in the "
                        "unity build it would compile without them, alone it might not"
                    )
                    before |= reached
                for header in (Path(h) for h in before if h.startswith("/")):
                    assert "#pragma once" in header.read_text(), f"{header}: no #pragma once"


@pytest.mark.parametrize("cell", CELLS, ids=_cell_id)
def test_compiles(compiled, cell):
    family, _, arch = cell
    result = compiled[_cell_id(cell)]
    if result.error:
        pytest.fail(result.error, pytrace=False)
    if result.skip:
        if result.missing and IN_CI:
            pytest.fail(f"{result.skip}; CI is set, so the compile tests must run", pytrace=False)
        pytest.skip(result.skip)
    failures = []
    for c in result.chunks:
        rc = c.rc.read_text().strip() if c.rc.exists() else "(not run)"
        log = c.log.read_text() if c.log.exists() else ""
        # Its units, those the messages name marked: the compilers name a unit by the path it is included by.
        units = "".join(f"\n  {u.relative_to(ROOT)}{'  <- in the messages' * (str(u) in log)}" for u in c.units)
        if rc != "0" or not c.output.is_file() or c.output.stat().st_size == 0:
            failures.append(
                f"--- {c.source.name}, {len(c.units)} units (exit {rc}):{units}\n$ {shlex.join(c.command)}\n{log}"
            )
        elif log.strip() and arch == result.archs[0]:  # a group's warnings once, not once per arch
            warnings.warn(CompileWarning(f"{c.source.name} [{', '.join(result.archs)}]:{units}\n{log}"), stacklevel=1)
    if failures:
        together = f" (one nvcc call per chunk for {', '.join(result.archs)})" if len(result.archs) > 1 else ""
        units = sum(len(c.units) for c in result.chunks)
        pytest.fail(
            f"{len(failures)} of {len(result.chunks)} unity compiles ({units} translation units) of {family} "
            f"failed for {arch}{together}:\n" + "\n".join(failures),
            pytrace=False,
        )
