"""How many compiles to run at once: min(cores, available memory / the peak memory of one unit).

`k3gen compile` measures the peak resident memory of the largest compiler process of its run (the
kernel keeps the maximum over every process it reaps, so ninja's children and theirs count) and
records it per arch in <cache>/compile_memory.json; JIT builds and later compiles on the machine
read it. Until a compile has measured an arch, a unit is assumed to peak at DEFAULT_PEAK. $K3GEN_JOBS
(or `-j`) overrides the whole rule. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
from pathlib import Path

from .env import cache_root
from .files import write_if_changed

# bytes. nvcc 13.0 peaked at 0.19 GiB on the largest generated sm_90a units (2026-11-30,
# /usr/bin/time -v); 1 GiB leaves room for larger templates until a compile has measured.
DEFAULT_PEAK = 1 << 30
PEAK_FILE = "compile_memory.json"


def peak_path() -> Path:
    return cache_root() / PEAK_FILE


def recorded_peaks() -> dict[str, int]:
    try:
        data = json.loads(peak_path().read_text())
        return {str(k): int(v) for k, v in data.get("peak_unit_bytes", {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def record_peak(arch: str, peak: int) -> None:
    """Remember the peak of one unit for arch (the larger of the old and new measures: stay safe)."""
    peaks = recorded_peaks()
    peaks[arch] = max(peak, peaks.get(arch, 0))
    with contextlib.suppress(OSError):  # an unwritable cache only loses the measurement
        write_if_changed(
            peak_path(),
            json.dumps({"format": 1, "peak_unit_bytes": dict(sorted(peaks.items()))}, indent=1) + "\n",
            atomic=True,
        )


def children_peak() -> int:
    """The largest resident set of any process this one has reaped, with their descendants (bytes)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB


def available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _positive(text: str) -> int | None:
    return int(text) if text.strip().isdigit() and 0 < int(text) < 1 << 16 else None


def jobs_argument(text: str) -> int:
    """-j N for argparse: a positive number of parallel compiles (anything else: exit 2 saying so)."""
    import argparse

    value = _positive(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{ascii(text)[1:-1][:40]} is not a positive number of parallel compiles")
    return value


def env_jobs() -> int | None:
    """$K3GEN_JOBS, or None when unset; K3BuildError (one line) when it is not a positive number."""
    from .errors import K3BuildError

    text = os.environ.get("K3GEN_JOBS", "")
    if not text.strip():
        return None
    value = _positive(text)
    if value is None:
        raise K3BuildError(
            f"k3gen: K3GEN_JOBS={ascii(text)[1:-1][:40]} is not a positive number of parallel compiles; "
            "set e.g. K3GEN_JOBS=8, or unset it for min(cores, memory / peak per unit)"
        )
    return value


def default_jobs(units: int, archs) -> tuple[int, str]:
    """(parallel compiles, why): $K3GEN_JOBS if set, else min(cores, units, available / peak per unit)."""
    if (env := env_jobs()) is not None:
        return env, "K3GEN_JOBS"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    peaks = recorded_peaks()
    archs = [archs] if isinstance(archs, str) else list(archs)
    peak = max([peaks.get(a, DEFAULT_PEAK) for a in archs] or [DEFAULT_PEAK])
    avail = available_memory()
    by_memory = max(1, avail // peak) if avail else cores
    jobs = max(1, min(cores, by_memory, units))
    measured = "measured" if all(a in peaks for a in archs) else "assumed"
    mem = f"{avail / 2**30:.1f} GiB available" if avail else "available memory unknown"
    return jobs, f"{cores} cores, {mem}, {peak / 2**30:.2f} GiB per unit ({measured})"
