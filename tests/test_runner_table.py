"""The runner table (specs/runners.yaml): validation against its front family, with both files and
lines named, and what the plan and the generated lookup receive."""
from __future__ import annotations

import pytest

from k3gen.errors import SpecErrors
from k3gen.load import load_specs
from k3gen.plan import resolve_all
from support import ROOT, copy_project

FRONT = "specs/route_quant_fused.yaml"
TABLE = "specs/runners.yaml"


@pytest.fixture
def project(tmp_path):
    return copy_project(tmp_path / "proj", specs=(FRONT, TABLE))


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
    (plan,) = resolve_all(load_specs(project), project)
    assert plan.runners_file == TABLE
    assert [r.name for r in plan.runners] == ["sm100_mxfp4", "marlin", "triton", "sm90_cutlass_mxfp4",
                                              "sm120_cutlass_mxfp4", "bf16_forced"]
    assert {r.name: r.activation_dtype for r in plan.runners}["sm100_mxfp4"] == "fp32"


def test_activation_dtype_outside_the_front_matrix_names_both_files(project):
    _edit(project, FRONT, "act: [bf16, fp32]", "act: [bf16]")
    (error,) = _errors(project)
    assert error == (
        f"{TABLE}:{_line(project, TABLE, 'consumes: fp32_strided')} (runners.0.consumes): runner 'sm100_mxfp4' "
        f"consumes fp32_strided (fp32), which route_quant_fused does not generate: its act axis at "
        f"{FRONT}:{_line(project, FRONT, 'act: [bf16]')} is [bf16]; add fp32 there or change the runner")


def test_arch_outside_the_front_targets_names_both_files(project):
    _edit(project, TABLE, "archs: [sm_90a]\n", "archs: [sm_90a, sm_120a]\n")
    _edit(project, FRONT, "cuda: [sm_90a, sm_100a, sm_120a]", "cuda: [sm_90a, sm_100a]")
    _edit(project, FRONT, "pdl: {archs: [sm_90a, sm_100a, sm_120a]}", "pdl: {archs: [sm_90a, sm_100a]}")
    errors = _errors(project)
    assert errors[0] == (
        f"{TABLE}:{_line(project, TABLE, 'archs: [sm_90a, sm_120a]')} (runners.3.archs.1): runner "
        f"'sm90_cutlass_mxfp4' runs on sm_120a, which is not a target of route_quant_fused "
        f"({FRONT}:{_line(project, FRONT, 'targets:')}: sm_90a, sm_100a, gfx942, gfx950); add it there or drop it here")
    assert len(errors) == 3  # sm90_cutlass_mxfp4, sm120_cutlass_mxfp4 and bf16_forced all name sm_120a


def test_unknown_front(project):
    _edit(project, TABLE, "front: route_quant_fused", "front: route_quant_fussed")
    assert _errors(project) == [f"{TABLE}:{_line(project, TABLE, 'front:')} (front): 'route_quant_fussed' is not "
                                "a kernel family (did you mean 'route_quant_fused'?); families: route_quant_fused"]


def test_duplicate_runner(project):
    _edit(project, TABLE, "name: triton", "name: marlin")
    assert _errors(project) == [f"{TABLE}:{_line(project, TABLE, 'name: marlin') + 4} (runners.2.name): "
                                "runner 'marlin' is listed twice; keep one"]


def test_unknown_key_with_suggestion(project):
    _edit(project, TABLE, '    summary: "Marlin mixed-precision GEMM"', '    sumary: "Marlin mixed-precision GEMM"')
    assert _errors(project) == [f"{TABLE}:{_line(project, TABLE, 'sumary:')} (runners.1.sumary): unknown key "
                                "'sumary' (did you mean 'summary'?); allowed here: name, archs, consumes, summary"]


def test_bundled_table_is_valid():
    plans = resolve_all(load_specs(ROOT), ROOT)
    fronts = [p for p in plans if p.runners]
    assert [p.name for p in fronts] == ["route_quant_fused"]
