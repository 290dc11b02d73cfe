"""Every spec error a user can see, pinned to the letter.

Each case is a frozen copy of the bundled spec (tests/data/situ_and_mul.yaml) with one textual edit, fed through the
loader as inline text. A case names the offending line by its text (`at`), so the test checks both
the exact message and that `file:LINE` points at the YAML node that is wrong.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from k3gen.cli import main
from k3gen.spec.errors import SpecErrors
from k3gen.spec.load import load_specs, parse_spec
from k3gen.spec.scopes import gate_scope

from support import FROZEN_SPEC, SPEC_FILE

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/
# (its projects are copies of tests/data's frozen specs and of templates/).
READS = ("templates/**",)

VALID = FROZEN_SPEC.read_text()
BAD = "specs/bad.yaml"
TOP_KEYS = (
    "kernel, summary, template, targets, constants, dtypes, params, flags, vector, fast_math, "
    "signature, gates, tie_order, sigmoid, oracle, tests, budget, tuning, routing"
)
EXCLUDE_1 = '    - {in: bf16, out: fp16, reason: "no consumer mixes half formats; cast the bf16 output instead"}\n'


def edit(old: str, new: str, text: str = VALID) -> str:
    """The spec with one substring replaced; the substring must occur exactly once."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in the spec; pick a unique piece"
    return text.replace(old, new)


def edit_between(start: str, stop: str, new: str) -> str:
    """The spec with everything from `start` up to (not including) `stop` replaced by `new`."""
    i = VALID.index(start)
    return VALID[:i] + new + VALID[VALID.index(stop, i) :]


def line_of(text: str, needle: str) -> int:
    """1-based number of the one line of `text` that contains `needle`."""
    hits = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} is on lines {hits}; the case must name one line"
    return hits[0]


@dataclass(frozen=True)
class Case:
    id: str
    text: str  # the edited spec
    at: str | int  # a piece of the line the error must point at, or the line number itself
    error: str  # str(SpecError) after `specs/bad.yaml:LINE `

    def expected(self) -> str:
        line = self.at if isinstance(self.at, int) else line_of(self.text, self.at)
        return f"{BAD}:{line} {self.error}"


AITER_LANES = (
    "56, 57, 58, 59, 63, 62, 61, 60, 52, 53, 54, 55, 51, 50, 49, 48, 40, 41, 42, 43, 47, 46, 45, 44, 36, 37, "
    "38, 39, 35, 34, 33, 32, 24, 25, 26, 27, 31, 30, 29, 28, 20, 21, 22, 23, 19, 18, 17, 16, 8, 9, 10, 11, "
    "15, 14, 13, 12, 4, 5, 6, 7, 3, 2, 1, 0"
)
ROWS_PER_THREAD = "  rows_per_thread: 2        # rows whose loads a thread issues together (memory-level parallelism)\n"


def with_routing(routing: str, num_experts: int | None = 8) -> str:
    """The spec with routing fields before `oracle:` and, unless None, a `num_experts` constant."""
    text = edit("oracle: k3gen.oracles.situ_and_mul", f"{routing}\noracle: k3gen.oracles.situ_and_mul")
    return (
        text if num_experts is None else edit(ROWS_PER_THREAD, f"{ROWS_PER_THREAD}  num_experts: {num_experts}\n", text)
    )


def rule(lanes: str = AITER_LANES, experts_per_group: int = 4) -> str:
    return f"{{rule: wave64_lane_table, experts_per_group: {experts_per_group}, lane_rank: [{lanes}]}}"


K = '(kernel "situ_and_mul", '  # every error of a readable spec names its kernel
# What a gate of the spec may name (dims, scalars, params, constants, vec); computed, as the spec grows.
_SCOPE = gate_scope(parse_spec(VALID, BAD)[0].spec)
GATE_NAMES = ", ".join(sorted({*_SCOPE.names, *_SCOPE.tensors}))

