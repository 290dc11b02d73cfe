"""The runner table (specs/runners.yaml): validation against its front family, with both files and
lines named, and what the plan and the generated lookup receive."""

from __future__ import annotations

import pytest

from k3gen.plan import resolve_all
from k3gen.spec.errors import SpecErrors
from k3gen.spec.load import load_specs

from support import FROZEN_SPECS, ROOT, SPEC_FILE, copy_frozen_project

FRONT = "specs/route_quant_fused.yaml"
TABLE = "specs/runners.yaml"
ACTIVATION = SPEC_FILE  # situ_and_mul: the dense-bf16 contract's family (k3gen/spec/meaning/contracts.py)
FAMILIES = ", ".join(sorted(f.split("/")[1][:-5] for f in FROZEN_SPECS if f != TABLE))


@pytest.fixture
def project(tmp_path):
    """Every frozen spec (tests/data): the front, its runner table, and the families its contracts
    name (situ_and_mul for dense bf16; route_topk and per_token_group_quant, which the fused front
    matches)."""
    return copy_frozen_project(tmp_path / "proj")


def _edit(project, rel, old, new):
    path = project / rel
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def _line(project, rel, needle):
    return next(n for n, line in enumerate((project / rel).read_text().splitlines(), 1) if needle in line)


def _errors(project) -> list[str]:
    with pytest.raises(SpecErrors) as info:
        load_specs(project)
    return [str(e) for e in info.value.errors]


def test_the_table_travels_with_its_front(project):
    (plan,) = [p for p in resolve_all(load_specs(project), project) if p.runners]
    assert plan.runners_file == TABLE
    assert [r.name for r in plan.runners] == [
        "sm100_mxfp4",
        "marlin",
        "triton",
        "sm90_cutlass_mxfp4",
        "sm120_cutlass_mxfp4",
        "bf16_forced",
    ]
    assert {r.name: r.activation_dtype for r in plan.runners}["sm100_mxfp4"] == "fp32"


def test_activation_dtype_outside_the_front_matrix_names_both_files(project):
    _edit(project, FRONT, "act: [bf16, fp32]", "act: [bf16]")
    (error,) = _errors(project)
    assert error == (
        f"{TABLE}:{_line(project, TABLE, 'consumes: fp32_strided')} (runners.0.consumes): runner 'sm100_mxfp4' "
        f"consumes fp32_strided (fp32), which route_quant_fused does not generate: its act axis at "
        f"{FRONT}:{_line(project, FRONT, 'act: [bf16]')} is [bf16]; add fp32 there or change the runner"
    )


def test_arch_outside_the_front_targets_names_both_files(project):
    _edit(project, TABLE, "archs: [sm_90a]\n", "archs: [sm_90a, sm_120a]\n")
    _edit(project, FRONT, "cuda: [sm_90a, sm_100a, sm_120a]", "cuda: [sm_90a, sm_100a]")
    _edit(project, FRONT, "pdl: {archs: [sm_90a, sm_100a, sm_120a]}", "pdl: {archs: [sm_90a, sm_100a]}")
    errors = _errors(project)
    assert errors[0] == (
        f"{TABLE}:{_line(project, TABLE, 'archs: [sm_90a, sm_120a]')} (runners.3.archs.1): runner "
        f"'sm90_cutlass_mxfp4' runs on sm_120a, which is not a target of route_quant_fused "
        f"({FRONT}:{_line(project, FRONT, 'targets:')}: sm_90a, sm_100a, gfx942, gfx950); add it there or drop it here"
    )
    assert len(errors) == 3  # sm90_cutlass_mxfp4, sm120_cutlass_mxfp4 and bf16_forced all name sm_120a


def test_unknown_front(project):
    _edit(project, TABLE, "front: route_quant_fused", "front: route_quant_fussed")
    assert _errors(project) == [
        f"{TABLE}:{_line(project, TABLE, 'front:')} (front): 'route_quant_fussed' is not "
        f"a kernel family (did you mean 'route_quant_fused'?); families: {FAMILIES}"
    ]


def test_duplicate_runner(project):
    _edit(project, TABLE, "name: triton", "name: marlin")
    assert _errors(project) == [
        f"{TABLE}:{_line(project, TABLE, 'name: marlin') + 4} (runners.2.name): "
        "runner 'marlin' is listed twice; keep one"
    ]


