"""Compile commands that are the same bytes in every checkout (k3gen.runtime.stage; issue 23, item 1),
with the fake compiler (tests/fake_cc.py): what a compile cache shared across machines needs.

Each unit compiles from a content-addressed copy of itself and the headers it includes, so the
build files of two checkouts at different paths are byte for byte the same; the stage is used only
when nobody else can write it, and a folder in it only when it holds exactly what its name says.
"""

from __future__ import annotations

import getpass
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from test_aot import compile_, wrapper

from k3gen.cli import main
from k3gen.runtime import K3BuildError, stage
from k3gen.runtime.cache import write_ninja
from k3gen.ship.aot import Target, write_build

from support import SPEC_FILE, copy_project

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/
# (its projects are copies of tests/data's frozen specs and of templates/).
READS = ("templates/**",)


@pytest.fixture
def fixed_stage(monkeypatch):
    """A stage root below /tmp whose path names no user and no test (as /tmp/k3gen-src does)."""
    root = Path(tempfile.mkdtemp(prefix="k3gen-stage-test-", dir="/tmp"))
    monkeypatch.setenv(stage.STAGE_ENV, str(root))
    stage._warned.clear()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _project(where: Path, capfd) -> Path:
    project = copy_project(where, (SPEC_FILE, "specs/route_topk.yaml"))
    assert main(["--root", str(project), "build"]) == 0
    capfd.readouterr()
    return project


def test_two_checkouts_write_the_same_build_files(fake_cc, fixed_stage, tmp_path, capfd):
    """The JIT's build.ninja and `k3gen compile`'s are the same bytes for a checkout at another
    path, and name no checkout, no temporary folder and no user (the compiler is the machine's)."""
    a = _project(tmp_path / "a", capfd)
    b = _project(tmp_path / "much" / "longer" / "path" / "b", capfd)
    texts = []
    for p in (a, b):
        req = wrapper(p, "situ_and_mul").request("sm_90a")
        jit = tmp_path / f"jit-{p.name}"
        jit.mkdir()
        aot = tmp_path / f"aot-{p.name}"
        aot.mkdir()
        families = ("situ_and_mul", "route_topk")
        targets = [Target(wrapper(p, f).request("sm_90a"), str(fake_cc.path), "") for f in families]
        texts.append((write_ninja(req, jit).read_text(), write_build(targets, aot).read_text()))
    assert texts[0] == texts[1]
    for text in texts[0]:
        shown = text.replace(str(fake_cc.path), "<compiler>")
        assert str(tmp_path) not in shown and "pytest" not in shown
        assert str(Path.home()) not in shown and f"/{getpass.getuser()}/" not in shown
        assert f"-I{fixed_stage}/" in shown and "-MD" not in shown


def test_an_edited_header_is_a_new_folder_for_the_units_that_include_it(fake_cc, fixed_stage, tmp_path, capfd):
    p = _project(tmp_path / "p", capfd)
    req = wrapper(p, "route_topk").request("sm_90a")
    before = dict(zip(req.sources, req.units()))
    header = p / "generated" / "k3kernels" / "csrc" / "route_topk" / "route_topk.cuh"
    os.chmod(header, 0o644)
    header.write_text(header.read_text() + "// edited\n")
    after = dict(zip(req.sources, req.units()))
    moved = {s for s in req.sources if after[s] != before[s]}
    assert moved == {s for s in req.sources if not s.startswith("dispatch.")} and moved
    for src, flags in after.values():
        assert src.is_relative_to(fixed_stage) and src.read_bytes() == (req.csrc / "route_topk" / src.name).read_bytes()
        assert f"-I{src.parents[1]}" in flags


def test_a_cleaned_stage_rebuilds_nothing_and_a_new_toolkit_rebuilds_everything(fake_cc, fixed_stage, tmp_path, capfd):
    """Staged files carry a fixed old mtime: a folder made again (a cleaned /tmp) is up to date for
    ninja. The compiler's version is in every command: an upgrade at the same path rebuilds."""
    p = _project(tmp_path / "p", capfd)
    assert compile_(p, "--family", "situ_and_mul", "--arch", "sm_90a") == 0
    n = fake_cc.count("compile")
    assert n == len(wrapper(p, "situ_and_mul").request("sm_90a").sources)
    shutil.rmtree(fixed_stage)
    assert compile_(p, "--family", "situ_and_mul", "--arch", "sm_90a") == 0
    assert fake_cc.count("compile") == n and "no work to do" in capfd.readouterr().out
    fake_cc.set("FAKE_CC_VERSION", "fake-cc release 2.0")
    assert compile_(p, "--family", "situ_and_mul", "--arch", "sm_90a") == 0
    assert fake_cc.count("compile") == 2 * n and fake_cc.count("link") == 2


