"""Files a spec names (its template, its oracle) are read only as plain files inside the project."""

from __future__ import annotations

from pathlib import Path


def plain_file_inside(path: Path, folder: Path) -> bool:
    """A regular file reached without links, inside `folder`: never a FIFO (a read would block), a
    device, or a link out of the project."""
    if not path.is_file() or any(p.is_symlink() for p in (path, *path.parents) if folder in (p, *p.parents)):
        return False
    return path.resolve().is_relative_to(folder.resolve())
