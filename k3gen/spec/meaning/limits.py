"""What a family template can do (templates/<template>/limits.yaml), and the specs checked against it.

A spec edit can be legal YAML and a legal model and still ask a kernel for something it was not
written for (a group size its shuffles cannot reduce, a dtype it has no conversion for). Each
template states its limits beside itself; every spec naming the template is checked at load, each
error naming the spec line and the limit's own file:line. The same limits become static_asserts in
the template's launch() (k3gen/render/cpp.py), a second line of defence for anything that bypasses load.

limits.yaml, all sections optional; every rule needs `why`, shown in the error:

    dtypes:    {AXIS: {values: [bf16, fp32], why: ...}}        # axes the template reads, and their dtypes
    params:    {NAME: {values: [32, 64], why: ...}}            # or min / max / multiple_of
    flags:     {NAME: {why: ..., needs: pdl}}                  # flags the template reads (needs: what
                                                               #   an arch where a per-arch flag is on must have)
    archs:     {needs: [fp8], why: ...}                        # what every target arch must have
    routing:   {scoring: {values: [sigmoid, softmax], why: ...}}  # the routing axes a route template serves
    constants: {NAME: {min: 1, max: 64, why: ...}}             # or values
    vector:    {elements: {values: [16], why: ...}}            # or bytes: the spec's vector kind
    checks:    [{check: "top_k <= num_experts", why: ...}]     # over constants, params and vec

Every name listed is read by the template, so a spec must declare it. Dtype axes, params and
call-time flags the file does not list are refused too: the kernel would ignore them and build the
same code twice. Constants it does not list are free (gates may use them). A dtype rule with
`optional: true` is an axis the template reads when the spec has it (a router's bias).

A check reads the constants and params listed here and vec; a routing template's checks also read
the routing axes as true/false names (ROUTING_NAMES). Checks hold for every tuning config, not the
default alone: each config's knob values replace their constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from k3gen.runtime.archs import ARCHS, FEATURES
from k3gen.runtime.dtypes import DTYPES
from k3gen.runtime.files import Refused, read_text
from k3gen.spec.bounds import MAX_SOURCE_BYTES
from k3gen.spec.errors import SpecError
from k3gen.spec.exprs import Expr, ExprError, Name, Scope, parse_expr
from k3gen.spec.model import tuning_configs, variant_points
from k3gen.spec.paths import plain_file_inside
from k3gen.spec.yaml_lines import LocatedData, parse_yaml

LIMITS_FILE = "limits.yaml"
RULE_SECTIONS = ("dtypes", "params", "flags", "constants", "vector", "routing")
# What a routing template's checks may read of the spec's routing (k3gen.spec.model.Routing).
ROUTING_NAMES = {
    "grouped": lambda r: r.groups is not None,
    "softmax": lambda r: r.scoring == "softmax",
    "scoring_after": lambda r: r.scoring_at == "after",
}
ROUTING_FIELDS = ("scoring", "scoring_at", "bias", "group_score", "renormalize", "sorted")
VECTOR_KINDS = ("bytes", "elements")
RULE_KEYS = {"dtypes": ("values", "why", "optional"), "flags": ("why", "needs"), "routing": ("values", "why")}
BOUND_KEYS = ("values", "min", "max", "multiple_of", "why")


@dataclass(frozen=True)
class Rule:
    """What values one name may take; None bounds do not apply."""

    section: str
    name: str
    line: int
    why: str
    values: tuple | None = None
    min: float | None = None
    max: float | None = None
    multiple_of: int | None = None
    needs: tuple[str, ...] = ()  # arch features (k3gen.runtime.archs.FEATURES)
    optional: bool = False  # a dtype axis the template reads when the spec has it

    def allows(self, value) -> bool:
        if self.values is not None and not any(_same(value, v) for v in self.values):
            return False
        if self.min is not None or self.max is not None or self.multiple_of is not None:
            if not _number(value):
                return False
            if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
                return False
            if self.multiple_of is not None and (not isinstance(value, int) or value % self.multiple_of):
                return False
        return True

    def describe(self) -> str:
        parts = [", ".join(_shown(v) for v in self.values)] if self.values is not None else []
        parts += [f"at least {_shown(self.min)}"] if self.min is not None else []
        parts += [f"at most {_shown(self.max)}"] if self.max is not None else []
        parts += [f"multiples of {self.multiple_of}"] if self.multiple_of is not None else []
        return "; ".join(parts) if parts else "any value"


@dataclass(frozen=True)
class Check:
    """A relation between constants, params and vec that the template needs: one expression of the
    spec language (k3gen.spec.exprs), decided at load and spelled as a static_assert in launch()."""

    source: str
    why: str
    line: int
    expr: Expr


@dataclass
class TemplateLimits:
    template: str
    file: str  # templates/<template>/limits.yaml
    rules: dict = field(default_factory=dict)  # section -> name -> Rule
    checks: list = field(default_factory=list)
    archs: Rule | None = None  # what every target arch must have (section "archs", name "")

    def at(self, line: int) -> str:
        return f"{self.file}:{line}"

    def section(self, name: str) -> dict:
        return self.rules.get(name, {})


def limits_path(template: str) -> str:
    return f"templates/{template}/{LIMITS_FILE}"


def read_limits(root: Path, template: str) -> tuple[TemplateLimits | None, list[SpecError]]:
    """Parse a template's limits strictly: unknown keys, missing `why` and malformed rules are errors
    located in the limits file."""
    rel = limits_path(template)
    path = Path(root) / rel
    if not plain_file_inside(path, Path(root) / "templates"):
        return None, []
    try:
        text = read_text(path, Path(root) / "templates", MAX_SOURCE_BYTES, rel, "bounds.MAX_SOURCE_BYTES")
    except Refused as exc:
        return None, [SpecError(rel, exc.line, "", "<file>", exc.reason)]
    located, errors = parse_yaml(text, rel)
    if located is None or errors:
        return None, errors
    return _Parser(rel, template, located).parse()


class _Parser:
    def __init__(self, file: str, template: str, located: LocatedData):
        self.file, self.template, self.located = file, template, located
        self.errors: list[SpecError] = []

    def error(self, path: tuple, message: str) -> None:
        self.errors.append(
            SpecError(self.file, self.located.line_of(path), "", ".".join(map(str, path)) or "<root>", message)
        )

    def parse(self) -> tuple[TemplateLimits | None, list[SpecError]]:
        data = self.located.data
        limits = TemplateLimits(self.template, self.file)
        if not isinstance(data, dict):
            self.error((), "limits are a mapping of sections: " + ", ".join((*RULE_SECTIONS, "checks")))
            return None, self.errors
        for key, body in data.items():  # checks last: they may read what every other section lists
            if key in RULE_SECTIONS:
                limits.rules[key] = self.section(key, body)
            elif key == "checks":
                continue
            elif key == "archs":
                limits.archs = self.rule("archs", "", body, ("archs",))
            else:
                self.error(
                    (key,), f"unknown section '{key}'; sections: {', '.join((*RULE_SECTIONS, 'archs', 'checks'))}"
                )
        if "checks" in data:
            limits.checks = self.checks(data["checks"], limits)
        return (None if self.errors else limits), self.errors

    def section(self, section: str, body) -> dict:
        if not isinstance(body, dict):
            self.error((section,), f"`{section}` is a mapping of name -> rule")
            return {}
        rules = {}
        for name, rule in body.items():
            path = (section, name)
            if section == "routing" and name not in ROUTING_FIELDS:
                self.error(path, f"unknown routing axis '{name}'; routing axes: {', '.join(ROUTING_FIELDS)}")
                continue
            if section == "vector" and name not in VECTOR_KINDS:
                self.error(path, f"unknown vector kind '{name}'; use one of: {', '.join(VECTOR_KINDS)}")
                continue
            if section == "dtypes" and isinstance(rule, dict) and "values" not in rule:
                self.error(path, "a dtype rule lists its dtypes: `values: [bf16, ...]`")
                continue
            parsed = self.rule(section, str(name), rule, path)
            if parsed is not None:
                rules[str(name)] = parsed
        return rules

    def rule(self, section: str, name: str, rule, path: tuple) -> Rule | None:
        if not isinstance(rule, dict):
            self.error(path, 'a rule is a mapping such as `{values: [...], why: "..."}`')
            return None
        allowed = ("needs", "why") if section == "archs" else RULE_KEYS.get(section, BOUND_KEYS)
        ok = True
        for key in rule:
            if key not in allowed:
                self.error(path + (key,), f"unknown key '{key}'; allowed here: {', '.join(allowed)}")
                ok = False
        why = rule.get("why")
        if not isinstance(why, str) or not why.strip():
            self.error(path, 'every limit says `why: "..."` (the error a spec gets shows it)')
            ok = False
        values = rule.get("values")
        if values is not None:
            if not isinstance(values, list) or not values:
                self.error(path + ("values",), "`values` is a non-empty list")
                ok = False
            elif section == "dtypes":
                for i, v in enumerate(values):
                    if v not in DTYPES:
                        self.error(path + ("values", i), f"'{v}' is not a dtype; known: {', '.join(DTYPES)}")
                        ok = False
            elif any(not isinstance(v, (int, float, str, bool)) for v in values):
                self.error(path + ("values",), "values are numbers, booleans or names")
                ok = False
        for key in ("min", "max"):
            if key in rule and not _number(rule[key]):
                self.error(path + (key,), f"`{key}` is a number")
                ok = False
        m = rule.get("multiple_of")
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m <= 0):
            self.error(path + ("multiple_of",), "`multiple_of` is a positive integer")
            ok = False
        needs = rule.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        if not isinstance(needs, list) or any(n not in FEATURES for n in needs):
            self.error(path + ("needs",), f"`needs` names arch features: {', '.join(FEATURES)}")
            ok = False
        if not ok:
            return None
        return Rule(
            section,
            name,
            self.located.line_of(path),
            why.strip(),
            tuple(values) if values is not None else None,
            rule.get("min"),
            rule.get("max"),
            m,
            tuple(needs),
            rule.get("optional") is True,
        )

    def checks(self, body, limits: TemplateLimits) -> list[Check]:
        if not isinstance(body, list):
            self.error(("checks",), '`checks` is a list of `{check: EXPR, why: "..."}`')
            return []
        scope = check_scope(limits)
        checks = []
        for i, item in enumerate(body):
            path = ("checks", i)
            if not isinstance(item, dict) or set(item) != {"check", "why"}:
                self.error(path, 'a check is `{check: EXPR, why: "..."}`, nothing else')
                continue
            try:
                expr = parse_expr(item["check"], scope)
            except ExprError as exc:
                said = (
                    f"'{exc.unknown}' is not a constant or param listed in this file, nor vec; list it above first"
                    if exc.unknown
                    else f"{exc}; a check uses integer arithmetic, comparisons and the names listed here"
                )
                self.error(path + ("check",), said)
                continue
            checks.append(Check(str(item["check"]), str(item["why"]), self.located.line_of(path), expr))
        return checks


def check_scope(limits: TemplateLimits) -> Scope:
    """What a limits check may read: the constants and params the file lists (template parameters and
    constants of launch() in C++, where vec is VEC), every one an integer that may divide."""
    names = {n: Name("int", n, n, positive=True) for n in (*limits.section("constants"), *limits.section("params"))}
    if limits.section("routing"):
        names |= {n: Name("bool", n, n) for n in ROUTING_NAMES}
    return Scope({**names, "vec": Name("int", "vec", "VEC", positive=True)}, cpp=True, want="bool")


# --- a spec against its template's limits ---------------------------------------------------------


def check_spec(ls, limits: TemplateLimits) -> list[SpecError]:
    """Every located error of one loaded spec (k3gen.spec.load.LoadedSpec) against its template's limits."""
    s, errors = ls.spec, []
    where = f"templates/{limits.template}/"

    def beyond(path: tuple, what: str, rule: Rule) -> None:
        errors.append(
            ls.error(
                path,
                f"{what} is beyond what {where} supports: {limits.at(rule.line)} allows "
                f"{rule.describe()} ({rule.why}); stay within it, or extend the template "
                "and its limits",
            )
        )

    axes = s.dtypes.axes
    for axis, rule in limits.section("dtypes").items():
        if axis not in axes and rule.optional:
            continue
        if axis not in axes:
            errors.append(
                ls.error(
                    ("dtypes", "axes"),
                    f"the template reads dtype axis '{axis}' (T_{axis}; "
                    f"{limits.at(rule.line)}); declare it, e.g. "
                    f"`{axis}: [{rule.values[0]}]`",
                )
            )
            continue
        for i, dtype in enumerate(axes[axis]):
            if not rule.allows(dtype):
                beyond(("dtypes", "axes", axis, i), f"dtype {dtype} on axis '{axis}'", rule)
    errors += _unread(ls, limits, "dtypes", "dtype axis", axes, ("dtypes", "axes"))
    for name, rule in limits.section("params").items():
        if name not in s.params:
            errors.append(
                _missing(
                    ls,
                    "params",
                    f"the template reads param '{name}' ({limits.at(rule.line)}); "
                    f"declare it: `{name}: {{values: [...], default: ...}}`",
                )
            )
            continue
        for i, value in enumerate(s.params[name].values):
            if not rule.allows(value):
                beyond(("params", name, "values", i), f"{name} {_shown(value)}", rule)
    errors += _unread(ls, limits, "params", "param", s.params, ("params",))
    call_flags = {f: s.flags[f] for f in s.call_flags}
    for name, rule in limits.section("flags").items():
        if name not in s.flags:
            errors.append(
                _missing(
                    ls, "flags", f"the template reads flag '{name}' ({limits.at(rule.line)}); declare it under `flags:`"
                )
            )
    errors += _unread(ls, limits, "flags", "flag", call_flags, ("flags",))
    for name, rule in limits.section("constants").items():
        if name not in s.constants:
            example = _shown(rule.values[0] if rule.values else rule.min if rule.min is not None else 1)
            errors.append(
                _missing(
                    ls,
                    "constants",
                    f"the template reads constant '{name}' "
                    f"({limits.at(rule.line)}); declare it, e.g. `{name}: {example}`",
                )
            )
        elif not rule.allows(s.constants[name]):
            beyond(("constants", name), f"constant {name} = {_shown(s.constants[name])}", rule)
    knobs = s.tuning.knobs if s.tuning is not None else {}
    for name, values in knobs.items():  # each candidate is compiled: the same limits as the constant
        rule = limits.section("constants").get(name)
        if rule is None:
            errors.append(
                ls.error(
                    ("tuning", "knobs", name),
                    f"{where}limits.yaml declares no constant '{name}'; a knob must be a constant the template reads",
                )
            )
            continue
        for i, value in enumerate(values):
            if not rule.allows(value):
                beyond(("tuning", "knobs", name, i), f"candidate {name} = {_shown(value)}", rule)
    errors += _check_vector(ls, limits, beyond)
    errors += _check_archs(ls, limits)
    errors += _check_routing(ls, limits, beyond)
    if not errors:  # the relations assume every name above is declared and in range
        errors += _check_relations(ls, limits)
    return errors