def test_unknown_key_with_suggestion(project):
    _edit(project, TABLE, '    summary: "Marlin mixed-precision GEMM"', '    sumary: "Marlin mixed-precision GEMM"')
    assert _errors(project) == [
        f"{TABLE}:{_line(project, TABLE, 'sumary:')} (runners.1.sumary): unknown key "
        "'sumary' (did you mean 'summary'?); allowed here: name, archs, consumes, summary"
    ]


def test_bundled_table_is_valid():
    plans = resolve_all(load_specs(ROOT), ROOT)
    fronts = [p for p in plans if p.runners]
    assert len(fronts) == 1 and fronts[0].runners_file == TABLE


# --- contracts on generated cells (k3gen/spec/meaning/contracts.py) -------------------------------------------------

CONTRACT = (
    'docs/kernels.md "Runners": bf16 of the fp32 front equals the bf16 front, so situ_and_mul generates '
    "fp32 -> fp32 and fp32 -> bf16 and defaults fp32 input to bf16"
)
S = '(kernel "situ_and_mul", '


def _dense_runners(project) -> str:
    return f"{TABLE}:{_line(project, TABLE, 'consumes: dense_bf16')}: runner 'marlin' and 4 more"


def _first_line(project, rel, needle) -> int:
    return next(n for n, line in enumerate((project / rel).read_text().splitlines(), 1) if needle in line)


def test_an_activation_dtype_whose_cells_are_all_excluded(project):
    _edit(
        project,
        FRONT,
        "act: [bf16, fp32]\n",
        "act: [bf16, fp32]\n  exclude:\n"
        '    - {score: bf16, act: fp32, reason: "a"}\n'
        '    - {score: fp32, act: fp32, reason: "b"}\n',
    )
    first = _line(project, FRONT, "{score: bf16, act: fp32")
    assert _errors(project) == [
        f"{TABLE}:{_line(project, TABLE, 'consumes: fp32_strided')} (runners.0.consumes): runner 'sm100_mxfp4' "
        "consumes fp32_strided (fp32), but route_quant_fused generates no cell with act=fp32: each is excluded "
        f"(first at {FRONT}:{first}); generated (score, act): "
        "(bf16, bf16), (fp32, bf16); keep one of those cells or change the runner"
    ]


def test_the_dense_bf16_contract_needs_fp32_to_fp32(project):
    _edit(project, ACTIVATION, "  defaults:", '    - {in: fp32, out: fp32, reason: "no fp32 outputs"}\n  defaults:')
    assert _errors(project) == [
        f"{ACTIVATION}:{_line(project, ACTIVATION, 'no fp32 outputs')} {S}dtypes.exclude.5): (in, out) = (fp32, fp32) "
        f"is not generated (it is excluded here), but the dense-bf16 runners need it ({_dense_runners(project)}; "
        f"{CONTRACT}); generate it, or change the runners"
    ]


def test_the_dense_bf16_contract_needs_fp32_inputs_on_the_bf16_front(project):
    _edit(project, ACTIVATION, "in: [bf16, fp16, fp32]", "in: [bf16, fp16]")
    _edit(
        project,
        ACTIVATION,
        '    - {in: fp32, out: fp16, reason: "fp32 GEMM outputs feed bf16 runners; fp16 is not a runner dtype"}\n',
        "",
    )
    _edit(project, ACTIVATION, ", fp32: bf16}}", "}}")
    at = f"{ACTIVATION}:{_line(project, ACTIVATION, 'in: [bf16, fp16]')} {S}dtypes.axes.in)"
    assert _errors(project) == [
        f"{at}: (in, out) = (fp32, {out}) is not generated (fp32 is not on axis 'in'), but the dense-bf16 runners "
        f"need it ({_dense_runners(project)}; {CONTRACT}); generate it, or change the runners"
        for out in ("bf16", "fp32")
    ]  # sorted, as SpecErrors reports them


def test_the_dense_bf16_contract_reads_the_default_output(project):
    _edit(project, ACTIVATION, "fp32: bf16}}", "fp32: fp32}}")
    assert _errors(project) == [
        f"{ACTIVATION}:{_line(project, ACTIVATION, 'fp32: fp32}}')} {S}dtypes.defaults.out.map.fp32): in=fp32 "
        f"defaults to out=fp32, but the dense-bf16 runners need bf16 ({_dense_runners(project)}; {CONTRACT}); "
        "map fp32: bf16"
    ]


