"""Contracts across spec files, held against the cells each family generates, not its axes.

- Every runner of specs/runners.yaml reads activations of its dtype, so the front family must
  generate a cell with that `act` (k3gen.spec.load.attach_runners checks the axis; an axis value whose
  every cell is excluded is caught here).
- The dense-bf16 contract (docs/kernels.md "Runners"; tested by templates/common/test_runners.py.j2):
  bf16 of the fp32 MoE front equals the bf16 front bit for bit. The front's activation is
  situ_and_mul on the fp32 GEMM output, so it must generate fp32 -> fp32 and fp32 -> bf16, and an
  fp32 input must default to the bf16 output.
- route_quant_fused is bit-identical to route_topk and per_token_group_quant run separately
  (docs/kernels.md §4), and its case matches_separate calls them: for each generated (score, act), they
  must generate (score, fp32 bias) and (in=act, the fused group_size, ue8m0 scales).
Both files and lines are named.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3gen.spec.errors import SpecError
from k3gen.spec.exprs import ExprError, parse_expr
from k3gen.spec.model import param_points
from k3gen.spec.scopes import gate_scope


@dataclass(frozen=True)
class DenseBf16Contract:
    family: str  # the family whose fp32 and bf16 outputs are compared
    source: str  # its input axis
    target: str  # its output axis
    cells: tuple  # (source dtype, target dtype) pairs that must be generated
    default: tuple  # (source dtype, the target dtype the wrapper must pick for it)


DENSE_BF16 = DenseBf16Contract("situ_and_mul", "in", "out", (("fp32", "fp32"), ("fp32", "bf16")), ("fp32", "bf16"))
CONTRACT = (
    f'docs/kernels.md "Runners": bf16 of the fp32 front equals the bf16 front, so {DENSE_BF16.family} '
    "generates fp32 -> fp32 and fp32 -> bf16 and defaults fp32 input to bf16"
)


@dataclass(frozen=True)
class Part:
    """A family the fused one is compared against: its cell and params, from the fused cell/constants."""

    family: str
    cell: tuple  # (its axis, ("axis", fused axis) or ("dtype", fixed dtype))
    params: tuple = ()  # (its param, ("constant", fused constant) or ("value", fixed value))
    same: tuple = ()  # constants (or `tie_order`) that must be equal in both specs


@dataclass(frozen=True)
class SeparateContract:
    family: str
    case: str  # the oracle case that runs the parts and compares
    parts: tuple


FUSED_SEPARATE = SeparateContract(
    "route_quant_fused",
    "matches_separate",
    (
        Part(
            "route_topk",
            (("score", ("axis", "score")), ("bias", ("dtype", "fp32"))),
            same=("num_experts", "top_k", "tie_order"),
        ),
        Part(
            "per_token_group_quant",
            (("in", ("axis", "act")),),
            (("group_size", ("constant", "group_size")), ("scale_format", ("value", "ue8m0"))),
            same=("fp8_max", "eps"),
        ),
    ),
)
SEPARATE = "docs/kernels.md §4: bit-identical to route_topk and per_token_group_quant run separately"


def check_contracts(runners, loaded: list, complete: bool) -> list[SpecError]:
    """`runners` is k3gen.spec.load.LoadedRunners or None; `complete` says every spec file loaded, so a
    family that is absent is really absent (not a spec that failed to parse)."""
    families = {ls.spec.kernel: ls for ls in loaded}
    errors = _matches_separate(FUSED_SEPARATE, families, complete)
    if runners is not None:
        errors += [
            *_runner_cells(runners, families.get(runners.table.front)),
            *_dense_bf16(runners, families, complete),
        ]
    return errors


def _matches_separate(c: SeparateContract, families: dict, complete: bool) -> list[SpecError]:
    fused = families.get(c.family)
    if fused is None or c.case not in fused.spec.tests.cases:
        return []
    case_at = ("tests", "cases", fused.spec.tests.cases.index(c.case))
    axes = list(fused.spec.dtypes.axes)
    cells = [dict(zip(axes, cell)) for cell in fused.spec.dtypes.generated_cells()]
    errors = []
    for part in c.parts:
        other = families.get(part.family)
        if other is None:
            if complete:
                errors.append(
                    fused.error(
                        case_at,
                        f"case {c.case} compares against {part.family}, which no spec "
                        f"defines ({SEPARATE}); add it, or drop the case",
                    )
                )
            continue
        theirs = list(other.spec.dtypes.axes)
        generated = [dict(zip(theirs, cell)) for cell in other.spec.dtypes.generated_cells()]
        axes_at = f"{other.file}:{other.located.line_of(('dtypes', 'axes'))}"
        missing = {}
        for cell in cells:
            want = {axis: cell[src] if how == "axis" else src for axis, (how, src) in part.cell}
            if not any(all(g.get(a) == v for a, v in want.items()) for g in generated):
                missing.setdefault(tuple(want.items()), cell)
        for want, cell in missing.items():
            src = next(s for _, (how, s) in part.cell if how == "axis")
            path = ("dtypes", "axes", src, fused.spec.dtypes.axes[src].index(cell[src]))
            shown = f"({', '.join(a for a, _ in want)}) = ({', '.join(v for _, v in want)})"
            errors.append(
                fused.error(
                    path,
                    (
                        f"{src}={cell[src]} is generated here, but "
                        f"{part.family} does not generate {shown} ({axes_at}), "
                        f"which case {c.case} compares against ({SEPARATE}); generate it there, or drop the case"
                    ),
                )
            )
        for param, (how, src) in part.params:
            value = fused.spec.constants.get(src) if how == "constant" else src
            values = other.spec.params[param].values if param in other.spec.params else []
            if value not in values:
                at = f"{other.file}:{other.located.line_of(('params', param))}"
                errors.append(
                    fused.error(
                        ("constants", src) if how == "constant" else case_at,
                        (
                            f"{part.family} does not generate {param}={value} "
                            f"({at}: {', '.join(map(str, values)) or 'none'}), "
                            f"which case {c.case} calls ({SEPARATE}); add it there, or drop the case"
                        ),
                    )
                )
        for name in part.same:
            mine, its = (_setting(ls, name) for ls in (fused, other))
            if mine != its:
                path = (name,) if name == "tie_order" else ("constants", name)
                at = f"{other.file}:{other.located.line_of(path)}"
                errors.append(
                    fused.error(
                        path,
                        (
                            f"{name} = {_shown(mine)} here but {_shown(its)} "
                            f"in {part.family} ({at}), which case {c.case} "
                            f"compares against ({SEPARATE}); make them equal, or drop the case"
                        ),
                    )
                )
    return errors


def _setting(ls, name: str):
    return ls.spec.tie_order if name == "tie_order" else ls.spec.constants.get(name)


def _shown(value) -> str:
    if isinstance(value, list):
        return f"a table of {len(value)}"
    return "undeclared" if value is None else repr(value) if isinstance(value, float) else str(value)


def _runner_cells(runners, front) -> list[SpecError]:
    if front is None or "act" not in front.spec.dtypes.axes:
        return []  # attach_runners names the missing front or axis
    axes = list(front.spec.dtypes.axes)
    cells = [dict(zip(axes, c)) for c in front.spec.dtypes.generated_cells()]
    generated = {c["act"] for c in cells}
    errors = []
    for i, r in enumerate(runners.table.runners):
        dtype = r.activation_dtype
        if dtype not in front.spec.dtypes.axes["act"] or dtype in generated:
            continue  # off the axis: attach_runners' error
        j = next(j for j, c in enumerate(front.spec.dtypes.exclude) if c["act"] == dtype)
        at = f"{front.file}:{front.located.line_of(('dtypes', 'exclude', j))}"
        shown = ", ".join("(" + ", ".join(c.values()) + ")" for c in cells)
        errors.append(
            runners.error(
                ("runners", i, "consumes"),
                (
                    f"runner '{r.name}' consumes {r.consumes} ({dtype}), "
                    f"but {front.spec.kernel} generates no cell with "
                    f"act={dtype}: each is excluded (first at {at}); generated ({', '.join(axes)}): {shown}; keep one "
                    "of those cells or change the runner"
                ),
            )
        )
    return errors


def _dense_bf16(runners, families: dict, complete: bool) -> list[SpecError]:
    c = DENSE_BF16
    dense = [(i, r) for i, r in enumerate(runners.table.runners) if r.consumes == "dense_bf16"]
    if not dense:
        return []
    i, first = dense[0]
    others = f" and {len(dense) - 1} more" if len(dense) > 1 else ""
    runner_at = f"{runners.file}:{runners.located.line_of(('runners', i, 'consumes'))}: runner '{first.name}'{others}"
    ls = families.get(c.family)
    if ls is None:
        if not complete:
            return []  # its spec may be among those that failed to load
        return [
            runners.error(
                ("runners", i, "consumes"),
                (
                    f"runner '{first.name}'{others} consume{'' if others else 's'} dense_bf16, and that contract needs "
                    f"{c.family} ({CONTRACT}); no spec defines kernel {c.family}: add it, or change the runners"
                ),
            )
        ]
    axes = ls.spec.dtypes.axes
    if c.source not in axes or c.target not in axes:
        return [
            ls.error(
                ("dtypes", "axes"),
                f"{c.family} has no axes '{c.source}' and '{c.target}', but the "
                f"dense-bf16 runners need them ({runner_at}; {CONTRACT}); restore "
                "them, or change the runners",
            )
        ]
    names = list(axes)
    generated = [dict(zip(names, cell)) for cell in ls.spec.dtypes.generated_cells()]
    errors = []
    for src, dst in c.cells:
        want = {c.source: src, c.target: dst}
        if any(all(cell[a] == v for a, v in want.items()) for cell in generated):
            continue
        excluded = [j for j, e in enumerate(ls.spec.dtypes.exclude) if all(e[a] == v for a, v in want.items())]
        if excluded:
            path, how = ("dtypes", "exclude", excluded[0]), "it is excluded here"
        else:
            axis = c.source if src not in axes[c.source] else c.target
            path, how = ("dtypes", "axes", axis), f"{want[axis]} is not on axis '{axis}'"
        errors.append(
            ls.error(
                path,
                f"({c.source}, {c.target}) = ({src}, {dst}) is not generated ({how}), but "
                f"the dense-bf16 runners need it ({runner_at}; {CONTRACT}); generate it, or "
                "change the runners",
            )
        )
    if not errors:
        errors += _same_math(ls, c, runner_at)
    if not errors:
        errors += _check_call(runners, ls, c, dense)
    src, dst = c.default
    rule = ls.spec.dtypes.defaults.get(c.target)
    if not errors and rule is not None and rule.from_ == c.source and rule.map.get(src, dst) != dst:
        errors.append(
            ls.error(
                ("dtypes", "defaults", c.target, "map", src),
                f"{c.source}={src} defaults to {c.target}={rule.map[src]}, but the dense-bf16 runners "
                f"need {dst} ({runner_at}; {CONTRACT}); map {src}: {dst}",
            )
        )
    return errors


def _check_call(runners, ls, c: DenseBf16Contract, dense: list) -> list[SpecError]:
    """The runner table's `dense_bf16_check` is a call the family accepts: its dims, its scalars, and
    sizes every gate passes in the contract's cells (generated/tests/test_runners.py makes the call)."""

    check, sig = runners.table.dense_bf16_check, ls.spec.signature
    fam_at = f"{ls.file}:{ls.located.line_of(('signature',))}"
    if check is None:
        i, first = dense[0]
        return [
            runners.error(
                ("runners", i, "consumes"),
                (
                    f"runner '{first.name}' consumes dense_bf16, whose generated GPU test calls {c.family}: add "
                    f"`dense_bf16_check: {{dims: {{{', '.join(f'{d}: SIZE' for d in sig.dims)}}}, scalars: {{...}}}}` "
                    f"to this file ({c.family}'s signature: {fam_at})"
                ),
            )
        ]
    errors = []
    missing = [d for d in sig.dims if d not in check.dims]
    unknown = [d for d in check.dims if d not in sig.dims]
    if missing or unknown:
        errors.append(
            runners.error(
                ("dense_bf16_check", "dims"),
                (
                    f"the call of {c.family} needs a size for each of its dims ({', '.join(sig.dims)}; {fam_at}); "
                    + "; ".join(
                        [
                            *([f"missing: {', '.join(missing)}"] if missing else []),
                            *([f"not a dim of {c.family}: {', '.join(unknown)}"] if unknown else []),
                        ]
                    )
                ),
            )
        )
    for name in check.scalars:
        if name not in sig.scalars:
            errors.append(
                runners.error(
                    ("dense_bf16_check", "scalars", name),
                    (f"'{name}' is not a scalar of {c.family} ({fam_at}: {', '.join(sig.scalars) or 'none'})"),
                )
            )
    required = [n for n, sc in sig.scalars.items() if not sc.optional and n not in check.scalars]
    if required:
        errors.append(
            runners.error(
                ("dense_bf16_check", "scalars"),
                (
                    f"the call of {c.family} needs {', '.join(required)} "
                    f"({fam_at}); give {'them' if len(required) > 1 else 'it'}"
                    " a value here"
                ),
            )
        )
    if errors:
        return errors
    s = ls.spec
    for src, dst in c.cells:
        dtypes = {c.source: src, c.target: dst}
        known = {**check.dims, **check.scalars, "vec": s.vector.elements_for(dtypes)}
        for i, gate in enumerate(s.gates):
            if _decide(gate.check, s, known) is False:
                return [
                    runners.error(
                        ("dense_bf16_check", "dims"),
                        (
                            f"{c.family} refuses this call: gate {i} `{gate.check}` fails for "
                            f"{', '.join(f'{d} = {v}' for d, v in check.dims.items())} in ({c.source}, {c.target}) = "
                            f"({src}, {dst}) ({ls.file}:{ls.located.line_of(('gates', i, 'check'))}); "
                            "pick sizes it accepts"
                        ),
                    )
                ]
    return []