def _missing(ls, section: str, message: str) -> SpecError:
    """An error about a name the spec lacks: at its section, or at `template:` when it has none."""
    line = ls.located.line_of((section if section in ls.located.data else "template",))
    return SpecError(ls.file, line, ls.spec.kernel, section, message)


def _unread(ls, limits: TemplateLimits, section: str, what: str, declared: dict, path: tuple) -> list[SpecError]:
    listed = limits.section(section)
    return [
        ls.error(
            path + (name,),
            f"templates/{limits.template}/ reads no {what} '{name}' ({limits.file} lists: "
            f"{', '.join(listed) or 'none'}); the kernel would ignore it and build the same "
            "code twice: remove it, or extend the template and its limits",
        )
        for name in declared
        if name not in listed
    ]


def _check_vector(ls, limits: TemplateLimits, beyond) -> list[SpecError]:
    vector, rules, errors = ls.spec.vector, limits.section("vector"), []
    if not rules:
        return errors
    kind = "bytes" if vector.bytes is not None else "elements"
    if kind not in rules:
        other = next(iter(rules))
        rule = rules[other]
        example = rule.values[0] if rule.values else 16
        return [
            ls.error(
                ("vector",),
                f"templates/{limits.template}/ sizes its vectors in {other} "
                f"({limits.at(rule.line)}); write `vector: {{{other}: {example}}}`",
            )
        ]
    rule = rules[kind]
    value = getattr(vector, kind)
    if not rule.allows(value):
        beyond(("vector", kind), f"vector.{kind} {value}", rule)
    for i, o in enumerate(vector.overrides):
        if kind == "bytes" and not rule.allows(o.bytes):
            beyond(("vector", "overrides", i, "bytes"), f"vector override of {o.bytes} bytes", rule)
    return errors


