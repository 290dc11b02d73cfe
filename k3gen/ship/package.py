"""`k3gen package`: a wheel of k3kernels that serves without a compiler.

What the wheel holds (and nothing of the generator: no pydantic, jinja2 or specs):

    k3kernels/*.py                         the generated wrappers, as in generated/
    k3kernels/csrc/                        the generated sources: the runtime hashes them into the
                                           content key that each prebuilt record must match
    k3kernels/prebuilt/<family>/<arch>/    lib.so and its record, from `k3gen compile`
    k3kernels/prebuilt/index.json          {"families": {family: [arch, ...]}}: the archs this wheel
                                           serves; on any other GPU supported_hardware() is False and
                                           build() names the GPU's arch and these
    k3gen/__init__.py, k3gen/runtime/      what the wrappers import (torch and the standard library)
    k3gen/runtime/prebuilt/                the C++ call path and its record: on torch's stable ABI, so one
                                           library serves torch >= 2.10 and CPython >= 3.10 (prebuilt_host)

The zip is written here, not by setuptools, so that the same tree and libraries give the same bytes:
entries sorted, every timestamp $SOURCE_DATE_EPOCH (default 1980-01-01), fixed permissions.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

from k3gen.runtime.files import read_bytes, write_if_changed
from k3gen.runtime.jobs import jobs_argument

NAME = "k3kernels"
MAX_LIBRARY_BYTES = 1 << 31  # one prebuilt library the wheel carries


class PackageUsageError(ValueError):
    """A flag or environment value `k3gen package` cannot use; said before anything compiles (exit 2)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--arch",
        action="extend",
        nargs="+",
        default=[],
        metavar="ARCH",
        help="archs, comma-separated or repeated (default: every CUDA arch the specs declare)",
    )
    p.add_argument(
        "--family",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME",
        help="prebuild only these families (default: all); the others' wrappers ship unbuilt",
    )
    p.add_argument("-j", "--jobs", type=jobs_argument, help="parallel compiles (as `k3gen compile`)")
    p.add_argument(
        "--aot",
        type=Path,
        help="the `k3gen compile` output to build into and take the libraries from (default: <project>/build/aot)",
    )
    p.add_argument("--out", type=Path, help="where the wheel is written (default: <project>/dist)")
    p.add_argument(
        "--hub",
        type=Path,
        metavar="DIR",
        help="write a Kernel Hub repository (DIR/build/<variant>/, what `kernels.get_kernel` loads) instead of a wheel",
    )


def _epoch() -> tuple[int, ...]:
    """$SOURCE_DATE_EPOCH as the zip's timestamp (at least 1980, where zip starts); PackageUsageError
    for a value that is not whole seconds since 1970 before 10000 AD."""
    text = os.environ.get("SOURCE_DATE_EPOCH", "315532800").strip()
    if not text.isdigit() or len(text) > 12:
        raise PackageUsageError(
            f"SOURCE_DATE_EPOCH={ascii(text)[1:-1][:40]} is not whole seconds since 1970 (e.g. "
            "SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)); fix or unset it"
        )
    return time.gmtime(max(int(text), 315532800))[:6]


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_files(root: Path, aot: Path, built: dict[str, list[str]], host: Path | None = None) -> dict[str, bytes]:
    """{path in the wheel: bytes}: wrappers, sources, the prebuilt libraries of `built`, the runtime
    and, when `host` is given, the C++ call path prebuilt here (prebuilt_host)."""
    from k3gen.runtime import artifact
    from k3gen.runtime.cache import PREBUILT, PREBUILT_INDEX
    from k3gen.ship.tree import manifest_entries

    files: dict[str, bytes] = {}
    generated = root / "generated"
    for rel in sorted(manifest_entries(generated)):  # what MANIFEST vouches for (aot.wrappers checked it)
        if rel.startswith(f"{NAME}/"):
            files[rel] = read_bytes(generated / rel, generated, MAX_LIBRARY_BYTES, f"generated/{rel}")
    for family, archs in built.items():
        for arch in archs:
            for name in (artifact.LIB, artifact.RECORD):
                files[f"{NAME}/{PREBUILT}/{family}/{arch}/{name}"] = read_bytes(
                    aot / family / arch / name, aot, MAX_LIBRARY_BYTES
                )
    index = {"families": {f: sorted(a) for f, a in sorted(built.items())}}
    files[f"{NAME}/{PREBUILT}/{PREBUILT_INDEX}"] = (json.dumps(index, indent=1, sort_keys=True) + "\n").encode()
    k3gen = Path(__file__).parents[1]  # the k3gen package (this file is k3gen/ship/package.py)
    files["k3gen/__init__.py"] = (k3gen / "__init__.py").read_bytes()
    for sub in ("runtime", "integrations"):  # integrations: use_k3gen_routing and the engines' hooks
        for f in sorted((k3gen / sub).glob("*.py")):
            files[f"k3gen/{sub}/{f.name}"] = f.read_bytes()
    csrc = k3gen / "runtime" / "csrc"
    for f in sorted([*csrc.glob("*.cpp"), *csrc.glob("*.h")]):  # the C++ call path, built where it runs
        files[f"k3gen/runtime/csrc/{f.name}"] = f.read_bytes()
    if host is not None:  # the library and the record that vouches for it (k3gen.runtime.hostext)
        import platform

        import torch

        from k3gen.runtime import hostext

        data = read_bytes(host, host.parent, MAX_LIBRARY_BYTES)
        files[f"k3gen/runtime/prebuilt/{host.name}"] = data
        built_with = {"torch": str(torch.__version__), "python": platform.python_version()}
        files[f"k3gen/runtime/prebuilt/{hostext.record_name(host.name)}"] = hostext.record_text(
            host.name, data, built_with=built_with
        ).encode()
    return files


