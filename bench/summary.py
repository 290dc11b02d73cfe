"""Render bench/results/README.md, the summary of every device's results, from bench/results/*/*.json.

    python bench/summary.py            # rewrite it (and the figures sections of README.md and docs/)
    python bench/summary.py --check    # exit 1 with a diff when anything is stale

The tables are k3gen.review.figures's, the same that render the README's and docs/performance.md's
figures, so the summary and the prose always show the numbers the committed JSON holds.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from k3gen.review import figures  # noqa: E402

if __name__ == "__main__":
    sys.exit(figures.main(["--root", str(REPO), *sys.argv[1:]]))
