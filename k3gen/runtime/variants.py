"""What one variant's library is made of: its unit, the headers it includes, its key's name.

A family's dispatch unit is the one table from switch key to variant (`case 0xKEY: return NAME(`,
templates/common/dispatch.cu.j2); each variant unit also exports `k3_<NAME>_launch` with the family
entry's ABI, so a library of that one unit serves a first call that needs only it. The headers a
unit includes are followed through `#include "..."` exactly as the generator does when it keys a
unit (k3gen.render.keys), so a variant library's content key is the unit key `k3gen list` shows.
Standard library only.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_CASE = re.compile(r"^\s*case (0x[0-9a-f]+): return ([A-Za-z_][A-Za-z0-9_]*)\(", re.M)


def included_headers(read: Callable[[str], str | None], family: str, unit: str) -> tuple[str, ...]:
    """The headers `unit` includes, transitively, relative to <family>/, sorted.

    read(path) gives a file's text by its path relative to csrc/ (None when there is no such file);
    an include is looked for beside the including file, then in csrc/ (-I<csrc>), as the compiler does.
    """
    seen: set[str] = set()
    todo = [posixpath.join(family, unit)]
    while todo:
        path = todo.pop()
        for name in _INCLUDE.findall(read(path) or ""):
            near, inc = (posixpath.normpath(posixpath.join(d, name)) for d in (posixpath.dirname(path), ""))
            target = next((t for t in (near, inc) if not t.startswith("..") and read(t) is not None), None)
            if target is not None and target not in seen:
                seen.add(target)
                todo.append(target)
    return tuple(sorted(posixpath.relpath(t, family) for t in seen))


def dispatch_table(text: str) -> dict[int, str]:
    """{switch key: variant name} from a family's dispatch unit."""
    return {int(k, 16): name for k, name in _CASE.findall(text)}


def entry_symbol(family: str, variant: str | None) -> str:
    """The C entry of a family's library, or of one variant's."""
    return f"k3_{variant or family}_launch"
