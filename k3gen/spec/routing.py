"""Tie order and sigmoid formula of routing families: what a spec may say, checked and resolved per backend.

A spec says, once for every backend or once per backend (`{cuda: ..., hip: ...}`), how equal rank
keys are ordered (`tie_order`) and which fp32 sigmoid scores go through (`sigmoid`). A tie order is
`lowest_id`, a table (every expert, first place first), or a rule with its table that k3gen
expands here: `wave64_lane_table` is aiter's wave64 traversal (docs/kernels.md §3, issue 15). Everything is
checked at load time, so a table or rule that is not a permutation of the experts is a located
error. The plan hands templates only what this module computes: integers (per-expert priorities)
and enum spellings; no spec text reaches C++. The plan resolves each backend's
routing once (k3gen.plan.resolve).
"""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from k3gen.spec.errors import FieldError

BACKENDS = ("cuda", "hip")
WAVE_LANES = 64
MAX_EXPERTS = 65535  # tie priorities are a 16-bit field of the kernel's composite key
# The formulas a spec may name, in words (docs); k3gen.render.cpp spells the C++ constant of each.
SIGMOIDS = {
    "expf": "`1 / (1 + expf(-x))`, torch.sigmoid's fp32 formula",
    "exp2": "`1 / (1 + exp2f(-log2e * x))` with log2e = 1.44269504088896340736f, aiter's formula",
}


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TieRule(_Strict):
    """A tie order given as a rule and its table; k3gen expands it into a priority per expert."""

    rule: Literal["wave64_lane_table"] = Field(
        description=(
            "wave64_lane_table: groups of `experts_per_group` consecutive experts are dealt to 64 lanes "
            "(group g on lane g % 64, bank g // 64); lanes are visited in `lane_rank` order, a lane's banks "
            "in order, a group's experts by id; the earlier visited wins a tie (aiter's wave64 traversal)"
        )
    )
    experts_per_group: int = Field(description="consecutive experts one lane loads together")
    lane_rank: list[int] = Field(description="64 entries: lane -> its place in the traversal (0 first)")


def _shape_of_order(value, per_backend: bool) -> str:
    """Which form a tie order takes, by the YAML shape alone (so an error speaks of that form only)."""
    if isinstance(value, list):
        return "table"
    if isinstance(value, dict):
        return "per_backend" if per_backend and "rule" not in value else "by_rule"
    return "named"


def _one_order(value) -> str:
    return _shape_of_order(value, per_backend=False)


def _any_order(value) -> str:
    return _shape_of_order(value, per_backend=True)


OneTieOrder = Annotated[
    Annotated[Literal["lowest_id"], Tag("named")]
    | Annotated[list[int], Tag("table")]
    | Annotated[TieRule, Tag("by_rule")],
    Discriminator(_one_order),
]
SigmoidName = Literal["expf", "exp2"]


class TieOrderPerBackend(_Strict):
    """One tie order per backend; every backend the spec targets needs one."""

    cuda: OneTieOrder | None = None
    hip: OneTieOrder | None = None


class SigmoidPerBackend(_Strict):
    """One sigmoid formula per backend; every backend the spec targets needs one."""

    cuda: SigmoidName | None = None
    hip: SigmoidName | None = None


TieOrderSpec = Annotated[
    Annotated[Literal["lowest_id"], Tag("named")]
    | Annotated[list[int], Tag("table")]
    | Annotated[TieRule, Tag("by_rule")]
    | Annotated[TieOrderPerBackend, Tag("per_backend")],
    Discriminator(_any_order),
]
SigmoidSpec = Annotated[
    Annotated[SigmoidName, Tag("named")] | Annotated[SigmoidPerBackend, Tag("per_backend")],
    Discriminator(lambda v: "per_backend" if isinstance(v, dict) else "named"),
]


def check_keys(field: str, value):
    """Unknown keys of a `tie_order` or `sigmoid` mapping, as a FieldError at the key. Checked before
    pydantic picks a union member, whose tag would otherwise end up in the error's field path."""
    if field == "sigmoid" and isinstance(value, dict):
        _known_keys(value, list(BACKENDS), ())
    elif field == "tie_order" and _any_order(value) == "per_backend":
        _known_keys(value, list(BACKENDS), ())
        for backend, order in value.items():
            if isinstance(order, dict):
                _known_keys(order, list(TieRule.model_fields), (backend,))
    elif field == "tie_order" and isinstance(value, dict):
        _known_keys(value, list(TieRule.model_fields), ())
    return value


def _known_keys(mapping: dict, allowed: list[str], where: tuple) -> None:
    for key in mapping:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise FieldError(f"unknown key '{key}'{hint}; allowed here: {', '.join(allowed)}", where + (key,))


