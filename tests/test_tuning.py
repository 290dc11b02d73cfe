"""Tunables (issue 13): knobs in the spec, the table `k3gen tune` writes, and the picks compiled into
the variant units. The GPU half (k3gen.tune.run) is exercised here only through render_table, fed
a made-up result; the timing itself needs a GPU."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from k3gen.cli import main
from k3gen.plan import resolve_all
from k3gen.runtime.devices import device_slug
from k3gen.spec.load import load_specs
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


def _table(root: Path, picks: dict, identity: str | None = None, device: str = "NVIDIA H200") -> Path:
    """A table as `k3gen tune` on `device` writes it; identity: what every variant claims instead of the
    current code."""
    data = _data(root)
    if identity is not None:
        data["variants"] = [dict(v, identity=identity) for v in data["variants"]]
    result = {"data": data, "picks": picks, "discarded": [], "arch": "sm_90a", "seconds": 1.0}
    path = root / f"specs/tuning/route_topk.{device_slug(device)}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(tuning_run.render_table(result, device))
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


def _unit_rows(unit: str) -> list[tuple[list[int], str, bool]]:
    """A variant unit's row per device's table: the config per bucket, the row's comment (device,
    then the table or why the variant is untuned there), and whether the variant is tuned there."""
    rows = re.findall(r"^      \{([0-9, ]+)\},  // \d+: (.*)$", unit, re.M)
    tuned = re.search(r"static constexpr bool tuned\[tables\] = \{([a-z, ]*)\};", unit).group(1).split(", ")
    assert len(rows) == len(tuned), unit
    return [([int(c) for c in cs.split(", ")], comment, flag == "true") for (cs, comment), flag in zip(rows, tuned)]


def _config(root: Path, threads: int) -> int:
    """The index of the config block_threads=threads (0 is the spec's default)."""
    return _data(root)["configs"].index({"block_threads": threads})


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
    picks = [_config(root, 128), _config(root, 128), _config(root, 256)]
    assert _unit_rows(unit) == [(picks, "h200, specs/tuning/route_topk.h200.yaml", True)]
    assert "constexpr int buckets = 3;" in unit and "constexpr int tables = 1;" in unit


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
    stale = "h200, untuned (stale in specs/tuning/route_topk.h200.yaml)"
    assert _unit_rows(_unit(root)) == [([0, 0, 0], stale, False)]
    doc = (root / "generated/docs/route_topk.md").read_text()
    assert "`specs/tuning/route_topk.h200.yaml`; 3 of 3 variants untuned (stale) run the spec's default config" in doc
    assert main(["--root", str(root), "check"]) == 0
    assert "3 of 3 variants untuned" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "stale"),
    [
        (("// --- routing of one token", "// --- how one token is routed"), False),  # a comment
        (('top_k: {min: 1, max: 64, why: "', 'top_k: {min: 1, max: 64, why: "at most: '), False),  # a limit's reason
        (("constexpr int kWarpCandidates = 64;", "constexpr int kWarpCandidates = 48;"), True),  # a statement
    ],
    ids=["comment", "static_assert", "statement"],
)
def test_only_code_that_compiles_to_instructions_stales_a_table(tmp_path, capsys, edit, stale):
    """What a table measured is the code without its comments and static_asserts (k3gen.render.code_only):
    a reworded comment or limit keeps every pick, a statement's edit stales them all."""
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    _table(root, {n: _rows(128, 128, 256) for n in names})
    old, new = edit
    for path in (root / "templates/route_topk").iterdir():
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new, 1))
            break
    else:
        raise AssertionError(f"{old!r} is in no file of templates/route_topk")
    rc, err = _build(root, capsys)
    assert rc == 0
    assert ("3 of 3 variants untuned (stale" in err) == stale, err
    assert all(tuned for *_, tuned in _unit_rows(_unit(root))) != stale


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
    no_pick = "h200, untuned (no pick in specs/tuning/route_topk.h200.yaml)"
    assert _unit_rows(_unit(root, names[0])) == [([0, 0, 0], no_pick, False)]
    picks = [_config(root, 128), _config(root, 128), _config(root, 256)]
    assert _unit_rows(_unit(root, names[1])) == [(picks, "h200, specs/tuning/route_topk.h200.yaml", True)]


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


# ---------------------------------------------------------------------- a table per device

H100 = "NVIDIA H100 80GB HBM3"