def prebuilt_host(aot: Path) -> tuple[Path | None, str]:
    """The C++ call path (k3gen.runtime.hostext) the wheel carries, so a serving machine needs no
    compiler for it, and what it serves; or None and why not. With torch >= 2.10 here, the stable-ABI
    build: any torch >= 2.10 and CPython >= 3.10 there (a CPU-only torch here builds it too).
    Otherwise the per-torch build, as before: only this torch and Python there."""
    try:
        import torch

        from k3gen.runtime import hostabi, hostext
    except ImportError:
        return None, "torch is not installed here"
    try:
        if hostabi.unsupported(torch) is None:
            lib = hostext.compile_to(torch, aot / "_host" / hostabi.prebuilt_name(torch), hostabi.command)
            oldest = ".".join(map(str, hostabi.OLDEST))
            return lib, f"stable ABI, built with torch {torch.__version__}: serves torch >= {oldest}, CPython >= 3.10"
        if not (torch.version.cuda or torch.version.hip):
            return None, f"torch {torch.__version__} here has no CUDA"
        lib = hostext.compile_to(torch, aot / "_host" / hostext.prebuilt_name(torch))
    except OSError as exc:
        return None, str(exc).splitlines()[0]
    return lib, f"prebuilt for torch {torch.__version__}, {sysconfig.get_config_var('SOABI')} only"


def write_wheel(files: dict[str, bytes], out: Path, version: str, archs: list[str]) -> Path:
    """The wheel of `files`, byte for byte the same for the same inputs."""
    tag = f"py3-none-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"
    local = ".".join(a.replace("_", "") for a in archs)
    full = f"{version}+{local}" if local else version
    dist = f"{NAME}-{full}.dist-info"
    meta = {
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {full}\n"
            f"Summary: k3gen kernels, prebuilt for {', '.join(archs) or 'no arch'}\n"
            "Requires-Python: >=3.10\nRequires-Dist: torch>=2.4\n"
        ),
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: k3gen {version}\nRoot-Is-Purelib: false\nTag: {tag}\n",
        f"{dist}/top_level.txt": f"k3gen\n{NAME}\n",
    }
    entries = {**dict(sorted(files.items())), **{k: v.encode() for k, v in meta.items()}}
    record = "".join(f"{p},{_digest(d)},{len(d)}\n" for p, d in entries.items()) + f"{dist}/RECORD,,\n"
    entries[f"{dist}/RECORD"] = record.encode()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{NAME}-{full}-{tag}.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=_epoch())
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data, compresslevel=9)
    write_if_changed(path, buf.getvalue(), atomic=True)
    return path


def sizes(path: Path) -> dict[str, tuple[int, int]]:
    """{arch: (library bytes, bytes in the wheel)}, and "common" for everything else."""
    out: dict[str, list[int]] = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            arch = parts[3] if len(parts) == 5 and parts[1] == "prebuilt" else "common"
            acc = out.setdefault(arch, [0, 0])
            acc[0] += info.file_size
            acc[1] += info.compress_size
    return {a: (v[0], v[1]) for a, v in out.items()}


