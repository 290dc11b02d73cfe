"""Each unit compiles from a content-addressed copy of its sources, at one path on every machine.

Why: a compile cache ($K3GEN_COMPILER_LAUNCHER=sccache) keys each compile by its arguments and the
preprocessed input. nvcc hands the real path of the unit to cudafe++ and cicc as arguments, hashes
it into the unit's module id, and writes it and every -I folder into the line markers of the
preprocessed source; sccache hashes all of these raw (SCCACHE_BASEDIRS rewrites only the markers,
and no setting can rewrite a hash of a path). A unit compiled in place therefore never shares a
cache entry with a checkout at another path. Compiled from <root>/<digest>/<family>/<unit> with
-I<root>/<digest>, the command and everything the compiler sees are the same bytes in every
checkout, on every machine with the same toolkit.

<digest> is the sha256 of the unit and the headers it includes (followed as the generator keys a
unit, k3gen.runtime.variants.included_headers): their names relative to csrc/ and their bytes. The
same sources are the same folder everywhere; any other sources another folder, so another command,
which is what makes ninja rebuild: no depfile is needed for the generated headers. A folder is laid
out as csrc/ is (<family>/<unit>, <family>/<header>, k3_backend.h) and never changes once made: it
is made whole under a temporary name and renamed into place, so concurrent builds from any checkout
share it, and its files carry a fixed old mtime, so a folder made again (after /tmp was cleaned)
leaves the objects built from it up to date.

Safety. <root> is /tmp/k3gen-src, or $K3GEN_SOURCE_STAGE (set it to the same path on every machine
that shares a cache). It is used only when it is a real folder (not a link) owned by this user that
no other user can write, made so if it is missing; a folder in it is used only when it holds
exactly the files its name promises, with those bytes, as plain files owned by this user that
nobody else can write: checked on every use, so nothing another user can plant is ever compiled.
When the root cannot be had that way (another user made it, or /tmp is read-only) the stage is
<JIT cache>/src, which is private to the user: builds stay correct and locally cached, but their
commands name that folder, so they hit no cache of another machine; one warning says so.
Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import posixpath
import re
import shutil
import stat
import tempfile
from pathlib import Path

from .env import cache_root
from .errors import K3BuildError
from .files import read_bytes, write_inside

log = logging.getLogger("k3gen")
STAGE_ENV = "K3GEN_SOURCE_STAGE"
DEFAULT_ROOT = Path("/tmp/k3gen-src")  # fixed, not $TMPDIR: the path is part of every compile command
MTIME_NS = 946684800 * 10**9  # 2000-01-01: older than any object built from a staged copy
_FORMAT = b"k3gen-stage-1\0"
_DIGEST_CHARS = 32
_warned: set[str] = set()


def _unsafe(root: Path) -> str | None:
    """Why `root` may not hold staged sources (None: it may), making it when it is missing."""
    try:
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
        st = os.lstat(root)
    except OSError as exc:
        return f"it cannot be made ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return "it is not a folder (a link, or a file)"
    if st.st_uid != os.getuid():
        return f"another user (uid {st.st_uid}) owns it"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"other users can write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def stage_root() -> Path:
    """The folder staged copies go into: $K3GEN_SOURCE_STAGE or /tmp/k3gen-src when it is safe,
    else the user's private <JIT cache>/src (said once); K3BuildError when neither is."""
    env = os.environ.get(STAGE_ENV, "").strip()
    shared = Path(env) if env else DEFAULT_ROOT
    if not shared.is_absolute():
        raise K3BuildError(
            f"k3gen: {STAGE_ENV}={ascii(env)[1:-1][:200]} is not an absolute path; set it to the same absolute "
            f"folder on every machine that shares a compile cache, or unset it for {DEFAULT_ROOT}"
        )
    why = _unsafe(shared)
    if why is None:
        return shared
    private = cache_root() / "src"
    if (why_private := _unsafe(private)) is not None:
        raise K3BuildError(
            f"k3gen: no folder to stage sources in: {shared}: {why}; {private}: {why_private}; set {STAGE_ENV} "
            "to a folder only you can write"
        )
    if str(shared) not in _warned:
        _warned.add(str(shared))
        log.warning(
            "k3gen: staging sources in %s, not %s (%s): builds are correct and cached here, but a compile "
            "cache shared with other machines will not hit; set %s to a folder of yours, the same on every "
            "machine",
            private,
            shared,
            why,
            STAGE_ENV,
        )
    return private


