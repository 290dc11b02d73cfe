"""The k3gen command: build, check, list, validate, schema, compile, package, diff, test, new.

Flow: load (k3gen.spec.load) → resolve (k3gen.plan) → render (k3gen.render) → key (k3gen.render.keys) →
write (k3gen.ship.tree). Exit codes: 0 ok; 1 generated/ is stale or a budget is exceeded (check, diff
--check-budget), a library failed to build (compile), or diff cannot read its revision; 2 spec
errors, an unknown family or arch, a malformed cost table, or a name `new` refuses.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from k3gen.ship.costs import CostTableError
from k3gen.ship.tree import GeneratedTreeError
from k3gen.spec.errors import SpecErrors, UnknownFamilyError
from k3gen.tune import run as tuning_run


class NotAProject(Exception):
    """--root (or the working directory and its parents) is not a k3gen project (exit 2)."""


PROJECT_DIRS = ("specs", "templates")


def find_root(start: Path) -> Path:
    for d in (start, *start.parents):
        if all((d / name).is_dir() for name in PROJECT_DIRS):
            return d
    raise NotAProject(f"no specs/ and templates/ found in {start} or above; run from the project, or pass --root")


def check_root(root: Path) -> Path:
    """--root as given: a folder holding specs/ and templates/, else NotAProject naming what is missing
    (the path escaped: a control character in it never reaches the terminal raw)."""
    shown = ascii(str(root))[1:-1]
    if not root.is_dir():
        raise NotAProject(f"--root {shown} is not a folder; pass the project's folder (the one holding specs/)")
    missing = [f"{name}/" for name in PROJECT_DIRS if not (root / name).is_dir()]
    if missing:
        raise NotAProject(
            f"--root {shown} is not a k3gen project: it has no {' and no '.join(missing)}; pass the folder "
            "holding specs/ and templates/"
        )
    return root


def _plans(root: Path):
    from k3gen.plan import resolve_all
    from k3gen.spec.load import load_specs

    return resolve_all(load_specs(root), root)


def _render(root: Path, say_untuned: bool = False):
    """The plans, the rendered files and the libraries with their keys, checked unique (k3gen.render.keys).
    say_untuned: print one located line per family whose variants run the default config (k3gen.plan.tuning)."""
    from k3gen.render import render_all
    from k3gen.render.keys import keyed, untuned_notes

    plans = _plans(root)
    files = render_all(plans, root)
    if say_untuned:
        for note in untuned_notes(plans, files):
            print(f"note: {note}", file=sys.stderr)
    return plans, files, keyed(plans, files)


def _families(values: list[str]) -> list[str]:
    """--family a,b --family c: the names in order, once each."""
    return list(dict.fromkeys(v for item in values for v in item.split(",") if v))


def cmd_build(root: Path, args) -> int:
    from k3gen.review import figures
    from k3gen.ship.tree import write_files

    start = time.perf_counter()
    plans, files, _ = _render(root, say_untuned=True)
    changes = write_files(files, root / "generated")
    for f in changes.written:
        print(f"  wrote   generated/{f}")
    for f in changes.removed:
        print(f"  removed generated/{f}")
    for f in figures.write_figures(root, plans):  # the README's and docs' tables of the specs
        print(f"  wrote   {f} (figures)")
    n_spec = sum(len(p.specializations) for p in plans)
    print(
        f"k3gen build: {len(plans)} families, {n_spec} specializations, {len(files) + 1} files; "
        f"{len(changes.written)} written, {len(changes.removed)} removed "
        f"({time.perf_counter() - start:.2f}s)"
    )
    return 0


def cmd_check(root: Path, args) -> int:
    from k3gen.review.pricing import over_budget
    from k3gen.ship import costs
    from k3gen.ship.tree import drift, project_strays

    plans, files, libs = _render(root, say_untuned=True)
    diff = drift(files, root / "generated")
    strays = project_strays(root)
    budget = over_budget(plans, libs, costs.load(root / costs.TABLE, root=root))
    if diff:
        sys.stdout.write(diff)
        print(
            "\nk3gen check: generated/ does not match specs/ and templates/ (stale or edited by hand).\n"
            "Fix: run `k3gen build` and commit generated/.",
            file=sys.stderr,
        )
    if budget:
        print(
            f"k3gen check: over budget (priced from {costs.TABLE}):\n" + "\n".join(f"  {e}" for e in budget),
            file=sys.stderr,
        )
    if strays:
        print("k3gen check: files k3gen does not vouch for:\n" + "\n".join(f"  {s}" for s in strays), file=sys.stderr)
    if diff or budget or strays:
        return 1
    print("k3gen check: generated/ is up to date")
    return 0


LIST_HEADER = ("identity", "backend", "params", "tuning tables", "unit key", "library key")


def _tables_text(t, variant: str) -> str:
    """The devices a family has tuning tables for, each marked where the variant has no current pick
    there (what runs instead: the fallback's picks or the default), and the fallback (`-`: the spec
    declares no knobs). `t`: the family's settled tuning."""
    if t is None:
        return "-"

    def device(tb) -> str:
        if tb.tuned(variant):
            return tb.device
        return f"{tb.device}:{'default' if t.serving(tb, variant) is None else t.fallback + ' picks'}"

    text = ",".join(device(tb) for tb in t.tables) or "none"
    return text + (f" (fallback {t.fallback})" if t.fallback else "")


