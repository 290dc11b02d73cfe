"""k3gen.integrations: k3kernels where users already route experts (transformers models, engine hooks).

Runtime code: torch, the standard library, k3gen.runtime and the generated package (k3kernels, or the
module the `kernels` library loaded from a Hub package), never transformers, vLLM or SGLang
themselves: what those call is matched by class name and call signature, each named with the source
file it follows. docs/use-it-from.md shows the calls.
"""
