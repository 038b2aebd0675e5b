"""Bar chart of a ``gemm.py`` result: tunesmith's speedup over ATen and over Inductor
max-autotune, per case (needs matplotlib; run anywhere, on the committed JSON).

    python benchmarks/gemm_chart.py benchmarks/results/gemm_h100.json benchmarks/results/gemm_h100.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(source: str, target: str) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = json.loads(Path(source).read_text())
    rows, summary = result["cases"], result["summary"]
    names = [r["name"] for r in rows]
    series = [
        ("over ATen", "speedup_vs_aten", "#4878d0"),
        ("over Inductor max-autotune", "speedup_vs_inductor", "#ee854a"),
    ]
    fig, ax = plt.subplots(figsize=(12, 5.5))
    width = 0.4
    for i, (label, key, color) in enumerate(series):
        xs = [j + (i - 0.5) * width for j in range(len(rows))]
        ax.bar(xs, [r.get(key, 0) for r in rows], width, label=label, color=color)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("speedup (time of the other / tunesmith's)")
    ax.set_title(
        f"tunesmith (aten + triton) on {result['device']}, torch {result['torch']}, triton {result['triton']}: "
        f"geomean {summary['geomean_speedup_vs_aten']:.4f}x over ATen, "
        f"{summary.get('geomean_speedup_vs_inductor', float('nan')):.4f}x over Inductor",
        fontsize=9,
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
