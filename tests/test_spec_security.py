"""A spec under review is data (issue 9): hostile specs and generated/ layouts, each in a throwaway
copy of the project, run through validate, build, check, list, diff, `import k3kernels.<family>`
and pytest collection of generated/tests.

Each case asserts one of two outcomes:
- refused: exit 2, `specs/FILE.yaml:LINE` at the offending line with the offending field named, no
  Python traceback, generated/ untouched, within 2 s;
- escaped (positive controls and the fuzz): it builds, every generated Python file compiles, the
  text comes out literally as data (docstring, string literal) and never as code, the C++ lexes
  with no comment or literal closed early, and import and collection run nothing of it.
and always: no MARKER file appeared anywhere in reach, and nothing outside the copy changed
(a sibling folder's victim file, a secret in another temp dir, the temp dirs' parents).

Messages are being reworded, so only exit codes, locations, field paths, named constants and the
absence of tracebacks are pinned here, never whole messages. tests/hostile.py has the harness:
why k3gen runs in forked children (a hang or a memory bomb fails one case, not the suite) and
why import and collection go through a warm fork server (torch imports once).

Run: python -m pytest -q tests/test_spec_security.py   (about 2.5 minutes on 2 cores; -k text. or
-k generated. and so on picks one group: text, oracle, expr, name, number, param, bound, yaml,
filename, all-errors, diff-rev, escaped, generated, cache)
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hostile import (
    PWNED,
    ROOT,
    Importer,
    Run,
    Sandbox,
    assert_payload_is_data,
    collect_in_subprocess,
    cpp_code,
    cpp_string_literals,
    docstrings,
    edit,
    generated_files,
    k3gen,
    line_of,
    py_strings,
    tree_state,
    yq,
)
from support import copy_project

SAM = "situ_and_mul.yaml"  # tests/data's frozen copy: the line numbers below are its own
PTGQ = "per_token_group_quant.yaml"
RUNNERS = "runners.yaml"
KINDS = {  # the projects cases start from: which specs the copy holds
    "sam": ("specs/situ_and_mul.yaml",),
    "ptgq": ("specs/per_token_group_quant.yaml",),
    # the front and what its contracts name (k3gen/spec/meaning/contracts.py): the separate parts and situ_and_mul
    "front": (
        "specs/route_quant_fused.yaml",
        "specs/runners.yaml",
        "specs/route_topk.yaml",
        "specs/per_token_group_quant.yaml",
        "specs/situ_and_mul.yaml",
    ),
    "router": ("specs/route_deepseek_v3.yaml",),  # a model router: every routing axis set
}
SPEC_COMMANDS = ("validate", "build", "check", "list", "diff")
IN_PROCESS_S = 2.0  # every hostile case answers within this (issue 9)
SUBPROCESS_S = 30.0  # import or collection in a fresh process (torch import included) on a busy 2-core CI
HEX = "0" * 64
# A size limit's error names its constant (bounds.MAX_VARIANTS, MAX_SPEC_BYTES, KEY_BITS, ...).
CONSTANT = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")
ANY = "any line"  # `at` for errors whose line is not pinned (file-level limits, YAML-level refusals)
EDITED = "the edited line"  # `at`: a line the case's edit wrote (replace_line, sub, append record them)


# ==================================================================================================
# Fixtures: one built, committed pristine copy per kind; a sandbox per case


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """Another temp dir: payloads aim absolute paths here; it holds the secret."""
    return tmp_path_factory.mktemp("outside")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """kind -> a built copy of the project in a git repo on main, its clean state committed."""
    from k3gen.cli import main

    made: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in made:
            root = copy_project(tmp_path_factory.mktemp(f"pristine-{kind}") / "proj", specs=KINDS[kind])
            assert main(["--root", str(root), "build"]) == 0, f"harness: the pristine {kind} copy does not build"
            # No hook samples, objects in one pack: every case copies this repo, so keep it to a few files.
            _git(root, "init", "-q", "-b", "main", f"--template={tmp_path_factory.mktemp('git-template')}")
            _git(root, "add", "-A")
            _git(root, "commit", "-q", "-m", "clean")
            _git(root, "repack", "-a", "-d", "-q")
            _git(root, "prune-packed")
            made[kind] = root
        return made[kind]

    return get


@pytest.fixture(scope="module")
def importer(tmp_path_factory):
    imp = Importer(tmp_path_factory.mktemp("importer"))
    yield imp
    imp.close()


def make_sandbox(base: Path, outside: Path, pristine_root: Path, case: str) -> Sandbox:
    shutil.copytree(pristine_root, base / "proj", symlinks=True)
    return Sandbox(base, outside, case)


@pytest.fixture
def sandbox(tmp_path, outside, pristine):
    return lambda kind, case: make_sandbox(tmp_path, outside, pristine(kind), case)


# ==================================================================================================
# Spec edits (each returns a change: Sandbox -> None; @MARK@ & co. are filled per case)


def replace_line(needle: str, new_line: str, file: str = SAM):
    """Replace the whole line holding `needle` by `new_line` (indentation included)."""

    def change(sb: Sandbox) -> None:
        path = sb.spec(file)
        lines = path.read_text().split("\n")
        n = line_of("\n".join(lines), needle)
        lines[n - 1] = sb.subst(new_line)
        path.write_text("\n".join(lines))
        sb.edited(file, n, n + new_line.count("\n"))

    return change


def sub(old: str, new: str, file: str = SAM):
    def change(sb: Sandbox) -> None:
        path = sb.spec(file)
        text = path.read_text()
        new_text = sb.subst(new)
        path.write_text(edit(text, old, new_text))
        first = text[: text.index(old)].count("\n") + 1
        sb.edited(file, first, first + new_text.count("\n"))

    return change


def append(text: str, file: str = SAM):
    def change(sb: Sandbox) -> None:
        path = sb.spec(file)
        old = path.read_text()
        path.write_text(old + sb.subst(text))
        first = old.count("\n") + 1
        sb.edited(file, first, first + text.count("\n"))

    return change


def raw_bytes(old: bytes, new: bytes, file: str = SAM):
    def change(sb: Sandbox) -> None:
        path = sb.spec(file)
        data = path.read_bytes()
        assert data.count(old) == 1, f"harness: {old!r} is not unique"
        path.write_bytes(data.replace(old, new))

    return change


def both(*changes):
    def change(sb: Sandbox) -> None:
        for c in changes:
            c(sb)

    return change


# Lines of the frozen situ_and_mul spec the cases edit (needles; each is on exactly one line).
SUMMARY = "summary:"
GATE0_REASON = 'reason: "each thread moves one 16-byte'
EXCL0 = "{in: bf16, out: fp16, reason"
EXCL1 = "{in: bf16, out: fp32, reason"
NOTE = 'note: "tanh.approx'
VECTOR = "vector: {bytes: 16}"
DIMS = 'dims: {M: "x.shape[0]", D: "x.shape[1] // 2"}'
X_TENSOR = 'x: {dtype: in, shape: [M, "2 * D"], layout: rows}'
SELECT = 'has_linear_beta: {select: "linear_beta is not None"}'
CHECK0 = 'check: "D % vec == 0"'
ORACLE = "oracle: k3gen.oracles.situ_and_mul"
CONST = "block_threads: 256"
RUNNER0 = 'summary: "Blackwell mxfp4'
SCALE_FORMAT = "scale_format: {values: [fp32_row, fp32_col, ue8m0], default: fp32_row}"
GROUP_SIZE = "group_size: {values: [32, 64, 128], default: 128}"


def summary(text: str):
    return replace_line(SUMMARY, "summary: " + yq(text))


def gate0_reason(text: str):
    return replace_line(GATE0_REASON, "    reason: " + yq(text))


def exclusion(i: int, text: str):
    cell = {0: "in: bf16, out: fp16", 1: "in: bf16, out: fp32"}[i]
    return replace_line(f"{{{cell}, reason", f"    - {{{cell}, reason: {yq(text)}}}")


def note(text: str):
    return replace_line(NOTE, "  note: " + yq(text))


def why(text: str):
    return replace_line(
        VECTOR, "vector: {bytes: 16, overrides: [{when: {in: fp32, out: fp32}, bytes: 16, why: " + yq(text) + "}]}"
    )


def runner_summary(text: str):
    return replace_line(RUNNER0, "    summary: " + yq(text), file=RUNNERS)


def dims(m: str = "x.shape[0]", d: str = "x.shape[1] // 2", extra: str = ""):
    return replace_line(DIMS, f"  dims: {{M: {yq(m)}, D: {yq(d)}{extra}}}")


def x_shape(expr: str):
    return replace_line(X_TENSOR, f"    x: {{dtype: in, shape: [M, {yq(expr)}], layout: rows}}")


def select(expr: str):
    return replace_line(SELECT, f"  has_linear_beta: {{select: {yq(expr)}}}")


def check0(expr: str):
    return replace_line(CHECK0, f"  - check: {yq(expr)}")


def oracle(value: str):
    return replace_line(ORACLE, "oracle: " + yq(value))


def constant(value: str, name: str = "block_threads"):
    return replace_line(CONST, f"  {name}: {value}")


def scale_format_values(*extra: str):
    values = ", ".join(["fp32_row", "fp32_col", "ue8m0", *extra])
    return replace_line(SCALE_FORMAT, f"  scale_format: {{values: [{values}], default: fp32_row}}", file=PTGQ)


def group_size_values(values: list):
    return replace_line(GROUP_SIZE, f"  group_size: {{values: {json.dumps(values)}, default: {values[0]}}}", file=PTGQ)


# Payloads: each tries to run a statement that creates the case's marker, or to leave the tree.
STATEMENT = 'open("@MARK@", "w"); k3_pwned()'
BREAKOUT_PY = "x\"\"\"; '''\n" + STATEMENT + "\n#"
BREAKOUT_C = 'x");\n#include "@OUT@/secret.txt"\n' + STATEMENT + "\n//"
DUNDER = "__import__('os').system('touch @MARK@')"


# ==================================================================================================
# Refused specs: exit 2 at SPEC:LINE naming the field, from every entry point


@dataclass(frozen=True)
class Refused:
    id: str
    change: Callable[[Sandbox], None]
    at: object  # the error's line: a needle on it, a line number, a tuple of either, or ANY
    field: str | None  # a piece of the error's field path (None: not pinned, e.g. undecodable bytes)
    file: str = SAM
    kind: str = "sam"
    bound: bool = False  # a size limit: the error also names its constant
    cwd: str = "cwd"  # where the commands run: the sandbox's empty cwd, or "proj"
    commands: tuple = SPEC_COMMANDS


def R(group: str, name: str, change, at, field, **kw) -> Refused:
    return Refused(f"{group}.{name}", change, at, field, **kw)


TEXT = [
    # summary, gate/exclusion reasons, fast_math note, vector override why, runner summary: one
    # printable line of at most 300 characters; the docstring breakout of the issue comes first.
    R("text", "summary-docstring-breakout", summary(BREAKOUT_PY), EDITED, "summary"),
    R("text", "summary-crlf-statement", summary("one line\r\n" + STATEMENT), EDITED, "summary"),
    R("text", "summary-carriage-return", summary("a\rb"), EDITED, "summary"),
    R("text", "summary-nul", summary("before\0after"), EDITED, "summary"),
    R("text", "summary-lone-high-surrogate", summary("\ud800 lone"), EDITED, "summary"),
    R("text", "summary-lone-low-surrogate", summary("lone \udfff"), EDITED, "summary"),
    R("text", "summary-tab", summary("a\tb"), EDITED, "summary"),
    R("text", "summary-ansi-escape", summary("\x1b[31mred\x1b[0m"), EDITED, "summary"),
    R("text", "summary-line-separator", summary("a\u2028" + STATEMENT), EDITED, "summary"),
    R("text", "summary-next-line-nel", summary("a\x85b"), EDITED, "summary"),
    R("text", "summary-bidi-override", summary("safe \u202e)(denwp_3k"), EDITED, "summary"),
    R(
        "text",
        "summary-block-scalar-two-lines",
        replace_line(SUMMARY, "summary: |\n  line one\n  " + STATEMENT),
        EDITED,
        "summary",
    ),
    R("text", "summary-301-chars", summary("s" * 301), EDITED, "summary"),
    R("text", "summary-5000-chars", summary("s" * 5000), EDITED, "summary"),
    R(
        "text",
        "summary-binary-tag-with-newline",
        replace_line(SUMMARY, "summary: !!binary " + base64.b64encode(b'x"""\nopen("K3_MARKER", "w")\n').decode()),
        EDITED,
        "summary",
    ),
    R("text", "gate-reason-c-breakout", gate0_reason(BREAKOUT_C), EDITED, "gates.0.reason"),
    R("text", "gate-reason-nul", gate0_reason("a\0b"), EDITED, "gates.0.reason"),
    R("text", "gate-reason-surrogate", gate0_reason("a\udc80b"), EDITED, "gates.0.reason"),
    R("text", "gate-reason-301-chars", gate0_reason("r" * 301), EDITED, "gates.0.reason"),
    R("text", "exclusion-reason-newline", exclusion(0, BREAKOUT_PY), EDITED, "dtypes.exclude.0"),
    R("text", "exclusion-reason-surrogate", exclusion(1, "\ud83d half an emoji"), EDITED, "dtypes.exclude.1"),
    R("text", "exclusion-reason-nul", exclusion(0, "\0"), EDITED, "dtypes.exclude.0"),
    R("text", "exclusion-reason-301-chars", exclusion(1, "e" * 301), EDITED, "dtypes.exclude.1"),
    R("text", "fast-math-note-newline", note("*/\n" + STATEMENT + "\n/*"), EDITED, "fast_math.note"),
    R("text", "fast-math-note-bidi", note("\u2066note\u2069"), EDITED, "fast_math.note"),
    R("text", "vector-why-newline", why(BREAKOUT_PY), EDITED, "vector.overrides.0.why"),
    R("text", "vector-why-301-chars", why("w" * 301), EDITED, "vector.overrides.0.why"),
    R(
        "text",
        "runner-summary-newline",
        runner_summary(BREAKOUT_PY),
        EDITED,
        "runners.0.summary",
        file=RUNNERS,
        kind="front",
    ),
    R("text", "runner-summary-nul", runner_summary("a\0b"), EDITED, "runners.0.summary", file=RUNNERS, kind="front"),
    R(
        "text",
        "runner-summary-301-chars",
        runner_summary("u" * 301),
        EDITED,
        "runners.0.summary",
        file=RUNNERS,
        kind="front",
    ),
]