def effective_routing(s):
    """The spec's routing, or the defaults (sigmoid before the top-K, bias on the scores, sorted) of a
    routing template's spec that declares none."""
    from k3gen.spec.model import Routing

    return s.routing if s.routing is not None else Routing()


def _routing_value(r, name: str):
    return (r.groups.score if r.groups else None) if name == "group_score" else getattr(r, name)


def _check_routing(ls, limits: TemplateLimits, beyond) -> list[SpecError]:
    """The spec's routing axes against what a routing template serves (its `routing:` section)."""
    s, rules = ls.spec, limits.section("routing")
    if not rules:
        if s.routing is not None:
            return [
                ls.error(
                    ("routing",),
                    f"templates/{limits.template}/ routes nothing ({limits.file} has no `routing:` section); "
                    "remove `routing:`, or use a routing template",
                )
            ]
        return []
    r = effective_routing(s)
    for name, rule in rules.items():
        value = _routing_value(r, name)
        if value is not None and not rule.allows(value):
            path = ("routing", "groups", "score") if name == "group_score" else ("routing", name)
            beyond(path, f"routing.{name} {_shown(value)}", rule)
    return []


def _check_archs(ls, limits: TemplateLimits) -> list[SpecError]:
    """Every target arch has what the template needs, and so does every arch a per-arch flag is on for
    (k3gen.runtime.archs): a new arch is a spec edit, accepted or refused here with the reason."""
    s, errors = ls.spec, []

    def lacking(arch: str, rule: Rule) -> str:
        missing = [n for n in rule.needs if n not in ARCHS[arch].features]
        return "; ".join(FEATURES[n] for n in missing)

    if limits.archs is not None:
        for backend in ("cuda", "hip"):
            for i, arch in enumerate(getattr(s.targets, backend)):
                if arch in ARCHS and (why := lacking(arch, limits.archs)):
                    errors.append(
                        ls.error(
                            ("targets", backend, i),
                            f"templates/{limits.template}/ needs {why}, which {arch} lacks "
                            f"({limits.at(limits.archs.line)}: {limits.archs.why}); target another arch, "
                            "or extend the template and its limits",
                        )
                    )
    for name, flag in s.flags.items():
        rule = limits.section("flags").get(name)
        for i, arch in enumerate(flag.archs or []):
            if rule is not None and arch in ARCHS and (why := lacking(arch, rule)):
                errors.append(
                    ls.error(
                        ("flags", name, "archs", i),
                        f"{name} is on for {arch}, which lacks {why} ({limits.at(rule.line)}: {rule.why}); "
                        f"drop {arch} from flags.{name}.archs",
                    )
                )
    return errors


