"""Exceptions of the generated wrappers. K3UnsupportedError is a ValueError: bad input, not a bug."""


class K3Error(RuntimeError):
    """A kernel call failed after its inputs were accepted (e.g. the launch itself)."""


class K3UnsupportedError(ValueError):
    """The call is outside what the spec generates: the message names the allowed values."""


class K3BuildError(K3Error):
    """Compiling or loading a family's module failed; the message holds the compiler output."""


class K3ToolchainMissing(K3BuildError):
    """The compiler (nvcc, hip-clang) or ninja is not installed or not found."""
