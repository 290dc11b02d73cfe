"""The hostile corpus beside the specs (issues 20 and 25): every file k3gen reads that is not a spec
(tuning tables, the cost table, record files, a wheel's prebuilt index, the C++ call path's library
and its record), every file it writes outside generated/ (`k3gen new`, record lines, a wheel, AOT
output), and what the environment and the command line hand it (--root, launchers, job counts,
SOURCE_DATE_EPOCH, revisions, the generator-free entry points).

Each case runs k3gen in a forked child (tests/hostile.py: a hang or a memory bomb fails one case)
and asserts: the exit code, the exact located line (or the one-line message), no traceback, within
IN_PROCESS_S, nothing written outside the copy, and no unbounded read (a link to /dev/zero would
exhaust the child's address-space limit).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from hostile import ROOT, Sandbox, run_forked, tree_state
from support import copy_project

IN_PROCESS_S = 2.0
# situ_and_mul's committed tuning table (the first, by name, where several devices have one).
TABLE = min(p.relative_to(ROOT).as_posix() for p in (ROOT / "specs/tuning").glob("situ_and_mul.*.yaml"))
GONE = "specs/tuning/gone." + TABLE.split(".", 1)[1]  # a table of a family no spec declares
SITU_SPEC = "specs/situ_and_mul.yaml"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("outside")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """A built copy holding the bundled situ_and_mul spec with its committed tuning table and the
    cost table, in a git repository (for diff)."""
    from k3gen.cli import main

    root = copy_project(tmp_path_factory.mktemp("tuned") / "proj")
    shutil.copy(ROOT / SITU_SPEC, root / SITU_SPEC)
    (root / "specs/tuning").mkdir()
    shutil.copy(ROOT / TABLE, root / TABLE)
    shutil.copy(ROOT / "specs/compile_costs.json", root / "specs/compile_costs.json")
    assert main(["--root", str(root), "build"]) == 0
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "clean")
    return root


@pytest.fixture
def sandbox(tmp_path, outside, tuned) -> Sandbox:
    shutil.copytree(tuned, tmp_path / "proj", symlinks=True)
    return Sandbox(tmp_path, outside, "inputs")


def _k3gen(sb: Sandbox, *argv: str, env: dict | None = None, limit_s: float = 10.0):
    from k3gen.cli import main

    def run():
        os.environ.update(env or {})
        return main(["--root", str(sb.proj), *argv])

    return run_forked(run, cwd=sb.cwd, limit_s=limit_s)


def _line(path: Path, prefix: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(prefix))


# ----------------------------------------------------------------------------------------------
# Files beside the specs: refused at their own line, by every command that reads them


@dataclass(frozen=True)
class Beside:
    id: str
    setup: Callable[[Sandbox], None]
    commands: tuple[tuple[str, ...], ...]
    code: int
    expected: str  # a substring of stderr; {TABLE} and {OUT} are filled in


def _write(rel: str, data: bytes | str) -> Callable[[Sandbox], None]:
    def setup(sb: Sandbox) -> None:
        path = sb.proj / rel
        path.unlink(missing_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    return setup


def _link(rel: str, target: Callable[[Sandbox], Path | str]) -> Callable[[Sandbox], None]:
    def setup(sb: Sandbox) -> None:
        path = sb.proj / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        path.unlink(missing_ok=True)
        path.symlink_to(target(sb))

    return setup


def _folder(rel: str) -> Callable[[Sandbox], None]:
    def setup(sb: Sandbox) -> None:
        (sb.proj / rel).unlink()
        (sb.proj / rel).mkdir()

    return setup


def _fifo(rel: str) -> Callable[[Sandbox], None]:
    def setup(sb: Sandbox) -> None:
        (sb.proj / rel).unlink()
        os.mkfifo(sb.proj / rel)

    return setup


def _table_bytes(sb: Sandbox) -> bytes:
    return (ROOT / TABLE).read_bytes()


def _not_utf8(sb: Sandbox) -> None:
    data = _table_bytes(sb).replace(b"device:", b"\xff\xfedevice:", 1)
    (sb.proj / TABLE).write_bytes(data)


def _huge(sb: Sandbox) -> None:
    (sb.proj / TABLE).write_bytes(_table_bytes(sb) + b"# " + b"x" * (2 << 20) + b"\n")


def _orphan(sb: Sandbox) -> None:
    shutil.copy(sb.proj / TABLE, sb.proj / GONE)


SPEC_COMMANDS = (("validate",), ("build",), ("check",), ("diff", "HEAD"))
TABLE_AT = f'{TABLE}:1 (kernel "situ_and_mul", <file>): '
BESIDE = [
    Beside(
        "table.link-to-dev-zero", _link(TABLE, lambda sb: "/dev/zero"), SPEC_COMMANDS, 2, TABLE_AT + "a symbolic link"
    ),
    Beside("table.folder", _folder(TABLE), SPEC_COMMANDS, 2, TABLE_AT + "a folder, not a regular file"),
    Beside("table.fifo", _fifo(TABLE), SPEC_COMMANDS, 2, TABLE_AT + "a device, pipe or socket, not a regular file"),
    Beside(
        "table.link-out-of-the-project",
        _link(TABLE, lambda sb: sb.outside / "secret.txt"),
        SPEC_COMMANDS,
        2,
        TABLE_AT + "a symbolic link",
    ),
    Beside(
        "table.not-utf8",
        _not_utf8,
        SPEC_COMMANDS,
        2,
        f'{TABLE}:10 (kernel "situ_and_mul", <file>): byte 0xff is not UTF-8; save it as UTF-8 text',
    ),
    Beside(
        "table.2-MB",
        _huge,
        SPEC_COMMANDS,
        2,
        TABLE_AT + "larger than 1048576 bytes (bounds.MAX_TABLE_BYTES), the most k3gen reads of such a file",
    ),
    Beside(
        "table.of-no-family",
        _orphan,
        SPEC_COMMANDS,
        2,
        f'{GONE}:1 (kernel "gone", <file>): a tuning table of family gone, which no spec '
        "declares (specs/gone.yaml is gone); delete it",
    ),
    Beside(
        "table.yml",
        _write("specs/tuning/situ_and_mul.h100.yml", "format: 2\n"),
        SPEC_COMMANDS,
        2,
        "specs/tuning/situ_and_mul.h100.yml:1 (<file>): specs/tuning/ holds tuning tables, FAMILY.DEVICE.yaml, "
        "only; rename it to end in .yaml",
    ),
    Beside(
        "spec.yml",
        _write("specs/extra.yml", "kernel: extra\n"),
        SPEC_COMMANDS,
        2,
        "specs/extra.yml:1 (<file>): k3gen reads spec files named NAME.yaml only, so this file would be ignored; "
        "rename it to specs/extra.yaml",
    ),
    Beside(
        "costs.link-to-dev-zero",
        _link("specs/compile_costs.json", lambda sb: "/dev/zero"),
        (("check",), ("diff", "HEAD")),
        2,
        "specs/compile_costs.json: a symbolic link (or a path through one); k3gen uses plain files only; a cost "
        "table is a plain file",
    ),
    Beside(
        "costs.infinity",
        _write("specs/compile_costs.json", '{"format": 1, "units": {"sm_90a": {"x/y.cu": {"seconds": Infinity}}}}'),
        (("check",), ("diff", "HEAD")),
        2,
        "specs/compile_costs.json: not readable JSON (Infinity is not a number a cost table holds)",
    ),
    Beside(
        "costs.4001-digits",
        _write(
            "specs/compile_costs.json", '{"format": 1, "units": {"sm_90a": {"x/y.cu": {"bytes": ' + "9" * 4001 + "}}}}"
        ),
        (("check",), ("diff", "HEAD")),
        2,
        "specs/compile_costs.json: not readable JSON (the integer 99999999999999999999... has 4001 digits)",
    ),
    Beside(
        "costs.beyond-bounds",
        _write(
            "specs/compile_costs.json", '{"format": 1, "units": {"sm_90a": {"x/y.cu": {"seconds": 1e300, "bytes": 1}}}}'
        ),
        (("check",), ("diff", "HEAD")),
        2,
        "specs/compile_costs.json: entries that are not finite non-negative numbers within bounds.MAX_UNIT_SECONDS "
        "and bounds.MAX_ARTIFACT_BYTES: units.sm_90a.x/y.cu",
    ),
]


@pytest.mark.parametrize("case", BESIDE, ids=[c.id for c in BESIDE])
def test_a_hostile_file_beside_the_specs_is_refused_at_its_line(case: Beside, sandbox: Sandbox):
    case.setup(sandbox)
    sandbox.arm()
    before = tree_state(sandbox.proj, skip=sandbox.proj / ".git")
    for argv in case.commands:
        run = _k3gen(sandbox, *argv)
        assert run.code == case.code, f"`k3gen {' '.join(argv)}`\n{run}"
        assert case.expected in run.err, f"`k3gen {' '.join(argv)}`\n{run}"
        assert "Traceback" not in run.text and "MemoryError" not in run.text, str(run)
        assert run.wall < IN_PROCESS_S, f"`k3gen {' '.join(argv)}` took {run.wall:.2f}s"
        assert sandbox.secret_token not in run.text
        assert tree_state(sandbox.proj, skip=sandbox.proj / ".git") == before, "the copy changed"
    sandbox.assert_untouched()


def test_runner_check_sizes_a_test_cannot_allocate_are_a_located_error(tmp_path, capsys):
    from k3gen.cli import main

    from support import copy_frozen_project

    root = copy_frozen_project(tmp_path / "p")
    path = root / "specs/runners.yaml"
    text = path.read_text()
    assert "dims: {M: 64, D: 3584}" in text
    path.write_text(text.replace("dims: {M: 64, D: 3584}", "dims: {M: 16777216, D: 16777216}"))
    assert main(["--root", str(root), "validate"]) == 2
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "dims: {M: 16777216" in s)
    err = capsys.readouterr().err
    assert (
        f"specs/runners.yaml:{line} (dense_bf16_check.dims): the sizes make 281474976710656 elements; the GPU test "
        "allocates at most 268435456 per tensor (bounds.MAX_TEST_ELEMENTS): use smaller sizes"
    ) in err


# ----------------------------------------------------------------------------------------------
# --root: one line naming what is missing, exit 2, for every command


ROOTS = {
    "missing": lambda sb: sb.base / "no-such-folder",
    "a-file": lambda sb: sb.victim,
    "dev-null": lambda sb: Path("/dev/null"),
    "control-characters": lambda sb: sb.base / "x\nk3gen check: all up to date",
    "no-templates": lambda sb: sb.proj / "specs",
}


@pytest.mark.parametrize("how", ROOTS, ids=[f"root.{k}" for k in ROOTS])
@pytest.mark.parametrize("command", ["validate", "build", "check", "list", "diff", "compile", "package", "new"])
def test_a_root_that_is_no_project_is_one_line_and_exit_2(how, command, sandbox: Sandbox):
    from k3gen.cli import main

    root = ROOTS[how](sandbox)
    if how == "control-characters":
        root.mkdir()
    argv = ["--root", str(root), command, *(["x_family"] if command == "new" else [])]
    sandbox.arm()
    run = run_forked(lambda: main(argv), cwd=sandbox.cwd)
    assert run.code == 2, str(run)
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"k3gen {command}: --root "), str(run)
    assert "is not a folder" in lines[0] or "is not a k3gen project: it has no" in lines[0]
    assert "up to date" not in run.out and "\nk3gen check" not in run.err, "a control character reached the terminal"
    sandbox.assert_untouched()


# ----------------------------------------------------------------------------------------------
# k3gen new writes inside the project only


def test_new_refuses_a_dangling_link_and_check_names_it(sandbox: Sandbox):
    target = sandbox.outside / "K3_ESCAPED_oracle.py"
    (sandbox.proj / "k3gen/oracles/evil.py").symlink_to(target)
    sandbox.arm()
    run = _k3gen(sandbox, "check")
    assert run.code == 1 and "k3gen/oracles/evil.py: a symbolic link; the project's files are plain files" in run.err
    run = _k3gen(sandbox, "new", "evil")
    assert run.code == 2 and "k3gen new: family 'evil' already exists: k3gen/oracles/evil.py" in run.err, str(run)
    assert not target.exists() and not (sandbox.proj / "specs/evil.yaml").exists()
    (sandbox.proj / "k3gen/oracles/evil.py").unlink()
    (sandbox.proj / "templates/evil2").symlink_to(sandbox.outside)
    run = _k3gen(sandbox, "new", "evil2")
    assert run.code == 2 and "templates/evil2/" in run.err, str(run)
    sandbox.assert_untouched()


def test_a_library_under_k3gen_that_no_build_put_there_is_drift(sandbox: Sandbox):
    lib = sandbox.proj / "k3gen/runtime/prebuilt/_k3host.0123.cpython-311-x86_64-linux-gnu.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF not vouched")
    run = _k3gen(sandbox, "check")
    assert run.code == 1
    assert (
        "k3gen/runtime/prebuilt/_k3host.0123.cpython-311-x86_64-linux-gnu.so: a library under k3gen/ that no "
        "k3gen build put there (only a wheel carries k3gen/runtime/prebuilt/); delete it"
    ) in run.err


# ----------------------------------------------------------------------------------------------
# The environment and the command line: one line before anything builds


ENV = [
    ("launcher-quoting", {"K3GEN_COMPILER_LAUNCHER": 'sccache "'}, ("compile", "--arch", "sm_90a"), 1,
     "k3gen: K3GEN_COMPILER_LAUNCHER='sccache \"' does not split into words (No closing quotation)"),
    ("launcher-missing", {"K3GEN_COMPILER_LAUNCHER": "sccache-missing"}, ("compile", "--arch", "sm_90a"), 1,
     "k3gen: K3GEN_COMPILER_LAUNCHER='sccache-missing': sccache-missing is not an executable"),
    ("jobs-not-a-number", {"K3GEN_JOBS": "abc"}, ("compile", "--arch", "sm_90a"), 1,
     "k3gen: K3GEN_JOBS=abc is not a positive number of parallel compiles"),
    ("jobs-negative", {}, ("compile", "-j", "-1"), 2,
     "argument -j/--jobs: -1 is not a positive number of parallel compiles"),
    ("source-date-epoch", {"SOURCE_DATE_EPOCH": "yesterday"}, ("package", "--arch", "sm_90a"), 2,
     "k3gen package: SOURCE_DATE_EPOCH=yesterday is not whole seconds since 1970"),
    ("package-out-is-a-file", {}, ("package", "--arch", "sm_90a", "--out", "{VICTIM}"), 2,
     "k3gen package: --out {VICTIM} is a file; the wheel goes into a folder"),
    ("compile-out-is-a-file", {}, ("compile", "--arch", "sm_90a", "--out", "{VICTIM}"), 2,
     "k3gen compile: --out {VICTIM} is a file; the libraries go into a folder"),
]  # fmt: skip


@pytest.mark.parametrize("case", ENV, ids=[f"env.{c[0]}" for c in ENV])
def test_a_bad_environment_or_flag_is_one_line_before_anything_builds(case, sandbox: Sandbox):
    _, env, argv, code, expected = case
    fill = lambda s: s.replace("{VICTIM}", str(sandbox.victim))  # noqa: E731
    sandbox.arm()
    run = _k3gen(sandbox, *map(fill, argv), env=env)
    assert run.code == code, str(run)
    assert fill(expected) in run.err, str(run)
    assert "Traceback" not in run.text and run.wall < IN_PROCESS_S, str(run)
    assert not (sandbox.proj / "build").exists(), "something was built"
    sandbox.assert_untouched()


def test_diff_against_a_revision_holding_an_absolute_link_is_one_line(sandbox: Sandbox):
    (sandbox.proj / "specs/evil.yaml").symlink_to("/etc/passwd")
    _git(sandbox.proj, "add", "-A")
    _git(sandbox.proj, "commit", "-q", "-m", "a link")
    rev = _git(sandbox.proj, "rev-parse", "--short", "HEAD").strip()
    (sandbox.proj / "specs/evil.yaml").unlink()
    run = _k3gen(sandbox, "diff", rev)
    assert run.code == 1, str(run)
    assert f"k3gen diff: {rev} holds a file k3gen will not unpack (AbsoluteLinkError" in run.err, str(run)
    assert "Traceback" not in run.text


# ----------------------------------------------------------------------------------------------
# Record files: read bounded and as names; written by the one writer


def _record(sb: Sandbox, text: str) -> Path:
    path = sb.base / "warm.jsonl"
    path.write_text(text)
    return path


RECORDS = {
    "link-to-dev-zero": (lambda sb: (sb.base / "warm.jsonl").symlink_to("/dev/zero") or sb.base / "warm.jsonl",
                         "a symbolic link (or a path through one); k3gen uses plain files only"),
    "unhashable-fields": (lambda sb: _record(sb, '{"family": ["situ_and_mul"], "variant": {}, "arch": "sm_90a"}\n'),
                          "warm.jsonl:1: not a K3GEN_RECORD line (JSON with family, variant and arch names)"),
    "control-characters": (
        lambda sb: _record(sb, json.dumps({"family": "situ\nk3gen compile: 6/6 libraries up to date", "variant": "v",
                                           "arch": "sm_90a"}) + "\n"),
        "warm.jsonl:1: not a K3GEN_RECORD line",
    ),
}  # fmt: skip


@pytest.mark.parametrize("how", RECORDS, ids=[f"record.{k}" for k in RECORDS])
@pytest.mark.parametrize("entry", ["k3gen compile", "python -m k3gen.ship.aot"])
def test_a_hostile_record_file_is_one_line(how, entry, sandbox: Sandbox):
    from k3gen.ship import aot

    make, expected = RECORDS[how]
    record = make(sandbox)
    sandbox.arm()
    if entry == "k3gen compile":
        run = _k3gen(sandbox, "compile", "--from-record", str(record))
    else:
        run = run_forked(lambda: aot.main(["--root", str(sandbox.proj), "--from-record", str(record)]), cwd=sandbox.cwd)
    assert run.code == 2, str(run)
    assert expected in run.err, str(run)
    assert "Traceback" not in run.text and "MemoryError" not in run.text and run.wall < IN_PROCESS_S
    assert not any(line.startswith("k3gen compile: 6/6") for line in run.text.splitlines()), "a forged line"
    sandbox.assert_untouched()


@pytest.mark.parametrize("how", ["a-committed-link", "a-missing-folder"])
def test_the_record_writer_refuses_links_and_names_a_missing_folder(how, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from k3gen.runtime import module
    from k3gen.runtime.errors import K3BuildError

    victim = tmp_path / "victim.txt"
    victim.write_text("victim\n")
    if how == "a-committed-link":
        path = tmp_path / "warm.jsonl"
        path.symlink_to(victim)
        expected = f"k3gen: K3GEN_RECORD={path}: a symbolic link (or a path through one); k3gen uses plain files only"
    else:
        path = tmp_path / "no-such-folder" / "warm.jsonl"
        expected = f"k3gen: K3GEN_RECORD={path}: its folder {path.parent} does not exist"
    monkeypatch.setenv("K3GEN_RECORD", str(path))
    with pytest.raises(K3BuildError) as exc:
        module.record_launch("situ_and_mul", f"situ_and_mul__{how}", "sm_90a", 0x11)
    assert str(exc.value).startswith(expected)
    assert victim.read_text() == "victim\n" and not (tmp_path / "no-such-folder").exists()


# ----------------------------------------------------------------------------------------------
# The generator-free entry points run nothing that MANIFEST does not vouch for


def _unlisted_module(sb: Sandbox) -> None:
    marker = sb.marker
    (sb.proj / "generated/k3kernels/evil.py").write_text(f"open({str(marker)!r}, 'w').close()\nMODULE = None\n")


def _linked_out(sb: Sandbox) -> None:
    (sb.proj / "generated/k3kernels/secret.txt").symlink_to(sb.secret)


@pytest.mark.parametrize("tamper", [_unlisted_module, _linked_out], ids=["unlisted-module", "link-out"])
@pytest.mark.parametrize("entry", ["aot", "package"])
def test_generator_free_entry_points_check_the_tree_first(tamper, entry, sandbox: Sandbox):
    pytest.importorskip("torch")
    from k3gen.ship import aot, package

    tamper(sandbox)
    record = _record(sandbox, json.dumps({"family": "situ_and_mul", "variant": "v", "arch": "sm_90a"}) + "\n")
    sandbox.arm()
    root = str(sandbox.proj)
    if entry == "aot":
        run = run_forked(lambda: aot.main(["--root", root, "--from-record", str(record)]), cwd=sandbox.cwd)
    else:
        out = str(sandbox.base / "dist")
        run = run_forked(lambda: package.main(["--root", root, "--arch", "sm_90a", "--out", out]), cwd=sandbox.cwd)
    assert run.code == 2, str(run)
    assert "generated/ is not what its MANIFEST vouches for, so nothing of it runs" in run.err, str(run)
    assert "run `k3gen check`" in run.err
    assert not sandbox.marker.exists() and not (sandbox.base / "dist").exists()
    assert sandbox.secret_token not in run.text


# ----------------------------------------------------------------------------------------------
# A wheel's prebuilt index and the C++ call path's library: vouched before use, never a raise


def test_a_malformed_prebuilt_index_makes_the_gates_false_never_raise(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from k3gen.runtime import module

    pkg = tmp_path / "k3kernels"
    (pkg / "prebuilt").mkdir(parents=True)
    (pkg / "prebuilt/index.json").write_text("[]")
    fam = module.FamilyModule("situ_and_mul", object, {}, {}, {"sm_90a": []}, str(pkg / "situ_and_mul.py"))
    monkeypatch.setattr(module, "device_arch", lambda device=None: "sm_90a")
    assert fam.supported_hardware() is False
    assert fam.available() is False


def test_the_call_path_library_is_loaded_only_when_its_record_vouches_for_it(tmp_path, monkeypatch, caplog):
    from k3gen.runtime import hostext

    lib = tmp_path / "_k3host.so"
    lib.write_bytes(b"the library")
    assert "no such file" in hostext.vouched(lib)
    (tmp_path / hostext.record_name(lib.name)).write_text(hostext.record_text(lib.name, b"the library"))
    assert hostext.vouched(lib) is None
    lib.write_bytes(b"the libr")  # truncated
    assert hostext.vouched(lib) == f"{lib} does not hash to its record (replaced or truncated)"
    lib.unlink()
    lib.symlink_to(tmp_path / "elsewhere.so")
    assert "a symbolic link" in hostext.vouched(lib)


def test_an_unvouched_call_path_library_is_rebuilt_or_refused(tmp_path, monkeypatch, caplog):
    torch = pytest.importorskip("torch")
    from k3gen.runtime import hostext

    monkeypatch.setenv("K3GEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(hostext, "PREBUILT", tmp_path / "prebuilt")
    monkeypatch.setattr(hostext, "_compiler_version", lambda command: "c++ 1.0")
    built = []

    def compile_to(torch, lib, command=None):
        built.append(lib)
        lib.parent.mkdir(parents=True, exist_ok=True)
        lib.write_bytes(b"fresh")
        (lib.parent / hostext.record_name(lib.name)).write_text(hostext.record_text(lib.name, b"fresh"))
        return lib

    monkeypatch.setattr(hostext, "compile_to", compile_to)
    prebuilt = tmp_path / "prebuilt" / hostext.prebuilt_name(torch)
    prebuilt.parent.mkdir()
    prebuilt.write_bytes(b"planted")  # no record: never loaded
    lib = hostext._build(torch)
    assert built == [lib] and lib != prebuilt and "not loading the prebuilt C++ call path" in caplog.text
    lib.write_bytes(b"fres")  # truncated in the cache: rebuilt
    assert hostext._build(torch) == lib and len(built) == 2 and "rebuilding the C++ call path" in caplog.text
    lib.write_bytes(b"fres")
    monkeypatch.setenv("K3GEN_NO_JIT", "1")  # and under K3GEN_NO_JIT=1: refused, one warning
    with pytest.raises(OSError, match="does not hash to its record"):
        hostext._build(torch)
    assert len(built) == 2


def test_a_cache_others_can_write_is_refused(tmp_path, monkeypatch):
    from k3gen.runtime.cache import trusted_cache
    from k3gen.runtime.errors import K3BuildError

    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    with pytest.raises(K3BuildError) as exc:
        trusted_cache(cache)
    assert str(exc.value) == (
        f"k3gen: the JIT cache {cache} is writable by other users (mode 777), who could replace the libraries it "
        f"loads; `chmod go-w {cache}`, or point K3GEN_CACHE_DIR at a folder only you can write"
    )
    cache.chmod(0o755)
    assert trusted_cache(cache) == cache
