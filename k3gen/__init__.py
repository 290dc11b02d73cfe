"""k3gen: declarative kernel specs -> CUDA/HIP sources, dispatch, host wrappers and tests.

Importing k3gen (and k3gen.runtime) needs only the standard library: the generated code runs on
machines that have torch and nothing else.
"""

__version__ = "0.1.0"
