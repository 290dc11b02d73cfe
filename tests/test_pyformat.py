"""k3gen.render.pyformat lays data out as `ruff format` does, so generated modules pass `ruff format --check`
without k3gen running ruff. Held to ruff itself on awkward data (skipped without ruff)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from k3gen.render import pyformat
from k3gen.spec.escape import py_literal

from support import ROOT

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ()

RUFF = shutil.which("ruff")
DATA = {
    "SHORT": ["dense", "strided"],
    "LONG_INTS": list(range(0, 256 * 37, 37)),
    "TABLE": pyformat.Call("testing.flat", [list(range(i, i + 16)) for i in range(0, 64, 16)]),
    "SMALL_CALL": pyformat.Call("testing.flat", [[1, 2]]),
    "NESTED": {
        "cuda": {"tie_order": "lowest_id"},
        "hip": {"tie_order": {"rule": "wave64", "lane_rank": list(range(64))}},
    },
    "REASONS": [({"in": "bf16", "out": "fp16"}, "x" * 130), ({"a": 1}, 'it\'s "q"')],
    "QUOTES": ["it's", 'say "hi"', "both ' and \"", "back\\slash'", "tab\t", "× mult", "\U0001f600", "日本語" * 30],
    "ONE_TUPLE": [(1,), ("a",)],
    "FLOATS": {"eps": 1e-10, "big": 1e16, "f": 448.0, "n": -3, "neg": -1.5e-07},
    "EMPTY": [[], {}, ()],
    "LONE_STRING": [("y" * 200,)],
    "DICT_STRING": {"k": "v" * 130},
    "NAMES": [pyformat.Name("torch.float32"), pyformat.Name("TIE_ORDER")],
}


def module() -> str:
    return '"""Data."""\n\n' + "".join(pyformat.assign(name, value) for name, value in DATA.items())


@pytest.mark.skipif(RUFF is None, reason="ruff is not installed")
def test_the_layout_is_ruffs():
    out = subprocess.run(
        [RUFF, "format", "--diff", "--stdin-filename", "data.py", "-"],
        cwd=ROOT,
        input=module(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(RUFF is None, reason="ruff is not installed")
def test_no_line_is_too_long_or_needs_a_fix():
    out = subprocess.run(
        [RUFF, "check", "--select", "E,W", "--stdin-filename", "data.py", "-"],
        cwd=ROOT,
        input=module(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_what_is_laid_out_is_the_value():
    from k3gen.oracles import testing

    names = {"torch": __import__("torch"), "testing": testing, "TIE_ORDER": [1]}
    for name, value in DATA.items():
        if any(isinstance(v, (pyformat.Name, pyformat.Call)) for v in (value, *getattr(value, "__iter__", list)())):
            continue
        scope = dict(names)
        exec(pyformat.assign(name, value), scope)
        assert scope[name] == value, name


def test_strings_take_ruffs_quotes():
    assert py_literal("plain") == '"plain"'
    assert py_literal('say "hi"') == "'say \"hi\"'"
    assert py_literal("it's") == '"it\'s"'
    assert py_literal("both ' and \"") == '"both \' and \\""'
    assert eval(py_literal("both ' and \"")) == "both ' and \""


def test_a_table_is_flat_again():
    from k3gen.oracles import testing

    rows = [list(range(i, i + 16)) for i in range(0, 64, 16)]
    assert testing.flat(rows) == list(range(64))
