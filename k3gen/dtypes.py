"""The dtypes a spec may name: the generator's name for the one table, k3gen.runtime.dtypes.

The table lives in the runtime so that the wrappers' input checks and the oracles, which may import
only torch and k3gen.runtime, read the same rows (k3gen/oracles/vocabulary.py builds on it).
"""

from .runtime.dtypes import DTYPES, Dtype

__all__ = ["DTYPES", "Dtype"]