def _spec_line(root: Path, text: str) -> int:
    return next(i for i, line in enumerate((root / SPEC).read_text().splitlines(), 1) if text in line)


def _with_fallback(root: Path, device: str) -> None:
    spec = root / SPEC
    text = spec.read_text()
    at = text.index("  buckets: ", text.index("tuning:\n"))
    spec.write_text(text[:at] + f"  fallback: {device}\n" + text[at:])


def test_a_table_per_device_each_compiled_as_its_own_row(tmp_path, capsys):
    """Two devices' tables: every variant unit holds both rows (by device name) and the wrapper names
    both files in that order; each table's untuned variants are its own, said in one line per table."""
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    _table(root, {n: _rows(128, 128, 256) for n in names})
    h100 = _table(root, {n: _rows(512, 512, 128) for n in names[1:]}, device=H100)
    rc, err = _build(root, capsys)
    assert rc == 0
    h100_picks = [_config(root, 512), _config(root, 512), _config(root, 128)]
    h200_picks = [_config(root, 128), _config(root, 128), _config(root, 256)]
    assert _unit_rows(_unit(root, names[1])) == [
        (h100_picks, "h100, specs/tuning/route_topk.h100.yaml", True),
        (h200_picks, "h200, specs/tuning/route_topk.h200.yaml", True),
    ]
    assert _unit_rows(_unit(root, names[0])) == [
        ([0, 0, 0], "h100, untuned (no pick in specs/tuning/route_topk.h100.yaml)", False),
        (h200_picks, "h200, specs/tuning/route_topk.h200.yaml", True),
    ]
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert notes == [
        f'note: specs/tuning/route_topk.h100.yaml:{_line(h100, "picks:")} (kernel "route_topk", picks): 1 of 3 '
        f"variants untuned (no pick: {names[0]}); it runs the spec's default config (block_threads=256) until "
        f"`k3gen tune --family route_topk` runs on {H100}"
    ]
    wrapper = (root / "generated/k3kernels/route_topk.py").read_text()
    assert (
        'TUNING_TABLES = {"h100": "specs/tuning/route_topk.h100.yaml", "h200": "specs/tuning/route_topk.h200.yaml"}'
        in wrapper
    )
    untuned = "1 of 3 variants untuned there run the spec's default config (block_threads=256)"
    assert f'UNTUNED_TABLES = {{"h100": "{untuned}"}}' in wrapper  # its first call on an H100 warns
    assert "TABLES = rt.DeviceTables(FAMILY, TUNING_TABLES, fallback=None, untuned=UNTUNED_TABLES)" in wrapper
    assert "        k3_device_table=TABLES.row(device),\n" in wrapper
    abi = (root / "generated/k3kernels/csrc/route_topk/route_topk_abi.h").read_text()
    assert "  int32_t k3_device_table;\n};" in abi  # the ctypes struct's last field too
    assert '("k3_device_table", ctypes.c_int32),\n]' in wrapper
    doc = (root / "generated/docs/route_topk.md").read_text()
    assert "| `h100` | its own: `specs/tuning/route_topk.h100.yaml`; 1 of 3 variants untuned (no pick) run" in doc
    assert "| another GPU | the spec's default config (block_threads=256) |" in doc
    assert main(["--root", str(root), "check"]) == 0


def test_the_committed_table_copied_for_a_second_device_builds(tmp_path, capsys):
    """A committed table copied as another device's (its `device:` changed): every variant unit gains
    that device's row, equal to the copied table's row, in device order."""
    root = copy_project(tmp_path / "p", (SPEC,))
    shutil.copy(ROOT / SPEC, root / SPEC)  # the bundled spec: the one its committed tables measured
    committed = sorted((ROOT / "specs/tuning").glob("route_topk.*.yaml"))
    if not committed:
        pytest.skip("route_topk has no committed table")
    (root / "specs/tuning").mkdir()
    for path in committed:
        shutil.copy(path, root / "specs/tuning" / path.name)
    assert _build(root, capsys)[0] == 0
    csrc = root / "generated/k3kernels/csrc/route_topk"
    before = {p.name: _unit_rows(p.read_text()) for p in csrc.glob("*.cu") if p.name != "dispatch.cu"}
    had = [path.name.split(".")[1] for path in committed]
    name = next(n for n in (H100, "NVIDIA H800", "NVIDIA A100-SXM4-80GB") if device_slug(n) not in had)
    source = committed[0]
    text = source.read_text()
    said = re.search(r"^device: (.*)$", text, re.M)
    copy = root / f"specs/tuning/route_topk.{device_slug(name)}.yaml"
    copy.write_text(text[: said.start(1)] + json.dumps(name) + text[said.end(1) :])
    rc, err = _build(root, capsys)
    assert rc == 0, err
    devices = sorted([*had, device_slug(name)])
    at = devices.index(device_slug(name))
    from_row = devices.index(source.name.split(".")[1])
    for unit, rows in before.items():
        after = _unit_rows((csrc / unit).read_text())
        assert [r for i, r in enumerate(after) if i != at] == rows, unit
        configs, comment, tuned = after[at]
        assert (configs, tuned) == (after[from_row][0], after[from_row][2]), unit
        assert comment.startswith(f"{device_slug(name)}, "), comment


