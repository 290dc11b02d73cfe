"""`k3gen compile`: the whole family × arch matrix in one build.ninja, built ahead of time.

The output directory (default <project>/build/aot, where the runtime looks without being told):

    build.ninja, .ninja_log, .ninja_deps   ninja's state: a rerun does nothing, an edited spec
                                           (after `k3gen build`) rebuilds only its family's units
    <family>/<arch>/obj/<unit>.o           one object per translation unit, compiled from its staged copy
                                           (k3gen.runtime.stage: an edited header is a new command)
    <family>/<arch>/lib.so                 one library per (family, arch)
    <family>/<arch>/k3gen-build.json       its record (k3gen.runtime.artifact): family, arch, the
                                           cache key the runtime computes, the library's sha256
    <family>/<arch>/variants/<variant>/    with --from-record: one variant's library (its unit's
                                           object alone) and record, for the (family, variant,
                                           arch) a K3GEN_RECORD run launched
    compile_costs.json                     seconds and bytes of each unit and library built here
                                           (k3gen.ship.costs); --record-costs merges it into the
                                           checked-in specs/compile_costs.json that `k3gen diff` reads

Parallel compiles default to min(cores, available memory / the peak memory of one unit), the peak
measured by every run (k3gen.runtime.jobs). $K3GEN_COMPILER_LAUNCHER prefixes each compile.

The runtime loads <dir>/<family>/<arch>/lib.so only when the record's key is the one it computes
from generated/ itself, so a stale build is never loaded. A record is written only for a library
that ninja reports up to date, and only if the sources hash as they did before the run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from k3gen.runtime.errors import K3BuildError
from k3gen.runtime.jobs import jobs_argument


class CompileUsageError(ValueError):
    """An --arch that the chosen families do not declare."""


@dataclass(frozen=True)
class Target:
    """One library to build: a family for one arch, with the keys computed before the build."""

    request: object  # k3gen.runtime.cache.BuildRequest
    compiler: str
    content_key: str

    @property
    def entry(self) -> str:
        req = self.request
        return f"{req.family}/{req.arch}" + (f"/variants/{req.variant}" if req.variant else "")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--arch",
        action="extend",
        nargs="+",
        default=[],
        metavar="ARCH",
        help="archs, comma-separated or repeated (default: every CUDA arch the specs declare; "
        "HIP archs only when named)",
    )
    p.add_argument(
        "--family", action="extend", nargs="+", default=[], metavar="NAME", help="only these families (default: all)"
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=jobs_argument,
        help="parallel compiles (default: $K3GEN_JOBS, else min(cores, "
        "available memory / the measured peak of one unit))",
    )
    p.add_argument(
        "--from-record",
        type=Path,
        metavar="FILE",
        help="build exactly the (family, variant, arch) that a run with K3GEN_RECORD=FILE launched, "
        "one library each, into <out>/<family>/<arch>/variants/<variant>/",
    )
    p.add_argument("--out", type=Path, help="output directory (default: <project>/build/aot)")
    p.add_argument(
        "--record-costs",
        action="store_true",
        help="also merge the measured compile seconds and bytes into the checked-in "
        "specs/compile_costs.json, which `k3gen diff` prices changes with",
    )


def _split(values: list[str]) -> list[str]:
    return list(dict.fromkeys(v for item in values for v in item.split(",") if v))


def select(plans: list, archs: list[str], families: list[str]) -> list[tuple[object, str]]:
    """(plan, arch) pairs to build: the named families (all by default) × the named archs each declares."""
    from k3gen.spec.errors import UnknownFamilyError

    by_name = {p.name: p for p in plans}
    UnknownFamilyError.check(families, list(by_name))
    chosen = [by_name[f] for f in families] if families else plans
    declared = {a: b for p in chosen for b in p.backends for a in p.archs(b)}
    if unknown := [a for a in archs if a not in declared]:
        raise CompileUsageError(
            f"arch {', '.join(unknown)} is declared by none of "
            f"{', '.join(p.name for p in chosen)}; declared: {', '.join(declared)}"
        )
    # HIP only when asked: its compiler is optional on a CUDA machine, and the default must just work.
    wanted = archs or [a for a, b in declared.items() if b == "cuda"]
    return [(p, a) for p in chosen for a in wanted if any(a in p.archs(b) for b in p.backends)]


def targets_for(pairs: list[tuple[object, str]], csrc: Path) -> list[Target]:
    """The same BuildRequest the generated wrapper's FamilyModule.request(arch) makes, so equal keys."""
    from k3gen.render.keys import request_for
    from k3gen.runtime.toolchain import find_compiler

    out = []
    for p, arch in pairs:
        req = request_for(p, arch, csrc)
        out.append(Target(req, find_compiler(req.backend), req.content_key()))
    return out


