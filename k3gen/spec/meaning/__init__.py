"""The load-time checks beyond the model: what a valid spec must also mean, for its template, its
oracle, its tests and the other specs. k3gen.spec.load calls check_meaning once per run; each check is
its own module and returns located SpecErrors.

- k3gen.spec.meaning.limits: the spec stays within what its template declares it can do;
- k3gen.spec.meaning.oracle_support: the oracle can check every generated cell;
- k3gen.spec.meaning.totality: maps over an axis cover every generated value, test shapes pass the gates;
- k3gen.spec.meaning.contracts: runners, the dense-bf16 and the fused-equals-separate contracts hold on
  generated cells.
"""

from __future__ import annotations

from pathlib import Path

from k3gen.spec.errors import SpecError
from k3gen.spec.meaning.contracts import check_contracts
from k3gen.spec.meaning.limits import check_spec, limits_path, read_limits
from k3gen.spec.meaning.oracle_support import check_oracle_support
from k3gen.spec.meaning.totality import check_totality


def check_meaning(loaded: list, runners, root: Path, complete: bool) -> list[SpecError]:
    """`loaded`: k3gen.spec.load.LoadedSpec list; `runners`: the LoadedRunners table or None; `complete`:
    no spec failed to load (so an absent family is really absent)."""
    errors: list[SpecError] = []
    limits_of: dict[str, object] = {}
    for ls in loaded:
        template = ls.spec.template
        if not (Path(root) / "templates" / template / "kernel.cuh.j2").is_file():
            continue  # k3gen.spec.load names the missing template
        if template not in limits_of:
            limits, limit_errors = read_limits(root, template)
            errors += limit_errors
            limits_of[template] = limits if not limit_errors else False
        limits = limits_of[template]
        if limits is None:
            errors.append(
                ls.error(
                    ("template",),
                    f"templates/{template}/ declares no limits ({limits_path(template)} "
                    "is missing); list the dtypes, params, flags, constants and vector "
                    "widths the template supports",
                )
            )
        elif limits:
            errors += check_spec(ls, limits)
        errors += check_oracle_support(ls, root)
        errors += check_totality(ls)
    errors += check_contracts(runners, loaded, complete)
    return errors
