"""A built library and the record that says what it is: the one format the JIT cache and AOT share.

A directory holds `lib.so` and `k3gen-build.json`. The record names the family, the arch, the cache
key (and the content key it was derived from) and the library's sha256. A library is trusted only
through its record: a missing or unreadable record, another family or arch, another key, or a
library whose bytes no longer hash to the record's sha256 all mean "not this artifact".
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .files import read_bytes, write_if_changed

LIB = "lib.so"
RECORD = "k3gen-build.json"
FORMAT = 1
MAX_RECORD_BYTES = 1 << 16
MAX_LIB_BYTES = 1 << 32


def full_key(content_key: str, compiler_version: str) -> str:
    """The cache key: the content key (sources, headers, flags, arch) bound to one compiler build."""
    return hashlib.sha256(f"{content_key}\0{compiler_version}".encode()).hexdigest()


def jit_entry_name(content_key: str, key: str) -> str:
    """The JIT cache folder of a library: its content key first (what `k3gen list` shows), then the
    cache key, which binds the compiler, so two compilers never share a folder."""
    return f"{content_key[:32]}-{key[:16]}"


def make_record(
    family: str,
    arch: str,
    content_key: str,
    compiler: str,
    compiler_version: str,
    lib: Path,
    built_by: str,
    variant: str | None = None,
) -> dict:
    """The record of a family's library, or of one variant's (`variant`: its unit alone)."""
    record = {
        "format": FORMAT,
        "family": family,
        "arch": arch,
        "key": full_key(content_key, compiler_version),
        "content_key": content_key,
        "compiler": compiler,
        "compiler_version": compiler_version,
        "lib": LIB,
        "lib_sha256": hashlib.sha256(lib.read_bytes()).hexdigest(),
        "built_by": built_by,
    }
    return {**record, "variant": variant} if variant else record


def write_record(entry: Path, record: dict) -> bool:
    """Write the record atomically (a reader sees the old one or the new one); False if unchanged."""
    return write_if_changed(entry / RECORD, json.dumps(record, indent=1, sort_keys=True) + "\n", atomic=True)


def check(
    entry: Path, family: str, arch: str, *, key: str | None = None, content_key: str | None = None
) -> tuple[dict | None, str]:
    """(record, "") if entry holds the artifact asked for, else (None, why not).

    With `key`, the record's key must equal it. Without one (no compiler here to compute it), the
    content key must match and the record's key must be the content key bound to the compiler the
    record names: the sources, flags and arch are the ones asked for, built by that compiler.
    """
    if not (entry / RECORD).exists() and not (entry / RECORD).is_symlink():
        return None, f"no record {entry / RECORD}"
    try:  # the one reader: a plain file in its entry, bounded (never a link, a FIFO or /dev/zero)
        record = json.loads(read_bytes(entry / RECORD, entry, MAX_RECORD_BYTES))
    except (OSError, ValueError) as exc:
        return None, f"unreadable record {entry / RECORD} ({exc})"
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return None, f"record {entry / RECORD} is not format {FORMAT}"
    if record.get("family") != family or record.get("arch") != arch:
        return None, (
            f"record {entry / RECORD} is for {record.get('family')} {record.get('arch')}, not {family} {arch}"
        )
    if key is not None and record.get("key") != key:
        return (
            None,
            f"stale: {entry} was built with key {str(record.get('key'))[:16]} (other sources, flags or compiler)",
        )
    if key is None and (
        record.get("content_key") != content_key
        or record.get("key") != full_key(str(content_key), str(record.get("compiler_version")))
    ):
        return None, f"stale: {entry} was built from other sources or flags"
    try:
        lib = read_bytes(entry / LIB, entry, MAX_LIB_BYTES)
    except OSError as exc:
        return None, f"no library {entry / LIB} ({exc})"
    if hashlib.sha256(lib).hexdigest() != record.get("lib_sha256"):
        return None, f"corrupted: {entry / LIB} does not hash to its record's lib_sha256"
    return record, ""
