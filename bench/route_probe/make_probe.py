"""Instrument a generated routing header for bench/route_probe/select_times.cu (issues 13, 22).

Writes a copy of generated/k3kernels/csrc/FAMILY/FAMILY.cuh in which block 0's thread 0 records
clock64() at kernel entry, after the PDL wait, after each barrier and each pick of the select, and
at the end (K3_PROBE, defined by select_times.cu): where a decode-size call's time goes.
Usage: python3 bench/route_probe/make_probe.py OUT.cuh [FAMILY [CSRC]]: FAMILY route_topk by default
(route_topk_unsorted too), CSRC the generated csrc tree (another tree's for a before/after).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "generated" / "k3kernels" / "csrc"


def instrument(src: str, source: Path) -> str:
    # The block select: RouteShared through route_row (the helpers route_row calls lie between).
    start = src.index("struct RouteShared {")
    end = src.index("\n}\n", src.index("K3_DEVICE void route_row("))
    body = src[start:end]
    body = body.replace("__syncthreads();", "__syncthreads(); K3_PROBE();")
    body = body.replace("pick_digit(hist, k_left);", "pick_digit(hist, k_left); K3_PROBE();")
    src = src[:start] + body + "\n  K3_PROBE();" + src[end:]
    abi = f"{source.stem}_abi.h"
    src = src.replace(f'#include "{abi}"', f'#include "{source.parent.resolve() / abi}"')
    return src.replace("  k3::pdl_wait();\n", "  K3_PROBE_AT(0);\n  k3::pdl_wait();\n  K3_PROBE_START(1);\n", 1)


if __name__ == "__main__":
    family = sys.argv[2] if len(sys.argv) > 2 else "route_topk"
    source = (Path(sys.argv[3]) if len(sys.argv) > 3 else CSRC) / family / f"{family}.cuh"
    Path(sys.argv[1]).write_text(instrument(source.read_text(), source), encoding="utf-8")
