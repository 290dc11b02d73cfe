"""`k3gen package --hub DIR`: the wheel's files laid out as a Kernel Hub repository.

The `kernels` library (huggingface/kernels) loads `DIR/build/<variant>/` for the variant that fits
the machine, reading `metadata.json` there and importing `<variant>/k3kernels/__init__.py` under
the metadata's id (kernels/_internals/resolver.py resolve_local_kernel, importer.py
_import_from_path_uncached, installed kernels 0.19). What this writes:

    DIR/README.md                        what the package serves, and the two lines that load it
    DIR/build/<variant>/metadata.json    name, id, version, license, backend (type, archs), digest
    DIR/build/<variant>/k3kernels/       the wheel's k3kernels/ (wrappers, sources, prebuilt libraries);
                                         its __init__.py first puts the runtime beside it on sys.path
    DIR/build/<variant>/_k3gen/k3gen/    the runtime and the integrations the wrappers import

One variant: `torch-stable-abi<XY>-cu<XY>-<cpu>-linux`, kernel-builder's name for a torch
stable-ABI build (nix-builder/lib/variants/torch.nix): the C++ call path is on torch's stable ABI
(k3gen.runtime.hostabi.OLDEST, so any newer torch loads it) and the kernels are plain C-ABI
libraries built with this nvcc, whose CUDA version the name carries (the loader takes a CUDA 13.x
torch for cu130, kernels/_internals/variants.py _backend_mismatch). The digest is the loader's own
(kernels-data/src/digest.rs): base64 sha256 of every file but metadata.json, by relative path, so
`kernels` verifies the files on every local load. Same inputs, same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import platform
import re
import shutil
from pathlib import Path

from k3gen.runtime.files import write_if_changed

NAME = "k3kernels"
RUNTIME_DIR = "_k3gen"
# Runs before the generated __init__: the loader imports this package under its build id, and the
# wrappers import `k3gen.runtime`, which ships in _k3gen/ beside it.
PROLOGUE = """\
# k3gen package --hub: the Kernel Hub loads this package under its build id; the wrappers import
# k3gen.runtime, which ships beside it in {runtime}/ (used unless another k3gen is importable).
import sys as _sys
from importlib.util import find_spec as _find_spec
from pathlib import Path as _Path

if _find_spec("k3gen") is None:
    _sys.path.append(str(_Path(__file__).resolve().parents[1] / "{runtime}"))
import k3gen as _k3gen

if _k3gen.__version__ != "{version}":
    raise ImportError(
        f"this k3kernels Hub build needs k3gen {version}, but k3gen {{_k3gen.__version__}} is imported from "
        f"{{_k3gen.__file__}}; uninstall it or use the matching k3kernels wheel"
    )
"""


class HubUsageError(ValueError):
    """A hub layout `k3gen package --hub` cannot write (said before anything compiles: exit 2)."""


def cuda_version(nvcc_version_text: str) -> tuple[int, int]:
    """(major, minor) of `nvcc --version`'s "release X.Y"."""
    m = re.search(r"release (\d+)\.(\d+)", nvcc_version_text)
    if m is None:
        raise HubUsageError(f"cannot read the CUDA release from nvcc --version: {nvcc_version_text[:200]!r}")
    return int(m.group(1)), int(m.group(2))


def variant_name(stable_abi: tuple[int, int], cuda: tuple[int, int], machine: str | None = None) -> str:
    """kernel-builder's stable-ABI variant name (legacy form, which every `kernels` release reads)."""
    return f"torch-stable-abi{stable_abi[0]}{stable_abi[1]}-cu{cuda[0]}{cuda[1]}-{machine or platform.machine()}-linux"


def capability(arch: str) -> str:
    """sm_90a -> 9.0a: the CUDA arch as the loader's metadata spells it (kernels/_internals/archs.py)."""
    m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
    if m is None:
        raise HubUsageError(f"{arch} is not a CUDA arch")
    return f"{m.group(1)}.{m.group(2)}{m.group(3)}"


def hub_files(wheel: dict[str, bytes], version: str) -> dict[str, bytes]:
    """The variant's files: the wheel's k3kernels/ as is (its __init__ after the prologue), k3gen/ in _k3gen/."""
    files = {}
    for path, data in wheel.items():
        if path.startswith("k3gen/"):
            files[f"{RUNTIME_DIR}/{path}"] = data
        elif path == f"{NAME}/__init__.py":
            files[path] = PROLOGUE.format(runtime=RUNTIME_DIR, version=version).encode() + b"\n" + data
        else:
            files[path] = data
    return files


def digest(files: dict[str, bytes]) -> dict:
    return {
        "algorithm": "sha256",
        "files": {p: base64.b64encode(hashlib.sha256(d).digest()).decode() for p, d in sorted(files.items())},
    }


def metadata(files: dict[str, bytes], archs: list[str], license: str) -> dict:
    d = digest(files)
    build_id = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "name": NAME,
        "id": f"_{NAME}_{build_id}",
        "version": 1,
        "license": license,
        "python-depends": [],
        "backend": {"type": "cuda", "archs": [capability(a) for a in archs]},
        "digest": d,
    }


def readme(variant: str, built: dict[str, list[str]], repo_hint: str = "<org>/k3kernels") -> str:
    rows = "\n".join(f"| {f} | {', '.join(a)} |" for f, a in sorted(built.items()))
    return f"""# k3kernels

MoE routing, activation and fp8 group-quantization kernels generated by k3gen, prebuilt for CUDA
(variant `{variant}`). Every other family of the package ships its wrapper and sources: it compiles
on first use where nvcc is installed.

| family | archs |
|---|---|
{rows}

```python
from kernels import get_kernel
k3 = get_kernel("{repo_hint}", version=1)  # or kernels.get_local_kernel(Path("this/folder"))
```
"""


def write_hub(
    out: Path, wheel: dict[str, bytes], built: dict[str, list[str]], version: str, nvcc_text: str, stable_abi
) -> Path:
    """DIR/build/<variant>/ and DIR/README.md; a variant folder from an earlier build is replaced whole
    (the digest must list exactly what is there). Returns the variant folder."""
    variant = variant_name(stable_abi, cuda_version(nvcc_text))
    files = hub_files(wheel, version)
    archs = sorted({a for a in built.values() for a in a})
    meta = metadata(files, archs, "NOASSERTION")
    root = out / "build" / variant
    if root.exists():
        shutil.rmtree(root)
    for rel, data in files.items():
        write_if_changed(root / rel, data)
    write_if_changed(root / "metadata.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
    write_if_changed(out / "README.md", readme(variant, built).encode())
    return root
