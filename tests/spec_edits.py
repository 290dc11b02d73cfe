"""Realistic spec edits, each applied to a copy of the frozen project (tests/data): either every layer
follows (it builds, its new units compile, its family's generated tests pass), or load refuses it
with located errors. tests/test_spec_edits.py runs the CPU half; tests/spec_edits_gpu.py prepares
the valid edits' copies for a GPU run of their generated tests.

An edit is text replacements in spec files (each `old` must occur exactly once) or new spec files.
Expected errors are (file, a needle on the line the error must point at, the text after
`file:LINE `), so each error pins both its message and its line.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from support import DATA, copy_frozen_project

QUANT, SITU, TOPK, FUSED, RUNNERS = (
    f"specs/{n}.yaml" for n in ("per_token_group_quant", "situ_and_mul", "route_topk", "route_quant_fused", "runners")
)


@dataclass(frozen=True)
class Replace:
    file: str
    old: str
    new: str


@dataclass(frozen=True)
class CopySpec:
    """A new spec file: a frozen spec with replacements (a new family from an existing one)."""

    file: str
    source: str
    replace: tuple = ()  # (old, new) pairs


@dataclass(frozen=True)
class Remove:
    file: str


@dataclass(frozen=True)
class Expected:
    file: str
    at: str  # a piece of the (edited) line the error points at
    error: str  # what follows `file:LINE `
    offset: int = 0  # the error's line is this many below `at`'s


@dataclass(frozen=True)
class Edit:
    name: str  # also the folder of its copy: build/spec_edits/<name>/
    why: str  # what a kernel engineer wants
    family: str  # the family it touches: its generated tests prove the edit
    changes: tuple
    errors: tuple = ()  # empty: a valid edit
    units: tuple = ()  # translation units it adds or changes (csrc/<family>/...), compiled for `arch`
    arch: str = "sm_90a"
    tests: tuple = ()  # generated test files to run; default: the family's
    notes: str = ""

    @property
    def valid(self) -> bool:
        return not self.errors

    def test_files(self) -> list[str]:
        return list(self.tests) or [f"generated/tests/test_{self.family}.py"]


def apply(edit: Edit, project: Path) -> None:
    for change in edit.changes:
        if isinstance(change, Replace):
            _replace(project / change.file, change.old, change.new)
        elif isinstance(change, CopySpec):
            shutil.copy(DATA / Path(change.source).name, project / change.file)
            for old, new in change.replace:
                _replace(project / change.file, old, new)
        elif isinstance(change, Remove):
            (project / change.file).unlink()
        else:
            raise TypeError(change)


def make_copy(edit: Edit, dest: Path) -> Path:
    """A throwaway project: every frozen spec, templates/, the oracles; then the edit."""
    project = copy_frozen_project(dest)
    apply(edit, project)
    return project


def expected_errors(edit: Edit, project: Path) -> list[str]:
    """The errors as load must print them. `<<FILE|NEEDLE>>` (or `<<FILE|NEEDLE|OFFSET>>`) in a message
    is FILE:LINE of the needle in the edited project: a limit's, an oracle's or another spec's line."""

    def where(match) -> str:
        file, needle, *offset = match.group(1).split("|")
        return f"{file}:{line_of(project / file, needle) + int(offset[0] if offset else 0)}"

    return sorted(
        f"{e.file}:{line_of(project / e.file, e.at) + e.offset} {PLACE.sub(where, e.error)}" for e in edit.errors
    )


PLACE = re.compile(r"<<([^>]+)>>")


def line_of(path: Path, needle: str) -> int:
    lines = [n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    assert len(lines) == 1, f"{needle!r} is on lines {lines} of {path}"
    return lines[0]


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path.name}"
    path.write_text(text.replace(old, new))