def _check_relations(ls, limits: TemplateLimits) -> list[SpecError]:
    """Each check, for every generated (cell, params) of the spec; one error per check, naming the
    values that break it."""

    s, errors = ls.spec, []
    for check in limits.checks:
        failing = []
        for values in _variant_values(s):
            if check.expr.decide(values) is False:
                shown = ", ".join(f"{n} = {_shown(values[n])}" for n in check.expr.reads)
                failing.append(shown)
        if failing:
            first = check.expr.reads[0]
            path = (
                ("constants", first)
                if first in s.constants
                else ("params", first)
                if first in s.params
                else ("vector",)
            )
            failing = list(dict.fromkeys(failing))
            errors.append(
                ls.error(
                    path,
                    f"`{check.source}` does not hold ({'; '.join(failing)}): "
                    f"{limits.at(check.line)} requires it ({check.why}); change the spec, or "
                    "extend the template and its limits",
                )
            )
    return errors


def _variant_values(s):
    """Name -> value of constants, params and vec (and a routing template's routing names), for each
    generated (cell, params) pair and each tuning config (its knob values over their constants)."""
    r = effective_routing(s)
    routed = {n: read(r) for n, read in ROUTING_NAMES.items()}
    configs = tuning_configs(s) if s.tuning is not None else [{}]
    for dtypes, params, _ in variant_points(s.dtypes, s.params):
        for config in configs:
            yield {**s.constants, **config, **params, **routed, "vec": s.vector.elements_for(dtypes)}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _shown(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)
