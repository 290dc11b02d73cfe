"""LoadedSpec → FamilyPlan: what generation needs of each family, resolved once (k3gen.plan.family)."""

from k3gen.plan.family import FamilyPlan
from k3gen.plan.resolve import resolve_all

__all__ = ["FamilyPlan", "resolve_all"]
