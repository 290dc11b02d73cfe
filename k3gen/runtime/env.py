"""Where the runtime keeps what it builds, and whether it may build: the environment's two answers.

$K3GEN_CACHE_DIR (else $XDG_CACHE_HOME/k3gen, else ~/.cache/k3gen) holds the JIT cache and the
measured compile memory; K3GEN_NO_JIT=1 forbids building. The cache holds libraries this process
loads, so a folder other users may write is refused (trusted_cache). Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import K3BuildError


def cache_root() -> Path:
    if d := os.environ.get("K3GEN_CACHE_DIR"):
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "k3gen"


def trusted_cache(root: Path) -> Path:
    """root, when no other user can write into it: the JIT cache holds libraries k3gen loads, so a
    folder others may write (mode 777, or a shared group's) could hand this process their code.
    K3BuildError (one line) otherwise; a folder not yet made is made by this user, so it is fine."""
    import stat

    try:
        st = os.stat(root)
    except FileNotFoundError:
        return root
    except OSError:
        return root  # the build that needs it says what is wrong (K3BuildError naming the path)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise K3BuildError(
            f"k3gen: the JIT cache {root} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}), who "
            f"could replace the libraries it loads; `chmod go-w {root}`, or point K3GEN_CACHE_DIR at a folder "
            "only you can write"
        )
    return root


def jit_disabled() -> bool:
    return os.environ.get("K3GEN_NO_JIT", "").strip().lower() not in ("", "0", "false", "no")