CASES = [
    # --- keys
    Case(
        "unknown top-level key, with did-you-mean",
        edit("summary:", "sumary:"),
        "sumary:",
        K + f"sumary): unknown key 'sumary' (did you mean 'summary'?); allowed here: {TOP_KEYS}",
    ),
    Case(
        "unknown top-level key, nothing close",
        edit("oracle:", "maintainer: kernels-team\noracle:"),
        "maintainer:",
        K + f"maintainer): unknown key 'maintainer'; allowed here: {TOP_KEYS}",
    ),
    Case(
        "unknown nested key",
        edit("  hip: [gfx942, gfx950]", "  rocm: [gfx942, gfx950]"),
        "rocm:",
        K + "targets.rocm): unknown key 'rocm'; allowed here: cuda, hip",
    ),
    Case(
        "unknown key in a list item",
        edit('    reason: "each thread', '    reasn: "each thread'),
        "reasn:",
        K + "gates.0.reasn): unknown key 'reasn' (did you mean 'reason'?); allowed here: check, reason",
    ),
    Case(
        "missing required key",
        edit("oracle: k3gen.oracles.situ_and_mul\n", ""),
        "kernel: situ_and_mul",
        K + "oracle): required key 'oracle' is missing; add it",
    ),
    Case(
        "missing required key in a list item",
        edit_between('    reason: "each thread', '  - check: "x.stride0', ""),
        'check: "D % vec == 0"',
        K + "gates.0.reason): required key 'reason' is missing; add it",
    ),
    Case(
        "missing kernel name",
        edit("kernel: situ_and_mul\n", ""),
        "summary:",
        "(kernel): required key 'kernel' is missing; add it",
    ),
    Case(
        "kernel name not snake_case",
        edit("kernel: situ_and_mul", "kernel: SituAndMul"),
        "kernel: SituAndMul",
        "(kernel): 'SituAndMul' is not a valid name; use lower_snake_case: a-z, 0-9 and _, starting with a letter",
    ),
    # --- types
    Case(
        "string where a list is expected",
        edit("layouts: [dense, strided]", "layouts: dense"),
        "layouts:",
        K + "tests.layouts): expected a list such as `[a, b]`; got 'dense'",
    ),
    Case(
        "list where a string is expected",
        edit_between("summary:", "template:", "summary: [one, two]\n"),
        "summary:",
        K + "summary): expected a string; got a list",
    ),
    Case(
        "union of number types",
        edit("block_threads: 256", "block_threads: many"),
        "block_threads:",
        K + "constants.block_threads): expected `true`/`false`, an integer or a number; got 'many'",
    ),
    Case(
        "choice with a near miss",
        edit("layout: rows", "layout: row"),
        "layout: row",
        K + "signature.tensors.x.layout): 'row' is not allowed here (did you mean 'rows'?); "
        "use one of: dense, rows, col_major",
    ),
    # --- dtype matrix
    Case(
        "misspelled dtype",
        edit("in: [bf16, fp16, fp32]", "in: [bf61, fp16, fp32]"),
        "in: [bf61",
        K + "dtypes.axes.in.0): 'bf61' is not a dtype (did you mean 'bf16'?); known: bf16, fp16, fp32, fp8, i32",
    ),
    Case(
        "duplicate axis value",
        edit("in: [bf16, fp16, fp32]", "in: [bf16, fp16, fp16]"),
        "in: [bf16, fp16, fp16]",
        K + "dtypes.axes.in.2): dtype 'fp16' is listed twice (items 1 and 2); list it once",
    ),
    Case(
        "empty axis",
        edit("in: [bf16, fp16, fp32]", "in: []"),
        "in: []",
        K + "dtypes.axes.in): axis 'in' is empty; list at least one dtype",
    ),
    Case(
        "empty axes mapping",
        edit_between("  axes:\n", "  exclude:", "  axes: {}\n"),
        "axes: {}",
        K + "dtypes.axes): the matrix has no axes; declare at least one, e.g. `in: [bf16]`",
    ),
    Case(
        "every cell excluded",
        edit_between(
            "    in: [bf16, fp16, fp32]", "  defaults:", "    in: [bf16]\n    out: [fp16]\n  exclude:\n" + EXCLUDE_1
        ),
        "  exclude:",
        K + "dtypes.exclude): every cell of the matrix is excluded; the family would generate nothing",
    ),
    Case(
        "exclusion names a value not on the axis",
        edit("{in: bf16, out: fp16, reason", "{in: bf16, out: fp8, reason"),
        "out: fp8",
        K + "dtypes.exclude.0.out): exclusion names a missing cell: 'fp8' is not on axis 'out' (bf16, fp16, fp32)",
    ),
    Case(
        "exclusion names an unknown axis",
        edit("{in: bf16, out: fp16, reason", "{in: bf16, out: fp16, inp: bf16, reason"),
        "inp: bf16",
        K + "dtypes.exclude.0.inp): 'inp' is not an axis (did you mean 'in'?); axes: in, out",
    ),
    Case(
        "exclusion without a reason",
        edit(EXCLUDE_1, "    - {in: bf16, out: fp16}\n"),
        "{in: bf16, out: fp16}",
        K + 'dtypes.exclude.0): exclusion has no reason; add `reason: "why this cell is not generated"`',
    ),
    Case(
        "exclusion missing an axis",
        edit("{in: bf16, out: fp16, reason", "{in: bf16, reason"),
        "{in: bf16, reason",
        K + "dtypes.exclude.0): exclusion does not name axis 'out'; give one value per axis (in, out) and a reason",
    ),
    Case(
        "default pointing at an excluded cell",
        edit("fp32: bf16}}", "fp32: fp16}}"),
        "fp32: fp16}}",
        K + "dtypes.defaults.out.map.fp32): default in=fp32 → out=fp16 points at no generated cell",
    ),
    Case(
        "tensor dtype neither axis nor dtype",
        edit("x: {dtype: in,", "x: {dtype: inp,"),
        "dtype: inp",
        K + "signature.tensors.x.dtype): dtype 'inp' is neither an axis (in, out) nor a dtype "
        "(bf16, fp16, fp32, fp8, i32)",
    ),
    # --- targets
    Case(
        "unknown arch, with suggestion",
        edit("cuda: [sm_90a, sm_100a]", "cuda: [sm_90a, sm90a]"),
        "sm90a",
        K + "targets.cuda.1): 'sm90a' is not a cuda arch (did you mean 'sm_90a'?); known: sm_80, sm_89, sm_90a, "
        "sm_100a, sm_120a (a new arch is a row of k3gen/runtime/archs.py)",
    ),
    Case(
        "duplicate arch",
        edit("cuda: [sm_90a, sm_100a]", "cuda: [sm_90a, sm_90a]"),
        "cuda: [sm_90a, sm_90a]",
        K + "targets.cuda.1): arch 'sm_90a' is listed twice (items 0 and 1); list it once",
    ),
    # --- gates, vector, flags
    Case(
        "gate with an unknown name",
        edit('check: "D % vec == 0"', 'check: "DD % vec == 0"'),
        "DD % vec",
        K + f"gates.0.check): unknown name 'DD'; known here: {GATE_NAMES}",
    ),
    Case(
        "gate with a function call",
        edit('check: "D % vec == 0"', 'check: "len(D) % vec == 0"'),
        "len(D)",
        K + "gates.0.check): 'len(D)' is not allowed; use integer arithmetic (+ - * // %), comparisons, "
        "and/or/not, `a if c else b`, declared names, T.ptr, T.stride0, T.shape[i] and `X is None`",
    ),
    Case(
        "vector with both bytes and elements",
        edit("vector: {bytes: 16}", "vector: {bytes: 16, elements: 8}"),
        "vector:",
        K + "vector): give exactly one of `bytes: 16` or `elements: 16`",
    ),
    Case(
        "vector not a power of two",
        edit("vector: {bytes: 16}", "vector: {bytes: 12}"),
        "vector:",
        K + "vector.bytes): 12 is not a power of two; use 4, 8, 16, ...",
    ),
    Case(
        "flag with two selection ways",
        edit('{select: "linear_beta is not None"}', '{select: "linear_beta is not None", kwarg: true}'),
        "has_linear_beta:",
        K + "flags.has_linear_beta): a flag is chosen one way: `select: EXPR`, `kwarg: true`, or `archs: [...]`",
    ),
    Case(
        "flag select not an expression",
        edit('{select: "linear_beta is not None"}', '{select: "linear_beta is"}'),
        "has_linear_beta:",
        K + "flags.has_linear_beta.select): 'linear_beta is' is not an expression: invalid syntax",
    ),
    Case(
        "flag arch not a target",
        edit("pdl: {archs: [sm_90a, sm_100a]}", "pdl: {archs: [sm_90a, gfx90a]}"),
        "gfx90a",
        K + "flags.pdl.archs.1): 'gfx90a' is not a target of this spec; targets: sm_90a, sm_100a, gfx942, gfx950",
    ),
    # --- tests
    Case(
        "rejects gate index out of range",
        edit("misaligned_pointer: 2", "misaligned_pointer: 3"),
        "rejects:",
        K + "tests.rejects.misaligned_pointer): gate index 3 is out of range; this spec has gates 0..2",
    ),
    Case(
        "tests.dims naming an unknown dim",
        edit("dims: {M: [1, 7", "dims: {N: [1, 7"),
        "dims: {N:",
        K + "tests.dims.N): 'N' is not a dim; dims: M, D",
    ),
    # --- tie order and sigmoid (k3gen.spec.routing)
    Case(
        "sigmoid not a formula",
        with_routing("sigmoid: exp3"),
        "sigmoid: exp3",
        K + "sigmoid): 'exp3' is not allowed here (did you mean 'expf'?); use one of: expf, exp2",
    ),
    Case(
        "sigmoid per backend misses a target backend",
        with_routing("sigmoid: {cuda: expf}"),
        "sigmoid:",
        K + "sigmoid): no sigmoid for backend hip, which this spec targets (gfx942, gfx950); add `hip: expf` or "
        "`hip: exp2`",
    ),
    Case(
        "sigmoid names a backend the spec does not target",
        edit("  hip: [gfx942, gfx950]\n", "", with_routing("sigmoid: {cuda: expf, hip: exp2}")),
        "sigmoid:",
        K + "sigmoid.hip): this spec has no hip targets; remove `hip` here or add hip archs under targets",
    ),
    Case(
        "sigmoid per backend with an unknown key",
        with_routing("sigmoid: {cuda: expf, hip: exp2, rocm: exp2}"),
        "sigmoid:",
        K + "sigmoid.rocm): unknown key 'rocm'; allowed here: cuda, hip",
    ),
    Case(
        "sigmoid per backend not a formula",
        with_routing("sigmoid: {cuda: expf, hip: exp}"),
        "sigmoid:",
        K + "sigmoid.hip): 'exp' is not allowed here (did you mean 'expf'?); use one of: expf, exp2",
    ),
    Case(
        "tie order name",
        with_routing("tie_order: lowest"),
        "tie_order: lowest",
        K + "tie_order): 'lowest' is not allowed here (did you mean 'lowest_id'?); use one of: lowest_id",
    ),
    Case(
        "tie order per backend misses a target backend",
        with_routing("tie_order: {hip: lowest_id}"),
        "tie_order:",
        K + "tie_order): no tie_order for backend cuda, which this spec targets (sm_90a, sm_100a); add "
        "`cuda: lowest_id` or another order",
    ),
    Case(
        "tie order per backend with an unknown key",
        with_routing("tie_order: {cuda: lowest_id, hipp: lowest_id}"),
        "tie_order:",
        K + "tie_order.hipp): unknown key 'hipp' (did you mean 'hip'?); allowed here: cuda, hip",
    ),
    Case(
        "tie table not a permutation",
        with_routing("tie_order: {cuda: lowest_id, hip: [0, 1, 2, 3, 4, 5, 6, 6]}"),
        "tie_order:",
        K + "tie_order.hip): the table must list each of 0..7 once (num_experts = 8); got 8 entries, missing e.g. [7]",
    ),
    Case(
        "tie rule without num_experts",
        with_routing(f"tie_order: {rule()}", num_experts=None),
        "tie_order:",
        K + "tie_order): a tie-order rule needs an integer constant `num_experts`",
    ),
    Case(
        "tie rule for more experts than the tie field holds",
        with_routing(f"tie_order: {rule()}", num_experts=70000),
        "tie_order:",
        K + "tie_order): num_experts = 70000 cannot be tie-ordered: 1..65535 experts fit the kernel's 16-bit tie field",
    ),
    Case(
        "tie rule unknown",
        with_routing(f"tie_order: {rule().replace('wave64', 'wave32')}"),
        "tie_order:",
        K + "tie_order.rule): 'wave32_lane_table' is not allowed here (did you mean 'wave64_lane_table'?); "
        "use one of: wave64_lane_table",
    ),
    Case(
        "tie rule with an unknown key",
        with_routing(f"tie_order: {rule().replace('lane_rank', 'lane_ranks')}"),
        "tie_order:",
        K + "tie_order.lane_ranks): unknown key 'lane_ranks' (did you mean 'lane_rank'?); allowed "
        "here: rule, experts_per_group, lane_rank",
    ),
    Case(
        "tie rule per backend with an unknown key",
        with_routing(f"tie_order: {{cuda: lowest_id, hip: {rule().replace('lane_rank', 'lanes')}}}"),
        "tie_order:",
        K + "tie_order.hip.lanes): unknown key 'lanes'; allowed here: rule, experts_per_group, lane_rank",
    ),
    Case(
        "tie rule missing a key",
        with_routing(f"tie_order: {rule().replace('experts_per_group: 4, ', '')}"),
        "tie_order:",
        K + "tie_order.experts_per_group): required key 'experts_per_group' is missing; add it",
    ),
    Case(
        "tie rule lane table too short",
        with_routing(f"tie_order: {rule(AITER_LANES[:-3])}"),
        "tie_order:",
        K + "tie_order.lane_rank): a wave64 lane table has 64 entries, one rank per lane; got 63",
    ),
    Case(
        "tie rule rank out of range",
        with_routing(f"tie_order: {rule(AITER_LANES.replace('63, 62', '64, 62'))}"),
        "tie_order:",
        K + "tie_order.lane_rank.4): lane 4 has rank 64; ranks are 0..63, each once",
    ),
    Case(
        "tie rule rank twice, on its own line of a multi-line table",
        with_routing(
            "tie_order: {rule: wave64_lane_table, experts_per_group: 4, lane_rank: [\n"
            "  56, 57, 58, 59, 63, 62, 61, 60, 52, 53, 54, 55, 51, 50, 49, 48,\n"
            "  40, 41, 42, 43, 47, 46, 45, 44, 36, 37, 38, 39, 35, 34, 33, 33,\n"
            "  24, 25, 26, 27, 31, 30, 29, 28, 20, 21, 22, 23, 19, 18, 17, 16,\n"
            "  8, 9, 10, 11, 15, 14, 13, 12, 4, 5, 6, 7, 3, 2, 1, 0]}"
        ),
        "35, 34, 33, 33",
        K + "tie_order.lane_rank.31): rank 33 is given to lanes 30 and 31; each of 0..63 once",
    ),
    Case(
        "tie rule groups that do not divide the experts",
        with_routing(f"tie_order: {rule(experts_per_group=3)}"),
        "tie_order:",
        K + "tie_order.experts_per_group): experts_per_group = 3 does not divide num_experts = 8; "
        "lanes load whole groups, so give a divisor",
    ),
    # --- YAML itself
    Case(
        "unclosed bracket",
        edit("cuda: [sm_90a, sm_100a]", "cuda: [sm_90a, sm_100a"),
        "cuda: [",
        "(<yaml>): not valid YAML: while parsing a flow sequence, expected ',' or ']', but got ':' (line 7); "
        "fix the syntax",
    ),
    Case(
        "tab indentation",
        edit("  cuda:", "\tcuda:"),
        "\tcuda:",
        "(<yaml>): not valid YAML: while scanning for the next token, found character '\\t' that cannot start "
        "any token; indent with spaces, not tabs",
    ),
    Case(
        "duplicate key",
        edit("constants:\n", "template: situ_and_mul  # again\nconstants:\n"),
        "# again",
        K + f"template): duplicate key 'template' (first at line {line_of(VALID, 'template:')}); keep one",
    ),
    Case(
        "unknown YAML tag",
        edit("block_threads: 256", "block_threads: !!python/object 256"),
        "block_threads:",
        "(constants.block_threads): the tag 'tag:yaml.org,2002:python/object' is not allowed; remove it and write a "
        "plain value",
    ),
    Case("empty file", "", 1, "(<yaml>): the file is empty; write a mapping starting with `kernel: NAME`"),
    Case(
        "only comments",
        "# a spec, one day\n",
        "# a spec",
        "(<yaml>): the file is empty; write a mapping starting with `kernel: NAME`",
    ),
    Case(
        "top-level list",
        "- kernel: situ_and_mul\n- kernel: other\n",
        "- kernel: situ_and_mul",
        "(<root>): the file holds a list, but a spec is a mapping; start with `kernel: NAME`",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_spec_error_message(case: Case):
    spec, errors = parse_spec(case.text, BAD)
    assert spec is None
    assert [str(e) for e in errors] == [case.expected()]


def test_the_unedited_spec_is_valid():
    spec, errors = parse_spec(VALID, BAD)
    assert errors == [] and spec is not None


def test_several_errors_in_one_spec_are_reported_together_sorted_by_line():
    text = edit(
        "vector: {bytes: 16}",
        "vector: {bytes: 12}",
        edit("in: [bf16, fp16, fp32]", "in: [bf61, fp16, fp32]", edit("summary:", "sumary:")),
    )
    _, errors = parse_spec(text, BAD)

    def line(needle: str) -> int:
        return line_of(text, needle)

    assert [str(e) for e in SpecErrors(errors).errors] == [
        f"{BAD}:{line('sumary:')} {K}sumary): unknown key 'sumary' (did you mean 'summary'?); allowed here: {TOP_KEYS}",
        f"{BAD}:{line('bf61')} {K}dtypes.axes.in.0): 'bf61' is not a dtype (did you mean 'bf16'?); known: bf16, "
        "fp16, fp32, fp8, i32",
        f"{BAD}:{line('vector:')} {K}vector.bytes): 12 is not a power of two; use 4, 8, 16, ...",
    ]


def test_duplicate_key_is_reported_with_the_validation_errors():
    text = edit(
        "in: [bf16, fp16, fp32]",
        "in: [bf61, fp16, fp32]",
        edit("constants:\n", "template: situ_and_mul  # again\nconstants:\n"),
    )
    _, errors = parse_spec(text, BAD)
    assert [(e.line, e.field) for e in sorted(errors)] == [
        (line_of(text, "# again"), "template"),
        (line_of(text, "bf61"), "dtypes.axes.in.0"),
    ]


def test_render_counts_and_indents_every_error():
    text = edit("in: [bf16, fp16, fp32]", "in: [bf61, fp16, fp61]")
    _, errors = parse_spec(text, BAD)
    n = line_of(text, "bf61")
    assert SpecErrors(errors).render() == (
        "2 spec errors:\n"
        f"  {BAD}:{n} {K}dtypes.axes.in.0): 'bf61' is not a dtype (did you mean 'bf16'?); known: bf16, fp16, fp32, "
        "fp8, i32\n"
        f"  {BAD}:{n} {K}dtypes.axes.in.2): 'fp61' is not a dtype (did you mean 'fp16'?); known: bf16, fp16, fp32, "
        "fp8, i32"
    )


# --- rules across files: load_specs on a copy of the project ---------------------------------------------


def _load_errors(project: Path) -> list[str]:
    with pytest.raises(SpecErrors) as info:
        load_specs(project)
    return [str(e) for e in info.value.errors]


def _rewrite(project: Path, old: str, new: str) -> None:
    (project / SPEC_FILE).write_text(edit(old, new))


def test_oracle_module_missing(project: Path):
    _rewrite(project, "oracle: k3gen.oracles.situ_and_mul", "oracle: oracles.situ_and_mul")
    assert _load_errors(project) == [
        f"{SPEC_FILE}:{line_of(VALID, 'oracle:')} {K}oracle): 'oracles.situ_and_mul' is not an oracle module (did you "
        "mean 'k3gen.oracles.situ_and_mul'?); write k3gen.oracles.NAME (NAME in lower_snake_case)"
    ]


def test_oracle_lacks_a_case_function(project: Path):
    _rewrite(project, "cases: [empty, nan,", "cases: [empty, inf, nan,")
    assert _load_errors(project) == [
        f"{SPEC_FILE}:{line_of(VALID, 'cases:')} {K}tests.cases.1): oracle k3gen.oracles.situ_and_mul has no "
        "function case_inf(); define it or remove the entry"
    ]


def test_oracle_lacks_a_required_function(project: Path):
    oracle = project / "k3gen" / "oracles" / "situ_and_mul.py"
    oracle.write_text(oracle.read_text().replace("def check(", "def check_close("))
    assert _load_errors(project) == [
        f"{SPEC_FILE}:{line_of(VALID, 'oracle:')} {K}oracle): oracle k3gen.oracles.situ_and_mul has no function "
        "check(); define it"
    ]


def test_oracle_that_does_not_parse(project: Path):
    (project / "k3gen" / "oracles" / "situ_and_mul.py").write_text("def reference(:\n")
    assert _load_errors(project) == [
        f"{SPEC_FILE}:{line_of(VALID, 'oracle:')} {K}oracle): oracle k3gen.oracles.situ_and_mul does not parse: "
        "invalid syntax at k3gen/oracles/situ_and_mul.py:1; fix the module"
    ]


def test_template_folder_missing(project: Path):
    _rewrite(project, "template: situ_and_mul", "template: situ_and_mull")
    known = ", ".join(sorted(p.parent.name for p in (project / "templates").glob("*/kernel.cuh.j2")))
    assert _load_errors(project) == [
        f"{SPEC_FILE}:{line_of(VALID, 'template:')} {K}template): templates/situ_and_mull/kernel.cuh.j2 does not "
        f"exist (did you mean 'situ_and_mul'?); known: {known}"
    ]


def test_two_specs_with_the_same_kernel_name(project: Path):
    shutil.copy(project / SPEC_FILE, project / "specs" / "copy.yaml")
    n = line_of(VALID, "kernel:")
    assert _load_errors(project) == [
        f"{SPEC_FILE}:{n} {K}kernel): kernel 'situ_and_mul' is already defined at specs/copy.yaml:{n}; rename one"
    ]


def test_errors_of_all_specs_are_collected_together(project: Path):
    (project / "specs" / "a_empty.yaml").write_text("")
    _rewrite(project, "cuda: [sm_90a, sm_100a]", "cuda: [sm_90a, sm90a]")
    assert _load_errors(project) == [
        "specs/a_empty.yaml:1 (<yaml>): the file is empty; write a mapping starting with `kernel: NAME`",
        f"{SPEC_FILE}:{line_of(VALID, 'cuda:')} {K}targets.cuda.1): 'sm90a' is not a cuda arch "
        "(did you mean 'sm_90a'?); known: sm_80, sm_89, sm_90a, sm_100a, sm_120a (a new arch is a row of "
        "k3gen/runtime/archs.py)",
    ]


def test_cli_validate_prints_every_error_and_exits_2(project: Path, capsys):
    _rewrite(project, "vector: {bytes: 16}", "vector: {bytes: 16, elements: 8}")
    (project / "specs" / "other.yaml").write_text("kernel: other\n")
    code = main(["--root", str(project), "validate"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    missing = "specs/other.yaml:1 (kernel \"other\", {0}): required key '{0}' is missing; add it".format
    assert (
        err
        == "\n".join(
            [
                "9 spec errors:",
                *(
                    f"  {missing(k)}"
                    for k in ("dtypes", "oracle", "signature", "summary", "targets", "template", "tests", "vector")
                ),
                f"  {SPEC_FILE}:{line_of(VALID, 'vector:')} {K}vector): "
                "give exactly one of `bytes: 16` or `elements: 16`",
            ]
        )
        + "\n"
    )
    assert "Traceback" not in err


def test_cli_validate_ok(project: Path, capsys):
    assert main(["--root", str(project), "validate"]) == 0
    assert capsys.readouterr().out == "k3gen validate: 1 specs ok\n"