def test_a_fallback_that_names_no_table_is_a_located_error(tmp_path, capsys):
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    _with_fallback(root, "h100")
    rc, err = _build(root, capsys)
    assert rc == 2
    line = _spec_line(root, "fallback:")
    assert (
        f'specs/route_topk.yaml:{line} (kernel "route_topk", tuning.fallback): fallback h100 names no table: '
        "specs/tuning/route_topk.h100.yaml does not exist (the tables there are: none); name a device that has "
        "one, or drop `fallback:`"
    ) in err
    names = [v["name"] for v in _data(root)["variants"]]
    _table(root, {n: _rows(128, 128, 256) for n in names})
    rc, err = _build(root, capsys)
    assert rc == 2
    assert f"specs/route_topk.yaml:{line} " in err
    assert "(the tables there are: specs/tuning/route_topk.h200.yaml)" in err


def test_a_fallback_is_a_device_short_name(tmp_path, capsys):
    root = _project(tmp_path)
    _with_fallback(root, '"H100 SXM"')
    rc, err = _build(root, capsys)
    assert rc == 2
    assert (
        f'specs/route_topk.yaml:{_spec_line(root, "fallback:")} (kernel "route_topk", tuning.fallback): '
        "'H100 SXM' is not a device's short name; write one of [a-z0-9_]{1,64}, e.g. h100 or h200"
    ) in err


