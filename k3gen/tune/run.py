"""`k3gen tune`, the GPU half: time each candidate config of a family per bucket of M, write its table.

Runs from generated/ alone (torch, the standard library, k3gen.runtime and the oracles; no spec
loader, so a device machine without pydantic can run it): `generated/k3kernels/tuning/<family>.json`
says what to tune. For each family: one build of its library (every candidate config is already
compiled into each variant unit); then per variant, for each candidate config (forced through
`k3_<family>_tuning_force`): the oracle's edge cases and a random batch at every bucket's M against
the oracle, a wrong config being discarded and reported, never timed; then CUDA-graph timing of each
surviving config at each bucket's bound. The fastest config wins a bucket only when it beats the
spec's default by more than `--min-gain` (timing noise must not churn the table).

Writes `specs/tuning/<family>.<device>.yaml`, a table reviewed and checked in like a spec: the pick
per variant and bucket with the runner-up and its margin, the discarded configs, and provenance.
`k3gen build` then checks it against the spec (k3gen.plan.tuning) and compiles the picks.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import importlib
import json
import platform
import shutil
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

from k3gen.runtime.devices import device_slug
from k3gen.runtime.files import write_if_changed
from k3gen.tune import table

ROOT = Path(__file__).resolve().parents[2]  # the project: k3gen/tune/run.py
GENERATED = ROOT / "generated"
TABLE_DIR = ROOT / "specs" / "tuning"
CALLS_PER_GRAPH = 20
HELP = (
    "on a GPU: check every candidate config of a family's knobs against its oracle, time each bucket of M "
    "with CUDA graphs and write specs/tuning/<family>.<device>.yaml"
)
EXAMPLES = ["k3gen tune --family route_topk", "k3gen tune --all --out /tmp/tables   # also copies the tables there"]


def _import_generated():
    try:
        importlib.import_module("k3kernels")
    except ImportError:
        sys.path.insert(0, str(GENERATED))


def families() -> list[str]:
    return sorted(p.stem for p in (GENERATED / "k3kernels" / "tuning").glob("*.json"))


def time_graph_us(fn, replays: int) -> float:
    """Median µs per call of `fn` captured CALLS_PER_GRAPH times in one CUDA graph (bench/common.py's way)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / CALLS_PER_GRAPH)
    return statistics.median(times)


def _batches(oracle, variant: dict, buckets: list[int], shape: dict) -> dict:
    """One random batch per bucket's bound M and the oracle's answer for it, made once per variant and
    shared by every config: making a batch (CPU random numbers, up to 16384 x 14336 of them) and its
    reference cost more than checking and timing a config on it."""
    batches = {}
    for m in buckets:
        seed = zlib.crc32(repr(("tune", sorted(variant.items(), key=str), m)).encode())
        args = oracle.make_args(variant, {"M": m, **shape}, "dense", seed)
        batches[m] = (args, oracle.reference(variant, **args))
    return batches


def _oracle_errors(op, oracle, variant: dict, cases: list[str], batches: dict) -> list[str]:
    """Every way this config disagrees with the oracle: the spec's edge cases (as the generated tests run
    them), then the random batch at every bucket's bound."""
    import torch

    errors = []
    for name in (f"case_{c}" for c in cases):
        try:
            getattr(oracle, name)(op, variant)
        except Exception as exc:
            if type(exc).__name__ not in ("Skipped", "SkipTest"):
                errors.append(f"{name[5:]}: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    for m, (args, want) in batches.items():
        try:
            oracle.check(op(**args), want, variant)
        except Exception as exc:
            errors.append(f"M={m}: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    torch.cuda.synchronize()
    return errors


def config_switch(family: str):
    """The family built for this GPU, and its library's switch that forces candidate config c on
    every call (`force(-1)`: the device's table's picks again). Also bench/outputs_probe.py's."""
    from k3gen.runtime.cache import ensure_built
    from k3gen.runtime.module import device_arch

    fam = importlib.import_module(f"k3kernels.{family}")
    fam.build()
    lib = ctypes.CDLL(str(ensure_built(fam.MODULE.request(device_arch(None)))))  # the handle the wrapper loaded
    force = getattr(lib, f"k3_{family}_tuning_force")
    force.argtypes, force.restype = [ctypes.c_int], None
    return fam, force


def family_data(family: str) -> dict:
    """generated/k3kernels/tuning/<family>.json, as `k3gen build` wrote it: the variants, candidate
    configs, buckets and what the oracle needs per backend."""
    return json.loads((GENERATED / "k3kernels" / "tuning" / f"{family}.json").read_text())


def oracle_variant(data: dict, variant: dict, backend: str) -> dict:
    """The oracle's variant as the generated tests build it: the variant, then the spec, then the
    backend's routing (`data`: family_data's)."""
    return {**variant, **data["oracle_spec"], **data["routing"].get(backend, {})}


def tune_family(family: str, replays: int, min_gain: float, log) -> dict:
    import torch

    from k3gen.runtime.module import device_arch

    data = family_data(family)
    oracle = importlib.import_module(data["oracle"])
    arch = device_arch(None)
    start = time.perf_counter()
    fam, force = config_switch(family)
    op = getattr(fam, family)
    log(
        f"{family}: built for {arch} in {time.perf_counter() - start:.1f} s; "
        f"{len(data['configs'])} configs x {len(data['variants'])} variants x {len(data['buckets'])} buckets"
    )
    backend = "hip" if torch.version.hip else "cuda"
    configs, buckets, shape = data["configs"], data["buckets"], data["shape"]
    picks, discarded = {}, []
    try:
        for entry in data["variants"]:
            variant = oracle_variant(data, entry["variant"], backend)
            batches = _batches(oracle, variant, buckets, shape)
            good = []
            for c, config in enumerate(configs):
                force(c)
                errors = _oracle_errors(op, oracle, variant, data["cases"], batches)
                if errors:
                    discarded.append({"variant": entry["name"], "config": config, "errors": errors[:5]})
                    log(f"  {entry['name']} {config}: WRONG, discarded: {errors[0]}")
                else:
                    good.append(c)
            rows = []
            for m, (args, _) in batches.items():
                times = {}
                for c in good:
                    force(c)
                    times[c] = time_graph_us(lambda args=args: op(**args), replays)
                ranked = sorted(times, key=times.get)
                best = ranked[0] if ranked else 0  # every config wrong: the default stays, the table says so
                if 0 in times and times[best] > times[0] * (1.0 - min_gain):
                    best = 0  # not clearly faster than the default: keep the default
                row = {"bucket": m, "config": configs[best], "us": round(times.get(best, float("nan")), 3)}
                others = [c for c in ranked if c != best]
                if others:
                    row["runner_up"] = configs[others[0]]
                    row["runner_up_us"] = round(times[others[0]], 3)
                    row["margin"] = round(times[others[0]] / times[best] - 1.0, 4)
                row["all_us"] = {json.dumps(configs[c], sort_keys=True): round(t, 3) for c, t in times.items()}
                rows.append(row)
                log(
                    f"  {entry['name']} M<={m}: "
                    + ", ".join(f"{configs[c]} {times[c]:.2f} us" for c in ranked)
                    + f" -> {configs[best]}"
                )
            picks[entry["name"]] = rows
    finally:
        force(-1)
    return {
        "data": data,
        "picks": picks,
        "discarded": discarded,
        "arch": arch,
        "seconds": round(time.perf_counter() - start, 1),
    }


def _tool_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.splitlines()[-1].strip() if out else "unknown"


def render_table(result: dict, device: str) -> str:
    """The table as YAML (JSON flow values, so one row is one line a reviewer can read)."""
    import torch

    data = result["data"]
    provenance = {
        "device": device,
        "arch": result["arch"],
        "driver": _tool_version(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or torch.version.hip or "",
        "nvcc": _tool_version(["nvcc", "--version"]),
        "host": platform.node(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "spec": data["spec"],
        "shape": data["shape"],
        "calls_per_graph": CALLS_PER_GRAPH,
        "seconds": result["seconds"],
    }
    return table.write(data, result["picks"], result["discarded"], device, provenance)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="k3gen tune",
        description=f"k3gen tune: {HELP}.",
        epilog="examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--family", action="append", default=[], metavar="NAME[,NAME]")
    ap.add_argument("--all", action="store_true", help="every family whose spec declares tuning")
    ap.add_argument("--out", type=Path, help="also copy the tables (and tune.log) into this folder")
    ap.add_argument("--replays", type=int, default=15, help="CUDA-graph replays per timing (median)")
    ap.add_argument(
        "--min-gain",
        type=float,
        default=0.02,
        help="a config replaces the default only when this much faster (default 2%%)",
    )
    args = ap.parse_args(argv)
    _import_generated()
    import torch

    known = families()
    wanted = known if args.all else [f for x in args.family for f in x.split(",") if f]
    unknown = [f for f in wanted if f not in known]
    if unknown or not wanted:
        print(
            f"k3gen tune: {'unknown ' + ', '.join(unknown) if unknown else 'no family given'}; families with "
            f"tuning: {', '.join(known) or 'none'}",
            file=sys.stderr,
        )
        return 2
    if not torch.cuda.is_available():
        print("k3gen tune: needs a GPU", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name()
    slug = device_slug(device)
    log_lines = []

    def log(line: str) -> None:
        print(line, flush=True)
        log_lines.append(line)

    TABLE_DIR.mkdir(parents=True, exist_ok=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    for family in wanted:
        result = tune_family(family, args.replays, args.min_gain, log)
        path = TABLE_DIR / f"{family}.{slug}.yaml"
        write_if_changed(path, render_table(result, device))  # never through a link
        log(
            f"{family}: wrote {path.relative_to(ROOT)} ({result['seconds']} s; "
            f"{len(result['discarded'])} configs discarded)"
        )
        if args.out:
            shutil.copy(path, args.out / path.name)
    if args.out:
        write_if_changed(args.out / "tune.log", "\n".join(log_lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
