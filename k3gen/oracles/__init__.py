"""Torch oracles: the kernel contracts (KERNELS.md) in plain fp32 torch, plus the generated tests' inputs."""
