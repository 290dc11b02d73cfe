"""Hypothesis fuzz of the spec model: any mutation of a valid spec gives located SpecErrors (or a
valid spec), never an exception from deep inside."""

from __future__ import annotations

import re

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3gen.spec.load import parse_spec

from support import FROZEN_SPEC

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/
# (its projects are copies of tests/data's frozen specs and of templates/).
READS = ("templates/**",)

VALID = yaml.safe_load(FROZEN_SPEC.read_text())
LOCATED = re.compile(r"^specs/fuzz\.yaml:\d+ \(.+\): .+", re.DOTALL)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["bf16", "fp32", "sm_90a", "gfx942", "in", "out", "M"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p in _paths(VALID) if p]


def _mutate(data, path, how, value):
    import copy

    out = copy.deepcopy(data)
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    key = path[-1]
    if how == "delete":
        del parent[key]
    elif how == "replace":
        parent[key] = value
    elif how == "add" and isinstance(parent, dict):
        parent[f"{key}_x"] = value
    else:
        parent[key] = value
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), how=st.sampled_from(["delete", "replace", "add"]), value=values)
def test_any_mutation_is_a_located_error_or_a_valid_spec(path, how, value):
    text = yaml.safe_dump(_mutate(VALID, path, how, value), sort_keys=False)
    spec, errors = parse_spec(text, "specs/fuzz.yaml")
    assert (spec is None) == bool(errors)
    for e in errors:
        assert LOCATED.match(str(e)), str(e)
        assert 1 <= e.line <= text.count("\n") + 1


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(text):
    spec, errors = parse_spec(text, "specs/fuzz.yaml")
    assert spec is None and errors
    assert all(LOCATED.match(str(e)) for e in errors), [str(e) for e in errors]