def cmd_list(root: Path, args) -> int:
    from k3gen.render.keys import settled_from

    plans, files, libs = _render(root)
    wanted = _families(args.family)
    UnknownFamilyError.check(wanted, [p.name for p in plans])
    by_arch = {(lib.family, lib.arch): lib for lib in libs}
    rows = []
    for p in plans:
        if wanted and p.name not in wanted:
            continue
        tuning = settled_from(p, files)
        for sp in p.specializations:
            lib = by_arch[(p.name, sp.arch)]
            unit = next(u for u in lib.units if u.identity == sp.identity)
            tables = _tables_text(tuning, sp.variant.name)
            rows.append((sp.identity, sp.backend, sp.variant.label, tables, unit.key[:16], lib.key[:16]))
    widths = [max(len(r[i]) for r in [*rows, LIST_HEADER]) for i in range(len(LIST_HEADER))]
    for r in [LIST_HEADER, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print(f"{len(rows)} specializations")
    return 0


def cmd_validate(root: Path, args) -> int:
    plans = _plans(root)
    print(f"k3gen validate: {len(plans)} specs ok")
    return 0


def cmd_compile(root: Path, args) -> int:
    from k3gen.ship.aot import compile_matrix
    from k3gen.ship.tree import drift

    plans, files, _ = _render(root)
    if drift(files, root / "generated"):  # the runtime keys generated/; compiling a stale tree helps no one
        print(
            "k3gen compile: generated/ does not match specs/ and templates/; run `k3gen build` first", file=sys.stderr
        )
        return 1
    return compile_matrix(plans, root, args)


def cmd_package(root: Path, args) -> int:
    from k3gen.ship.package import package
    from k3gen.ship.tree import drift

    _, files, _ = _render(root)
    if drift(files, root / "generated"):
        print(
            "k3gen package: generated/ does not match specs/ and templates/; run `k3gen build` first", file=sys.stderr
        )
        return 1
    return package(root, args)


def cmd_diff(root: Path, args) -> int:
    from k3gen.review import FORMATS, DiffError, diff_rev

    try:
        report = diff_rev(root, args.rev, _families(args.family))
    except DiffError as exc:
        print(exc, file=sys.stderr)
        return 1
    sys.stdout.write(FORMATS[args.format](report))
    if args.check_budget and report.over_budget:
        print("k3gen diff: over budget:\n" + "\n".join(f"  {e}" for e in report.over_budget), file=sys.stderr)
        return 1
    return 0  # differences are what a review wants to see, not a failure


def cmd_test(root: Path, args) -> int:
    from k3gen.review import DiffError, diff_rev
    from k3gen.review.test_run import describe, run

    try:
        report = diff_rev(root, args.rev)
    except DiffError as exc:
        print(exc, file=sys.stderr)
        return 1
    sys.stdout.write(describe(report.tests, report.base))
    return 0 if args.list else run(root, report.tests, args.pytest_args)


def cmd_new(root: Path, args) -> int:
    from k3gen.ship.scaffold import ScaffoldError, scaffold

    try:
        written = scaffold(root, args.name)
    except ScaffoldError as exc:
        print(exc, file=sys.stderr)
        return 2
    for path in written:
        print(f"  wrote   {path}")
    print(
        f"k3gen new: family '{args.name}' scaffolded. Next: run `k3gen build`; its generated tests fail "
        f"until you fill in {written[2]} (and the kernel in {written[1]})."
    )
    return 0


def cmd_tune(root: Path, args) -> int:
    """Never reached: main() hands `k3gen tune ...` to k3gen.tune.run before parsing, since the tuner
    runs on GPU machines from generated/ alone (no spec loader)."""
    from k3gen.tune.run import main as tune

    return tune(["--help"])


def cmd_schema(root: Path | None, args) -> int:
    from k3gen.spec.model import KernelSpec

    print(json.dumps(KernelSpec.model_json_schema(by_alias=True), indent=2, sort_keys=True))
    return 0


# name: (function, one line for `k3gen --help` and the command's own --help, example lines)
COMMANDS = {
    "build": (
        cmd_build,
        "render specs/ into generated/ (writes only changed files, removes stale ones)",
        ["k3gen build", "k3gen --root path/to/project build"],
    ),
    "check": (
        cmd_check,
        "exit 1 with a diff when generated/ is stale or edited by hand, or a spec's budget is exceeded",
        ["k3gen check && python -m pytest"],
    ),
    "list": (
        cmd_list,
        "the specialization table: identity, backend, params, unit key and library key (the "
        "keys the runtime and `k3gen compile` use)",
        ["k3gen list", "k3gen list --family situ_and_mul | grep sm_90a"],
    ),
    "validate": (cmd_validate, "load and check the specs; print every error (exit 2)", ["k3gen validate"]),
    "schema": (
        cmd_schema,
        "print the JSON Schema of a spec file (for editors)",
        ["k3gen schema > k3gen-spec.schema.json"],
    ),
    "compile": (
        cmd_compile,
        "build every family x arch ahead of time into build/aot (one ninja run) and measure its compile costs",
        [
            "k3gen compile --arch sm_90a -j 8",
            "k3gen compile --family route_topk --arch sm_90a,gfx942",
            "k3gen compile --arch sm_90a --record-costs   # update specs/compile_costs.json",
            "k3gen compile --from-record warm.jsonl        # what a K3GEN_RECORD=warm.jsonl run launched",
        ],
    ),
    "package": (
        cmd_package,
        "a wheel of k3kernels with the AOT libraries of every family for the CUDA archs "
        "the specs declare (or --arch): serving needs torch and no compiler",
        ["k3gen package --arch sm_90a", "k3gen package --family situ_and_mul --arch sm_90a --out dist/"],
    ),
    "diff": (
        cmd_diff,
        "what the spec and template changes since REV (default: merge base with main) do: "
        "specializations, keys, gates, cost per arch, generated files",
        [
            "k3gen diff",
            "k3gen diff origin/main --format markdown > review.md",
            "k3gen diff --family situ_and_mul --check-budget",
        ],
    ),
    "test": (
        cmd_test,
        "run the tests a change since REV (default: merge base with main) touches: the generated tests of "
        "each family it changes and the tests/ that read what changed; the rest listed as unaffected, with why",
        [
            "k3gen test",
            "k3gen test origin/main -- -n auto",
            "k3gen test --list",
        ],
    ),
    "tune": (cmd_tune, tuning_run.HELP, tuning_run.EXAMPLES),
    "new": (
        cmd_new,
        "scaffold specs/NAME.yaml, its kernel template and oracle: a family whose tests fail until filled in",
        ["k3gen new my_kernel && k3gen build"],
    ),
}


def _add_family(p: argparse.ArgumentParser, what: str) -> None:
    # one value per flag (comma-separated, or the flag repeated), so `diff --family F REV` keeps REV
    p.add_argument(
        "--family",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help=f"{what} (comma-separated or repeated; an unknown name exits 2 listing the families)",
    )


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="k3gen", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="project root (default: the folder holding specs/)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_text, examples) in COMMANDS.items():
        p = sub.add_parser(
            name,
            help=help_text,
            description=f"k3gen {name}: {help_text}.",
            epilog="example" + ("s" if len(examples) > 1 else "") + ":\n" + "\n".join(f"  {e}" for e in examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name == "list":
            _add_family(p, "only these families")
        if name == "diff":
            p.add_argument(
                "rev",
                nargs="?",
                help="git revision to compare with (default: the merge base of HEAD and main; HEAD on main)",
            )
            p.add_argument(
                "--format",
                choices=["text", "markdown", "json"],
                default="text",
                help="text for a terminal, markdown for a PR comment, json for tools",
            )
            _add_family(p, "report only these families")
            p.add_argument(
                "--check-budget",
                action="store_true",
                help="exit 1 when a family of the work tree exceeds its spec's budget",
            )
        if name == "test":
            p.add_argument("rev", nargs="?", help="git revision to compare with (default: as `k3gen diff`)")
            p.add_argument("--list", action="store_true", help="print what would run, and why; run nothing")
            p.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed on to pytest")
        if name == "new":
            p.add_argument("name", help="family name, lower_snake_case")
        if name == "compile":
            from k3gen.ship.aot import add_arguments

            add_arguments(p)
        if name == "package":
            from k3gen.ship.package import add_arguments as add_package_arguments

            add_package_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["tune"]:  # the GPU half parses its own flags and needs no spec loader
        from k3gen.tune.run import main as tune

        return tune(argv[1:])
    args = make_parser().parse_args(argv)
    fn = COMMANDS[args.command][0]
    if args.command == "schema":
        return fn(None, args)
    try:
        root = check_root(args.root.resolve()) if args.root else find_root(Path.cwd())
    except NotAProject as exc:
        print(f"k3gen {args.command}: {exc}", file=sys.stderr)
        return 2
    try:
        return fn(root, args)
    except SpecErrors as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    except (GeneratedTreeError, UnknownFamilyError, CostTableError) as exc:
        print(f"k3gen {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
