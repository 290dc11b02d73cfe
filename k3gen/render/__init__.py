"""FamilyPlan → files in memory (k3gen.render.render), their keys checked unique and the tuning
tables' claims checked against the rendered code (k3gen.render.keys)."""

from k3gen.render.render import render_all

__all__ = ["render_all"]
