"""Harness of the hostile-spec corpus (tests/test_spec_security.py).

- Sandbox: one throwaway copy of the project per case, beside the things a payload aims at: a
  sibling folder with a victim file, an empty working directory, and a folder outside the case
  (another temp dir) holding a secret file and the case's marker path. After a case, no file whose
  name holds MARKER may exist anywhere we can see, and every victim must be byte-for-byte unchanged.
- run_forked: k3gen's entry points run in a forked child of the test process (already warm: no
  import cost), with a hard time limit and an address-space limit. A hostile spec that makes the
  generator hang or eat memory then fails one case instead of hanging the suite or the machine.
- Importer: a long-lived Python process that has imported torch and pytest once; each request is
  served by a fresh fork of it, so `import k3kernels.<family>` and pytest collection of a copy's
  generated/tests run in a real separate process for ~0.2 s instead of ~3-6 s.
- Readers that tell code from text: identifiers of a Python module (ast) and the code of a C/C++
  file with its comments and string literals blanked out, so a test can assert that a payload is
  only ever data.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import os
import re
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
MARK = "MARKER"  # every file a payload tries to create has this in its name
ESCAPED = "K3_ESCAPED"  # ... or this (the issue's own spelling for a path that left the tree)
# An identifier every code-shaped payload uses; it must never be code in any generated file.
PWNED = "k3_pwned"


# --------------------------------------------------------------------------------------------------
# Spec text edits


def edit(text: str, old: str, new: str) -> str:
    """`text` with the one occurrence of `old` replaced; a harness error when `old` is not unique."""
    n = text.count(old)
    assert n == 1, f"harness: {old!r} occurs {n} times; pick a unique piece of the spec"
    return text.replace(old, new)


def line_of(text: str, needle: str) -> int:
    """1-based number of the one line of `text` that contains `needle`."""
    hits = [n for n, line in enumerate(text.split("\n"), 1) if needle in line]
    assert len(hits) == 1, f"harness: {needle!r} is on lines {hits}; the case must name one line"
    return hits[0]


def yq(value: str) -> str:
    """A YAML double-quoted scalar holding exactly `value`, any code point included (lone surrogates
    too: YAML's \\uXXXX escapes decode one code unit each, so astral characters need \\U)."""
    out = []
    for c in value:
        o = ord(c)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= o < 0x7F:
            out.append(c)
        elif o < 0x100:
            out.append(f"\\x{o:02x}")
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    return '"' + "".join(out) + '"'


# --------------------------------------------------------------------------------------------------
# Sandboxes


def _digest(path: Path) -> tuple:
    if path.is_symlink():
        return ("link", os.readlink(path))
    if path.is_file():
        return ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return ("dir" if path.is_dir() else "other",)


def tree_state(root: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Path -> what it is (file and sha256, link and target, dir), for everything under root."""
    out = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if skip is not None and d == skip:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = d / name
            if skip is not None and p == skip:
                continue
            out[p.relative_to(root).as_posix()] = _digest(p)
    return out


def markers_under(root: Path) -> list[Path]:
    if not root.exists():
        return []
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            if MARK in name or ESCAPED in name:
                found.append(Path(dirpath) / name)
    return found


class Sandbox:
    """One case's world. `proj` is the project copy k3gen runs on; everything else is bait."""

    def __init__(self, base: Path, outside: Path, case: str):
        self.base = base
        self.proj = base / "proj"
        self.sibling = base / "sibling"  # a sibling of the copy: `../sibling/...` from the root
        self.cwd = base / "cwd"  # the working directory of every run: relative payloads land here
        self.outside = outside  # another temp dir, shared by the module: absolute payloads aim here
        self.case = re.sub(r"[^A-Za-z0-9_.-]+", "_", case)[:80]
        self.sibling.mkdir(parents=True, exist_ok=True)
        self.cwd.mkdir(exist_ok=True)
        self.victim = self.sibling / "victim.txt"
        self.victim.write_text("the sibling's victim file: must survive every case\n")
        self.secret = outside / "secret.txt"
        self.secret_token = "K3-SECRET-4f1d2a9c"  # never in k3gen's output
        if not self.secret.exists():
            self.secret.write_text(f"{self.secret_token}\n")
        self._before_base = self._before_outside = None
        self.edits: dict[str, list[tuple[int, int]]] = {}  # spec file -> line ranges a case's edits wrote

    def edited(self, file: str, first: int, last: int) -> None:
        self.edits.setdefault(file, []).append((first, last))

    def arm(self) -> None:
        """Record what lies outside the copy; call once the case has laid out its bait."""
        self._before_base = tree_state(self.base, skip=self.proj)
        self._before_outside = tree_state(self.outside)

    @property
    def marker(self) -> Path:
        """The absolute path this case's payloads try to create (in the other temp dir)."""
        return self.outside / f"{self.case}.{MARK}"

    def subst(self, text: str) -> str:
        """Fill a payload's placeholders: @MARK@ (absolute marker path), @OUT@ (outside dir),
        @SIB@ (sibling dir), @ROOT@ (the copy's root)."""
        return (
            text.replace("@MARK@", str(self.marker))
            .replace("@OUT@", str(self.outside))
            .replace("@SIB@", str(self.sibling))
            .replace("@ROOT@", str(self.proj))
        )

    def spec(self, name: str) -> Path:
        return self.proj / "specs" / name

    def assert_untouched(self) -> None:
        """No marker anywhere in reach, and nothing outside the copy created, changed or removed."""
        assert self._before_base is not None, "harness: call arm() before running the case"
        found = markers_under(self.base) + markers_under(self.outside)
        for d in (self.base.parent, self.base.parent.parent, ROOT):  # the temp dir's parents, the real project
            found += [d / n for n in os.listdir(d) if MARK in n or ESCAPED in n]
        assert not found, f"a payload created files: {[str(f) for f in found]}"
        assert tree_state(self.base, skip=self.proj) == self._before_base, "files beside the copy changed"
        assert tree_state(self.outside) == self._before_outside, "files in the other temp dir changed"
        assert self.victim.read_text().startswith("the sibling's victim file")
        assert self.secret.read_text() == f"{self.secret_token}\n"


# --------------------------------------------------------------------------------------------------
# Running k3gen's entry points in a forked child


@dataclass
class Run:
    code: int | None  # exit status; None when the child was killed at its time limit
    out: str
    err: str
    wall: float  # seconds from fork to exit

    @property
    def text(self) -> str:
        return self.out + self.err

    def __str__(self) -> str:
        return (
            f"exit {self.code} after {self.wall:.2f}s\n--- stdout\n{self.out[-3000:]}\n--- stderr\n{self.err[-3000:]}"
        )


def _vm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def run_forked(fn, *, cwd: Path, limit_s: float = 10.0, extra_memory: int = 3 << 30) -> Run:
    """Run fn() in a forked child with stdout/stderr captured; its return value is the exit status.

    An uncaught exception prints its traceback and exits 1, as `python -m k3gen` would. The child
    gets limit_s seconds (then it and its process group are killed: code None) and extra_memory
    bytes of address space beyond what the test process already maps (a MemoryError shows as a
    traceback). stdout is strict UTF-8 and stderr backslashreplace, as in a real interpreter.
    """
    out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115 - closed once read, below
    limit_as = _vm_bytes() + extra_memory
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            os.setpgid(0, 0)
            os.dup2(out_f.fileno(), 1)
            os.dup2(err_f.fileno(), 2)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="strict")
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
            os.chdir(cwd)
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
            result = fn()
            code = result if isinstance(result, int) else 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:  # what an uncaught exception would do
            with contextlib.suppress(BaseException):
                traceback.print_exc()
            code = 1
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:  # e.g. a lone surrogate that strict stdout refuses
                    with contextlib.suppress(OSError):
                        os.write(2, b"\nTraceback: the output could not be written (UnicodeEncodeError)\n")
            os._exit(code if 0 <= code < 256 else 1)
    code = None
    deadline = start + limit_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.perf_counter() > deadline:
            _kill_group(pid)
            os.waitpid(pid, 0)
            break
        time.sleep(0.002)
    wall = time.perf_counter() - start
    _kill_group(pid)  # stray grandchildren (git, ninja) go with it
    outs = []
    for f in (out_f, err_f):
        f.seek(0)
        outs.append(f.read().decode("utf-8", "backslashreplace"))
        f.close()
    return Run(code, outs[0], outs[1], wall)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def k3gen(sb: Sandbox, *args: str, cwd: Path | None = None, limit_s: float = 10.0) -> Run:
    """`k3gen --root <copy> ARGS` (k3gen.cli.main) in a forked child; cwd: the sandbox's empty cwd."""
    from k3gen.cli import main

    return run_forked(lambda: main(["--root", str(sb.proj), *args]), cwd=cwd or sb.cwd, limit_s=limit_s)


# --------------------------------------------------------------------------------------------------
# Import and pytest collection in a separate process


_SERVER = r"""
import json, os, sys, time, io, traceback, signal
root = sys.argv[1]
sys.path[:] = [root] + [p for p in sys.path if p not in ("", ".") and not p.rstrip("/").endswith("/generated")]
import torch, pytest  # the expensive imports, once
try:  # pytest would import (and assertion-rewrite) the hypothesis plugin's package on every collection
    import hypothesis, hypothesis.strategies, _hypothesis_pytestplugin  # noqa: F401
except ImportError:
    pass
import k3gen.runtime  # noqa: F401  (k3gen itself comes from the real project, as in `pip install -e .`)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            out = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1); os.dup2(out, 2)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
            sys.stderr = sys.stdout
            proj = req["proj"]
            os.chdir(proj)
            gen = os.path.join(proj, "generated")
            if req["op"] == "import":
                sys.path.insert(0, gen)
                import importlib
                importlib.import_module("k3kernels." + req["family"])
                code = 0
            else:  # `python -m pytest --collect-only -q generated/tests` with PYTHONPATH=generated
                sys.path[:0] = [proj, gen]
                code = int(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "generated/tests"]))
            k3 = sys.modules.get("k3kernels")
            if k3 is not None and not os.path.realpath(k3.__file__).startswith(os.path.realpath(gen) + os.sep):
                print(f"harness: k3kernels was imported from {k3.__file__}, not from {gen}")
                code = 97
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
            except BaseException:
                pass
            os._exit(code)
    deadline = start + req["limit_s"]
    code = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.perf_counter() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    print(json.dumps({"code": code, "wall": time.perf_counter() - start}), flush=True)
"""


class Importer:
    """A warm Python process that forks one child per request: import a family, or collect tests."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(ROOT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=workdir,
            env=env,
            text=True,
        )
        assert json.loads(self._read(120)) == {"ready": True}
        self.n = 0

    def _read(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "harness: the import server did not answer"
        line = self.proc.stdout.readline()
        assert line, "harness: the import server died"
        return line

    def _ask(self, op: str, proj: Path, family: str = "", limit_s: float = 10.0) -> Run:
        self.n += 1
        log = self.workdir / f"request-{self.n}.log"
        self.proc.stdin.write(
            json.dumps({"op": op, "proj": str(proj), "family": family, "log": str(log), "limit_s": limit_s}) + "\n"
        )
        self.proc.stdin.flush()
        reply = json.loads(self._read(limit_s + 30))
        text = log.read_text(errors="backslashreplace") if log.exists() else ""
        return Run(reply["code"], text, "", reply["wall"])

    def import_family(self, proj: Path, family: str) -> Run:
        """`import k3kernels.<family>` with proj/generated first on sys.path, cwd = proj."""
        return self._ask("import", proj, family)

    def collect(self, proj: Path) -> Run:
        """`python -m pytest --collect-only -q generated/tests` in proj (PYTHONPATH=generated)."""
        return self._ask("collect", proj)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def collect_in_subprocess(proj: Path, limit_s: float = 60.0) -> Run:
    """The real thing, no fork server: a fresh `python -m pytest --collect-only` (about 5 s)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([str(proj / "generated"), str(ROOT)]), PYTHONDONTWRITEBYTECODE="1")
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "generated/tests"],
            cwd=proj,
            env=env,
            capture_output=True,
            text=True,
            timeout=limit_s,
            errors="backslashreplace",
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = None, str(exc.stdout or ""), str(exc.stderr or "")
    return Run(code, out, err, time.perf_counter() - start)


