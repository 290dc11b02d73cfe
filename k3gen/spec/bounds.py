"""Every size limit a spec is held to, checked before anything is expanded.

A spec is untrusted input: a few bytes of YAML must not become millions of variants, files or
test cases. Each limit is one constant, and the error that enforces it names the constant.
"""

from __future__ import annotations

MAX_SPEC_BYTES = 64 * 1024  # a spec file; the bundled ones are under 4 KiB
MAX_TABLE_BYTES = 1024 * 1024  # a tuning table: a row per variant and bucket (256 x 8 rows: ~700 KiB)
MAX_SOURCE_BYTES = 1024 * 1024  # an oracle module or a template's limits.yaml read by the loader
MAX_COST_TABLE_BYTES = 4 * 1024 * 1024  # specs/compile_costs.json (a few hundred units per arch: ~50 KiB each)
MAX_UNIT_SECONDS = 24 * 3600.0  # a compile-cost table entry: one unit's compile time
MAX_ARTIFACT_BYTES = 1 << 40  # a compile-cost table entry: an object's or a library's size
MAX_TEST_ELEMENTS = 1 << 28  # elements of the largest tensor a generated test allocates (1 GiB of fp32)
MAX_TABLE_NODES = 100_000  # values in one tuning table (256 variants x 8 buckets of ~20 values: 41k)
MAX_YAML_DEPTH = 12  # nesting of mappings and lists in one spec
MAX_YAML_NODES = 20_000  # scalars, lists and mappings in one spec
MAX_NAME = 40  # characters of a name (kernel, axis, tensor, param, ...)
MAX_TEXT = 300  # characters of a summary, reason, note or why
KEY_BITS = 4  # bits per switch-key component: a dtype code, a param index or a flag
KEY_FIELDS = 64 // KEY_BITS  # components of one 64-bit switch key (axes + params + call-time flags)
MAX_PARAM_VALUES = 1 << KEY_BITS  # values of one param: its index must fit its key field
MAX_VARIANTS = 256  # variants (translation units per backend) of one family
MAX_TEST_DIM_SETS = 64  # combinations of tests.dims
MAX_FILE_NAME = 200  # characters of a generated file name (filesystems stop at 255)
INT32 = (-(2**31), 2**31 - 1)  # integer constants, params and defaults become C++ int
FLOAT32_MAX = 3.4028234663852886e38