def test_a_fallback_is_the_wrappers_alone_and_said_in_list_and_docs(tmp_path, capsys):
    """The fallback changes which row a call passes, not what is compiled: the units stay byte for byte."""
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    _table(root, {n: _rows(128, 128, 256) for n in names})
    assert _build(root, capsys)[0] == 0
    csrc = root / "generated/k3kernels/csrc/route_topk"
    units = {p.name: p.read_text() for p in csrc.iterdir()}
    _with_fallback(root, "h200")
    assert _build(root, capsys)[0] == 0
    assert {p.name: p.read_text() for p in csrc.iterdir()} == units
    wrapper = (root / "generated/k3kernels/route_topk.py").read_text()
    assert 'TABLES = rt.DeviceTables(FAMILY, TUNING_TABLES, fallback="h200")' in wrapper
    doc = (root / "generated/docs/route_topk.md").read_text()
    assert "| another GPU | the h200 table (the spec's fallback) |" in doc
    assert main(["--root", str(root), "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  tuning tables  " in out[0]
    assert all(" h200 (fallback h200) " in line for line in out[1:-1]), out[:3]


def test_a_stale_table_takes_the_fallback_devices_current_picks(tmp_path, capsys):
    """A variant with no current pick in its device's table runs the spec's fallback device's picks
    where that table measured the current code, and the build, the unit and the doc say so: a kernel
    change retuned on one GPU does not send the others to the default config."""
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    _table(root, {n: _rows(128, 128, 256) for n in names}, device=H100)
    stale = _table(root, {n: _rows(512, 512, 512) for n in names}, identity="0" * 64)
    _with_fallback(root, "h100")
    rc, err = _build(root, capsys)
    assert rc == 0
    assert (
        f'note: specs/tuning/route_topk.h200.yaml:{_line(stale, "picks:")} (kernel "route_topk", picks): 3 of 3 '
        "variants untuned (stale: the kernel code, knobs, shape or the variant changed since the table measured "
        f"it: {', '.join(names)}); they run the h100 table's picks (the spec's fallback) until "
        "`k3gen tune --family route_topk` runs on NVIDIA H200"
    ) in err
    picks = [_config(root, 128), _config(root, 128), _config(root, 256)]
    served = (
        "h200, untuned (stale in specs/tuning/route_topk.h200.yaml): "
        "specs/tuning/route_topk.h100.yaml's picks (the spec's fallback)"
    )
    assert _unit_rows(_unit(root)) == [(picks, "h100, specs/tuning/route_topk.h100.yaml", True), (picks, served, True)]
    doc = (root / "generated/docs/route_topk.md").read_text()
    assert (
        "`specs/tuning/route_topk.h200.yaml`; 3 of 3 variants untuned (stale) run the h100 table's picks "
        "(the spec's fallback) until it is retuned"
    ) in doc
    wrapper = (root / "generated/k3kernels/route_topk.py").read_text()
    assert (
        'UNTUNED_TABLES = {"h200": "3 of 3 variants untuned there run the h100 table\'s picks (the spec\'s fallback)"}'
    ) in wrapper
    assert 'fallback="h100", untuned=UNTUNED_TABLES)' in wrapper
    assert main(["--root", str(root), "list"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:-1]
    assert rows and all(" h100,h200:h100 picks (fallback h100) " in row for row in rows), rows[:2]
    # The fallback's own stale entries serve nowhere: both rows then run the default config.
    _table(root, {n: _rows(128, 128, 256) for n in names}, identity="0" * 64, device=H100)
    assert _build(root, capsys)[0] == 0
    assert [tuned for _, _, tuned in _unit_rows(_unit(root))] == [False, False]
    assert main(["--root", str(root), "list"]) == 0
    assert " h100:default,h200:default (fallback h100) " in capsys.readouterr().out.splitlines()[1]


def test_a_table_measured_on_another_device_than_its_name_is_a_located_error(tmp_path, capsys):
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    path = _table(root, {n: _rows(128, 128, 256) for n in names})
    moved = path.with_name("route_topk.h100.yaml")
    path.rename(moved)
    rc, err = _build(root, capsys)
    assert rc == 2
    assert (
        f'specs/tuning/route_topk.h100.yaml:{_line(moved, "device:")} (kernel "route_topk", device): the table '
        "measured NVIDIA H200, whose short name is h200, not h100 as its file name says; rename it "
        "specs/tuning/route_topk.h200.yaml"
    ) in err


def test_diff_prices_a_second_devices_table_like_any_edit(tmp_path, capsys):
    """Adding one device's table: `k3gen diff` names the table and its picks, keyed by device, and every
    tuned unit's key changes (its row is compiled in); `k3gen list` shows both devices."""
    root = _project(tmp_path)
    assert _build(root, capsys)[0] == 0
    names = [v["name"] for v in _data(root)["variants"]]
    _table(root, {n: _rows(128, 128, 256) for n in names})
    assert _build(root, capsys)[0] == 0
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "h200"], check=True)
    _table(root, {n: _rows(512, 512, 128) for n in names}, device=H100)
    assert _build(root, capsys)[0] == 0
    assert main(["--root", str(root), "diff", "HEAD", "--format", "json"]) == 0
    fam = next(f for f in json.loads(capsys.readouterr().out)["families"] if f["family"] == "route_topk")
    changes = {(c["kind"], c["name"]): (c["old"], c["new"]) for c in fam["changes"]}
    assert changes[("tuning table", "h100")] == (None, "specs/tuning/route_topk.h100.yaml")
    assert ("tuning table", "h200") not in changes
    assert changes[("tuning pick", f"{names[0]} on h100, 0 < M <= 1")] == (None, "block_threads=512")
    assert not [k for k in changes if k[0] == "tuning pick" and " on h200, " in k[1]]
    plan = next(p for p in resolve_all(load_specs(root), root) if p.name == "route_topk")
    assert sorted(fam["invalidated"]) == sorted(sp.identity for sp in plan.specializations)  # each gains a row
    assert main(["--root", str(root), "list"]) == 0
    assert all(" h100,h200 " in line for line in capsys.readouterr().out.splitlines()[1:-1])


# ---------------------------------------------------------------------- the runtime's choice of a table


@pytest.fixture
def gpus(monkeypatch):
    """torch.cuda.get_device_name answering from a dict (index -> name), counting its calls."""
    torch = pytest.importorskip("torch")
    names, asked = {}, []

    def name(index=None):
        asked.append(index)
        return names[index]

    monkeypatch.setattr(torch.cuda, "get_device_name", name)
    return names, asked


def test_device_tables_pick_by_the_gpus_short_name_and_log_once(gpus, caplog):
    import torch

    from k3gen.runtime.tables import NO_ROW, DeviceTables

    names, asked = gpus
    names.update({0: H100, 1: "NVIDIA H200", 2: "NVIDIA B200"})
    files = {"h100": "specs/tuning/f.h100.yaml", "h200": "specs/tuning/f.h200.yaml"}
    tables = DeviceTables("f", files)
    with caplog.at_level(logging.INFO, logger="k3gen"):
        rows = [tables.row(torch.device("cuda", i)) for i in (0, 1, 2, 0, 1, 2)]
    assert rows == [list(files).index("h100"), list(files).index("h200"), NO_ROW] * 2
    assert asked == [0, 1, 2]  # asked once per GPU, never per call
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"k3gen: f on {H100}: specs/tuning/f.h100.yaml"),
        (logging.INFO, "k3gen: f on NVIDIA H200: specs/tuning/f.h200.yaml"),
        (logging.WARNING, "k3gen: f on NVIDIA B200: no table for b200 (tables: h100, h200); the spec's default config"),
    ]