def package_tree(
    root: Path,
    archs: list[str],
    families: list[str],
    jobs: int | None,
    aot: Path | None,
    out: Path | None,
    hub: Path | None = None,
) -> int:
    """Compile what the wheel carries (incrementally, into the AOT directory), then write the wheel.
    Every CUDA arch of the chosen families by default; an arch or family they lack is exit 2."""
    from k3gen import __version__
    from k3gen.runtime.errors import K3BuildError
    from k3gen.runtime.jobs import env_jobs
    from k3gen.runtime.toolchain import backend_of, find_compiler, launcher
    from k3gen.ship.aot import Target, UnvouchedTree, compile_targets, wrappers

    out = (out or root / "dist").resolve()
    try:  # everything a flag or the environment says, before anything compiles
        _epoch()
        env_jobs()
        if out.exists() and not out.is_dir():
            raise PackageUsageError(f"--out {out} is a file; the wheel goes into a folder (it is created if missing)")
        launcher()
        modules = wrappers(root)
    except (PackageUsageError, UnvouchedTree) as exc:
        print(f"k3gen package: {exc}", file=sys.stderr)
        return 2
    except K3BuildError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if unknown := [f for f in families if f not in modules]:
        print(f"k3gen package: unknown family {', '.join(unknown)}; families: {', '.join(modules)}", file=sys.stderr)
        return 2
    chosen = {f: modules[f] for f in families} if families else modules
    declared = {a for m in chosen.values() for a in m.arch_defines}
    if bad := [a for a in archs if a not in declared or backend_of(a) != "cuda"]:
        print(
            f"k3gen package: {', '.join(bad)}: not a CUDA arch of {', '.join(chosen)} (the wheel carries CUDA "
            f"libraries); declared: {', '.join(sorted(a for a in declared if backend_of(a) == 'cuda'))}",
            file=sys.stderr,
        )
        return 2
    built = {
        f: [a for a in m.arch_defines if backend_of(a) == "cuda" and (not archs or a in archs)]
        for f, m in chosen.items()
    }
    built = {f: a for f, a in built.items() if a}
    try:
        targets = []
        for f, family_archs in built.items():
            for arch in family_archs:
                req = chosen[f].request(arch)
                targets.append(Target(req, find_compiler(req.backend), req.content_key()))
    except K3BuildError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    aot = (aot or root / "build" / "aot").resolve()
    if rc := compile_targets(targets, aot, jobs, None):
        print("k3gen package: no wheel: the compile failed", file=sys.stderr)
        return rc
    all_archs = sorted({a for a in built.values() for a in a})
    host, host_note = prebuilt_host(aot)
    if hub is not None:
        return _write_hub(root, aot, built, host, host_note, hub.resolve())
    path = write_wheel(wheel_files(root, aot, built, host), out, __version__, all_archs)
    print(
        f"k3gen package: {path} ({path.stat().st_size / 2**20:.2f} MiB; {len(built)} families prebuilt for "
        f"{', '.join(all_archs)})"
    )
    for arch, (raw, packed) in sorted(sizes(path).items()):
        what = (
            "wrappers, sources, runtime" if arch == "common" else f"{sum(arch in a for a in built.values())} libraries"
        )
        print(f"  {arch:8} {raw / 2**20:7.2f} MiB ({what}), {packed / 2**20:6.2f} MiB compressed")
    print(
        f"  C++ call path: {host_note}"
        + ("" if host else "; the wheel serves cached calls from Python there unless a C++ compiler can build it")
    )
    print(
        f"Install on a serving machine (torch installed, no compiler): pip install --no-deps {path.name}; "
        "then K3GEN_NO_JIT=1 makes any miss an error instead of a build"
    )
    return 0


def _write_hub(root: Path, aot: Path, built: dict, host: Path | None, host_note: str, hub: Path) -> int:
    """The Kernel Hub layout of the same files (k3gen.ship.hub); it needs the stable-ABI call path,
    which is what lets one variant serve every torch from hostabi.OLDEST on."""
    from k3gen import __version__
    from k3gen.runtime import hostabi
    from k3gen.runtime.toolchain import compiler_version, find_compiler
    from k3gen.ship.hub import HubUsageError, write_hub

    if host is None or not host_note.startswith("stable ABI"):
        print(f"k3gen package --hub: the variant needs the stable-ABI call path; here: {host_note}", file=sys.stderr)
        return 2
    try:
        nvcc = compiler_version(str(find_compiler("cuda")))
        variant = write_hub(hub, wheel_files(root, aot, built, host), built, __version__, nvcc, hostabi.OLDEST)
    except HubUsageError as exc:
        print(f"k3gen package --hub: {exc}", file=sys.stderr)
        return 2
    archs = sorted({a for a in built.values() for a in a})
    print(f"k3gen package: {variant} ({len(built)} families prebuilt for {', '.join(archs)}; call path: {host_note})")
    print(
        f"Load it: kernels.get_local_kernel(Path({str(hub)!r})) here, or upload {hub} as a Hub kernel repo and "
        "kernels.get_kernel('<org>/k3kernels', version=1)"
    )
    return 0


def _split(values: list[str]) -> list[str]:
    return list(dict.fromkeys(v for item in values for v in item.split(",") if v))


def package(root: Path, args) -> int:
    return package_tree(root, _split(args.arch), _split(args.family), args.jobs, args.aot, args.out, args.hub)


def main(argv: list[str] | None = None) -> int:
    """`python -m k3gen.ship.package`: the same wheel from generated/ alone, on a machine without the
    generator's dependencies (a build farm with nvcc and torch)."""
    p = argparse.ArgumentParser(prog="python -m k3gen.ship.package", description=main.__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path.cwd(), help="the project (default: here)")
    add_arguments(p)
    args = p.parse_args(argv)
    return package(args.root.resolve(), args)


if __name__ == "__main__":
    sys.exit(main())