class UnvouchedTree(CompileUsageError):
    """generated/ is not what its MANIFEST vouches for: nothing of it is loaded or shipped."""


def wrappers(root: Path) -> dict[str, object]:
    """{family: its generated FamilyModule}, loaded from <root>/generated/k3kernels by path: the
    requests the runtime itself will make, and nothing of the generator (no pydantic, jinja2, YAML).

    Only a tree its MANIFEST vouches for is loaded (k3gen.ship.tree.verify_tree, the part of `k3gen check`
    that needs no generator), and only the wrappers MANIFEST lists."""
    import importlib.util

    from k3gen.ship.tree import manifest_entries, verify_tree

    generated = root / "generated"
    if problems := verify_tree(generated):
        raise UnvouchedTree(
            "generated/ is not what its MANIFEST vouches for, so nothing of it runs: "
            + "; ".join(ascii(p)[1:-1] for p in problems[:5])
            + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            + "; run `k3gen check` (and `k3gen build`) where the generator is installed"
        )
    pkg = generated / "k3kernels"
    listed = manifest_entries(generated)
    names = sorted(
        Path(rel).stem
        for rel in listed
        if rel.startswith("k3kernels/")
        and rel.count("/") == 1
        and rel.endswith(".py")
        and Path(rel).stem not in ("__init__", "runners")
    )
    out = {}
    for name in names:
        spec = importlib.util.spec_from_file_location(f"_k3gen_wrapper_{name}", pkg / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "MODULE"):
            out[name] = module.MODULE
    return out


MAX_RECORD_BYTES = 16 * 1024 * 1024  # a K3GEN_RECORD file: one short line per (family, variant, arch)
_RECORD_NAME = re.compile(r"[a-z][a-z0-9_]{0,199}\Z")  # family and variant names (k3gen.spec.grammar's kind)


