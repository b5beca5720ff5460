#!/usr/bin/python3
"""Plots of an infera bench/sim result JSON (the pinned shape of issue #7), with Debian's
python3-matplotlib. Usage: plot_report.py RESULT.json PREFIX
Writes PREFIX-ttft-cdf.png (TTFT CDF per policy), PREFIX-hit-ratio.png (hit ratio per policy
against the bounds) and PREFIX-load.png (requests per worker per policy)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    report = json.load(open(sys.argv[1]))
    prefix = sys.argv[2]
    policies = report["policies"]
    title = report.get("settings", {}).get("workload", "")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, p in policies.items():
        cdf = p.get("ttft_cdf_ms", [])
        if cdf:
            ax.plot(cdf, [i / (len(cdf) - 1) for i in range(len(cdf))], label=name)
    bounds = report.get("bounds") or {}
    if "ttft_lower_bound_p50_ms" in bounds:
        qs = [0.5, 0.9, 0.99]
        xs = [bounds["ttft_lower_bound_%s_ms" % q] for q in ("p50", "p90", "p99")]
        ax.plot(xs, qs, "ko", markersize=5,
                label="lower bound p50, p90, p99 (idle engine, infinite cache)")
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF " + title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(prefix + "-ttft-cdf.png", dpi=110)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = list(policies)
    ax.bar(names, [policies[n]["hit_ratio"] * 100 for n in names], color="tab:blue")
    if bounds:
        ax.axhline(bounds["infinite_cache_hit_ratio"] * 100, color="tab:red", linestyle="--",
                   label="infinite shared cache")
        ax.axhline(bounds["pooled_lru_hit_ratio"] * 100, color="tab:orange", linestyle=":",
                   label="pooled LRU (fleet capacity)")
        ax.legend()
    ax.set_ylabel("prefix cache hit ratio (%)")
    ax.set_title("Hit ratio " + title)
    fig.tight_layout()
    fig.savefig(prefix + "-hit-ratio.png", dpi=110)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        per = policies[n].get("requests_per_worker", [])
        ax.bar([w + i * width for w in range(len(per))], per, width=width, label=n)
    # One tick per worker, under the middle of its group of bars, labelled with its index (the
    # default ticks fell between groups: 0.5, 1.5, ...).
    workers = max((len(policies[n].get("requests_per_worker", [])) for n in names), default=0)
    ax.set_xticks([w + (len(names) - 1) * width / 2 for w in range(workers)])
    ax.set_xticklabels([str(w) for w in range(workers)])
    ax.set_xlabel("worker")
    ax.set_ylabel("requests")
    ax.set_title("Load per worker " + title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(prefix + "-load.png", dpi=110)


if __name__ == "__main__":
    main()
