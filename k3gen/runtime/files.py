"""The two file primitives everything that writes shares: write only changed bytes, and a lock.

Generated sources (k3gen.write), build.ninja (JIT and `k3gen compile`), build records and the
compile-cost tables all go through `write_if_changed`, so an unchanged file keeps its mtime and ninja
rebuilds nothing; `locked` serializes builds of one cache entry and runs of `k3gen compile` into one
directory, across threads and processes. Standard library only: the runtime imports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


def write_if_changed(path: Path, data: str | bytes, *, atomic: bool = False) -> bool:
    """Write `data` unless the file already holds exactly these bytes; True when it wrote.

    atomic: write a temporary file beside it and rename, so a reader sees the old bytes or the new,
    never half of either (build records that another process may be checking).
    """
    data = data.encode() if isinstance(data, str) else data
    try:
        if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    if not atomic:
        path.write_bytes(data)
        return True
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


@contextlib.contextmanager
def locked(path: Path):
    """Hold an exclusive advisory lock on `path` (created if missing) for the block."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
