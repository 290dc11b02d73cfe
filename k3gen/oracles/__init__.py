"""Torch oracles: the kernel contracts (docs/kernels.md) in plain fp32 torch, plus the generated tests' inputs."""