def read_record(path: Path) -> list[tuple[int, str, str, str]]:
    """(line number, family, variant, arch) of each line of a K3GEN_RECORD file, read through the one
    reader (a plain file, at most MAX_RECORD_BYTES); CompileUsageError naming the line otherwise.
    Fields are names, so nothing of the file reaches a message unescaped."""
    from k3gen.runtime.files import Refused, read_text

    shown = ascii(str(path))[1:-1]
    try:
        text = read_text(path, path.parent, MAX_RECORD_BYTES, shown, "k3gen.ship.aot.MAX_RECORD_BYTES")
    except Refused as exc:
        raise CompileUsageError(f"cannot read the record {exc}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            fields = [entry[k] for k in ("family", "variant", "arch")]
            if not all(isinstance(f, str) and _RECORD_NAME.match(f) for f in fields):
                raise TypeError("fields are names")
        except (ValueError, KeyError, TypeError):
            raise CompileUsageError(
                f"{shown}:{n}: not a K3GEN_RECORD line (JSON with family, variant and arch names): {line[:120]!a}"
            ) from None
        out.append((n, *fields))
    return out


def from_record(root: Path, path: Path) -> list[Target]:
    """The variant libraries a K3GEN_RECORD file names, once each, in its order: the requests the
    generated wrappers make (needs torch, not the generator)."""
    from k3gen.runtime.toolchain import find_compiler

    lines = read_record(path)
    shown = ascii(str(path))[1:-1]
    modules = wrappers(root)
    seen, out = set(), []
    for n, family, variant, arch in lines:
        module = modules.get(family)
        if module is None or arch not in module.arch_defines:
            raise CompileUsageError(
                f"{shown}:{n}: {family} for {arch} is not declared by the specs (recorded from another tree?)"
            )
        if (family, variant, arch) in seen:
            continue
        seen.add((family, variant, arch))
        req = module.request(arch)
        try:
            vreq = req.variant_request(variant)
        except K3BuildError:
            raise CompileUsageError(
                f"{shown}:{n}: {family} has no variant {variant} (recorded from another tree?)"
            ) from None
        out.append(Target(vreq, find_compiler(req.backend), vreq.content_key()))
    return out


def write_build(targets: list[Target], out: Path) -> Path:
    from k3gen.runtime import ninja
    from k3gen.runtime.files import write_if_changed

    lines, have = [ninja.RULES], set()
    for t in targets:
        req = t.request
        # A variant links the object its family's library compiles: one compile serves both.
        obj_dir = f"{req.family}/{req.arch}/obj/" if req.variant else None
        edges, _ = ninja.library_edges(req.units(), t.compiler, req.flags()[1], f"{t.entry}/", t.entry, obj_dir, have)
        lines += edges
    path = out / "build.ninja"
    write_if_changed(path, "\n".join(lines))  # the same bytes keep a rerun a true no-op
    return path


def write_records(targets: list[Target], out: Path, all_built: bool) -> tuple[list[str], list[str]]:
    """(entries whose record was written or changed, entries left without one)."""
    from k3gen.runtime import artifact, ninja
    from k3gen.runtime.toolchain import compiler_name, compiler_version

    written, missing = [], []
    for t in targets:
        entry = out / t.entry
        built = all_built or ninja.up_to_date(out, f"{t.entry}/{artifact.LIB}")
        # Sources rewritten during the run (a concurrent `k3gen build`) would make the record lie.
        if not built or t.request.content_key() != t.content_key:
            (entry / artifact.RECORD).unlink(missing_ok=True)
            missing.append(t.entry)
            continue
        record = artifact.make_record(
            t.request.family,
            t.request.arch,
            t.content_key,
            compiler_name(t.compiler),
            compiler_version(t.compiler),
            entry / artifact.LIB,
            "aot",
            variant=t.request.variant,
        )
        if artifact.write_record(entry, record):
            written.append(t.entry)
    return written, missing


def record_costs(targets: list[Target], out: Path, root: Path | None, jobs) -> None:
    """Measure what is built in `out` (k3gen.ship.costs) into out/compile_costs.json; with a project root,
    merge it into the checked-in table too."""
    from k3gen.runtime.toolchain import compiler_version
    from k3gen.ship import costs

    def how(t: Target) -> str:
        lines = compiler_version(t.compiler).splitlines()
        version = next((ln for ln in lines if "version" in ln or "release" in ln), lines[0] if lines else "?")
        return f"{version.strip()}; -j {jobs or 'ninja default'} on {os.cpu_count()} cores"

    measured = costs.measure(out, targets, {t.request.arch: how(t) for t in targets})
    local = out / "compile_costs.json"
    costs.save(local, costs.load(local, str(local)).merge(measured))
    if root is not None:
        table = root / costs.TABLE
        if costs.save(table, costs.load(table, root=root).merge(measured)):
            print(f"k3gen compile: recorded the compile costs of {len(targets)} libraries in {costs.TABLE}")


def compile_matrix(plans: list, root: Path, args) -> int:
    """Build, print a summary; 0 when every library has its record, 1 otherwise, 2 for bad arguments."""
    from k3gen.runtime.jobs import env_jobs
    from k3gen.runtime.toolchain import launcher

    csrc = root / "generated" / "k3kernels" / "csrc"
    try:
        launcher()  # a launcher that cannot run is one line here, not one shell error per unit
        env_jobs()
        if args.out is not None and args.out.exists() and not args.out.is_dir():
            raise CompileUsageError(f"--out {args.out} is a file; the libraries go into a folder")
        if getattr(args, "from_record", None):
            if args.arch or args.family:
                raise CompileUsageError("--from-record builds what the record names; drop --arch and --family")
            targets = from_record(root, args.from_record)
        else:
            targets = targets_for(select(plans, _split(args.arch), _split(args.family)), csrc)
    except CompileUsageError as exc:
        print(f"k3gen compile: {exc}", file=sys.stderr)
        return 2
    except K3BuildError as exc:  # a missing compiler, a missing generated source
        print(str(exc), file=sys.stderr)
        return 1
    return compile_targets(
        targets,
        (args.out or root / "build" / "aot").resolve(),
        args.jobs,
        root if args.record_costs else None,
        explicit_out=args.out is not None,
    )


def compile_targets(
    targets: list[Target], out: Path, jobs: int | None, costs_root: Path | None, explicit_out: bool = True
) -> int:
    """One ninja run for `targets` into `out`, records for what is up to date, the costs measured
    (merged into costs_root's table when given); 0 when every library has its record, else 1.
    Needs only the runtime (k3gen.runtime): `python -m k3gen.ship.package` runs it without the generator."""
    from k3gen.runtime import jobs as jobs_rule
    from k3gen.runtime import ninja
    from k3gen.runtime.files import locked
    from k3gen.runtime.stage import stage_root_shown, unstaged
    from k3gen.runtime.toolchain import explain_failure, explain_hip_arch

    start = time.perf_counter()
    # A HIP arch its compiler cannot build a library for (an arch it does not know, no ROCm device
    # libraries) is one line per arch before any unit runs, instead of one failure per unit.
    hip_archs = sorted({(t.request.arch, t.compiler) for t in targets if t.request.backend == "hip"})
    unbuildable = {arch: why for arch, cc in hip_archs if (why := explain_hip_arch(cc, arch))}
    for arch, why in unbuildable.items():
        families = ", ".join(dict.fromkeys(t.request.family for t in targets if t.request.arch == arch))
        print(f"k3gen compile: {arch}: nothing built ({families}): {why.removeprefix('k3gen: ')}", file=sys.stderr)
    skipped = [t.entry for t in targets if t.request.arch in unbuildable]
    targets = [t for t in targets if t.request.arch not in unbuildable]
    if not targets:
        return 1
    out.mkdir(parents=True, exist_ok=True)
    archs = sorted({t.request.arch for t in targets})
    n_units = len({(t.request.family, t.request.arch, s) for t in targets for s in t.request.sources})
    if jobs:
        why = "-j"
    else:
        jobs, why = jobs_rule.default_jobs(n_units, archs)
    print(
        f"k3gen compile: {len(targets)} libraries, {n_units} units for {', '.join(archs) or 'no arch'}; "
        f"{jobs} parallel compiles ({why})"
    )
    # HIP without ROCm's device libraries fails once per unit with the same clang line: say it once.
    hip = [(arch, cc) for arch, cc in hip_archs if arch not in unbuildable]
    with locked(out / ".k3gen-compile.lock"):  # two compiles into one directory would race on ninja's state
        write_build(targets, out)
        started = time.time()
        sys.stdout.flush()  # ninja writes to the same terminal: keep our lines in order
        proc = ninja.run(out, jobs, capture=bool(hip), keep_going=True)
        output = (proc.stdout or "") + (proc.stderr or "")
        missing_tool = next(filter(None, (explain_failure(output, arch, cc) for arch, cc in hip)), None)
        if hip and not missing_tool:
            sys.stdout.write(unstaged(proc.stdout or "", targets[0].request.csrc))
            sys.stderr.write(unstaged(proc.stderr or "", targets[0].request.csrc))
        written, missing = write_records(targets, out, proc.returncode == 0)
        peak = jobs_rule.children_peak()
        # Only a run that compiled measures a compiler: a no-op rerun measures ninja alone.
        compiled = any(
            o.stat().st_mtime >= started
            for t in targets
            for o in (out / t.request.family / t.request.arch / "obj").glob("*.o")
        )
        if proc.returncode == 0 and compiled:
            for arch in archs:
                jobs_rule.record_peak(arch, peak)
        family_targets = [t for t in targets if t.request.variant is None]
        if family_targets:
            record_costs(family_targets, out, costs_root, jobs)
    where = "" if not explicit_out else f"; set K3GEN_AOT_DIR={out} for the runtime to find it"
    print(
        f"k3gen compile: {len(targets) - len(missing)}/{len(targets) + len(skipped)} libraries up to date in {out} "
        f"({len(written)} records written, {time.perf_counter() - start:.1f}s"
        + (f", largest compiler process {peak / 2**20:.0f} MiB" if compiled else "")
        + f"){where}"
    )
    if missing_tool:
        print(missing_tool, file=sys.stderr)
    if missing or skipped:
        print(
            f"k3gen compile: failed: {', '.join(missing + skipped)}"
            + (
                f" (compiler output above; {stage_root_shown()}/<digest>/ in it is a staged copy of "
                "generated/k3kernels/csrc/, k3gen.runtime.stage)"
                if missing and not missing_tool
                else ""
            ),
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m k3gen.ship.aot --from-record FILE`: build what a K3GEN_RECORD run launched, from
    generated/ alone (torch and a compiler; no generator dependencies), as `k3gen compile` would."""
    p = argparse.ArgumentParser(prog="python -m k3gen.ship.aot", description=main.__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path.cwd(), help="the project (default: here)")
    p.add_argument("--from-record", type=Path, metavar="FILE", required=True)
    p.add_argument("-j", "--jobs", type=jobs_argument)
    p.add_argument("--out", type=Path, help="output directory (default: <project>/build/aot)")
    args = p.parse_args(argv)
    root = args.root.resolve()
    from k3gen.runtime.jobs import env_jobs
    from k3gen.runtime.toolchain import launcher

    try:
        launcher()
        env_jobs()
        targets = from_record(root, args.from_record)
    except CompileUsageError as exc:
        print(f"k3gen compile: {exc}", file=sys.stderr)
        return 2
    except K3BuildError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return compile_targets(
        targets, (args.out or root / "build" / "aot").resolve(), args.jobs, None, explicit_out=args.out is not None
    )


if __name__ == "__main__":
    sys.exit(main())