def _exclude(file: str, *cells: tuple[str, str, str], anchor: str = "  defaults:") -> Replace:
    """Exclusions inserted before `anchor` (situ_and_mul's axes are in, out)."""
    rows = "".join(f'    - {{in: {i}, out: {o}, reason: "{why}"}}\n' for i, o, why in cells)
    return Replace(file, anchor, rows + anchor)


GROUP_256 = Replace(QUANT, "values: [32, 64, 128], default: 128", "values: [32, 64, 128, 256], default: 128")
FP8_IN = Replace(SITU, "in: [bf16, fp16, fp32]", "in: [bf16, fp16, fp32, fp8]")
FP8_EXCLUSIONS = _exclude(
    SITU,
    ("fp8", "fp16", "fp8 activations feed bf16 runners; fp16 is not a runner dtype"),
    ("fp8", "fp32", "a widening output doubles write traffic; no consumer asks for it"),
)
CONTRACT = (
    'docs/kernels.md "Runners": bf16 of the fp32 front equals the bf16 front, so situ_and_mul generates '
    "fp32 -> fp32 and fp32 -> bf16 and defaults fp32 input to bf16"
)
LIMITS = "templates/{}/limits.yaml".format
Q, S, T, F = (f'(kernel "{n}", ' for n in ("per_token_group_quant", "situ_and_mul", "route_topk", "route_quant_fused"))
BEYOND = "stay within it, or extend the template and its limits"
SEPARATE = "docs/kernels.md §4: bit-identical to route_topk and per_token_group_quant run separately"