# `'K3_MARK'+'ER'`: the directory's own name must not look like a marker file to the sandbox.
CRAFTED_DIR = "situ_and_mul;open('K3_MARK'+'ER','w');import k3gen"
CRAFTED_ORACLE = f"k3gen.oracles.{CRAFTED_DIR}.oracles.situ_and_mul"


def _crafted_oracle_dir(sb: Sandbox) -> None:
    """The directories a `;`-injected oracle name resolves to, added by the hostile PR, so the old
    existence check passes and `import <oracle> as oracle` runs the statement at collection."""
    d = sb.proj / "k3gen" / "oracles" / CRAFTED_DIR / "oracles"
    d.mkdir(parents=True)
    shutil.copy(sb.proj / "k3gen" / "oracles" / "situ_and_mul.py", d / "situ_and_mul.py")


def _oracle_file(name: str, how: str):
    """k3gen/oracles/NAME.py as a symlink (inside or outside the copy), FIFO or directory."""

    def change(sb: Sandbox) -> None:
        oracles = sb.proj / "k3gen" / "oracles"
        target = oracles / name
        if how == "symlink-inside":
            target.symlink_to(oracles / "situ_and_mul.py")
        elif how == "symlink-outside":
            shutil.copy(oracles / "situ_and_mul.py", sb.sibling / "evil_oracle.py")
            target.symlink_to(sb.sibling / "evil_oracle.py")
        elif how == "fifo":
            os.mkfifo(target)
        elif how == "dir":
            target.mkdir()

    return change


def _oracle_package_symlinked(sb: Sandbox) -> None:
    oracles = sb.proj / "k3gen" / "oracles"
    shutil.copytree(oracles, sb.sibling / "oracles")
    shutil.rmtree(oracles)
    oracles.symlink_to(sb.sibling / "oracles", target_is_directory=True)


def _nested_oracle(sb: Sandbox) -> None:
    d = sb.proj / "k3gen" / "oracles" / "sub"
    d.mkdir()
    shutil.copy(sb.proj / "k3gen" / "oracles" / "situ_and_mul.py", d / "situ_and_mul.py")


def _upper_oracle(sb: Sandbox) -> None:
    o = sb.proj / "k3gen" / "oracles"
    shutil.copy(o / "situ_and_mul.py", o / "Situ_and_mul.py")


ORACLES = [
    # `k3gen.oracles.NAME`, NAME ^[a-z][a-z0-9_]*\Z, a regular file inside the project's package.
    R("oracle", "statement-through-crafted-dirs", both(_crafted_oracle_dir, oracle(CRAFTED_ORACLE)), EDITED, "oracle"),
    R("oracle", "proc-self-cwd", oracle("/proc/self/cwd/k3gen.oracles.situ_and_mul"), EDITED, "oracle", cwd="proj"),
    R("oracle", "trailing-newline", oracle("k3gen.oracles.situ_and_mul\n"), EDITED, "oracle"),
    R("oracle", "trailing-space", oracle("k3gen.oracles.situ_and_mul "), EDITED, "oracle"),
    R("oracle", "stdlib-module", oracle("os"), EDITED, "oracle"),
    R("oracle", "nested-package", both(_nested_oracle, oracle("k3gen.oracles.sub.situ_and_mul")), EDITED, "oracle"),
    R("oracle", "upper-case-module", both(_upper_oracle, oracle("k3gen.oracles.Situ_and_mul")), EDITED, "oracle"),
    R("oracle", "dunder-init", oracle("k3gen.oracles.__init__"), EDITED, "oracle"),
    R("oracle", "empty-component", oracle("k3gen.oracles..situ_and_mul"), EDITED, "oracle"),
    R("oracle", "slashes", oracle("k3gen/oracles/situ_and_mul"), EDITED, "oracle"),
    R(
        "oracle",
        "symlink-inside-package",
        both(_oracle_file("evil.py", "symlink-inside"), oracle("k3gen.oracles.evil")),
        EDITED,
        "oracle",
    ),
    R(
        "oracle",
        "symlink-out-of-the-copy",
        both(_oracle_file("evil.py", "symlink-outside"), oracle("k3gen.oracles.evil")),
        EDITED,
        "oracle",
    ),
    R("oracle", "package-is-a-symlink-out", _oracle_package_symlinked, ORACLE[:7], "oracle"),
    R(
        "oracle",
        "fifo-never-read",
        both(_oracle_file("evil.py", "fifo"), oracle("k3gen.oracles.evil")),
        EDITED,
        "oracle",
    ),
    R(
        "oracle",
        "directory-not-file",
        both(_oracle_file("evil.py", "dir"), oracle("k3gen.oracles.evil")),
        EDITED,
        "oracle",
    ),
]