def digest(files: dict[str, bytes]) -> str:
    """The folder name of these files ({name relative to csrc/: bytes})."""
    h = hashlib.sha256(_FORMAT)
    for name in sorted(files):
        data = files[name]
        h.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()[:_DIGEST_CHARS]


def stage(files: dict[str, bytes]) -> Path:
    """The folder holding exactly `files` ({name relative to csrc/: bytes}; names as
    `posixpath.normpath` spells them, never above csrc/), laid out as csrc/ is: made if missing,
    replaced if it holds anything else."""
    for name in files:
        if name != posixpath.normpath(name) or name.startswith(("/", "..")):
            raise K3BuildError(f"k3gen: cannot stage {name!a}: not a plain path below csrc/")
    root = stage_root()
    folder = root / digest(files)
    if holds(folder, files):
        return folder
    try:
        _make(root, folder, files)
    except OSError as exc:
        raise K3BuildError(f"k3gen: cannot stage sources in {root}: {exc.strerror or exc}") from None
    if not holds(folder, files):
        raise K3BuildError(f"k3gen: the staged sources in {folder} are not what was written; remove that folder")
    return folder


def _make(root: Path, folder: Path, files: dict[str, bytes]) -> None:
    """Make `folder` whole under a temporary name beside it, then rename it into place."""
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))  # mode 700, this user's
    try:
        for name, data in files.items():
            path = work / name
            write_inside(path, work, data)
            os.chmod(path, 0o444)  # whatever the umask
            os.utime(path, ns=(MTIME_NS, MTIME_NS))
        for d, _, _ in os.walk(work):
            os.chmod(d, 0o755)
        try:
            os.rename(work, folder)
        except OSError:
            if holds(folder, files):  # another build staged the same sources first
                return
            # Other contents (a half-deleted folder, a damaged one): set them aside, then take their place.
            trash = Path(tempfile.mkdtemp(prefix=f".{folder.name}-old-", dir=root))
            with contextlib.suppress(FileNotFoundError):  # another build set them aside first
                os.rename(folder, trash / "old")
            shutil.rmtree(trash, ignore_errors=True)
            try:
                os.rename(work, folder)
            except OSError:
                if not holds(folder, files):  # else another build put the right folder there first
                    raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ours(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def holds(folder: Path, files: dict[str, bytes]) -> bool:
    """Whether `folder` holds exactly `files` and nothing else, as plain files and folders (no link)
    of this user that nobody else can write."""
    try:
        if not (stat.S_ISDIR((st := os.lstat(folder)).st_mode) and _ours(st)):
            return False
        seen: set[str] = set()
        for d, dirs, names in os.walk(folder):
            rel = os.path.relpath(d, folder)
            rel = "" if rel == "." else rel.replace(os.sep, "/")
            for name in dirs:
                st = os.lstat(os.path.join(d, name))
                if not (stat.S_ISDIR(st.st_mode) and _ours(st)):
                    return False
            for name in names:
                full = posixpath.join(rel, name) if rel else name
                st = os.lstat(os.path.join(d, name))
                if full not in files or not (stat.S_ISREG(st.st_mode) and _ours(st)):
                    return False
                if read_bytes(Path(d) / name, folder, len(files[full])) != files[full]:
                    return False
                seen.add(full)
        return seen == set(files)
    except OSError:
        return False


def stage_root_shown() -> Path:
    """The shared root, as messages name it (nothing is made or checked)."""
    env = os.environ.get(STAGE_ENV, "").strip()
    return Path(env) if env else DEFAULT_ROOT


def unstaged(text: str, csrc: Path) -> str:
    """A compiler's output with every staged folder named as the csrc/ it was copied from."""
    roots = "|".join(re.escape(str(r)) for r in (stage_root_shown(), cache_root() / "src"))
    return re.sub(rf"(?:{roots})/[0-9a-f]{{{_DIGEST_CHARS}}}/", lambda _: f"{csrc}/", text)
