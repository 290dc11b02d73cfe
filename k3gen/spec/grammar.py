"""The strict grammars every spec string that reaches output must match.

A spec string reaches generated Python, C++, file names or docs through exactly one door: it is an
identifier, a number or a module name checked here, or it is text emitted through k3gen.spec.escape.
Patterns end in \\Z, not $, which would let a trailing newline through.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re

from k3gen.spec.bounds import FLOAT32_MAX, INT32, MAX_NAME, MAX_TEXT

IDENT = re.compile(r"[a-z][a-z0-9_]*\Z")  # kernel, axis, tensor, param, flag, constant, param value
SYMBOL = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")  # dims may be upper case: M, K, D
ORACLE = re.compile(r"k3gen\.oracles\.([a-z][a-z0-9_]*)\Z")
SPEC_FILE = re.compile(r"[a-z][a-z0-9_]*\.yaml\Z")

# Names the generated Python module, the wrapper's locals and the C++ translation units already use,
# or that would shadow what generated code calls (builtins, torch, ...). A spec name that is bare
# code somewhere must not be one of them.
CPP_KEYWORDS = frozenset(
    """
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
decltype default delete do double dynamic_cast else enum explicit export extern false float for friend
goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private
protected public register reinterpret_cast requires return short signed sizeof static static_assert
static_cast struct switch template this thread_local throw true try typedef typeid typename union
unsigned using virtual void volatile wchar_t while xor xor_eq
__global__ __device__ __host__ __shared__ __constant__ main std half
""".split()
)
GENERATED_NAMES = frozenset(
    """
a args available build covered ctypes device err err_len fake family key module oracle pytest re rt
runners s stream torch variant vec zlib optional annotations csrc docs tests common scaffold k3gen
k3kernels launch dim3 grid block smem blockdim threadidx blockidx warpsize
FAMILY MATRIX EXCLUDED VARIANTS MODULE Args OP SPEC DIMS LAYOUTS CASES REJECTS INPUTS OUTPUTS OP_ARGS
OP_DEFAULTS DTYPE_ARGS VARIANT_IDS FAST_MATH VEC Optional NULL
""".split()
)
RESERVED = (
    frozenset(keyword.kwlist)
    | frozenset(keyword.softkwlist)
    | frozenset(dir(builtins))
    | CPP_KEYWORDS
    | GENERATED_NAMES
)
RESERVED_PREFIXES = ("dtype_", "k3", "K3", "T_", "DEFAULT_", "_")
RESERVED_SUFFIXES = ("_spec", "_dtype", "_stride0", "_t")


def name_problem(value, pattern=IDENT, bare: bool = True) -> str | None:
    """Why `value` cannot be a name (None when it can). `bare`: it is spelled alone in code."""
    if not isinstance(value, str):
        return f"expected a name; got {value!r}"
    shown = _shown(value)
    if len(value) > MAX_NAME:
        return f"{shown[:50]}... has {len(value)} characters; names have at most {MAX_NAME} (bounds.MAX_NAME)"
    if not pattern.match(value):
        case = (
            "letters, digits and _, starting with a letter"
            if pattern is SYMBOL
            else "lower_snake_case: a-z, 0-9 and _, starting with a letter"
        )
        return f"{shown} is not a valid name; use {case}"
    if bare and (value in RESERVED or value.startswith(RESERVED_PREFIXES) or value.endswith(RESERVED_SUFFIXES)):
        return (
            f"{shown} is reserved (a Python or C++ keyword or builtin, or a name the generated code uses); "
            "choose another name"
        )
    return None


def text_problem(value) -> str | None:
    """Why `value` cannot be a one-line text field (summary, reason, note, why)."""
    if not isinstance(value, str):
        return f"expected text; got {value!r}"
    if not value.strip():
        return "the text is empty; say it in one line"
    if len(value) > MAX_TEXT:
        return f"the text has {len(value)} characters; at most {MAX_TEXT} (bounds.MAX_TEXT)"
    bad = next((c for c in value if not c.isprintable() or 0xD800 <= ord(c) <= 0xDFFF), None)
    if bad is not None:
        what = "a line break" if bad in "\r\n" else f"the character {bad!a}"
        return f"the text contains {what}; write one line of printable text"
    return None


def int32_problem(value) -> str | None:
    if type(value) is not int:
        return f"expected an integer; got {value!r}"
    if not INT32[0] <= value <= INT32[1]:
        return f"{value} does not fit a C++ int ({INT32[0]}..{INT32[1]})"
    return None


def float32_problem(value) -> str | None:
    if type(value) is not float:
        return f"expected a number; got {value!r}"
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        return f"{value!r} is not a finite C++ float; give a finite number"
    return None


def spec_file_problem(name: str) -> str | None:
    if not SPEC_FILE.match(name) or len(name) > MAX_NAME + 5:
        return (
            f"the file name {_shown(name)} is not NAME.yaml with NAME in lower_snake_case (a-z, 0-9, _); "
            "rename the file"
        )
    return None


def _shown(value: str) -> str:
    """A value quoted for a message: non-ASCII and control characters escaped, so a message is one line."""
    return ascii(value)
