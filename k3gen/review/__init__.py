"""(old tree, new tree) → DiffReport: `k3gen diff` (k3gen.review.git, .compare, .format, .report), the
price of a change and the budgets (k3gen.review.pricing), and the figures of the README and docs
(k3gen.review.figures)."""

from k3gen.review.format import FORMATS
from k3gen.review.git import diff_rev
from k3gen.review.report import DiffError, DiffReport

__all__ = ["FORMATS", "DiffError", "DiffReport", "diff_rev"]
