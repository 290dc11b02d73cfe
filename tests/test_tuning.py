"""Tunables (issue 13): knobs in the spec, the table `k3gen tune` writes, and the picks compiled into
the variant units. The GPU half (k3gen.tune.run) is exercised here only through render_table, fed
a made-up result; the timing itself needs a GPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from k3gen.cli import main
from k3gen.tune import run as tuning_run

from support import ROOT, copy_project

SPEC = "specs/route_topk.yaml"
TUNING = """tuning:
  knobs: {block_threads: [256, 128, 512]}
  buckets: [1, 128, 1024]
"""


def _project(tmp_path: Path, tuning: str = TUNING) -> Path:
    root = copy_project(tmp_path / "p", (SPEC,))
    text = (ROOT / SPEC).read_text()
    start = text.index("tuning:\n")
    end = text.index("\ntests:", start) + 1
    (root / SPEC).write_text(text[:start] + tuning + text[end:])
    return root


def _build(root: Path, capsys) -> tuple[int, str]:
    rc = main(["--root", str(root), "build"])
    return rc, capsys.readouterr().err


def _data(root: Path) -> dict:
    return json.loads((root / "generated/k3kernels/tuning/route_topk.json").read_text())


def _table(root: Path, picks: dict, identity: str | None = None) -> Path:
    """A table as `k3gen tune` writes it; identity: what every variant claims instead of the current code."""
    data = _data(root)
    if identity is not None:
        data["variants"] = [dict(v, identity=identity) for v in data["variants"]]
    result = {"data": data, "picks": picks, "discarded": [], "arch": "sm_90a", "seconds": 1.0}
    path = root / "specs/tuning/route_topk.h200.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(tuning_run.render_table(result, "NVIDIA H200"))
    return path


def _rows(*configs: int) -> list[dict]:
    return [
        {
            "bucket": b,
            "config": {"block_threads": c},
            "us": 3.0,
            "runner_up": {"block_threads": 256},
            "runner_up_us": 3.3,
            "margin": 0.1,
        }
        for b, c in zip([1, 128, 1024], configs)
    ]


def _unit(root: Path, variant: str = "route_topk__score_bf16__bias_fp32") -> str:
    return (root / f"generated/k3kernels/csrc/route_topk/{variant}.cu").read_text()


def _line(path: Path, prefix: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(prefix))


def test_without_a_table_every_config_is_compiled_and_the_default_runs(tmp_path, capsys):
    root = _project(tmp_path)
    rc, err = _build(root, capsys)
    assert rc == 0
    unit = _unit(root)
    assert "k3::untuned_config(tuning, said," in unit  # every M runs the default; its first call says so
    for threads in (128, 256, 512):
        assert f"/*block_threads=*/{threads}>" in unit
    assert (
        "\"route_topk__score_bf16__bias_fp32 is untuned (no table); ran the spec's default config "
        '(block_threads=256); tune with `k3gen tune --family route_topk`"' in unit
    )
    line = _line(root / SPEC, "tuning:")
    assert (
        f'note: specs/route_topk.yaml:{line} (kernel "route_topk", tuning): untuned: no table '
        "specs/tuning/route_topk.DEVICE.yaml yet; all 3 variants run the spec's default config (block_threads=256); "
        "tune on a GPU with `k3gen tune --family route_topk`"
    ) in err
    data = _data(root)
    assert data["configs"] == [{"block_threads": 256}, {"block_threads": 128}, {"block_threads": 512}]
    assert data["variants"][0]["name"] == "route_topk__score_bf16__bias_fp32"
    assert len(data["variants"][0]["identity"]) == 64


def test_the_table_picks_are_compiled_into_each_variant(tmp_path, capsys):
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    _table(root, {n: _rows(128, 128, 256) for n in names})
    rc, err = _build(root, capsys)
    assert rc == 0 and "untuned" not in err
    unit = _unit(root)
    assert "bucket_config[] = {1, 1, 0};" in unit and "constexpr int buckets = 3;" in unit
    assert "specs/tuning/route_topk.h200.yaml" in unit


def test_a_comment_in_the_table_changes_nothing(tmp_path, capsys):
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    path = _table(root, {n: _rows(128, 256, 512) for n in names})
    assert _build(root, capsys)[0] == 0
    before = _unit(root)
    path.write_text("# reviewed\n" + path.read_text())
    assert _build(root, capsys)[0] == 0
    assert _unit(root) == before


def test_a_table_that_measured_other_code_leaves_its_variants_untuned(tmp_path, capsys):
    """A template or variant edit makes the picks stale: the build succeeds, every stale variant runs
    the default config, and one located line says so (issue 25: a table never blocks a build)."""
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    path = _table(root, {n: _rows(128, 128, 256) for n in names}, identity="0" * 64)
    rc, err = _build(root, capsys)
    assert rc == 0
    assert (
        f'note: specs/tuning/route_topk.h200.yaml:{_line(path, "picks:")} (kernel "route_topk", picks): 3 of 3 '
        f"variants untuned (stale: the kernel code, knobs, shape or the variant changed since the table measured "
        f"it: {', '.join(names)}); they run the spec's default config (block_threads=256) until "
        "`k3gen tune --family route_topk` runs on NVIDIA H200"
    ) in err
    assert "k3::untuned_config(" in _unit(root) and "untuned (stale in specs/tuning/route_topk.h200.yaml)" in _unit(
        root
    )
    assert main(["--root", str(root), "check"]) == 0
    assert "3 of 3 variants untuned" in capsys.readouterr().err


def test_a_variant_without_a_pick_is_untuned_and_the_others_keep_theirs(tmp_path, capsys):
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    path = _table(root, {n: _rows(128, 128, 256) for n in names[1:]})
    rc, err = _build(root, capsys)
    assert rc == 0
    assert (
        f'(kernel "route_topk", picks): 1 of 3 variants untuned (no pick: {names[0]}); it runs the spec\'s '
        "default config (block_threads=256) until `k3gen tune --family route_topk` runs on NVIDIA H200"
    ) in err
    assert f"specs/tuning/route_topk.h200.yaml:{_line(path, 'picks:')}" in err
    assert "k3::untuned_config(" in _unit(root, names[0])
    assert "bucket_config[] = {1, 1, 0};" in _unit(root, names[1])


def test_a_table_naming_no_candidate_or_no_variant_is_a_located_error(tmp_path, capsys):
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    picks = {n: _rows(128, 128, 256) for n in names}
    picks[names[1]] = _rows(96, 128, 256)
    path = _table(root, picks)
    path.write_text(path.read_text().replace(names[2], "route_topk__score_fp8__bias_fp32"))
    rc, err = _build(root, capsys)
    assert rc == 2
    assert (
        f"(kernel \"route_topk\", picks.{names[1]}.rows.0.config): config {{'block_threads': 96}} is not a "
        "candidate of tuning.knobs (3 configs: block_threads=256; block_threads=128; block_threads=512)" in err
    )
    assert (
        "(kernel \"route_topk\", picks.route_topk__score_fp8__bias_fp32): 'route_topk__score_fp8__bias_fp32' is no "
        "variant of route_topk (the spec no longer generates it); delete its entry, or rerun "
        "`k3gen tune --family route_topk`"
    ) in err


def test_a_table_of_the_old_format_is_a_located_error(tmp_path, capsys):
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    path = _table(root, {n: _rows(128, 128, 256) for n in names})
    path.write_text(path.read_text().replace("format: 2", "format: 1"))
    rc, err = _build(root, capsys)
    assert rc == 2
    assert (
        f'specs/tuning/route_topk.h200.yaml:{_line(path, "format:")} (kernel "route_topk", format): format 1 is '
        "not 2; rerun `k3gen tune --family route_topk` (or delete the table)"
    ) in err


def test_a_table_of_no_family_is_a_located_error_naming_both_files(tmp_path, capsys):
    """Renaming `kernel:` orphans the table: said, never ignored."""
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    _table(root, {n: _rows(128, 128, 256) for n in names})
    spec = root / SPEC
    spec.write_text(spec.read_text().replace("kernel: route_topk\n", "kernel: route_topk_k3\n"))
    rc, err = _build(root, capsys)
    assert rc == 2
    assert (
        'specs/tuning/route_topk.h200.yaml:1 (kernel "route_topk", <file>): a tuning table of family route_topk, '
        "which no spec declares (specs/route_topk.yaml now declares kernel 'route_topk_k3'); delete it, or rerun "
        "`k3gen tune` for the family that replaced it"
    ) in err


@pytest.mark.parametrize(
    "tuning, message",
    [
        (
            "tuning:\n  knobs: {threads: [256]}\n  buckets: [1]\n",
            "(kernel \"route_topk\", tuning.knobs.threads): 'threads' is not a constant",
        ),
        (
            "tuning:\n  knobs: {block_threads: [128, 512]}\n  buckets: [1]\n",
            "the default block_threads = 256 (constants.block_threads) is not a candidate",
        ),
        (
            "tuning:\n  knobs: {block_threads: [256, 96]}\n  buckets: [1]\n",
            '(kernel "route_topk", tuning.knobs.block_threads.1): candidate block_threads = 96 is beyond what '
            "templates/route_topk/ supports",
        ),
        ("tuning:\n  knobs: {block_threads: [256]}\n  buckets: [1, 8, 4]\n", "bucket 4 is not above 8"),
        (
            "tuning:\n  knobs: {block_threads: [256]}\n  buckets: [1, 1024, 2048]\n",
            '(kernel "route_topk", tuning.buckets.2): no test size lies in bucket 1024 < M <= 2048',
        ),
    ],
)
def test_knob_errors_are_located(tmp_path, capsys, tuning, message):
    root = _project(tmp_path, tuning)
    rc, err = _build(root, capsys)
    assert rc == 2
    assert message in err
    assert "specs/route_topk.yaml:" in err


def test_device_slug_names_the_table_file():
    assert tuning_run.device_slug("NVIDIA H200") == "h200"
    assert tuning_run.device_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert tuning_run.device_slug("AMD Instinct MI300X") == "mi300x"
    assert tuning_run.device_slug("NVIDIA GeForce RTX 4090") == "rtx_4090"


def test_a_table_whose_file_name_is_not_family_dot_device_is_refused(tmp_path, capsys):
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    path = _table(root, {n: _rows(128, 128, 256) for n in names})
    path.rename(path.with_name("route_topk.H 200*.yaml"))
    rc, err = _build(root, capsys)
    assert rc == 2
    assert "the file name is not route_topk.DEVICE.yaml with DEVICE in [a-z0-9_]+" in err


def test_tune_family_flow_without_a_gpu(monkeypatch, tmp_path):
    """tune_family's control flow with the GPU parts stubbed: a config the oracle rejects is discarded and
    never timed, the default stays unless another config is clearly faster, and the force is undone."""
    import sys
    import types

    import k3gen.runtime.cache as cache
    import k3gen.runtime.module as module

    forced = []
    lib = types.SimpleNamespace(k3_fake_tuning_force=lambda c: forced.append(c))
    monkeypatch.setattr(tuning_run.ctypes, "CDLL", lambda path: lib)
    monkeypatch.setattr(cache, "ensure_built", lambda request: tmp_path / "lib.so")
    monkeypatch.setattr(module, "device_arch", lambda device=None: "sm_90a")
    speed = {0: 5.0, 1: 3.0, 2: 4.99}  # config 1 is wrong (below), 2 is within min_gain of the default
    monkeypatch.setattr(tuning_run, "time_graph_us", lambda fn, replays: speed[forced[-1]])
    fam = types.ModuleType("k3kernels.fake")
    fam.build = lambda: None
    fam.MODULE = types.SimpleNamespace(request=lambda arch: arch)
    fam.fake = lambda **args: forced[-1]
    oracle = types.ModuleType("fake_oracle")
    oracle.make_args = lambda variant, dims, layout, seed: {"M": dims["M"]}
    oracle.reference = lambda variant, **args: 0
    oracle.case_edge = lambda op, variant: None

    def check(got, want, variant):
        assert got != 1, "config 1 is wrong"

    oracle.check = check
    monkeypatch.setitem(sys.modules, "k3kernels.fake", fam)
    monkeypatch.setitem(sys.modules, "fake_oracle", oracle)
    data = {
        "format": 2,
        "family": "fake",
        "spec": "specs/fake.yaml",
        "knobs": ["t"],
        "configs": [{"t": 256}, {"t": 128}, {"t": 512}],
        "buckets": [1, 128],
        "shape": {},
        "oracle": "fake_oracle",
        "oracle_spec": {"constants": {}},
        "routing": {},
        "cases": ["edge"],
        "variants": [{"name": "fake__v", "variant": {"x": "bf16"}, "identity": "ab" * 32}],
    }
    gen = tmp_path / "generated"
    (gen / "k3kernels" / "tuning").mkdir(parents=True)
    (gen / "k3kernels" / "tuning" / "fake.json").write_text(json.dumps(data))
    monkeypatch.setattr(tuning_run, "GENERATED", gen)
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    result = tuning_run.tune_family("fake", 3, 0.02, lambda line: None)
    assert forced[-1] == -1
    assert [d["config"] for d in result["discarded"]] == [{"t": 128}]
    rows = result["picks"]["fake__v"]
    assert [r["config"] for r in rows] == [{"t": 256}, {"t": 256}]  # 4.99 is not 2% faster than 5.0
    assert rows[0]["runner_up"] == {"t": 512} and rows[0]["margin"] == pytest.approx(
        -0.002, abs=1e-3
    )  # faster, not by 2%
    text = tuning_run.render_table(result, "NVIDIA H200")
    assert '"config": {"t": 256}' in text and "discarded:\n  - " in text
    assert f'  fake__v:\n    identity: "{"ab" * 32}"\n    rows:\n      - ' in text


def test_the_gpu_half_runs_without_the_generator_dependencies(tmp_path):
    """`k3gen tune` runs where only torch and PyYAML are (the device machine has no pydantic, no
    jinja2): importing the CLI must not import the spec loader or the renderer."""
    import subprocess
    import sys

    for name in ("pydantic", "jinja2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('{name} is not on the GPU machine')\n")
    done = subprocess.run(
        [sys.executable, "-m", "k3gen", "tune", "--family", "route_topk"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0 and "needs a GPU" in done.stdout + done.stderr
