"""Compile every generated translation unit, for every arch the specs declare.

CUDA: each family's units (FamilyPlan.sources) with nvcc and the runtime's flags
(k3gen.runtime.toolchain.compile_flags) for each CUDA arch of the spec; the archs of a family whose
flags differ only in their -gencode are compiled by one nvcc call per unit, every arch's -gencode in
it: the same device code for each arch, the host side once (a third less time on CI's 2 cores, where
this fixture is the longest step). HIP: device code only
(k3gen.runtime.toolchain.device_only_flags: no ROCm here), each HIP arch with the first clang of
HIP_CLANGS that knows it; an arch none of them knows is a skip that says so, never a pass. One ninja
run per session builds every cell on all cores; each (family, backend, arch) is then its own test,
whose failure names the translation unit and shows the compiler's output.

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
class Unit:
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
    units: list[Unit] = field(default_factory=list)
    skip: str | None = None  # why this cell was not compiled
    missing: bool = False  # the skip is a missing compiler (a failure under CI)
    error: str | None = None  # the toolchain failed before any unit was compiled
    archs: tuple[str, ...] = ()  # the archs its units compile for (CUDA: one nvcc call may build several)


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


def _units(p, backend: str, archs: tuple[str, ...], compiler: str, out_dir: Path) -> list[Unit]:
    src_dir = CSRC / p.name
    units = []
    for name in p.sources[backend]:
        src = src_dir / name
        if backend == "cuda":
            out = out_dir / f"{Path(name).stem}.o"
            cmd = [compiler, *_cuda_flags(p, archs), "-c", str(src), "-o", str(out)]
        else:
            (arch,) = archs
            defines = list(p.defines[arch])
            out = out_dir / f"{Path(name).stem}.s"
            cmd = [compiler, *device_only_flags(arch), *defines, f"-I{CSRC}", "-S", str(src), "-o", str(out)]
        units.append(Unit(src, out, cmd))
    return units


def _ninja_escape_path(s: str) -> str:
    return s.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _write_ninja(units: list[Unit], build_dir: Path) -> Path:
    # Each edge records its own output and exit status, so one failing unit neither hides the
    # others' results nor mixes its messages with theirs.
    lines = [
        "ninja_required_version = 1.3",
        "",
        "rule cc",
        "  command = $cmd > $log 2>&1; echo $$? > $out",
        "  description = $desc",
        "",
    ]
    for u in units:
        lines += [
            f"build {_ninja_escape_path(str(u.rc))}: cc {_ninja_escape_path(str(u.source))}",
            f"  cmd = {shlex.join(u.command).replace('$', '$$')}",
            f"  log = {shlex.quote(str(u.log)).replace('$', '$$')}",
            f"  desc = {u.source.name} -> {u.output.parent.name}",
        ]
    path = build_dir / "build.ninja"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def compiled(request, tmp_path_factory) -> dict[str, Cell]:
    """Compile every cell this run tests (`-k route_topk`, `k3gen test`: only theirs) in one ninja run;
    map each cell id to its units or its skip reason."""
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
            group = Cell(units=_units(PLANS[family], backend, archs, nvcc, out_dir), archs=archs)
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
        cells[cid] = Cell(units=_units(PLANS[family], backend, (arch,), compiler, out_dir), archs=(arch,))
    units = list({id(u): u for c in cells.values() for u in c.units}.values())  # a group's units once
    if units:
        _write_ninja(units, work)
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
    for u in result.units:
        rc = u.rc.read_text().strip() if u.rc.exists() else "(not run)"
        log = u.log.read_text() if u.log.exists() else ""
        if rc != "0" or not u.output.is_file() or u.output.stat().st_size == 0:
            failures.append(f"--- {u.source.relative_to(ROOT)} (exit {rc})\n$ {shlex.join(u.command)}\n{log}")
        elif log.strip() and arch == result.archs[0]:  # a group's warnings once, not once per arch
            warnings.warn(
                CompileWarning(f"{u.source.relative_to(ROOT)} [{', '.join(result.archs)}]:\n{log}"), stacklevel=1
            )
    if failures:
        together = f" (one nvcc call per unit for {', '.join(result.archs)})" if len(result.archs) > 1 else ""
        pytest.fail(
            f"{len(failures)} of {len(result.units)} translation units of {family} failed to compile "
            f"for {arch}{together}:\n" + "\n".join(failures),
            pytrace=False,
        )
