"""A GPU's short name: the device part of a tuning table's file name and of a bench results folder.

One rule for `k3gen tune` (which writes specs/tuning/<family>.<device>.yaml), the generated code
(which picks the table of the GPU it runs on) and bench/ (bench/results/<device>/): a table tuned on
one H100 serves every H100, whatever its memory or form factor.
"""

from __future__ import annotations

import re

# What device_slug returns, and all a table's file name or a spec's `tuning.fallback` may spell.
SHORT_NAME = re.compile(r"[a-z0-9_]{1,64}")
# Words of a GPU's name that say nothing about which GPU it is.
VENDOR_WORDS = {"nvidia", "amd", "geforce", "tesla", "instinct", "radeon"}
# A name's words from the first of these on say its memory or form factor, not the GPU.
VARIANT_WORDS = re.compile(r"\d+gb|pcie|sxm\d*|hbm\d*e?|nvl\d*")


def device_slug(name: str) -> str:
    """torch.cuda.get_device_name -> 'h200' ('NVIDIA H200'), 'h100' ('NVIDIA H100 80GB HBM3'),
    'mi300x' ('AMD Instinct MI300X'), 'rtx_4090' ('NVIDIA GeForce RTX 4090')."""
    words = [w for w in re.findall(r"[a-z0-9]+", name.lower()) if w not in VENDOR_WORDS]
    kept = []
    for w in words:
        if VARIANT_WORDS.fullmatch(w):
            break
        kept.append(w)
    return "_".join(kept or words)[:64] or "gpu"