EDITS = [
    # --- per_token_group_quant: a new param value -----------------------------------------------------
    Edit(
        "quant_group_size_256",
        "DeepSeek-style 256-element groups, test sizes made multiples of 256",
        "per_token_group_quant",
        (GROUP_256, Replace(QUANT, "K: [128, 3584, 7168]", "K: [256, 3584, 7168]")),
        units=(
            "per_token_group_quant__in_bf16__group_size_256__scale_format_ue8m0__fuse_silu_and_mul_off.cu",
            "per_token_group_quant__in_fp32__group_size_256__scale_format_ue8m0__fuse_silu_and_mul_on.cu",
            "dispatch.cu",
        ),
        notes="UE8M0 words span two warps: packed by byte stores (templates/per_token_group_quant/device.cuh.j2)",
    ),
    Edit(
        "quant_group_size_256_spec_dims",
        "the same, keeping the spec's test sizes (K = 128)",
        "per_token_group_quant",
        (GROUP_256,),
        errors=(
            Expected(
                QUANT,
                "K: [128, 3584, 7168]",
                Q + "tests.dims.K): the generated tests would call shapes gate 0 `K % group_size == 0` "
                "refuses: K = 128 for 9 generated variants (in=bf16, group_size=256, "
                "scale_format=fp32_row; in=bf16, group_size=256, scale_format=fp32_col; in=bf16, "
                "group_size=256, scale_format=ue8m0 and 6 more); use test sizes every generated "
                "variant accepts",
            ),
        ),
    ),
    Edit(
        "quant_group_size_512",
        "groups of 512, test sizes multiples of 512",
        "per_token_group_quant",
        (
            Replace(QUANT, "values: [32, 64, 128], default: 128", "values: [32, 64, 128, 512], default: 128"),
            Replace(QUANT, "K: [128, 3584, 7168]", "K: [512, 3584, 7168]"),
        ),
        errors=(
            Expected(
                QUANT,
                "values: [32, 64, 128, 512]",
                Q + "params.group_size.values.3): group_size 512 is beyond what "
                "templates/per_token_group_quant/ supports: "
                "<<templates/per_token_group_quant/limits.yaml|group_size:>> allows 32, 64, 128, 256 "
                "(group_size / 16 threads reduce a group's amax "
                "with shuffles inside one warp, and the oracle's edge cases use K = 256); " + BEYOND,
            ),
        ),
    ),
    Edit(
        "quant_fp8_input",
        "quantize fp8 input",
        "per_token_group_quant",
        (Replace(QUANT, "in: [bf16, fp16, fp32]", "in: [bf16, fp16, fp32, fp8]"),),
        errors=(
            Expected(
                QUANT,
                "in: [bf16, fp16, fp32, fp8]",
                Q + "dtypes.axes.in.3): dtype fp8 on axis 'in' is beyond what "
                "templates/per_token_group_quant/ supports: "
                "<<templates/per_token_group_quant/limits.yaml|  in: {>> allows bf16, fp16, fp32 "
                "(16-byte loads converted to fp32; fp8 input is "
                "already quantized); " + BEYOND,
            ),
        ),
    ),
    Edit(
        "quant_new_scale_format",
        "a column-major UE8M0 layout, by naming it",
        "per_token_group_quant",
        (Replace(QUANT, "values: [fp32_row, fp32_col, ue8m0]", "values: [fp32_row, fp32_col, ue8m0, ue8m0_col]"),),
        errors=(
            Expected(
                QUANT,
                "ue8m0_col]",
                Q + "params.scale_format.values.3): oracle k3gen.oracles.per_token_group_quant cannot "
                "check scale_format='ue8m0_col' (<<k3gen/oracles/per_token_group_quant.py|SUPPORTED "
                "=>> supports "
                "'fp32_row', 'fp32_col', 'ue8m0'); teach the oracle the value first",
            ),
            Expected(
                QUANT,
                "ue8m0_col]",
                Q + "params.scale_format.values.3): scale_format ue8m0_col is beyond what "
                "templates/per_token_group_quant/ supports: "
                "<<templates/per_token_group_quant/limits.yaml|scale_format:>> allows fp32_row, "
                "fp32_col, ue8m0 (the scale layouts of docs/kernels.md "
                "§2); " + BEYOND,
            ),
        ),
    ),
    # --- situ_and_mul: new dtypes on each axis, archs, vector widths, the runner contract -------------
    Edit(
        "situ_fp8_input",
        "the README's example: fp8 input, bf16 output",
        "situ_and_mul",
        (FP8_IN, FP8_EXCLUSIONS, Replace(SITU, "fp32: bf16}}", "fp32: bf16, fp8: bf16}}")),
        units=("situ_and_mul__in_fp8__out_bf16__has_linear_beta_on.cu", "dispatch.cu"),
    ),
    Edit(
        "situ_fp8_input_without_default",
        "fp8 input, defaults.out.map not extended",
        "situ_and_mul",
        (FP8_IN, FP8_EXCLUSIONS),
        errors=(
            Expected(
                SITU,
                "map: {bf16: bf16, fp16: fp16, fp32: bf16}",
                S + "dtypes.defaults.out.map): no default out for in=fp8, which is generated (in=fp8, "
                "out=bf16); a call that omits out would be refused: add `fp8: bf16` to the map",
            ),
        ),
    ),
    Edit(
        "situ_fp8_output",
        "fp8 output of fp32 GEMM outputs",
        "situ_and_mul",
        (
            Replace(SITU, "out: [bf16, fp16, fp32]", "out: [bf16, fp16, fp32, fp8]"),
            _exclude(
                SITU, ("bf16", "fp8", "half inputs feed bf16 runners"), ("fp16", "fp8", "half inputs feed bf16 runners")
            ),
        ),
        units=("situ_and_mul__in_fp32__out_fp8__has_linear_beta_on.cu", "dispatch.cu"),
    ),
    Edit(
        "situ_i32_output",
        "an integer output",
        "situ_and_mul",
        (Replace(SITU, "out: [bf16, fp16, fp32]", "out: [bf16, fp16, fp32, i32]"),),
        errors=(
            Expected(
                SITU,
                "out: [bf16, fp16, fp32, i32]",
                S + "dtypes.axes.out.3): dtype i32 on axis 'out' is beyond what templates/situ_and_mul/ "
                "supports: <<templates/situ_and_mul/limits.yaml|  out: {>> allows bf16, fp16, fp32, "
                "fp8 "
                "(k3::from_float rounds the fp32 result once to each); " + BEYOND,
            ),
            Expected(
                SITU,
                "out: [bf16, fp16, fp32, i32]",
                S + "dtypes.axes.out.3): oracle k3gen.oracles.situ_and_mul cannot check out=i32 "
                "(<<k3gen/oracles/situ_and_mul.py|SUPPORTED =>> supports bf16, fp16, fp32, fp8); "
                "exclude the cells, "
                "or teach the oracle the dtype",
            ),
        ),
    ),
    Edit(
        "situ_add_sm_120a",
        "situ_and_mul for the SM120 runners",
        "situ_and_mul",
        (
            Replace(SITU, "  cuda: [sm_90a, sm_100a]", "  cuda: [sm_90a, sm_100a, sm_120a]"),
            Replace(SITU, "pdl: {archs: [sm_90a, sm_100a]}", "pdl: {archs: [sm_90a, sm_100a, sm_120a]}"),
        ),
        units=("situ_and_mul__in_bf16__out_bf16__has_linear_beta_on.cu",),
        arch="sm_120a",
        notes="sm_120a is compiled, not run (no such GPU here): the H200 run shows the family is intact",
    ),
    Edit(
        "situ_drop_sm_100a",
        "no Blackwell build of situ_and_mul",
        "situ_and_mul",
        (
            Replace(SITU, "  cuda: [sm_90a, sm_100a]", "  cuda: [sm_90a]"),
            Replace(SITU, "pdl: {archs: [sm_90a, sm_100a]}", "pdl: {archs: [sm_90a]}"),
        ),
    ),
    Edit(
        "situ_vector_32_bytes_fp32",
        "the measured 32-byte override for fp32 -> fp32",
        "situ_and_mul",
        (
            Replace(
                SITU,
                "vector: {bytes: 16} ",
                "vector:\n  bytes: 16\n  overrides:\n"
                '    - {when: {in: fp32, out: fp32}, bytes: 32, why: "95% of copy at '
                'M=16384 (H200)"}\n  ',
            ),
        ),
        units=("situ_and_mul__in_fp32__out_fp32__has_linear_beta_on.cu",),
    ),
    Edit(
        "situ_vector_64_bytes",
        "64-byte vectors",
        "situ_and_mul",
        (Replace(SITU, "vector: {bytes: 16}", "vector: {bytes: 64}"),),
        errors=(
            Expected(
                SITU,
                "vector: {bytes: 64}",
                S + "vector.bytes): vector.bytes 64 is beyond what templates/situ_and_mul/ supports: "
                "<<templates/situ_and_mul/limits.yaml|  bytes:>> allows 16, 32 (one or two 16-byte "
                "accesses per "
                "operand and thread; 32 is the measured fp32->fp32 override, wider spills registers); " + BEYOND,
            ),
        ),
    ),
    Edit(
        "situ_exclude_fp32_to_fp32",
        "drop the fp32 -> fp32 cell",
        "situ_and_mul",
        (_exclude(SITU, ("fp32", "fp32", "no fp32 outputs")),),
        errors=(
            Expected(
                SITU,
                "no fp32 outputs",
                S + "dtypes.exclude.5): (in, out) = (fp32, fp32) is not generated (it is excluded here), "
                "but the dense-bf16 runners need it (<<specs/runners.yaml|name: marlin|2>>: runner "
                "'marlin' and 4 more; "
                f"{CONTRACT}); generate it, or change the runners",
            ),
        ),
    ),
    Edit(
        "situ_removed",
        "retire situ_and_mul",
        "situ_and_mul",
        (Remove(SITU),),
        errors=(
            Expected(
                RUNNERS,
                "name: marlin",
                "(runners.1.consumes): runner 'marlin' and 4 more consume dense_bf16, and that contract "
                f"needs situ_and_mul ({CONTRACT}); no spec defines kernel situ_and_mul: add it, or change "
                "the runners",
                offset=2,
            ),
        ),
    ),
    # --- route_topk: new dtypes on both axes, constants, a new family ---------------------------------
    Edit(
        "topk_fp16",
        "fp16 scores, and fp16 biases beside them",
        "route_topk",
        (
            Replace(TOPK, "score: [bf16, fp32]", "score: [bf16, fp32, fp16]"),
            Replace(TOPK, "bias: [fp32, bf16]", "bias: [fp32, bf16, fp16]"),
            Replace(
                TOPK,
                "  exclude:\n",
                "  exclude:\n"
                '    - {score: fp16, bias: bf16, reason: "the bias is fp32 or the score '
                'dtype"}\n'
                '    - {score: bf16, bias: fp16, reason: "the bias is fp32 or the score '
                'dtype"}\n'
                '    - {score: fp32, bias: fp16, reason: "the bias is fp32 or the score '
                'dtype"}\n',
            ),
        ),
        units=("route_topk__score_fp16__bias_fp32.cu", "route_topk__score_fp16__bias_fp16.cu", "dispatch.cu"),
    ),
    Edit(
        "topk_max_tokens_512",
        "a smaller batch limit",
        "route_topk",
        (Replace(TOPK, "max_tokens: 1024", "max_tokens: 512"),),
        errors=(
            Expected(
                TOPK,
                "dims: {M: [1, 2, 16, 255, 1024]}",
                T + "tests.dims.M): the generated tests would call shapes gate 1 `M <= max_tokens` refuses: "
                "M = 1024 for 3 generated variants (score=bf16, bias=fp32; score=bf16, bias=bf16; "
                "score=fp32, bias=fp32); use test sizes every generated variant accepts",
            ),
        ),
    ),
    Edit(
        "topk_thread_strategy",
        "one thread per token for 896 experts",
        "route_topk",
        (Replace(TOPK, "  strategy: 1\n", "  strategy: 4\n"),),
        errors=(
            Expected(
                TOPK,
                "  strategy: 4",
                T + "constants.strategy): `strategy != 4 or (num_experts <= 32 and not grouped)` does not hold "
                "(strategy = 4, num_experts = 896, grouped = False): "
                "<<templates/route_topk/limits.yaml|strategy != 4>> requires it (one thread per token keeps its "
                "whole row in registers: at most 32 experts, and no groups (strategy: 2 or 3 serve the rest)); "
                "change the spec, or extend the template and its limits",
            ),
        ),
    ),
    Edit(
        "new_family_topk_e512",
        "a 512-expert, top-8 router from route_topk's spec",
        "route_topk_e512",
        (
            CopySpec(
                "specs/route_topk_e512.yaml",
                TOPK,
                (
                    ("kernel: route_topk\n", "kernel: route_topk_e512\n"),
                    ("num_experts: 896", "num_experts: 512"),
                    ("top_k: 16", "top_k: 8"),
                    ("(Kimi-K3: 896 experts, top-16)", "(512 experts, top-8)"),
                ),
            ),
        ),
        units=("route_topk_e512__score_bf16__bias_fp32.cu", "dispatch.cu"),
    ),
    Edit(
        "new_family_topk_k128",
        "a top-128 router from route_topk's spec",
        "route_topk_k128",
        (
            CopySpec(
                "specs/route_topk_k128.yaml",
                TOPK,
                (("kernel: route_topk\n", "kernel: route_topk_k128\n"), ("top_k: 16", "top_k: 128")),
            ),
        ),
        errors=(
            Expected(
                "specs/route_topk_k128.yaml",
                "top_k: 128",
                '(kernel "route_topk_k128", constants.top_k): constant top_k = 128 is beyond what '
                "templates/route_topk/ supports: <<templates/route_topk/limits.yaml|top_k:>> allows at "
                "least 1; at "
                "most 64 (RouteShared holds at most 64 picks per token); " + BEYOND,
            ),
        ),
    ),
    Edit(
        "new_family_quant_blocks_128",
        "a per_token_group_quant instance with 128-thread blocks, bf16/fp32 input and groups of 128 only",
        "per_token_group_quant_b128",
        (
            CopySpec(
                "specs/per_token_group_quant_b128.yaml",
                QUANT,
                (
                    ("kernel: per_token_group_quant\n", "kernel: per_token_group_quant_b128\n"),
                    ("block_threads: 256", "block_threads: 128"),
                    ("in: [bf16, fp16, fp32]", "in: [bf16, fp32]"),
                    ("values: [32, 64, 128], default: 128", "values: [128], default: 128"),
                ),
            ),
        ),
        units=(
            "per_token_group_quant_b128__in_bf16__group_size_128__scale_format_ue8m0__fuse_silu_and_mul_off.cu",
            "dispatch.cu",
        ),
    ),
    # --- route_quant_fused and the runner table -------------------------------------------------------
    Edit(
        "fused_fp16_act",
        "fp16 routed activations",
        "route_quant_fused",
        (Replace(FUSED, "act: [bf16, fp32]", "act: [bf16, fp32, fp16]"),),
        units=("route_quant_fused__score_bf16__act_fp16.cu", "dispatch.cu"),
    ),
    Edit(
        "fused_fp16_score",
        "fp16 router scores into the fused front, route_topk left as it is",
        "route_quant_fused",
        (Replace(FUSED, "score: [bf16, fp32]", "score: [bf16, fp32, fp16]"),),
        errors=(
            Expected(
                FUSED,
                "score: [bf16, fp32, fp16]",
                F + "dtypes.axes.score.2): score=fp16 is generated here, but route_topk does not generate "
                "(score, bias) = (fp16, fp32) (<<specs/route_topk.yaml|  axes:>>), which case "
                f"matches_separate compares against ({SEPARATE}); generate it there, or drop the case",
            ),
        ),
    ),
    Edit(
        "fused_fp16_score_with_topk",
        "fp16 router scores into the fused front and into route_topk",
        "route_quant_fused",
        (
            Replace(FUSED, "score: [bf16, fp32]", "score: [bf16, fp32, fp16]"),
            Replace(TOPK, "score: [bf16, fp32]", "score: [bf16, fp32, fp16]"),
            Replace(
                TOPK,
                "  exclude:\n",
                '  exclude:\n    - {score: fp16, bias: bf16, reason: "the bias is fp32 or the score dtype"}\n',
            ),
        ),
        units=("route_quant_fused__score_fp16__act_bf16.cu", "dispatch.cu"),
        notes="its case matches_separate runs route_topk's new fp16 cell beside the fused one",
    ),
    Edit(
        "fused_group_size_64_not_in_quant",
        "groups of 64 in the fused front; per_token_group_quant without 64",
        "route_quant_fused",
        (
            Replace(FUSED, "group_size: 32", "group_size: 64"),
            Replace(QUANT, "values: [32, 64, 128], default: 128", "values: [32, 128], default: 128"),
        ),
        errors=(
            Expected(
                FUSED,
                "group_size: 64",
                F + "constants.group_size): per_token_group_quant does not generate group_size=64 "
                "(<<specs/per_token_group_quant.yaml|group_size: {values>>: 32, 128), which case "
                f"matches_separate calls ({SEPARATE}); add it there, or drop the case",
            ),
        ),
    ),
    Edit(
        "fused_512_experts",
        "a 512-expert fused front beside the 896-expert route_topk",
        "route_quant_fused",
        (Replace(FUSED, "num_experts: 896", "num_experts: 512"),),
        errors=(
            Expected(
                FUSED,
                "num_experts: 512",
                F + "constants.num_experts): num_experts = 512 here but 896 in route_topk "
                "(<<specs/route_topk.yaml|num_experts:>>), which case matches_separate compares "
                f"against ({SEPARATE}); make them equal, or drop the case",
            ),
        ),
    ),
    Edit(
        "fused_exclude_act_fp32",
        "drop the fp32 activations",
        "route_quant_fused",
        (
            Replace(
                FUSED,
                "act: [bf16, fp32]\n",
                "act: [bf16, fp32]\n  exclude:\n"
                '    - {score: bf16, act: fp32, reason: "bf16 only"}\n'
                '    - {score: fp32, act: fp32, reason: "bf16 only, too"}\n',
            ),
        ),
        errors=(
            Expected(
                RUNNERS,
                "consumes: fp32_strided",
                "(runners.0.consumes): runner 'sm100_mxfp4' consumes fp32_strided (fp32), but "
                "route_quant_fused generates no cell with act=fp32: each is excluded (first at "
                '<<specs/route_quant_fused.yaml|bf16 only">>); generated '
                "(score, act): (bf16, bf16), (fp32, bf16); "
                "keep one of those cells or change the runner",
            ),
        ),
    ),
    Edit(
        "fused_hidden_3600",
        "a hidden size groups of 32 do not tile",
        "route_quant_fused",
        (Replace(FUSED, "hidden: 3584", "hidden: 3600"),),
        errors=(
            Expected(
                FUSED,
                "hidden: 3600",
                F + "constants.hidden): `hidden % group_size == 0` does not hold (hidden = 3600, "
                "group_size = 32): <<templates/route_quant_fused/limits.yaml|hidden % group_size>> "
                "requires it (groups of "
                "group_size elements tile a row); change the spec, or extend the template and its "
                "limits",
            ),
        ),
    ),
    Edit(
        "fused_drop_sm_120a",
        "no SM120 build of the fused front",
        "route_quant_fused",
        (
            Replace(FUSED, "cuda: [sm_90a, sm_100a, sm_120a]", "cuda: [sm_90a, sm_100a]"),
            Replace(FUSED, "pdl: {archs: [sm_90a, sm_100a, sm_120a]}", "pdl: {archs: [sm_90a, sm_100a]}"),
        ),
        errors=(
            Expected(
                RUNNERS,
                "archs: [sm_120a]",
                "(runners.4.archs.0): runner 'sm120_cutlass_mxfp4' runs on sm_120a, which is not a target "
                "of route_quant_fused (<<specs/route_quant_fused.yaml|targets:>>: sm_90a, sm_100a, "
                "gfx942, gfx950); "
                "add it there or drop it here",
            ),
            Expected(
                RUNNERS,
                "archs: [sm_90a, sm_100a, sm_120a, gfx942, gfx950]",
                "(runners.5.archs.2): runner 'bf16_forced' runs on sm_120a, which is not a target "
                "of route_quant_fused (<<specs/route_quant_fused.yaml|targets:>>: sm_90a, sm_100a, "
                "gfx942, gfx950); "
                "add it there or drop it here",
            ),
        ),
    ),
    Edit(
        "runner_gfx950_added",
        "an AMD runner reading dense bf16",
        "route_quant_fused",
        (
            Replace(
                RUNNERS,
                '    summary: "any runner forced to bf16 precision"\n',
                '    summary: "any runner forced to bf16 precision"\n  - name: aiter_moe\n    archs: [gfx950]\n'
                '    consumes: dense_bf16\n    summary: "aiter fused-MoE GEMM on MI355"\n',
            ),
        ),
        tests=("generated/tests/test_runners.py",),
    ),
    Edit(
        "runner_removed",
        "retire the SM100 mxfp4 runner",
        "route_quant_fused",
        (
            Replace(
                RUNNERS,
                "  - name: sm100_mxfp4\n    archs: [sm_100a]\n    consumes: fp32_strided\n"
                '    summary: "Blackwell mxfp4 expert GEMM reading the fp32 slice of the fused GEMM '
                "output "
                'directly"\n',
                "",
            ),
        ),
        tests=("generated/tests/test_runners.py",),
    ),
]