# --------------------------------------------------------------------------------------------------
# Code versus text in generated files


def py_identifiers(tree: ast.AST) -> set[str]:
    """Every name the module's code uses or binds (not the contents of its strings)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.update(filter(None, [*node.name.split("."), node.asname]))
        elif (isinstance(node, ast.keyword) and node.arg) or isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def py_strings(tree: ast.AST) -> list[str]:
    """Every str constant of the module (docstrings included)."""
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def docstrings(tree: ast.Module) -> list[str]:
    """The module's docstring and those of its top-level functions and classes."""
    nodes = [tree, *(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)))]
    return [d for d in (ast.get_docstring(n, clean=False) for n in nodes) if d is not None]


class CppLexError(ValueError):
    pass


_RAW = re.compile(r'R"([^()\\ \t\n]{0,16})\(')


def cpp_lex(text: str) -> tuple[str, list[str]]:
    """(`text` with every comment and string/char literal blanked, the bodies of its "..." literals
    as written). What remains of the first is code and preprocessor lines. Raises CppLexError on an
    unterminated literal or comment (a payload that closed one early usually leaves one open)."""
    out, literals, i, n = [], [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = i
            while True:  # a line comment ends at a newline not preceded by a backslash
                j = text.find("\n", j)
                if j == -1:
                    j = n
                    break
                if text[j - 1] != "\\":
                    break
                j += 1
            out.append(" ")
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j == -1:
                raise CppLexError(f"unterminated /* comment at offset {i}")
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j + 2
        elif (m := _RAW.match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = ")" + m.group(1) + '"'
            j = text.find(end, m.end())
            if j == -1:
                raise CppLexError(f"unterminated raw string at offset {i}")
            literals.append(text[m.end() : j])
            out.append('""')
            i = j + len(end)
        elif c in "\"'":
            j = i + 1
            while True:
                if j >= n or text[j] == "\n":
                    raise CppLexError(f"unterminated {c} literal at offset {i}: {text[i : i + 60]!r}")
                if text[j] == "\\":
                    j += 2
                    continue
                if text[j] == c:
                    break
                j += 1
            if c == '"':
                literals.append(text[i + 1 : j])
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out), literals


def cpp_code(text: str) -> str:
    return cpp_lex(text)[0]


def cpp_string_literals(text: str) -> list[str]:
    return cpp_lex(text)[1]


def generated_files(proj: Path) -> dict[str, str]:
    gen = proj / "generated"
    return {
        p.relative_to(gen).as_posix(): p.read_text(errors="surrogateescape")
        for p in sorted(gen.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


CPP_SUFFIXES = (".cu", ".hip", ".h", ".cuh")


def assert_payload_is_data(proj: Path, forbidden: tuple[str, ...] = (PWNED, "__import__")) -> dict:
    """Every generated Python file compiles and uses none of `forbidden` as a name; every C/C++ file
    lexes (no literal or comment left open) and has none of them outside comments and strings.
    Returns {path: ast.Module} of the Python files."""
    trees = {}
    for rel, text in generated_files(proj).items():
        if rel.endswith(".py"):
            compile(text, rel, "exec")  # SyntaxError: the payload broke out of its literal
            tree = ast.parse(text)
            bad = py_identifiers(tree) & set(forbidden)
            assert not bad, f"generated/{rel}: the payload became code: {sorted(bad)}"
            trees[rel] = tree
        elif rel.endswith(CPP_SUFFIXES):
            try:
                code = cpp_code(text)
            except CppLexError as exc:
                raise AssertionError(f"generated/{rel}: {exc}") from None
            for word in forbidden:
                assert word not in code, f"generated/{rel}: {word!r} is C++ code, not text"
    return trees