FILES = {"fam/u.cu": b'#include "fam.cuh"\n', "fam/fam.cuh": b"// header\n", "k3_backend.h": b"// backend\n"}


def test_a_folder_holds_exactly_its_files_or_is_made_again(fixed_stage):
    folder = stage.stage(FILES)
    assert folder.parent == fixed_stage and folder.name == stage.digest(FILES)
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == set(FILES)
    assert all((folder / n).stat().st_mtime_ns == stage.MTIME_NS for n in FILES)
    assert not (folder / "fam" / "u.cu").stat().st_mode & 0o222  # read-only
    damages = {
        "other bytes": lambda f: (os.chmod(f / "fam" / "fam.cuh", 0o644), (f / "fam" / "fam.cuh").write_text("evil")),
        "an extra header (it would shadow a system one)": lambda f: (f / "cuda_runtime.h").write_text("evil"),
        "a link": lambda f: (os.unlink(f / "k3_backend.h"), os.symlink("/etc/hostname", f / "k3_backend.h")),
        "a missing file": lambda f: os.unlink(f / "k3_backend.h"),
        "writable by others": lambda f: os.chmod(f / "fam", 0o777),
    }
    for why, damage in damages.items():
        os.chmod(folder, 0o755)
        damage(folder)
        assert not stage.holds(folder, FILES), why
        assert stage.stage(FILES) == folder and stage.holds(folder, FILES), why


def _unsafe_roots(tmp_path: Path):
    yield "writable by others", lambda r: (r.mkdir(), os.chmod(r, 0o777))
    yield "a link", lambda r: os.symlink(tmp_path, r)
    yield "a file", lambda r: r.write_text("")
    if os.getuid() == 0:
        yield "another user's", lambda r: (r.mkdir(), os.chown(r, 65534, 65534))


@pytest.mark.parametrize("why", ["writable by others", "a link", "a file", "another user's"])
def test_a_root_others_can_write_is_never_used(fake_cc, tmp_path, monkeypatch, caplog, why):
    """The private <cache>/src serves instead, said once; builds stay correct, only not shared."""
    make = dict(_unsafe_roots(tmp_path)).get(why)
    if make is None:
        pytest.skip("chown needs root")
    root = tmp_path / "shared-stage"
    make(root)
    monkeypatch.setenv(stage.STAGE_ENV, str(root))
    stage._warned.clear()
    with caplog.at_level(logging.WARNING, logger="k3gen"):
        folder = stage.stage(FILES)
        assert stage.stage(FILES) == folder
    assert folder.parent == Path(os.environ["K3GEN_CACHE_DIR"]) / "src"
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert f"not {root}" in caplog.records[0].getMessage() and stage.STAGE_ENV in caplog.records[0].getMessage()
    if root.is_dir() and not root.is_symlink():
        assert list(root.iterdir()) == []  # nothing was staged where others could have put it


def test_a_relative_stage_root_is_one_line(monkeypatch):
    monkeypatch.setenv(stage.STAGE_ENV, "relative/dir")
    with pytest.raises(K3BuildError, match="is not an absolute path"):
        stage.stage(FILES)


def test_compiler_messages_name_the_generated_sources(fixed_stage, tmp_path):
    folder = stage.stage(FILES)
    text = f"{folder}/fam/u.cu(3): error: expected a ';'\n"
    assert stage.unstaged(text, tmp_path / "csrc") == f"{tmp_path}/csrc/fam/u.cu(3): error: expected a ';'\n"


def test_builds_staging_the_same_sources_at_once_share_one_folder(fixed_stage):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        folders = set(pool.map(lambda _: stage.stage(FILES), range(32)))
    assert len(folders) == 1 and stage.holds(folders.pop(), FILES)
    assert [p.name for p in fixed_stage.iterdir()] == [stage.digest(FILES)]  # no temporary folder left