EXPRS = [
    # One restricted language for dims, shapes, selects and gate checks; names resolved at load.
    R("expr", "dims-dunder-import", dims(m=DUNDER), EDITED, "signature.dims.M"),
    R("expr", "dims-lambda-call", dims(m="(lambda: x.shape[0])()"), EDITED, "signature.dims.M"),
    R("expr", "dims-f-string", dims(m="f'{x.shape[0]}'"), EDITED, "signature.dims.M"),
    R("expr", "dims-comprehension", dims(m="[n for n in x.shape][0]"), EDITED, "signature.dims.M"),
    R("expr", "dims-method-call", dims(m="x.shape.count(0)"), EDITED, "signature.dims.M"),
    R("expr", "dims-attribute-chain", dims(m="x.data.shape[0]"), EDITED, "signature.dims.M"),
    R("expr", "dims-dunder-attribute", dims(m="x.__class__"), EDITED, "signature.dims.M"),
    R("expr", "dims-builtin-call", dims(m="len(x)"), EDITED, "signature.dims.M"),
    R("expr", "dims-slice", dims(m="x.shape[0:1]"), EDITED, "signature.dims.M"),
    R("expr", "dims-computed-index", dims(m="x.shape[x.shape[0]]"), EDITED, "signature.dims.M"),
    R("expr", "dims-tensor-subscript", dims(m="x[0]"), EDITED, "signature.dims.M"),
    R("expr", "dims-string-literal", dims(m="'abc'"), EDITED, "signature.dims.M"),
    R("expr", "dims-unknown-tensor", dims(m="y.shape[0]"), EDITED, "signature.dims.M"),
    R("expr", "dims-unknown-name", dims(d="x.shape[1] // N"), EDITED, "signature.dims.D"),
    R("expr", "dims-float-literal", dims(d="x.shape[1] * 0.5"), EDITED, "signature.dims.D"),
    R("expr", "dims-true-division", dims(d="x.shape[1] / 2"), EDITED, "signature.dims.D"),
    R("expr", "dims-power", dims(d="x.shape[1] ** 1"), EDITED, "signature.dims.D"),
    R("expr", "dims-shift", dims(d="x.shape[1] >> 1"), EDITED, "signature.dims.D"),
    R("expr", "dims-floordiv-by-zero", dims(d="x.shape[1] // 0"), EDITED, "signature.dims.D"),
    R("expr", "dims-floordiv-by-negative", dims(d="x.shape[1] // -2"), EDITED, "signature.dims.D"),
    R("expr", "dims-floordiv-by-runtime-value", dims(d="x.shape[1] // x.shape[0]"), EDITED, "signature.dims.D"),
    R("expr", "dims-mod-by-float-scalar", dims(d="x.shape[1] % beta"), EDITED, "signature.dims.D"),
    R("expr", "dims-walrus", dims(m="(k3_pwned := x.shape[0])"), EDITED, "signature.dims.M"),
    R("expr", "dims-is-none-of-required-tensor", dims(m="x.shape[0] if x is None else 1"), EDITED, "signature.dims.M"),
    R("expr", "dims-dunder-debug", dims(m="x.shape[0] if __debug__ else 0"), EDITED, "signature.dims.M"),
    R("expr", "dims-yield", dims(m="(yield)"), EDITED, "signature.dims.M"),
    R("expr", "dims-tuple-index", dims(m="(x.shape[0], 1)[0]"), EDITED, "signature.dims.M"),
    R("expr", "dims-dict-display", dims(m="{1: x.shape[0]}[1]"), EDITED, "signature.dims.M"),
    R("expr", "dims-exec-in-else", dims(m="x.shape[0] if 1 else exec('k3_pwned()')"), EDITED, "signature.dims.M"),
    R("expr", "dims-201-chars", dims(m="x.shape[0]" + " + 0" * 48), EDITED, "signature.dims.M", bound=True),
    R("expr", "dims-150-deep-unary", dims(m="-" * 150 + "x.shape[0]"), EDITED, "signature.dims.M", bound=True),
    R(
        "expr",
        "shape-dunder-import",
        x_shape("__import__('os').getpid() * 0 + 2 * D"),
        EDITED,
        "signature.tensors.x.shape.1",
    ),
    R("expr", "shape-unknown-name", x_shape("2 * Q"), EDITED, "signature.tensors.x.shape.1"),
    R("expr", "shape-builtin-call", x_shape("max(M, D)"), EDITED, "signature.tensors.x.shape.1"),
    R("expr", "shape-string-literal", x_shape("'2 * D'"), EDITED, "signature.tensors.x.shape.1"),
    R("expr", "shape-power", x_shape("2 ** D"), EDITED, "signature.tensors.x.shape.1"),
    R(
        "expr",
        "shape-by-case-dunder-import",
        replace_line("ue8m0: {dtype: i32", f"          ue8m0: {{dtype: i32, shape: [M, {yq(DUNDER)}]}}", file=PTGQ),
        EDITED,
        "signature.tensors.out_scale.by.scale_format.ue8m0.shape.1",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "expr",
        "shape-mod-by-zero",
        replace_line('shape: [M, "K // group_size"]', '      shape: [M, "K % 0"]', file=PTGQ),
        'shape: [M, "K % 0"]',
        "signature.tensors.out_scale.shape.1",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "expr",
        "select-dunder-import",
        select(DUNDER + " or linear_beta is not None"),
        EDITED,
        "flags.has_linear_beta.select",
    ),
    R("expr", "select-lambda", select("(lambda: True)()"), EDITED, "flags.has_linear_beta.select"),
    R(
        "expr",
        "select-comprehension",
        select("any([b for b in [linear_beta]])"),
        EDITED,
        "flags.has_linear_beta.select",
    ),
    R(
        "expr",
        "select-dunder-attribute",
        select("linear_beta.__class__ is not None"),
        EDITED,
        "flags.has_linear_beta.select",
    ),
    R("expr", "select-is-a-number", select("linear_beta is 3"), EDITED, "flags.has_linear_beta.select"),
    R("expr", "select-typo-name", select("linear_bet is not None"), EDITED, "flags.has_linear_beta.select"),
    R("expr", "select-is-none-of-required-scalar", select("beta is not None"), EDITED, "flags.has_linear_beta.select"),
    R("expr", "select-string-literal", select("'yes'"), EDITED, "flags.has_linear_beta.select"),
    R("expr", "select-f-string", select("f'{linear_beta}' != 'None'"), EDITED, "flags.has_linear_beta.select"),
    R("expr", "check-dunder-import", check0(DUNDER + " == 0"), EDITED, "gates.0.check"),
    R("expr", "check-mod-by-zero", check0("D % 0 == 0"), EDITED, "gates.0.check"),
    R("expr", "check-mod-by-runtime-dim", check0("D % M == 0"), EDITED, "gates.0.check"),
    R("expr", "check-floordiv-by-negative", check0("D // -4 >= 0"), EDITED, "gates.0.check"),
    R("expr", "check-string-compare", check0("'a' == 'a'"), EDITED, "gates.0.check"),
    R("expr", "check-attribute-chain", check0("x.stride0.real == 0"), EDITED, "gates.0.check"),
    R("expr", "check-builtin-call", check0("abs(D) % vec == 0"), EDITED, "gates.0.check"),
    R("expr", "check-201-chars", check0("D % vec == 0" + " and D > 0" * 20), EDITED, "gates.0.check", bound=True),
    R(
        "expr",
        "check-10k-deep-parens",
        check0("(" * 10_000 + "D" + ")" * 10_000 + " % vec == 0"),
        EDITED,
        "gates.0.check",
        bound=True,
    ),
    # 10^5 terms is ~200 KB: a file-size limit may answer first, at line 1.
    R("expr", "check-1e5-terms", check0("1" + "+1" * 100_000 + " > 0"), (EDITED, 1), None, bound=True),
]

# C++ and Python keywords, reserved generated names, over-long and \n-terminated names.
A300 = "a" * 300
NAMES = [
    R("name", "kernel-300-chars", replace_line("kernel: situ_and_mul", "kernel: " + A300), EDITED, "kernel"),
    R("name", "kernel-python-keyword", replace_line("kernel: situ_and_mul", "kernel: class"), EDITED, "kernel"),
    R("name", "kernel-runners", replace_line("kernel: situ_and_mul", "kernel: runners"), EDITED, "kernel"),
    R(
        "name",
        "kernel-trailing-newline",
        replace_line("kernel: situ_and_mul", 'kernel: "situ_and_mul\\n"'),
        EDITED,
        "kernel",
    ),
    R(
        "name",
        "template-trailing-newline",
        replace_line("template: situ_and_mul", 'template: "situ_and_mul\\n"'),
        EDITED,
        "template",
    ),
    R(
        "name",
        "template-path-traversal",
        replace_line("template: situ_and_mul", 'template: "../templates/situ_and_mul"'),
        EDITED,
        "template",
    ),
    R(
        "name",
        "scalar-fake",
        sub("    beta: {type: f32}", "    fake: {type: f32}"),
        "fake: {type",
        "signature.scalars.fake",
    ),
    R(
        "name",
        "scalar-python-keyword",
        sub(
            "    linear_beta: {type: f32, optional: true}",
            "    linear_beta: {type: f32, optional: true}\n    import: {type: f32, optional: true}",
        ),
        "import: {type",
        "signature.scalars.import",
    ),
    R(
        "name",
        "constant-torch",
        sub("  rows_per_thread: 2", "  rows_per_thread: 2\n  torch: 3"),
        "torch: 3",
        "constants.torch",
    ),
    R(
        "name",
        "constant-cpp-keyword",
        sub("  rows_per_thread: 2", "  rows_per_thread: 2\n  auto: 3"),
        "auto: 3",
        "constants.auto",
    ),
    R(
        "name",
        "constant-trailing-newline",
        sub("  rows_per_thread: 2", '  "rows_per_thread\\n": 2'),
        "rows_per_thread",
        "constants",
    ),
    R("name", "dim-vec", dims(extra=', vec: "x.shape[0]"'), EDITED, "signature.dims.vec"),
    R("name", "dim-cpp-keyword", dims(extra=', new: "x.shape[0]"'), EDITED, "signature.dims.new"),
    R(
        "name",
        "tensor-cpp-int",
        sub(
            "    out: {dtype: out, shape: [M, D], output: true}",
            "    out: {dtype: out, shape: [M, D], output: true}\n    int: {dtype: fp32, shape: [M], optional: true}",
        ),
        "int: {dtype",
        "signature.tensors.int",
    ),
    R(
        "name",
        "tensor-cpp-template",
        sub(
            "    out: {dtype: out, shape: [M, D], output: true}",
            "    out: {dtype: out, shape: [M, D], output: true}\n"
            "    template: {dtype: fp32, shape: [M], optional: true}",
        ),
        "template: {dtype",
        "signature.tensors.template",
    ),
    R(
        "name",
        "tensor-300-chars",
        sub(
            "    out: {dtype: out, shape: [M, D], output: true}",
            "    out: {dtype: out, shape: [M, D], output: true}\n"
            f"    {A300}: {{dtype: fp32, shape: [M], optional: true}}",
        ),
        A300,
        "signature.tensors",
    ),
    R(
        "name",
        "flag-python-keyword",
        sub("  pdl: {archs: [sm_90a, sm_100a]}", "  pdl: {archs: [sm_90a, sm_100a]}\n  lambda: {kwarg: true}"),
        "lambda: {kwarg",
        "flags.lambda",
    ),
    R(
        "name",
        "axis-trailing-newline",
        sub("    in: [bf16, fp16, fp32]", '    "in\\n": [bf16, fp16, fp32]'),
        '"in\\n"',
        "dtypes.axes",
    ),
    R(
        "name",
        "test-case-trailing-newline",
        sub("cases: [empty, nan, no_linear_beta, out_given]", 'cases: [empty, nan, no_linear_beta, "out_given\\n"]'),
        EDITED,
        "tests.cases.3",
    ),
    R(
        "name",
        "param-cpp-keyword",
        sub(GROUP_SIZE, GROUP_SIZE + "\n  switch: {values: [1, 2], default: 1}", file=PTGQ),
        "switch: {values",
        "params.switch",
        file=PTGQ,
        kind="ptgq",
    ),
]