def test_the_dense_bf16_contract_needs_one_fp32_math(project):
    """fp32 -> bf16 fast but fp32 -> fp32 accurate: bf16 of the one is not the other, bit for bit."""
    _edit(project, ACTIVATION, "when: {in: [bf16, fp16]}", "when: {out: [bf16, fp16]}")
    assert _errors(project) == [
        f"{ACTIVATION}:{_line(project, ACTIVATION, 'when: {out:')} {S}fast_math.when): fast_math makes (in, out) = "
        "(fp32, bf16) approximate but (fp32, fp32) accurate, while the dense-bf16 runners need both to compute one "
        f"fp32 value ({_dense_runners(project)}; {CONTRACT}); keep them both off (or both on) fast_math"
    ]


def test_the_dense_bf16_contract_needs_its_family(project):
    (project / ACTIVATION).unlink()
    assert _errors(project) == [
        f"{TABLE}:{_line(project, TABLE, 'consumes: dense_bf16')} (runners.1.consumes): runner 'marlin' and 4 more "
        f"consume dense_bf16, and that contract needs situ_and_mul ({CONTRACT}); no spec defines kernel "
        "situ_and_mul: add it, or change the runners"
    ]


def test_a_family_that_failed_to_load_is_not_called_absent(project):
    _edit(project, ACTIVATION, "summary:", "sumary:")
    errors = _errors(project)
    assert len(errors) == 1 and "(kernel \"situ_and_mul\", sumary): unknown key 'sumary'" in errors[0]


# --- the call the dense-bf16 contract's GPU test makes (dense_bf16_check) ------------------------------

SIGNATURE = "specs/situ_and_mul.yaml:30"  # tests/data/situ_and_mul.yaml's `signature:` line


def test_the_dense_bf16_test_takes_its_call_from_the_table(project):
    (plan,) = [p for p in resolve_all(load_specs(project), project) if p.runners]
    call = plan.dense_bf16_call
    assert (call.family, call.inputs, call.outputs) == ("situ_and_mul", {"x": [64, 7168]}, {"out": [64, 3584]})
    assert call.scalars == {"beta": 4.0, "linear_beta": 25.0}


def test_the_dense_bf16_check_is_needed_while_a_runner_consumes_dense_bf16(project):
    _edit(
        project, TABLE, "dense_bf16_check:\n  dims: {M: 64, D: 3584}\n  scalars: {beta: 4.0, linear_beta: 25.0}\n", ""
    )
    assert _errors(project) == [
        f"{TABLE}:{_line(project, TABLE, 'consumes: dense_bf16')} (runners.1.consumes): runner 'marlin' consumes "
        "dense_bf16, whose generated GPU test calls situ_and_mul: add `dense_bf16_check: {dims: {M: SIZE, D: SIZE}, "
        f"scalars: {{...}}}}` to this file (situ_and_mul's signature: {SIGNATURE})"
    ]


def test_the_dense_bf16_check_names_the_dims_of_its_family(project):
    _edit(project, TABLE, "dims: {M: 64, D: 3584}", "dims: {M: 64, N: 3584}")
    assert _errors(project) == [
        f"{TABLE}:{_line(project, TABLE, 'dims: {M: 64, N')} (dense_bf16_check.dims): the call of situ_and_mul needs "
        f"a size for each of its dims (M, D; {SIGNATURE}); missing: D; not a dim of situ_and_mul: N"
    ]


def test_the_dense_bf16_check_names_the_scalars_of_its_family(project):
    _edit(project, TABLE, "scalars: {beta: 4.0, linear_beta: 25.0}", "scalars: {linear_beta: 25.0, gamma: 1}")
    at = f"{TABLE}:{_line(project, TABLE, 'gamma: 1')}"
    assert _errors(project) == [
        f"{at} (dense_bf16_check.scalars): the call of situ_and_mul needs beta ({SIGNATURE}); give it a value here",
        f"{at} (dense_bf16_check.scalars.gamma): 'gamma' is not a scalar of situ_and_mul ({SIGNATURE}: beta, "
        "linear_beta)",
    ]


def test_the_dense_bf16_check_is_a_call_the_gates_accept(project):
    _edit(project, TABLE, "dims: {M: 64, D: 3584}", "dims: {M: 64, D: 129}")
    gate = _line(project, ACTIVATION, 'check: "D % vec == 0"')
    assert _errors(project) == [
        f"{TABLE}:{_line(project, TABLE, 'D: 129')} (dense_bf16_check.dims): situ_and_mul refuses this call: gate 0 "
        f"`D % vec == 0` fails for M = 64, D = 129 in (in, out) = (fp32, fp32) "
        f"({ACTIVATION}:{gate}); pick sizes it accepts"
    ]
