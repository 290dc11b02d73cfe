"""The file primitives everything shares: the one reader, write only changed bytes, and a lock.

`read_bytes`/`read_text` are the one door for every file k3gen reads from the project or from a
location the environment names (specs, tuning tables, the cost table, records, indexes, MANIFEST):
a regular file reached without a link below its root, at most `limit` bytes, UTF-8 where it is
text; anything else is `Refused`, with the file and why, never a hang (a FIFO), all memory (a link
to /dev/zero) or a traceback.

Generated sources (k3gen.write), build.ninja (JIT and `k3gen compile`), build records and the
compile-cost tables all go through `write_if_changed`, so an unchanged file keeps its mtime and ninja
rebuilds nothing; `locked` serializes builds of one cache entry and runs of `k3gen compile` into one
directory, across threads and processes. Standard library only: the runtime imports it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path


class Refused(Exception):
    """A file k3gen does not read: `path` as the caller names it, `reason` in words, `line` (1-based)
    where the problem is (a byte that is not UTF-8), else 1."""

    def __init__(self, path: str, reason: str, line: int = 1):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason, self.line = path, reason, line


def _below(path: Path, root: Path) -> list[Path]:
    """The components from root (exclusive) down to path (inclusive), or raise ValueError."""
    rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(root))
    parts, here = [], Path(os.path.normpath(root))
    for name in rel.parts:
        here = here / name
        parts.append(here)
    return parts


def read_bytes(path: Path, root: Path, limit: int, shown: str | None = None) -> bytes:
    """The bytes of a regular file inside `root`, reached without a symbolic link below `root`, at
    most `limit` of them; else Refused naming `shown` (default: the path)."""
    shown = shown or str(path)
    try:
        below = _below(Path(path), Path(root))
    except ValueError:
        raise Refused(shown, f"outside {root}; k3gen reads only files inside it") from None
    for part in below:
        try:
            if stat.S_ISLNK(os.lstat(part).st_mode):
                raise Refused(shown, "a symbolic link; k3gen reads plain files only")
        except FileNotFoundError:
            raise Refused(shown, "no such file") from None
        except OSError as exc:
            raise Refused(shown, f"cannot be read ({exc.strerror})") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(shown, "a symbolic link; k3gen reads plain files only") from None
        raise Refused(shown, f"cannot be read ({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise Refused(shown, f"{'a folder' if stat.S_ISDIR(mode) else 'a device, pipe or socket'}, not a regular file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Refused(shown, f"larger than {limit} bytes, the most k3gen reads of such a file")
    return data


def read_text(path: Path, root: Path, limit: int, shown: str | None = None) -> str:
    """read_bytes, decoded as UTF-8; a byte that is not is Refused at its line."""
    data = read_bytes(path, root, limit, shown)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise Refused(
            shown or str(path), f"byte 0x{data[exc.start]:02x} is not UTF-8; save it as UTF-8 text", line
        ) from None


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