def _decide(source, s, values: dict) -> bool | None:
    """The gate (checked against spec `s`) decided for `values`; one that does not parse (the loader's
    error already) decides nothing."""
    try:
        return parse_expr(source, gate_scope(s)).decide(values)
    except (ExprError, TypeError):
        return None


def _same_math(ls, c: DenseBf16Contract, runner_at: str) -> list[SpecError]:
    """The contract's cells compute one fp32 value, so fast_math must treat them alike."""
    fm = ls.spec.fast_math
    if fm is None:
        return []
    for params in param_points(ls.spec.params):
        fast = {}
        for src, dst in c.cells:
            chosen = {c.source: src, c.target: dst, **params}
            fast[(src, dst)] = all(chosen.get(k) in vs for k, vs in fm.when.items())
        if len(set(fast.values())) > 1:
            approx = [f"({s}, {d})" for (s, d), f in fast.items() if f]
            exact = [f"({s}, {d})" for (s, d), f in fast.items() if not f]
            return [
                ls.error(
                    ("fast_math", "when"),
                    (
                        f"fast_math makes ({c.source}, {c.target}) = {', '.join(approx)} approximate but "
                        f"{', '.join(exact)} accurate, while the dense-bf16 "
                        "runners need both to compute one fp32 value "
                        f"({runner_at}; {CONTRACT}); keep them both off (or both on) fast_math"
                    ),
                )
            ]
    return []
