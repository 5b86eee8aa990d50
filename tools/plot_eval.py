#!/usr/bin/env python3
"""Plot `mlakv eval --csv` output: per format (and variant), attention cosine to float64 (mean and
worst single query) and latent rel-RMSE against the layer magnitude.

usage: plot_eval.py EVAL.csv OUT.png
"""
import csv
import sys
from collections import defaultdict


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = defaultdict(list)
    with open(argv[1], newline="") as f:
        for r in csv.DictReader(f):
            rows[r.get("label") or r["format"]].append(r)
    fig, ax = plt.subplots(1, 2, figsize=(14, 5.5))
    for i, (label, rs) in enumerate(rows.items()):
        rs.sort(key=lambda r: float(r["mag"]))
        x = [float(r["mag"]) for r in rs]
        color = plt.cm.tab20(i % 20)
        style = "--" if "+" in label else "-"
        ax[0].plot(x, [1 - float(r["attn_cos_mean"]) for r in rs], style, color=color,
                   marker="o", ms=3, label=f"{label} (mean)")
        ax[0].plot(x, [1 - float(r["attn_cos_min"]) for r in rs], style, color=color,
                   marker="v", ms=4, alpha=0.45, label=f"{label} (worst query)")
        ax[1].plot(x, [float(r["latent_rel_rmse"]) for r in rs], style, color=color, marker="o",
                   ms=3, label=label)
    for a in ax:
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("layer magnitude max |latent|")
        a.grid(True, which="both", alpha=0.3)
    ax[0].set_title("attention: 1 - cosine to float64 (o mean, v worst query)")
    ax[0].set_ylabel("1 - cosine")
    ax[1].set_title("latent rel-RMSE")
    ax[1].set_ylabel("rel-RMSE")
    ax[1].legend(fontsize=6, loc="upper right")
    handles, labels = ax[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=6, loc="lower center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    fig.savefig(argv[2], dpi=130)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
