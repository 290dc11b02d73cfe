"""Does a kernel's time depend on who allocates its outputs? One process on the GPU, interleaved.

bench/bench.py passes the outputs in (`out=`), so the 20 calls of a graph write the same buffers;
`k3gen tune` times calls that allocate their outputs, each call its own. This times every tuning
config of per_token_group_quant and route_quant_fused both ways, on one batch, twice, and the
table's own pick, for the tree PYTHONPATH names (trees from 3d0cc11 on: config_switch):

    PYTHONPATH=$PWD:$PWD/generated python3 bench/outputs_probe.py   # on the GPU machine

Measured on the H200: the two ways time the same within 0.8% (bench/trials/outputs_probe.log).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import time_graph_us

from k3gen.tune.run import config_switch


def forcing(family: str):
    """The family's module, its candidate configs and the switch that forces one (-1: the table's pick)."""
    fam, force = config_switch(family)
    table = Path(fam.__file__).parent / "tuning" / f"{family}.json"  # the timed tree's, not this checkout's
    configs = json.loads(table.read_text())["configs"]
    return fam, configs, force


def compare(label: str, configs, force, given, fresh) -> None:
    for rnd in (1, 2):
        for c, config in enumerate([*configs, "table's pick"]):
            force(c if c < len(configs) else -1)
            print(
                f"{label} round {rnd} {config}: out= {time_graph_us(given):8.2f} us, "
                f"allocated {time_graph_us(fresh):8.2f} us",
                flush=True,
            )
    force(-1)


def main() -> int:
    ptgq, configs, force = forcing("per_token_group_quant")
    for m in (4096, 16384):
        x = torch.randn(m, 7168, device="cuda").to(torch.bfloat16)
        q, s = ptgq.per_token_group_quant(x, group_size=128, scale_format="ue8m0")
        compare(
            f"per_token_group_quant bf16 G128 ue8m0 M={m}",
            configs,
            force,
            lambda: ptgq.per_token_group_quant(x, group_size=128, scale_format="ue8m0", out=q, out_scale=s),
            lambda: ptgq.per_token_group_quant(x, group_size=128, scale_format="ue8m0"),
        )
    rqf, configs, force = forcing("route_quant_fused")
    m = 1024
    scores = torch.randn(m, 896, device="cuda").to(torch.bfloat16)
    bias = torch.randn(896, device="cuda") * 0.1
    x = torch.randn(m, 3584, device="cuda").to(torch.bfloat16)
    outs = dict(zip(("out_weights", "out_ids", "out_q", "out_scale"), rqf.route_quant_fused(scores, bias, x, 16)))
    compare(
        f"route_quant_fused bf16/bf16 M={m}",
        configs,
        force,
        lambda: rqf.route_quant_fused(scores, bias, x, 16, **outs),
        lambda: rqf.route_quant_fused(scores, bias, x, 16),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