NUMBERS = [
    # What cannot be a C++ int/float literal (or a Python one: `inf` is a NameError on import).
    R("number", "constant-inf", constant(".inf"), EDITED, "constants.block_threads"),
    R("number", "constant-minus-inf", constant("-.inf"), EDITED, "constants.block_threads"),
    R("number", "constant-nan", constant(".nan"), EDITED, "constants.block_threads"),
    R("number", "constant-float-overflows-to-inf", constant("1.0e+400"), EDITED, "constants.block_threads"),
    R("number", "constant-beyond-float32", constant("1.0e+39"), EDITED, "constants.block_threads"),
    R("number", "constant-2-pow-40", constant(str(2**40)), EDITED, "constants.block_threads"),
    R("number", "constant-minus-2-pow-40", constant(str(-(2**40))), EDITED, "constants.block_threads"),
    R("number", "constant-2-pow-31", constant(str(2**31)), EDITED, "constants.block_threads"),
    R("number", "constant-5000-digits", constant("9" * 5000), EDITED, "constants.block_threads"),
    R(
        "number",
        "scalar-default-inf",
        sub(
            "    linear_beta: {type: f32, optional: true}",
            "    linear_beta: {type: f32, optional: true, default: .inf}",
        ),
        EDITED,
        "signature.scalars.linear_beta",
    ),
    R(
        "number",
        "scalar-default-nan",
        sub(
            "    linear_beta: {type: f32, optional: true}",
            "    linear_beta: {type: f32, optional: true, default: .nan}",
        ),
        EDITED,
        "signature.scalars.linear_beta",
    ),
    R(
        "number",
        "i32-scalar-default-2-pow-40",
        sub(
            "    linear_beta: {type: f32, optional: true}",
            "    linear_beta: {type: f32, optional: true}\n"
            f"    count: {{type: i32, optional: true, default: {2**40}}}",
        ),
        "count: {type",
        "signature.scalars.count",
    ),
    R(
        "number",
        "param-value-2-pow-32",
        group_size_values([32, 64, 128, 2**32]),
        EDITED,
        "params.group_size.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "number",
        "param-value-below-int32",
        group_size_values([32, 64, 128, -(2**31) - 1]),
        EDITED,
        "params.group_size.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
]

PARAMS = [
    # String param values are identifiers: they become C++ enum names and file names.
    # From generated/k3kernels/csrc/FAMILY/NAME_x, six `..` reach the sandbox (the sibling), seven its parent.
    R(
        "param",
        "value-path-traversal",
        scale_format_values(yq("x" + "/.." * 6 + "/sibling/K3_ESCAPED")),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-path-to-temp-parent",
        scale_format_values(yq("x" + "/.." * 7 + "/K3_ESCAPED")),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-cpp-directive",
        scale_format_values(yq("x\n#error k3_pwned")),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-cpp-include-secret",
        scale_format_values(yq('x\n#include "@OUT@/secret.txt"')),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-python-quote-breakout",
        scale_format_values(yq("a') or __import__('os').system('x') or ('")),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-upper-case",
        scale_format_values("UE8M0"),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-unicode",
        scale_format_values(yq("ue8m0\u00e9")),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-trailing-newline",
        scale_format_values(yq("ue8m1\n")),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-semicolon",
        scale_format_values(yq("1; k3_pwned()")),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-dot-dot",
        scale_format_values(yq("..")),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
    R(
        "param",
        "value-absolute-path",
        scale_format_values(yq("/tmp/K3_ESCAPED")),
        EDITED,
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
]

ALIAS_BOMB = (
    "\n".join(
        ["x_bomb:", '  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        + [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    )
    + "\n"
)
TWENTY_FLAGS = "".join(f"\n  f{i:02d}: {{kwarg: true}}" for i in range(20))
NINE_AXES = "\n".join(f"    a{i}: [bf16, fp16, fp32, fp8, i32]" for i in range(9))
NINE_TENSORS = "\n".join(f"    t{i}: {{dtype: a{i}, shape: [M]}}" for i in range(9))


def _nine_axes(sb: Sandbox) -> None:
    """9 dtype axes of 5 dtypes (5^9 cells), each bound by an input tensor: a valid-looking matrix."""
    text = sb.spec(SAM).read_text()
    start, stop = text.index("dtypes:\n"), text.index("flags:\n")
    text = text[:start] + "dtypes:\n  axes:\n" + NINE_AXES + "\n" + text[stop:]
    text = re.sub(r"fast_math:\n  when: \{\w+: \[bf16, fp16\]\}", "fast_math:\n  when: {a0: [bf16, fp16]}", text)
    start, stop = text.index("  tensors:\n"), text.index("  scalars:\n")
    text = (
        text[:start] + '  tensors:\n    x: {dtype: fp32, shape: [M, "2 * D"], layout: rows}\n'
        "    out: {dtype: fp32, shape: [M, D], output: true}\n" + NINE_TENSORS + "\n" + text[stop:]
    )
    sb.spec(SAM).write_text(text)


BOUNDS = [
    # Unbounded work: answered within 2 s, exit 2, file:line, and (for limits) the constant's name.
    R("bound", "alias-bomb-1kb", append(ALIAS_BOMB), ANY, None),
    R(
        "bound",
        "anchor-and-alias",
        both(
            sub("cuda: [sm_90a, sm_100a]", "cuda: &archs [sm_90a, sm_100a]"),
            sub("pdl: {archs: [sm_90a, sm_100a]}", "pdl: {archs: *archs}"),
        ),
        ("&archs", "*archs"),
        None,
    ),
    R(
        "bound",
        "merge-key",
        both(
            sub(X_TENSOR, "x: &t " + X_TENSOR[3:]),
            sub(
                "out: {dtype: out, shape: [M, D], output: true}",
                "out: {<<: *t, dtype: out, shape: [M, D], output: true}",
            ),
        ),
        ("&t", "<<: *t"),
        None,
    ),
    R("bound", "twenty-call-flags", sub("flags:", "flags:" + TWENTY_FLAGS), ANY, None, bound=True),
    R("bound", "nine-dtype-axes", _nine_axes, ANY, None, bound=True),
    R(
        "bound",
        "param-1e5-values",
        group_size_values(list(range(1, 100_001))),
        ANY,
        None,
        file=PTGQ,
        kind="ptgq",
        bound=True,
    ),
    R(
        "bound",
        "param-17-values-overflow-key-field",
        group_size_values([2**i for i in range(17)]),
        EDITED,
        "params.group_size",
        file=PTGQ,
        kind="ptgq",
        bound=True,
    ),
    R(
        "bound",
        "six-params-of-16-values",
        sub(
            GROUP_SIZE,
            GROUP_SIZE + "".join(f"\n  p{i}: {{values: {list(range(16))}, default: 0}}" for i in range(6)),
            file=PTGQ,
        ),
        ANY,
        None,
        file=PTGQ,
        kind="ptgq",
        bound=True,
    ),
    R(
        "bound",
        "list-nested-10k-deep",
        sub("cases: [empty, nan, no_linear_beta, out_given]", "cases: " + "[" * 10_000 + "]" * 10_000),
        ANY,
        None,
        bound=True,
    ),
    R(
        "bound",
        "mapping-nested-5k-deep",
        append("x_deep: " + "{a: " * 5_000 + "1" + "}" * 5_000 + "\n"),
        ANY,
        None,
        bound=True,
    ),
    R("bound", "spec-10mb-one-comment", append("# " + "x" * 10_000_000 + "\n"), ANY, None, bound=True),
    R("bound", "spec-10mb-many-lines", append(("# padding\n") * 1_000_000), ANY, None, bound=True),
    R(
        "bound",
        "tests-dims-1e4-sizes",
        sub("dims: {M: [1, 7, 128, 4096]", "dims: {M: " + json.dumps(list(range(1, 10_001)))),
        ANY,
        None,
        bound=True,
    ),
    R(
        "bound",
        "tests-dims-100x100-product",
        sub(
            "dims: {M: [1, 7, 128, 4096], D: [256, 2048, 3584]}",
            f"dims: {{M: {list(range(1, 101))}, D: {[256 * i for i in range(1, 101)]}}}",
        ),
        "  dims: {M: [1, 2, 3",
        "tests.dims",
        bound=True,
    ),
]

ENCODING = [
    # Bytes and YAML features that used to crash with a traceback.
    R("yaml", "non-utf8-bytes", raw_bytes(b'summary: "out', b'summary: "\xff\xfeout'), 3, None),
    R("yaml", "utf8-encoded-surrogate", raw_bytes(b'summary: "out', b'summary: "\xed\xa0\x80out'), 3, None),
    R(
        "yaml",
        "latin1-text",
        raw_bytes(b"vector loads and stores", b"vector loads and stor\xe9s"),
        "vector loads and stor",
        None,
    ),
    R("yaml", "raw-nul-byte", raw_bytes(b'summary: "out', b'summary: "\x00out'), 3, None),
    R("yaml", "utf16-file", lambda sb: sb.spec(SAM).write_bytes(sb.spec(SAM).read_text().encode("utf-16")), 1, None),
    R(
        "yaml",
        "tag-python-object-apply",
        constant('!!python/object/apply:os.system ["touch @MARK@"]'),
        EDITED,
        "constants.block_threads",
    ),
    R("yaml", "tag-python-name", replace_line(SUMMARY, "summary: !!python/name:os.system"), EDITED, "summary"),
    R("yaml", "tag-python-module", replace_line(SUMMARY, "summary: !!python/module:os"), EDITED, "summary"),
    R("yaml", "tag-local", replace_line(SUMMARY, 'summary: !k3 "x"'), EDITED, "summary"),
    R("yaml", "tag-set", replace_line(SUMMARY, "summary: !!set {a, b}"), EDITED, "summary"),
    R("yaml", "second-document", append("---\nkernel: other\n"), ("---", 1, 2), None),
]

RT = "route_topk.yaml"
DSV3 = "route_deepseek_v3.yaml"  # a router with every axis of issue 24 set
ROUTING = [
    # Tuning knobs (issue 13) are constants' names and numbers; the runner check's call (issue 11)
    # is dims and scalars by name with numbers: a payload in either is refused where it stands.
    R(
        "routing",
        "tuning-knob-value-payload",
        append('tuning: {knobs: {block_threads: [256, "128); k3_pwned("]}, buckets: [1, 1024]}\n', file=RT),
        EDITED,
        "tuning",
        file=RT,
        kind="front",
    ),
    R(
        "routing",
        "tuning-knob-name-payload",
        append("tuning: {knobs: {\"__import__('os')\": [1, 2]}, buckets: [1, 1024]}\n", file=RT),
        EDITED,
        "tuning",
        file=RT,
        kind="front",
    ),
    R(
        "routing",
        "tuning-bucket-string",
        append('tuning: {knobs: {block_threads: [256, 128]}, buckets: ["1; rm"]}\n', file=RT),
        EDITED,
        "tuning",
        file=RT,
        kind="front",
    ),
    R(
        "routing",
        "tuning-fallback-payload",  # the wrapper spells it, so it is a device's short name or refused
        append(
            'tuning: {knobs: {block_threads: [256, 128]}, buckets: [1, 1024], fallback: "h100\\"); k3_pwned(\\""}\n',
            file=RT,
        ),
        EDITED,
        "tuning.fallback",
        file=RT,
        kind="front",
    ),
    R(
        "routing",
        "runner-check-scalar-payload",
        sub(
            "scalars: {beta: 4.0, linear_beta: 25.0}",
            'scalars: {beta: "4.0); k3_pwned(", linear_beta: 25.0}',
            file=RUNNERS,
        ),
        EDITED,
        "dense_bf16_check",
        file=RUNNERS,
        kind="front",
    ),
    R(
        "routing",
        "runner-check-dim-name-payload",
        sub("dims: {M: 64, D: 3584}", 'dims: {M: 64, "D); k3_pwned(": 3584}', file=RUNNERS),
        EDITED,
        "dense_bf16_check",
        file=RUNNERS,
        kind="front",
    ),
    # The routing fields (issue 15) and the build budget (issue 11) are closed vocabularies and
    # numbers: no string of theirs reaches generated code, so a payload is refused where it stands.
    R(
        "routing",
        "tie-order-rule-payload",
        sub("tie_order: lowest_id", 'tie_order: "lowest_id\'); import os  #"', file=RT),
        EDITED,
        "tie_order",
        file=RT,
        kind="front",
    ),
    R(
        "routing",
        "tie-order-lane-rank-string",
        sub(
            "tie_order: lowest_id",
            "tie_order: {cuda: lowest_id, hip: {rule: wave64_lane_table, experts_per_group: 4, "
            'lane_rank: ["56); k3_pwned(", 1]}}',
            file=RT,
        ),
        EDITED,
        "tie_order",
        file=RT,
        kind="front",
    ),
    R(
        "routing",
        "tie-order-group-size-path",
        sub(
            "tie_order: lowest_id",
            "tie_order: {cuda: lowest_id, hip: {rule: wave64_lane_table, experts_per_group: ../../etc, lane_rank: []}}",
            file=RT,
        ),
        EDITED,
        "tie_order",
        file=RT,
        kind="front",
    ),
    R(
        "routing",
        "sigmoid-payload",
        append('sigmoid: {cuda: "expf(x)); k3_pwned(", hip: exp2}\n', file=RT),
        EDITED,
        "sigmoid",
        file=RT,
        kind="front",
    ),
    # The router axes of issue 24: each a closed vocabulary, a bounded number or a boolean.
    R(
        "routing",
        "scoring-payload",
        sub("scoring: sigmoid", 'scoring: "sigmoid\\"); k3_pwned(\\""', file=DSV3),
        EDITED,
        "scoring",
        file=DSV3,
        kind="router",
    ),
    R(
        "routing",
        "bias-path",
        sub("bias: scores", "bias: ../../etc/passwd", file=DSV3),
        EDITED,
        "bias",
        file=DSV3,
        kind="router",
    ),
    R(
        "routing",
        "groups-count-expression",
        sub("groups: {count: 8,", "groups: {count: \"8 + __import__('os').system('id')\",", file=DSV3),
        EDITED,
        "groups",
        file=DSV3,
        kind="router",
    ),
    R(
        "routing",
        "groups-score-payload",
        sub("score: sum_top2}", 'score: "sum_top2; system(\\"id\\")"}', file=DSV3),
        EDITED,
        "groups",
        file=DSV3,
        kind="router",
    ),
    R(
        "routing",
        "renormalize-payload",
        sub("renormalize: add_eps", 'renormalize: "add_eps */ k3_pwned(); /*"', file=DSV3),
        EDITED,
        "renormalize",
        file=DSV3,
        kind="router",
    ),
    R(
        "routing",
        "renorm-eps-overflow",
        sub("renorm_eps: 1.0e-20", "renorm_eps: 1.0e+400", file=DSV3),
        EDITED,
        "renorm_eps",
        file=DSV3,
        kind="router",
    ),
    R(
        "routing",
        "sorted-string",
        sub("scoring: sigmoid", 'scoring: sigmoid\n  sorted: "true); k3_pwned(("', file=DSV3),
        EDITED,
        "sorted",
        file=DSV3,
        kind="router",
    ),
    R(
        "routing",
        "budget-units-string",
        append("budget: {units_per_arch: \"1 or __import__('os')\"}\n", file=RT),
        EDITED,
        "budget",
        file=RT,
        kind="front",
    ),
    R(
        "routing",
        "budget-bytes-overflow",
        append("budget: {bytes_per_arch: 1.0e+400}\n", file=RT),
        EDITED,
        "budget",
        file=RT,
        kind="front",
    ),
    R(
        "routing",
        "budget-unknown-key",
        append('budget: {units_per_arch: 4, run: "rm -rf /"}\n', file=RT),
        EDITED,
        "budget",
        file=RT,
        kind="front",
    ),
]
REFUSED = TEXT + ORACLES + EXPRS + NAMES + NUMBERS + PARAMS + BOUNDS + ENCODING + ROUTING


def spec_text(sb: Sandbox, file: str) -> str:
    return sb.spec(file).read_bytes().decode("utf-8", "replace")


def expected_lines(case: Refused, sb: Sandbox) -> set[int] | None:
    """The lines an error may point at: those of `at` in the edited spec."""
    if case.at == ANY:
        return None
    text = spec_text(sb, case.file)
    lines = set()
    for at in case.at if isinstance(case.at, tuple) else (case.at,):
        if at == EDITED:
            ranges = sb.edits.get(case.file)
            assert ranges, "harness: the case's change recorded no edited line"
            lines |= {n for first, last in ranges for n in range(first, last + 1)}
        else:
            lines.add(at if isinstance(at, int) else line_of(text, sb.subst(at)))
    return lines


def assert_located(
    run: Run, file: str, lines: set[int] | None, field_path: str | None, bound: bool = False, prefix: str = ""
) -> None:
    """exit 2, an error at FILE:LINE naming the field (and a limit's constant), no traceback."""
    assert run.code == 2, f"expected a refusal (exit 2)\n{run}"
    assert "Traceback" not in run.text, f"a traceback, not a spec error\n{run}"
    where = re.escape(f"specs/{file}") + r":(\d+)\b"
    hits = [(int(m.group(1)), line) for line in run.err.splitlines() for m in [re.search(prefix + where, line)] if m]
    assert hits, f"no error located in specs/{file}\n{run}"
    if lines is not None:
        hits = [(n, line) for n, line in hits if n in lines]
        assert hits, f"no error at specs/{file}:{sorted(lines)}\n{run}"
    if field_path is not None:
        assert any(field_path in line for _, line in hits), f"no error at that line names {field_path!r}\n{run}"
    if bound:
        assert any(CONSTANT.search(line) for _, line in hits), f"the limit's constant is not named\n{run}"


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_hostile_spec_is_refused(case: Refused, sandbox):
    sb = sandbox(case.kind, case.id)
    case.change(sb)
    sb.arm()
    lines = expected_lines(case, sb)
    before = tree_state(sb.proj, skip=sb.proj / ".git")
    for command in case.commands:
        run = k3gen(sb, command, cwd=sb.proj if case.cwd == "proj" else None)
        assert_located(run, case.file, lines, case.field, case.bound)
        assert run.wall < IN_PROCESS_S, f"`k3gen {command}` took {run.wall:.2f}s"
        assert sb.secret_token not in run.text
        assert tree_state(sb.proj, skip=sb.proj / ".git") == before, f"`k3gen {command}` changed the copy"
    sb.assert_untouched()


# ==================================================================================================
# Spec file names: specs/NAME.yaml with NAME ^[a-z][a-z0-9_]*\Z, refused at line 1, name escaped


BAD_NAMES = {
    "newline-python-statement": "situ\nopen('K3_MARK'+'ER','w')\n#.yaml",  # the name itself is no marker
    "newline-cpp-directive": "situ\n#error k3_pwned\n.yaml",
    "carriage-return": "situ\r.yaml",
    "line-separator": "situ\u2028x.yaml",
    "space": "situ and mul.yaml",
    "single-quote": "situ'mul.yaml",
    "double-quote": 'situ"mul.yaml',
    "backslash": "situ\\x.yaml",
    "hash": "situ#x.yaml",
    "upper-case": "Situ_and_mul.yaml",
    "unicode": "situ_\u00fcnd_mul.yaml",
    "leading-digit": "1situ.yaml",
    "hyphen": "situ-and-mul.yaml",
    "extra-dot": "situ.and.yaml",
    "over-long": "a" * 120 + ".yaml",
}


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=[f"filename.{k}" for k in BAD_NAMES])
def test_bad_spec_file_name_is_refused_at_line_1(name: str, sandbox):
    sb = sandbox("sam", name)
    (sb.proj / "specs" / SAM).rename(sb.proj / "specs" / name)
    sb.arm()
    before = tree_state(sb.proj, skip=sb.proj / ".git")
    stem = name[: -len(".yaml")]
    fragment = max(re.findall(r"[a-z]{3,}", stem), key=len)[:20]  # a printable piece of the name
    for command in SPEC_COMMANDS:
        run = k3gen(sb, command)
        assert run.code == 2, f"`k3gen {command}`: expected exit 2\n{run}"
        assert "Traceback" not in run.text, str(run)
        located = [
            line for line in run.err.splitlines() if "specs/" in line and re.search(r":1\b", line) and fragment in line
        ]
        assert located, f"`k3gen {command}`: no error at the file, line 1\n{run}"
        # A name with control characters is escaped: neither it nor they reach the terminal raw.
        if not name.isprintable():
            assert name not in run.err, f"`k3gen {command}` printed the file name raw\n{run}"
            for c in set(name) - {"\n"}:
                if not c.isprintable():
                    assert c not in run.err, f"`k3gen {command}` printed {c!r} raw\n{run}"
        assert not any(line.startswith(("open(", "#error")) for line in run.text.splitlines()), str(run)
        assert run.wall < IN_PROCESS_S
        assert tree_state(sb.proj, skip=sb.proj / ".git") == before
    sb.assert_untouched()


SPEC_LINKS = {
    # A spec is read from the project only: a link out of it is refused (never read, never quoted).
    "link-to-a-file-outside": lambda sb: sb.sibling / "outside.yaml",
    "link-to-the-other-temp-dir": lambda sb: sb.outside / "secret.txt",
}


@pytest.mark.parametrize("how", SPEC_LINKS, ids=[f"filename.{k}" for k in SPEC_LINKS])
def test_spec_file_linked_out_of_the_project_is_refused(how: str, sandbox):
    sb = sandbox("sam", how)
    (sb.sibling / "outside.yaml").write_text(f"kernel: evil\nsummary: {sb.secret_token}\n")
    (sb.proj / "specs" / "evil.yaml").symlink_to(SPEC_LINKS[how](sb))
    sb.arm()
    for command in ("validate", "build"):
        run = k3gen(sb, command)
        assert run.code == 2 and "Traceback" not in run.text, f"`k3gen {command}`\n{run}"
        assert re.search(r"specs/evil\.yaml:1\b", run.err), f"`k3gen {command}` does not name the link\n{run}"
        assert sb.secret_token not in run.text, f"`k3gen {command}` printed a file outside the project\n{run}"
        assert run.wall < IN_PROCESS_S
    sb.assert_untouched()


# ==================================================================================================
# Every error of a run is reported: field errors beside model-level and cross-file ones


@dataclass(frozen=True)
class AllErrors:
    id: str
    change: Callable[[Sandbox], None]
    expected: tuple  # (needle of the line, field path) per error that must be reported


ALL_ERRORS = [
    AllErrors(
        "bad-arch-and-exclusion-naming-a-missing-axis",
        both(
            replace_line("cuda: [sm_90a, sm_100a]", "  cuda: [sm_90a, sm_99a]"),
            replace_line(EXCL0, '    - {in: bf16, out: fp16, inp: bf16, reason: "r"}'),
        ),
        (("cuda: [sm_90a, sm_99a]", "targets.cuda.1"), ("inp: bf16", "dtypes.exclude.0")),
    ),
    AllErrors(
        "bad-arch-and-gate-naming-an-unknown-name",
        both(replace_line("cuda: [sm_90a, sm_100a]", "  cuda: [sm_90a, sm_99a]"), check0("D % vecc == 0")),
        (("cuda: [sm_90a, sm_99a]", "targets.cuda.1"), ('check: "D % vecc', "gates.0.check")),
    ),
    AllErrors(
        "two-bad-exclusions",
        both(
            replace_line(EXCL0, '    - {in: bf16, out: fp8, reason: "r"}'),
            replace_line("{in: fp16, out: bf16, reason", '    - {in: fp16, out: fp8, reason: "r"}'),
        ),
        (("{in: bf16, out: fp8", "dtypes.exclude.0"), ("{in: fp16, out: fp8", "dtypes.exclude.2")),
    ),
    AllErrors(
        "bad-dtype-and-flag-arch-not-a-target",
        both(
            sub("in: [bf16, fp16, fp32]", "in: [bf61, fp16, fp32]"),
            sub("pdl: {archs: [sm_90a, sm_100a]}", "pdl: {archs: [sm_90a, gfx90a]}"),
        ),
        (("in: [bf61", "dtypes.axes.in.0"), ("gfx90a", "flags.pdl.archs.1")),
    ),
    AllErrors(
        "newline-summary-and-injected-oracle",
        both(summary(BREAKOUT_PY), oracle("os; open('K3_MARKER', 'w')")),
        ((SUMMARY, "summary"), ("oracle:", "oracle")),
    ),
    AllErrors(
        "two-bad-gates",
        both(
            check0("D % vecc == 0"),
            sub('check: "x.ptr % 16 == 0 and out.ptr % 16 == 0"', 'check: "abs(x.ptr) % 16 == 0"'),
        ),
        (('- check: "D % vecc', "gates.0.check"), ("abs(x.ptr)", "gates.2.check")),
    ),
]


@pytest.mark.parametrize("case", ALL_ERRORS, ids=[f"all-errors.{c.id}" for c in ALL_ERRORS])
def test_every_error_of_a_run_is_reported(case: AllErrors, sandbox):
    sb = sandbox("sam", case.id)
    case.change(sb)
    sb.arm()
    text = spec_text(sb, SAM)
    for command in ("validate", "build"):
        run = k3gen(sb, command)
        for needle, field_path in case.expected:
            assert_located(run, SAM, {line_of(text, needle)}, field_path)
        assert run.wall < IN_PROCESS_S
    sb.assert_untouched()


# ==================================================================================================
# `k3gen diff` with the hostile spec committed at REV and a clean work tree


DIFF_AT_REV = [
    R("diff-rev", "summary-docstring-breakout", summary(BREAKOUT_PY), EDITED, "summary"),
    R("diff-rev", "oracle-statement-through-crafted-dirs", ORACLES[0].change, ORACLE[:7], "oracle"),
    R("diff-rev", "alias-bomb", append(ALIAS_BOMB), ANY, None),
    R(
        "diff-rev",
        "param-path-traversal",
        PARAMS[0].change,
        "scale_format: {values",
        "params.scale_format.values.3",
        file=PTGQ,
        kind="ptgq",
    ),
]


@pytest.mark.parametrize("case", DIFF_AT_REV, ids=[c.id for c in DIFF_AT_REV])
def test_hostile_spec_at_the_diffed_revision_is_refused(case: Refused, sandbox, pristine):
    sb = sandbox(case.kind, case.id)
    case.change(sb)
    lines = expected_lines(case, sb)
    _git(sb.proj, "add", "-A")
    _git(sb.proj, "commit", "-q", "-m", "hostile")
    for path in (sb.proj / "specs").iterdir():  # the work tree goes back to the clean specs
        shutil.copy(pristine(case.kind) / "specs" / path.name, path)
    sb.arm()
    run = k3gen(sb, "diff")
    assert_located(run, case.file, lines, case.field, prefix=r"[0-9a-f]{7,40}:")
    assert run.wall < IN_PROCESS_S
    sb.assert_untouched()


# ==================================================================================================
# Positive controls: unusual but printable text builds, and comes out as data everywhere


@dataclass(frozen=True)
class Escaped:
    id: str
    change: Callable[[Sandbox], None]
    text: str  # must come out literally (placeholders filled)
    where: str  # docstring: the summary; string: a str constant of the module; none: builds only
    kind: str = "sam"
    module: str = "k3kernels/situ_and_mul.py"
    in_cpp: bool = False  # also inside a C++ string literal (gate reasons)
    real_subprocess: bool = False  # collect with a fresh `python -m pytest` too, not only the fork server


TRIPLE = 'x"""; open("@MARK@", "w"); k3_pwned(); """'
UNICODE = "\u00fcn\u00efc\u00f8d\u00e9 \u2014 \u201cq\u201d \u2713 \u6f22\u5b57 \U0001f680"  # printable, astral too
ESCAPED = [
    Escaped("summary-triple-quote-statement", summary(TRIPLE), TRIPLE, "docstring"),
    Escaped("summary-single-triple-quotes", summary("'''; k3_pwned() #"), "'''; k3_pwned() #", "docstring"),
    Escaped("summary-trailing-backslash", summary("ends with a backslash \\"), "ends with a backslash \\", "docstring"),
    Escaped(
        "summary-backslash-sequences",
        summary(r"\n \t \x00 \u2028 \N{BULLET} \\ \""),
        r"\n \t \x00 \u2028 \N{BULLET} \\ \"",
        "docstring",
    ),
    Escaped(
        "summary-comment-closers",
        summary("*/ /* */ --> <!-- # k3_pwned() */"),
        "*/ /* */ --> <!-- # k3_pwned() */",
        "docstring",
    ),
    Escaped(
        "summary-jinja-syntax",
        summary("{{ 7*7 }} {% raw %} {# x #} ${{ k3_pwned }}"),
        "{{ 7*7 }} {% raw %} {# x #} ${{ k3_pwned }}",
        "docstring",
    ),
    Escaped("summary-unicode", summary(UNICODE), UNICODE, "docstring"),
    Escaped("summary-300-chars", summary('"\\' * 150), '"\\' * 150, "docstring"),
    Escaped(
        "gate-reason-c-and-python-breakout",
        gate0_reason('x"); k3_pwned(); // */ \\" \\'),
        'x"); k3_pwned(); // */ \\" \\',
        "string",
        in_cpp=True,
    ),
    Escaped("exclusion-reason-quotes", exclusion(0, "'\"; k3_pwned() # \\"), "'\"; k3_pwned() # \\", "string"),
    Escaped("fast-math-note-comment-closer", note('*/ k3_pwned(); /* """ \\'), '*/ k3_pwned(); /* """ \\', "none"),
    Escaped("vector-why-directive", why('*/ #include "x" """ k3_pwned'), '*/ #include "x" """ k3_pwned', "none"),
    Escaped(
        "runner-summary-quotes",
        runner_summary('x"), k3_pwned(), ("\\'),
        'x"), k3_pwned(), ("\\',
        "string",
        kind="front",
        module="k3kernels/runners.py",
    ),
    Escaped(
        "constants-at-int32-limits",
        sub("  rows_per_thread: 2", f"  rows_per_thread: 2\n  big: {2**31 - 1}\n  small: {-(2**31)}"),
        "",
        "none",
    ),
    Escaped("dims-divided-by-a-constant", dims(d="x.shape[1] // rows_per_thread"), "", "none"),
]


def c_unescape(body: str) -> str:
    """The text a C string literal's body denotes (escapes decoded, bytes read as UTF-8)."""
    out, i = bytearray(), 0
    simple = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, '"': 34, "'": 39, "?": 63, "a": 7, "b": 8, "f": 12, "v": 11}
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in "01234567":
            j = i + 1
            while j < len(body) and j < i + 4 and body[j] in "01234567":
                j += 1
            out.append(int(body[i + 1 : j], 8))
            i = j
        elif nxt == "x":
            j = i + 2
            while j < len(body) and body[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(body[i + 2 : j], 16) & 0xFF)
            i = j
        elif nxt in "uU":
            n = 4 if nxt == "u" else 8
            out += chr(int(body[i + 2 : i + 2 + n], 16)).encode()
            i += 2 + n
        else:
            out.append(simple[nxt])
            i += 2
    return out.decode("utf-8", "replace")


@pytest.mark.parametrize("case", ESCAPED, ids=[f"escaped.{c.id}" for c in ESCAPED])
def test_printable_text_builds_and_stays_data(case: Escaped, sandbox, importer):
    sb = sandbox(case.kind, case.id)
    case.change(sb)
    sb.arm()
    text = sb.subst(case.text)
    for command in ("validate", "build", "check", "list"):
        run = k3gen(sb, command)
        assert run.code == 0 and "Traceback" not in run.text, f"`k3gen {command}`\n{run}"
        assert run.wall < IN_PROCESS_S, f"`k3gen {command}` took {run.wall:.2f}s"
    run = k3gen(sb, "diff", "--format", "json")
    assert run.code == 0, str(run)
    json.loads(run.out)  # the report stays valid JSON whatever the text
    trees = assert_payload_is_data(sb.proj)
    tree = trees[case.module]
    if case.where == "docstring":
        # Docstrings wrap the summary at spaces to stay within 120 columns: compare word for word.
        docs = [" ".join(d.split()) for d in docstrings(tree)]
        assert sum(" ".join(text.split()) in d for d in docs) >= 2, (
            f"the summary is not literally in the module and wrapper docstrings: {docs}"
        )
    elif case.where == "string":
        assert any(text in s for s in py_strings(tree)), f"{text!r} is not a string of {case.module}"
    if case.in_cpp:
        units = {
            rel: body for rel, body in generated_files(sb.proj).items() if rel.endswith((".cu", ".hip")) and "__" in rel
        }
        # A reason is a message, not code: the C++ gate check names the gate alone (issue 11), so no
        # unit carries the text at all, escaped or not; the wrapper's string constant says why.
        assert units and not any(
            text in body or any(text in c_unescape(lit) for lit in cpp_string_literals(body)) for body in units.values()
        ), "a reason reached a translation unit"
    family = case.module.split("/")[-1][:-3]
    for label, run in (("import", importer.import_family(sb.proj, family)), ("collect", importer.collect(sb.proj))):
        assert run.code == 0, f"{label}\n{run}"
        assert run.wall < SUBPROCESS_S, f"{label} took {run.wall:.2f}s"
    if case.real_subprocess:
        run = collect_in_subprocess(sb.proj)
        assert run.code == 0, str(run)
        assert run.wall < SUBPROCESS_S, f"collection took {run.wall:.2f}s"
    sb.assert_untouched()


# ==================================================================================================
# generated/ as a hostile PR may leave it: MANIFEST lines, symlinks, files MANIFEST does not list


def _append_manifest(sb: Sandbox, line: str) -> None:
    m = sb.proj / "generated" / "MANIFEST"
    m.write_text(m.read_text() + line)


def manifest_line(path_text: str, digest: str = HEX, sep: str = "  "):
    """Append one MANIFEST line; the error must then name the file's last line."""
    return lambda sb: _append_manifest(sb, f"{digest}{sep}{sb.subst(path_text)}\n")


def _generated_is_a_link(sb: Sandbox) -> None:
    shutil.move(str(sb.proj / "generated"), str(sb.sibling / "gen"))
    (sb.proj / "generated").symlink_to(sb.sibling / "gen", target_is_directory=True)


def symlink(rel: str, target: str, make_target: Callable[[Sandbox, Path], None] | None = None):
    """Replace generated/REL by a symlink to TARGET (placeholders filled; relative targets stay relative)."""

    def change(sb: Sandbox) -> None:
        link = sb.proj / "generated" / rel
        dest = Path(sb.subst(target))
        if make_target:
            make_target(sb, dest)
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        elif link.exists() or link.is_symlink():
            link.unlink()
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(dest)

    return change


def extra_file(rel: str, text: str = "", fifo: bool = False):
    def change(sb: Sandbox) -> None:
        path = sb.proj / "generated" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if fifo:
            os.mkfifo(path)
        else:
            path.write_text(sb.subst(text))

    return change


def _empty_dir(sb: Sandbox, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)


def _outside_conftest(sb: Sandbox, dest: Path) -> None:
    dest.write_text(f'open({str(sb.marker)!r}, "w")\n')


MARKER_CONFTEST = 'open("@MARK@", "w")  # runs at collection if it survives\n'


@dataclass(frozen=True)
class Layout:
    id: str
    change: Callable[[Sandbox], None]
    names: str  # what the errors (or the removal report) must name; placeholders filled
    outcome: str  # "refused": build and check exit 2; "extra": check fails naming it, build removes it
    manifest_line: bool = False  # the error also names MANIFEST's last line (the one added)
    real_subprocess: bool = False  # collect with a fresh `python -m pytest`, not the fork server


LAYOUTS = [
    Layout(
        "manifest-dotdot-to-sibling-victim",
        manifest_line("../../sibling/victim.txt"),
        "MANIFEST",
        "refused",
        manifest_line=True,
    ),
    Layout(
        "manifest-absolute-path-to-secret", manifest_line("@OUT@/secret.txt"), "MANIFEST", "refused", manifest_line=True
    ),
    Layout(
        "manifest-dotdot-inside-path",
        manifest_line("k3kernels/../../../sibling/victim.txt"),
        "MANIFEST",
        "refused",
        manifest_line=True,
    ),
    Layout(
        "manifest-not-normalized",
        manifest_line("./k3kernels/situ_and_mul.py"),
        "MANIFEST",
        "refused",
        manifest_line=True,
    ),
    Layout("manifest-absolute-dir", manifest_line("@SIB@"), "MANIFEST", "refused", manifest_line=True),
    Layout(
        "manifest-bad-digest",
        manifest_line("k3kernels/extra.py", digest="not-a-sha256"),
        "MANIFEST",
        "refused",
        manifest_line=True,
    ),
    Layout(
        "manifest-single-space", manifest_line("k3kernels/extra.py", sep=" "), "MANIFEST", "refused", manifest_line=True
    ),
    Layout(
        "manifest-shell-line", lambda sb: _append_manifest(sb, "rm -rf /\n"), "MANIFEST", "refused", manifest_line=True
    ),
    Layout("manifest-empty-path", manifest_line(""), "MANIFEST", "refused", manifest_line=True),
    Layout("manifest-dot-dot", manifest_line(".."), "MANIFEST", "refused", manifest_line=True),
    Layout(
        "symlink-file-to-sibling-victim",
        symlink("k3kernels/situ_and_mul.py", "@SIB@/victim.txt"),
        "k3kernels/situ_and_mul.py",
        "refused",
    ),
    Layout(
        "symlink-dir-out-of-the-copy", symlink("k3kernels/csrc", "@SIB@/csrc", _empty_dir), "k3kernels/csrc", "refused"
    ),
    Layout("generated-itself-a-symlink", _generated_is_a_link, "generated", "refused"),
    Layout(
        "dangling-symlink-out",
        symlink("k3kernels/situ_and_mul.py", "@SIB@/created_by_build.py"),
        "k3kernels/situ_and_mul.py",
        "refused",
    ),
    Layout(
        "symlink-conftest-out-of-the-copy",
        symlink("tests/conftest.py", "@OUT@/evil_conftest.py", _outside_conftest),
        "tests/conftest.py",
        "refused",
    ),
    Layout("symlink-manifest-to-spec", symlink("MANIFEST", "../specs/situ_and_mul.yaml"), "MANIFEST", "refused"),
    Layout(
        "symlink-listed-dir-to-sibling",
        both(symlink("k3kernels/linkdir", "@SIB@"), manifest_line("k3kernels/linkdir/victim.txt")),
        "k3kernels/linkdir",
        "refused",
    ),
    Layout(
        "extra-tests-conftest",
        extra_file("tests/conftest.py", MARKER_CONFTEST),
        "tests/conftest.py",
        "extra",
        real_subprocess=True,
    ),
    Layout("extra-root-conftest", extra_file("conftest.py", MARKER_CONFTEST), "conftest.py", "extra"),
    Layout("extra-tests-init", extra_file("tests/__init__.py", MARKER_CONFTEST), "tests/__init__.py", "extra"),
    Layout("extra-module", extra_file("k3kernels/evil.py", MARKER_CONFTEST), "k3kernels/evil.py", "extra"),
    Layout(
        "extra-unit-in-new-dir",
        extra_file("k3kernels/csrc/evil/evil.cu", "#error k3_pwned\n"),
        "k3kernels/csrc/evil/evil.cu",
        "extra",
    ),
    Layout("extra-hidden-file", extra_file("tests/.evil.py", MARKER_CONFTEST), "tests/.evil.py", "extra"),
    Layout("extra-fifo", extra_file("tests/fifo_test.py", fifo=True), "tests/fifo_test.py", "extra"),
]


def _manifest_lines(sb: Sandbox) -> int:
    m = sb.proj / "generated" / "MANIFEST"
    return len(m.read_text().splitlines()) if m.is_file() and not m.is_symlink() else 0


@pytest.mark.parametrize("case", LAYOUTS, ids=[f"generated.{c.id}" for c in LAYOUTS])
def test_hostile_generated_layout(case: Layout, sandbox, importer):
    sb = sandbox("sam", case.id)
    case.change(sb)
    sb.arm()
    names = sb.subst(case.names)
    last = _manifest_lines(sb)
    gen_before = tree_state(sb.proj / "generated")
    if case.outcome == "refused":
        for command in ("check", "build"):
            run = k3gen(sb, command)
            assert run.code == 2, f"`k3gen {command}` must refuse this generated/ (exit 2)\n{run}"
            assert "Traceback" not in run.text, str(run)
            assert names in run.text, f"`k3gen {command}` does not name {names!r}\n{run}"
            if case.manifest_line:
                assert re.search(rf"MANIFEST(?::|,? line ){last}\b", run.text), f"MANIFEST line {last} not named\n{run}"
            assert sb.secret_token not in run.text, f"`k3gen {command}` printed a file outside the copy\n{run}"
            assert run.wall < IN_PROCESS_S
            assert tree_state(sb.proj / "generated") == gen_before, f"`k3gen {command}` wrote into generated/"
    else:
        run = k3gen(sb, "check")
        assert run.code not in (0, None) and "Traceback" not in run.text, f"check passed a file MANIFEST lacks\n{run}"
        assert f"generated/{names}" in run.text, f"check does not name generated/{names}\n{run}"
        assert run.wall < IN_PROCESS_S
        run = k3gen(sb, "build")
        assert run.code == 0 and "Traceback" not in run.text, str(run)
        assert re.search(rf"removed\s+generated/{re.escape(names)}\b", run.out), f"build did not report it\n{run}"
        assert not os.path.lexists(sb.proj / "generated" / names)
        assert run.wall < IN_PROCESS_S
        run = k3gen(sb, "check")
        assert run.code == 0, f"check after build\n{run}"
        run = collect_in_subprocess(sb.proj) if case.real_subprocess else importer.collect(sb.proj)
        assert run.code == 0 and run.wall < SUBPROCESS_S, str(run)
    sb.assert_untouched()


# ==================================================================================================
# Runtime: cache-directory OSErrors become K3BuildError naming the path and K3GEN_CACHE_DIR


CSRC = {
    "k3_backend.h": "#pragma once\n",
    "fam/fam_abi.h": '#pragma once\n#include "../k3_backend.h"\nstruct Args { int n; };\n',
    "fam/fam.cuh": '#pragma once\n#include "fam_abi.h"\n',
    "fam/fam__a.cu": '#include "fam.cuh"\nvoid a() {}\n',
    "fam/dispatch.cu": '#include "fam_abi.h"\nextern "C" int k3_fam_launch() { return 0; }\n',
}


def _cache_request(root: Path):
    from k3gen.runtime.cache import BuildRequest

    for rel, text in CSRC.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return BuildRequest(
        "fam",
        "sm_90a",
        root,
        ("fam__a.cu", "dispatch.cu"),
        ("fam.cuh", "fam_abi.h", "../k3_backend.h"),
        ("-DK3_PDL=1",),
    )


def _read_only_cache(tmp: Path, req) -> Path:
    cache = tmp / "ro-cache"
    if os.geteuid() != 0:
        cache.mkdir()
        cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
        return cache
    probe = Path("/sys/k3gen-cache-probe")  # root ignores modes; sysfs refuses mkdir even to root
    try:
        probe.mkdir()
    except OSError:
        return Path("/sys/k3gen-cache")
    probe.rmdir()
    pytest.skip("no read-only location to point K3GEN_CACHE_DIR at")


def _file_cache(tmp: Path, req) -> Path:
    (tmp / "cache-file").write_text("not a directory\n")
    return tmp / "cache-file"


def _under_a_file(tmp: Path, req) -> Path:
    return _file_cache(tmp, req) / "sub"


def _family_is_a_file(tmp: Path, req) -> Path:
    (tmp / "cache").mkdir()
    (tmp / "cache" / "fam").write_text("")
    return tmp / "cache"


def _lock_is_a_dir(tmp: Path, req) -> Path:
    from k3gen.runtime.artifact import jit_entry_name

    cache = tmp / "cache"
    name = jit_entry_name(req.content_key(), req.key())  # the cache entry's folder name, as the runtime makes it
    (cache / "fam" / "sm_90a" / f"{name}.lock").mkdir(parents=True)
    return cache


def _arch_is_a_dangling_link(tmp: Path, req) -> Path:
    cache = tmp / "cache"
    (cache / "fam").mkdir(parents=True)
    (cache / "fam" / "sm_90a").symlink_to(tmp / "nowhere")
    return cache


CACHE_DIRS = {
    "read-only": _read_only_cache,
    "a-file": _file_cache,
    "under-a-file": _under_a_file,
    "family-dir-is-a-file": _family_is_a_file,
    "lock-is-a-directory": _lock_is_a_dir,
    "arch-dir-is-a-dangling-symlink": _arch_is_a_dangling_link,
}


@pytest.mark.parametrize("how", CACHE_DIRS, ids=[f"cache.{k}" for k in CACHE_DIRS])
def test_cache_dir_oserror_is_a_build_error(how: str, fake_cc, tmp_path):
    from k3gen.runtime import K3BuildError
    from k3gen.runtime.cache import ensure_built

    req = _cache_request(tmp_path / "gen" / "k3kernels" / "csrc")
    cache = CACHE_DIRS[how](tmp_path, req)
    fake_cc.set("K3GEN_CACHE_DIR", str(cache))
    with pytest.raises(Exception) as info:
        ensure_built(req)
    assert isinstance(info.value, K3BuildError), f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    assert "K3GEN_CACHE_DIR" in message and str(cache) in message, message


# ==================================================================================================
# Harness self-checks: the corpus would see a payload run, and the pristine output lexes


def test_harness_sees_a_payload_that_runs(sandbox, importer):
    """A conftest.py that creates the marker does create it, and assert_untouched says so: the
    marker checks of every case above are not vacuous."""
    sb = sandbox("sam", "self-check")
    sb.arm()
    (sb.proj / "generated" / "tests" / "conftest.py").write_text(sb.subst(MARKER_CONFTEST))
    importer.collect(sb.proj)
    with pytest.raises(AssertionError, match="a payload created files"):
        sb.assert_untouched()
    sb.marker.unlink()


def test_harness_reads_the_pristine_output_as_data(pristine):
    for kind in KINDS:
        for rel, text in generated_files(pristine(kind)).items():
            if rel.endswith((".cu", ".hip", ".h", ".cuh")):
                assert PWNED not in cpp_code(text), rel
        assert_payload_is_data(pristine(kind))


# ==================================================================================================
# Fuzz: every string field of the spec, with an injection alphabet


INJECTION = [
    '"',
    "'",
    '"""',
    "'''",
    "\\",
    "\n",
    "\r",
    "\t",
    "#",
    "*/",
    "/*",
    "{{",
    "}}",
    "{%",
    "%}",
    "\0",
    "\ud800",
    "\udfff",
    "..",
    "/",
    " ",
    ";",
    "(",
    ")",
    "k3_pwned()",
    "__import__('pathlib').Path(r'@MARK@').touch()",
    "a",
    "x",
    "\u2028",
    "\u00e9",
    "-->",
    "$",
    "`",
    "%",
    "\\n",
    "\\x",
    ")\n#",
]
# Half the examples use printable tokens only, so that text fields often build and the escaping
# (not only the refusal) is what gets fuzzed.
PRINTABLE = [t for t in INJECTION if t.isprintable() and not any(0xD800 <= ord(c) <= 0xDFFF for c in t)]
injected = st.one_of(
    st.lists(st.sampled_from(INJECTION), min_size=1, max_size=10).map("".join),
    st.lists(st.sampled_from(PRINTABLE), min_size=1, max_size=10).map("".join),
)


def _fuzz_base() -> dict:
    data = yaml.safe_load((ROOT / "tests" / "data" / SAM).read_text())
    data["vector"] = {
        "bytes": 16,
        "overrides": [{"when": {"in": "fp32", "out": "fp32"}, "bytes": 16, "why": "measured on the H200"}],
    }
    return data


def _string_paths(node, prefix=()):
    if isinstance(node, str):
        yield prefix
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _string_paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _string_paths(v, prefix + (i,))


FUZZ_BASE = _fuzz_base()
FUZZ_PATHS = list(_string_paths(FUZZ_BASE))  # summary, reasons, note, why, names, exprs, dtypes, oracle, ...
# Text fields may hold any printable line, so only they can build with a payload: half the examples
# aim at them, or the escaping would hardly be fuzzed at all.
TEXT_PATHS = [p for p in FUZZ_PATHS if p[-1] in ("summary", "reason", "note", "why")]
fuzz_path = st.one_of(st.sampled_from(TEXT_PATHS), st.sampled_from(FUZZ_PATHS))


def _set(data: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(data)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def fuzz_once(
    base_dir: Path, outside: Path, pristine_root: Path, importer: Importer, file: str, data: dict, family: str
) -> None:
    """Write `data` as the spec, build: a located refusal (exit 2, no traceback), or output whose
    Python compiles, whose payload is never code, and whose import creates no marker."""
    base = Path(tempfile.mkdtemp(dir=base_dir))
    sb = make_sandbox(base, outside, pristine_root, base.name)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=False, width=1 << 30)
    sb.spec(file).write_text(sb.subst(text))
    sb.arm()
    gen_before = tree_state(sb.proj / "generated")
    run = k3gen(sb, "build")
    assert run.code in (0, 2), f"neither built nor refused\n{run}"
    assert "Traceback" not in run.text, str(run)
    assert run.wall < IN_PROCESS_S, f"build took {run.wall:.2f}s"
    event("built" if run.code == 0 else "refused")
    if run.code == 2:
        assert re.search(r"specs/[^\s:]+\.yaml:\d+ \(", run.err), f"refused without a location\n{run}"
        assert tree_state(sb.proj / "generated") == gen_before
    else:
        assert_payload_is_data(sb.proj, forbidden=("k3_pwned", "__import__"))
        imported = importer.import_family(sb.proj, family)
        assert imported.code == 0, f"import\n{imported}"
    sb.assert_untouched()
    shutil.rmtree(base)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(path=fuzz_path, value=injected)
def test_fuzz_every_string_field(path, value, tmp_path_factory, outside, pristine, importer):
    base = tmp_path_factory.mktemp("fuzz", numbered=True)
    fuzz_once(base, outside, pristine("sam"), importer, SAM, _set(FUZZ_BASE, path, value), "situ_and_mul")


RUNNERS_BASE = yaml.safe_load((ROOT / "specs" / RUNNERS).read_text())


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(value=injected)
def test_fuzz_runner_summary(value, tmp_path_factory, outside, pristine, importer):
    base = tmp_path_factory.mktemp("fuzz-runner", numbered=True)
    fuzz_once(
        base,
        outside,
        pristine("front"),
        importer,
        RUNNERS,
        _set(RUNNERS_BASE, ("runners", 0, "summary"), value),
        "runners",
    )