def test_device_tables_serve_another_gpu_from_the_fallback(gpus, caplog):
    import torch

    from k3gen.runtime.tables import DeviceTables

    names, _ = gpus
    names[0] = "NVIDIA H800"
    files = {"h100": "specs/tuning/f.h100.yaml", "h200": "specs/tuning/f.h200.yaml"}
    with caplog.at_level(logging.INFO, logger="k3gen"):
        assert DeviceTables("f", files, fallback="h100").row(torch.device("cuda", 0)) == list(files).index("h100")
    assert [r.getMessage() for r in caplog.records] == [
        "k3gen: f on NVIDIA H800: no h800 table; the h100 table (the spec's fallback), specs/tuning/f.h100.yaml"
    ]
    assert caplog.records[0].levelno == logging.WARNING


def test_device_tables_warn_where_the_gpus_own_table_leaves_variants_untuned(gpus, caplog):
    import torch

    from k3gen.runtime.tables import DeviceTables

    names, _ = gpus
    names[0] = "NVIDIA H200"
    files = {"h100": "specs/tuning/f.h100.yaml", "h200": "specs/tuning/f.h200.yaml"}
    untuned = {"h200": "2 of 2 variants untuned there run the h100 table's picks (the spec's fallback)"}
    with caplog.at_level(logging.INFO, logger="k3gen"):
        tables = DeviceTables("f", files, fallback="h100", untuned=untuned)
        assert tables.row(torch.device("cuda", 0)) == list(files).index("h200")  # its own row holds those picks
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, f"k3gen: f on NVIDIA H200: specs/tuning/f.h200.yaml; {untuned['h200']}")
    ]


def test_the_generated_wrapper_holds_the_plans_tables(gpus):
    """k3kernels.<family>.TABLES (generated/) is the plan's tables in row order; its row for a GPU named
    like one of them is that table's."""
    import importlib

    import torch

    names, _ = gpus
    for p in resolve_all(load_specs(ROOT), ROOT):
        if p.tuning is None:
            assert not hasattr(importlib.import_module(f"k3kernels.{p.name}"), "TABLES"), p.name
            continue
        tables = importlib.import_module(f"k3kernels.{p.name}").TABLES
        assert tables.tables == {tb.device: tb.file for tb in p.tuning.tables}, p.name
        assert tables.fallback == p.tuning.fallback, p.name
        for row, tb in enumerate(p.tuning.tables):
            if tb.device_name:
                names[10 + row] = tb.device_name
                assert tables.row(torch.device("cuda", 10 + row)) == row, (p.name, tb.device)


def test_code_only_keeps_literals_and_cuts_whole_static_asserts():
    from k3gen.render.code_only import code_only

    src = (
        'const char* p = "a // b /* c */";  // gone\n'
        "  static_assert(f(x) > 0 && g(')') < 1,\n"
        '                "why (with a paren) and \\" a quote");\n'
        "/* gone\n too */ int x = ';'; \t\n"
        "\n"
        "#if K3_CUDA  // the line stays\n"
    )
    assert code_only(src) == "const char* p = \"a // b /* c */\";\nint x = ';';\n#if K3_CUDA"
