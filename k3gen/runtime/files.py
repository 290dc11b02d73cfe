"""The file primitives everything shares: the one reader, write only changed bytes, and a lock.

`read_bytes`/`read_text` are the one door for every file k3gen reads from the project or from a
location the environment names (specs, tuning tables, the cost table, records, indexes, MANIFEST):
a regular file reached without a link below its root, at most `limit` bytes, UTF-8 where it is
text; anything else is `Refused`, with the file and why, never a hang (a FIFO), all memory (a link
to /dev/zero) or a traceback. `write_inside` is the one writer of files that are not build outputs
(a scaffold, a record line): inside its root, never through a link.

Generated sources (k3gen.ship.tree), build.ninja (JIT and `k3gen compile`), build records and the
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


class Refused(OSError):
    """A file k3gen does not read or write: `path` as the caller names it, `reason` in words, `kind`
    (outside, link, missing, unreadable, not_regular, too_large, not_utf8) for callers that word
    their own message, `line` (1-based) where the problem is (a byte that is not UTF-8), else 1.
    An OSError, so code that already treats an unreadable file as absent or stale stays closed."""

    def __init__(self, path: str, reason: str, kind: str, line: int = 1):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason, self.kind, self.line = path, reason, kind, line

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _below(path: Path, root: Path, shown: str) -> list[Path]:
    """The components from root (exclusive) down to path (inclusive); Refused when path is not inside
    root or one of them is a symbolic link (existing components only: a write may create the rest)."""
    try:
        rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(root))
    except ValueError:
        raise Refused(shown, f"outside {root}; k3gen uses only files inside it", "outside") from None
    parts, here = [], Path(os.path.normpath(root))
    for name in rel.parts:
        here = here / name
        parts.append(here)
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            break
        except OSError as exc:
            raise Refused(shown, f"cannot be read ({exc.strerror})", "unreadable") from None
        if stat.S_ISLNK(mode):
            raise Refused(shown, "a symbolic link (or a path through one); k3gen uses plain files only", "link")
    return parts


def check_inside(path: Path, root: Path, shown: str | None = None) -> None:
    """Refused unless `path` lies inside `root` with no symbolic link below `root` on the way (what
    exists of it): a caller that writes several files checks them all before the first write."""
    _below(Path(path), Path(root), shown or str(path))


def read_bytes(path: Path, root: Path, limit: int, shown: str | None = None, limit_name: str = "") -> bytes:
    """The bytes of a regular file inside `root`, reached without a symbolic link below `root`, at
    most `limit` of them; else Refused naming `shown` (default: the path). `limit_name` (the constant
    that sets `limit`) goes into the too-large message."""
    shown = shown or str(path)
    _below(Path(path), Path(root), shown)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise Refused(shown, "no such file", "missing") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(shown, "a symbolic link; k3gen reads plain files only", "link") from None
        raise Refused(shown, f"cannot be read ({exc.strerror})", "unreadable") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a device, pipe or socket"
        raise Refused(shown, f"{kind}, not a regular file", "not_regular")
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        named = f" ({limit_name})" if limit_name else ""
        raise Refused(shown, f"larger than {limit} bytes{named}, the most k3gen reads of such a file", "too_large")
    return data


def read_text(path: Path, root: Path, limit: int, shown: str | None = None, limit_name: str = "") -> str:
    """read_bytes, decoded as UTF-8; a byte that is not is Refused at its line."""
    data = read_bytes(path, root, limit, shown, limit_name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        why = f"byte 0x{data[exc.start]:02x} is not UTF-8; save it as UTF-8 text"
        raise Refused(shown or str(path), why, "not_utf8", line) from None


def write_inside(path: Path, root: Path, data: str | bytes, *, append: bool = False, shown: str | None = None) -> None:
    """The one writer of files outside k3gen's own build outputs (a scaffold, a record line): `path`
    must lie inside `root` with no symbolic link below `root` on the way, and be a regular file if it
    exists; folders below `root` are created, `root` itself must exist. Appends are one write."""
    shown = shown or str(path)
    data = data.encode() if isinstance(data, str) else data
    if not Path(root).is_dir():
        raise Refused(shown, f"its folder {root} does not exist", "missing")
    _below(Path(path), Path(root), shown)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _below(Path(path), Path(root), shown)  # a link planted while the folders were made
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_APPEND if append else os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(shown, "a symbolic link; k3gen writes plain files only", "link") from None
        raise Refused(shown, f"cannot be written ({exc.strerror})", "unreadable") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(shown, "not a regular file; k3gen writes plain files only", "not_regular")
        os.write(fd, data)
    finally:
        os.close(fd)


def write_if_changed(path: Path, data: str | bytes, *, atomic: bool = False) -> bool:
    """Write `data` unless the file already holds exactly these bytes; True when it wrote.

    atomic: write a temporary file beside it and rename, so a reader sees the old bytes or the new,
    never half of either (build records that another process may be checking).
    """
    data = data.encode() if isinstance(data, str) else data
    if path.is_symlink():  # never write through a link (atomic or not, the link is not followed)
        raise Refused(str(path), "a symbolic link; k3gen writes plain files only", "link")
    try:
        if path.is_file() and path.read_bytes() == data:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    if not atomic:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # a leftover of a killed writer (or a planted link): never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
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
