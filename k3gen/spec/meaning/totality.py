"""Total specs: every map over an axis covers every generated value, and every test shape passes the gates.

The model checks that what a spec names exists; this checks that nothing generated falls through:
- dtypes.defaults: a caller may omit the derived axis for every generated value of its source axis;
- vector.overrides: each override matches some generated cell (else it is dead text);
- tests.dims: sizes for every dim of the signature, and for every generated variant every
  combination of them passes the spec's gates (Expr.decide: dims, constants, params and vec are
  known; scalars and tensor attributes such as x.ptr are not, and count as passing: the generated
  tests build dense and strided inputs that meet them). The generated tests call each variant with
  each combination, so a refused one is a located error here rather than a crash there.
"""

from __future__ import annotations

import itertools

from k3gen.spec.errors import SpecError
from k3gen.spec.exprs import ExprError, parse_expr
from k3gen.spec.model import variant_points
from k3gen.spec.scopes import gate_scope

SHOWN_VARIANTS = 3  # how many refused variants an error spells out


def check_totality(ls) -> list[SpecError]:
    return [*_defaults(ls), *_overrides(ls), *_test_dims(ls)]


def _defaults(ls) -> list[SpecError]:
    s, errors = ls.spec, []
    axes = list(s.dtypes.axes)
    cells = [dict(zip(axes, c)) for c in s.dtypes.generated_cells()]
    for axis, rule in s.dtypes.defaults.items():
        for src in dict.fromkeys(c[rule.from_] for c in cells):
            if src in rule.map:
                continue
            targets = list(dict.fromkeys(c[axis] for c in cells if c[rule.from_] == src))
            fix = (
                f"add `{src}: {targets[0]}`"
                if len(targets) == 1
                else f"add `{src}: DTYPE`, one of {', '.join(targets)}"
            )
            errors.append(
                ls.error(
                    ("dtypes", "defaults", axis, "map"),
                    f"no default {axis} for {rule.from_}={src}, which is generated "
                    f"({', '.join(f'{rule.from_}={src}, {axis}={t}' for t in targets)}); a call that "
                    f"omits {axis} would be refused: {fix} to the map",
                )
            )
    return errors


def _overrides(ls) -> list[SpecError]:
    s, errors = ls.spec, []
    axes = list(s.dtypes.axes)
    cells = [dict(zip(axes, c)) for c in s.dtypes.generated_cells()]
    for i, o in enumerate(s.vector.overrides):
        if not any(all(c[a] == d for a, d in o.when.items()) for c in cells):
            when = ", ".join(f"{a}={d}" for a, d in o.when.items())
            errors.append(
                ls.error(
                    ("vector", "overrides", i, "when"),
                    f"the override for {when} matches no generated cell; remove it or fix `when`",
                )
            )
    return errors


def _test_dims(ls) -> list[SpecError]:

    s, errors = ls.spec, []
    sizes = s.tests.dims
    missing = [d for d in s.signature.dims if d not in sizes]
    for d in missing:
        errors.append(
            ls.error(
                ("tests", "dims"),
                f"no test sizes for dim '{d}'; the generated tests build every input from these: add `{d}: [...]`",
            )
        )
    for d, values in sizes.items():
        if not values:
            errors.append(ls.error(("tests", "dims", d), f"dim '{d}' has no test sizes; list at least one"))
    if errors:
        return errors
    combos = [dict(zip(sizes, c)) for c in itertools.product(*sizes.values())]
    gates = _parsed_gates(s)
    refused: dict[int, dict[str, list[str]]] = {}  # gate -> refused dims (as text) -> variant labels
    for dtypes, params, _ in variant_points(s.dtypes, s.params):
        known = {**params, "vec": s.vector.elements_for(dtypes)}
        label = ", ".join([*(f"{a}={d}" for a, d in dtypes.items()), *(f"{p}={v}" for p, v in params.items())])
        for i, gate in gates.items():
            read = [d for d in gate.reads if d in sizes]
            for dims in combos:
                if gate.decide({**known, **dims}) is False:
                    shown = ", ".join(f"{d} = {dims[d]}" for d in read) or "every size"
                    refused.setdefault(i, {}).setdefault(shown, [])
                    if label not in refused[i][shown]:
                        refused[i][shown].append(label)
    for i, by_dims in refused.items():
        gate = s.gates[i]
        read = [d for d in gates[i].reads if d in sizes]
        labels = list(dict.fromkeys(v for vs in by_dims.values() for v in vs))
        more = f" and {len(labels) - SHOWN_VARIANTS} more" if len(labels) > SHOWN_VARIANTS else ""
        path = ("tests", "dims", read[0]) if read else ("gates", i, "check")
        errors.append(
            ls.error(
                path,
                (
                    f"the generated tests would call shapes gate {i} `{gate.check}` refuses: {'; '.join(by_dims)} "
                    f"for {len(labels)} generated variant{'s' if len(labels) != 1 else ''} "
                    f"({'; '.join(labels[:SHOWN_VARIANTS])}{more}); use test sizes every generated variant accepts"
                ),
            )
        )
    return errors


def _parsed_gates(s) -> dict:
    """{gate index: its checked Expr}; a gate that does not parse is k3gen.spec.rules' error already."""
    gates = {}
    for i, gate in enumerate(s.gates):
        try:
            gates[i] = parse_expr(gate.check, gate_scope(s))
        except ExprError:
            continue
    return gates