def declares_routing(spec) -> bool:
    """Whether the spec says anything of ties or the sigmoid (the routing families do; the defaults
    mean nothing to the others, whose generated tests stay as they were)."""
    return bool({"tie_order", "sigmoid", "routing"} & spec.model_fields_set)


def check_routing(spec) -> None:
    """Load-time checks of a spec's tie_order and sigmoid; raises FieldError with the path from the spec's root."""
    targeted = [b for b in BACKENDS if getattr(spec.targets, b)]
    for field in ("tie_order", "sigmoid"):
        value = getattr(spec, field)
        if not isinstance(value, (TieOrderPerBackend, SigmoidPerBackend)):
            continue
        for b in BACKENDS:
            given = getattr(value, b)
            if given is None and b in targeted:
                fix = (
                    f"`{b}: lowest_id` or another order"
                    if field == "tie_order"
                    else " or ".join(f"`{b}: {s}`" for s in SIGMOIDS)
                )
                raise FieldError(
                    f"no {field} for backend {b}, which this spec targets "
                    f"({', '.join(getattr(spec.targets, b))}); add {fix}",
                    (field,),
                )
            if given is not None and b not in targeted:
                raise FieldError(
                    f"this spec has no {b} targets; remove `{b}` here or add {b} archs under targets", (field, b)
                )
    for b in targeted:
        order = for_backend(spec.tie_order, b)
        where = ("tie_order", b) if isinstance(spec.tie_order, TieOrderPerBackend) else ("tie_order",)
        expert_priorities(order, spec.constants.get("num_experts"), where)


def expert_priorities(order, num_experts, where: tuple) -> list[int] | None:
    """Priority of each expert (its place in the order: lower wins a tie), or None for lowest_id.

    `where` is the path in the spec that errors point at.
    """
    if order == "lowest_id":
        return None
    n = num_experts
    if not isinstance(n, int) or isinstance(n, bool):
        what = "table" if isinstance(order, list) else "rule"
        raise FieldError(f"a tie-order {what} needs an integer constant `num_experts`", where)
    if not 0 < n <= MAX_EXPERTS:
        raise FieldError(
            f"num_experts = {n} cannot be tie-ordered: 1..{MAX_EXPERTS} experts fit the kernel's 16-bit tie field",
            where,
        )
    places = order if isinstance(order, list) else wave64_traversal(order, n, where)
    if sorted(places) != list(range(n)):
        missing = sorted(set(range(n)) - set(places))[:5]
        raise FieldError(
            f"the table must list each of 0..{n - 1} once (num_experts = {n}); "
            f"got {len(places)} entries, missing e.g. {missing}",
            where,
        )
    priority = [0] * n
    for place, expert in enumerate(places):
        priority[expert] = place
    return priority


def wave64_traversal(rule: TieRule, num_experts: int, where: tuple) -> list[int]:
    """The experts in the order aiter's wave64 reduction visits them (first place first).

    Group g (experts g*epg ... g*epg+epg-1) sits on lane g % 64 in bank g // 64; lanes are visited
    by rank, each lane's banks in order. For 896 experts, 4 to a group, lanes of rank < 32 hold 3
    groups and the others 4, which is aiter's `group_rank = rank*3 + bank` / `96 + (rank-32)*4 + bank`.
    """
    ranks, epg = rule.lane_rank, rule.experts_per_group
    if len(ranks) != WAVE_LANES:
        raise FieldError(
            f"a wave64 lane table has {WAVE_LANES} entries, one rank per lane; got {len(ranks)}", where + ("lane_rank",)
        )
    first: dict[int, int] = {}
    for lane, rank in enumerate(ranks):
        if not 0 <= rank < WAVE_LANES:
            raise FieldError(
                f"lane {lane} has rank {rank}; ranks are 0..{WAVE_LANES - 1}, each once", where + ("lane_rank", lane)
            )
        if rank in first:
            raise FieldError(
                f"rank {rank} is given to lanes {first[rank]} and {lane}; each of 0..{WAVE_LANES - 1} once",
                where + ("lane_rank", lane),
            )
        first[rank] = lane
    if epg < 1 or num_experts % epg:
        raise FieldError(
            f"experts_per_group = {epg} does not divide num_experts = {num_experts}; lanes load "
            "whole groups, so give a divisor",
            where + ("experts_per_group",),
        )
    groups = num_experts // epg
    lanes = sorted(range(WAVE_LANES), key=ranks.__getitem__)
    return [g * epg + i for lane in lanes for g in range(lane, groups, WAVE_LANES) for i in range(epg)]


def for_backend(value, backend: str):
    """A per-backend value's entry for `backend`, or the one value every backend shares."""
    return getattr(value, backend) if isinstance(value, (TieOrderPerBackend, SigmoidPerBackend)) else value
