#!/usr/bin/python3
"""Checks issue 20's routing targets on the JSON that scripts/bench-routing wrote.
Usage: check-routing-targets.py OUT_DIR. Prints one line per target and workload, PASS or MISS,
and exits 0 either way (the figures go to docs/benchmarks.md; a miss is reported, not hidden)."""
import json
import os
import sys

BASELINES = ["round-robin", "random", "least-loaded"]
MODEL = "kv-aware:prefill-aware"


def main():
    out = sys.argv[1]
    for blocks in (16384, 65536):
        for workload in ("trace", "multi-turn", "agentic"):
            path = os.path.join(out, f"{workload}-{blocks}.json")
            if not os.path.exists(path):
                continue
            report = json.load(open(path))
            p = report["policies"]
            m = p[MODEL]
            name = f"{workload} @ {blocks}"
            for q in ("p50", "p90", "p99"):
                key = f"ttft_{q}_ms"
                best = min(p[b][key] for b in BASELINES)
                verdict = "PASS" if m[key] <= best else "MISS"
                print(f"{verdict} {name}: TTFT {q} {m[key]:.1f} ms <= best baseline {best:.1f} ms")
            bound = report["bounds"]["pooled_lru_hit_ratio"]
            share = m["hit_ratio"] / bound if bound else 1.0
            verdict = "PASS" if share >= 0.95 else "MISS"
            print(f"{verdict} {name}: hit ratio {m['hit_ratio'] * 100:.1f} % = {share * 100:.1f} % "
                  f"of the pooled-LRU bound {bound * 100:.1f} % (>= 95 %)")
            rr = p["round-robin"]
            if workload == "multi-turn" and blocks == 65536:
                for q, need in (("p50", 1.2), ("p99", 1.5)):
                    key = f"ttft_{q}_ms"
                    ratio = rr[key] / m[key] if m[key] else 0
                    verdict = "PASS" if ratio >= need else "MISS"
                    print(f"{verdict} {name}: TTFT {q} {ratio:.2f}x better than round-robin (>= {need}x)")
            if workload == "trace":
                ratio = rr["ttft_p50_ms"] / m["ttft_p50_ms"] if m["ttft_p50_ms"] else 0
                verdict = "PASS" if ratio >= 3 else "MISS"
                print(f"{verdict} {name}: TTFT p50 {ratio:.2f}x better than round-robin (>= 3x)")


if __name__ == "__main__":
    main()
