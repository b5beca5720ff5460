"""Summarises scripts/bench-proxy's runs: a table of medians and the ratios, then one JSON line.
Ratios of req/s are given both as the ratio of the medians and per round (the paths of one
round ran back to back), with the median of those.

Input: a JSON-lines file, one line per wrk run: {"round", "variant", "connections", "path",
"requests", "rps", "p50_us", "p90_us", "p99_us", "errors": {...}, "cpu_us_per_req": {...}}.
Usage: /usr/bin/python3 summarize.py RESULTS.jsonl META_JSON
"""
import json
import statistics
import sys

# baseline: --baseline BIN; nats: --nats (infera with --request-transport nats), when given
PATHS = ("direct", "nginx", "infera", "baseline", "nats")


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=0):
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def rounded(x):
    """Floats to 3 significant decimals at most (the JSON line is quoted in docs)."""
    if isinstance(x, float):
        return round(x, 3) if abs(x) < 10 else round(x, 1)
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return x


def main():
    runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    meta = json.loads(sys.argv[2])
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    conns = sorted({r["connections"] for r in runs}, reverse=True)

    def select(variant, c, path):
        return sorted((r for r in runs if r["variant"] == variant and r["connections"] == c
                       and r["path"] == path), key=lambda r: r["round"])

    out = {"bench": "proxy", **meta, "results": {}, "ratios": {}}
    lines = []
    header = (f"{'variant':<12} {'conns':>5} {'path':<7} {'req/s':>9} {'rounds (req/s)':<26}"
              f" {'p50 us':>8} {'p90 us':>8} {'p99 us':>8} {'proxy cpu us/req':>16}"
              f" {'engine':>7} {'wrk':>6} {'errors':>6}")
    lines.append(header)
    for v in variants:
        out["results"][v] = {}
        for c in conns:
            out["results"][v][str(c)] = {}
            for p in PATHS:
                rs = select(v, c, p)
                if not rs:
                    continue
                cpu = lambda key: median([r["cpu_us_per_req"].get(key) for r in rs])
                errors = sum(sum(r["errors"].values()) for r in rs)
                agg = {
                    "rps": median([r["rps"] for r in rs]),
                    "rps_rounds": [round(r["rps"], 1) for r in rs],
                    "p50_us": median([r["p50_us"] for r in rs]),
                    "p90_us": median([r["p90_us"] for r in rs]),
                    "p99_us": median([r["p99_us"] for r in rs]),
                    "p50_us_rounds": [r["p50_us"] for r in rs],
                    "proxy_cpu_us_per_req": cpu("proxy"),
                    "engine_cpu_us_per_req": cpu("engine"),
                    "wrk_cpu_us_per_req": cpu("wrk"),
                    "bus_cpu_us_per_req": cpu("bus"),
                    "tokens_per_s": median([r.get("tokens_per_s") for r in rs]),
                    "requests": sum(r["requests"] for r in rs),
                    "prompt_tokens": median([r.get("prompt_tokens") for r in rs]),
                    "errors": errors,
                }
                out["results"][v][str(c)][p] = agg
                rounds = " ".join(f"{x:,.0f}" for x in agg["rps_rounds"])
                lines.append(
                    f"{v:<12} {c:>5} {p:<7} {fmt(agg['rps']):>9} {rounds:<26}"
                    f" {fmt(agg['p50_us']):>8} {fmt(agg['p90_us']):>8} {fmt(agg['p99_us']):>8}"
                    f" {fmt(agg['proxy_cpu_us_per_req'], 1):>16}"
                    f" {fmt(agg['engine_cpu_us_per_req'], 1):>7}"
                    f" {fmt(agg['wrk_cpu_us_per_req'], 1):>6} {errors:>6}"
                    + (f"  (bus cpu {fmt(agg['bus_cpu_us_per_req'], 1)} us/req)"
                       if agg["bus_cpu_us_per_req"] is not None else ""))

    lines.append("")
    lines.append(f"{'variant':<12} {'infera/nginx req/s':>18} {'(rounds; median)':<26} {'infera/direct':>13}"
                 f" {'nginx/direct':>12}   added p50 at 1 conn (us): {'nginx':>6} {'infera':>7}")
    top = conns[0]
    for v in variants:
        res = out["results"][v]
        ratios = {}

        def ratio(a, b, c=top):
            ra, rb = res.get(str(c), {}).get(a), res.get(str(c), {}).get(b)
            if not ra or not rb or not rb["rps"]:
                return None
            return ra["rps"] / rb["rps"]

        def paired(a, b, c=top):
            ra, rb = select(v, c, a), select(v, c, b)
            by_round = {r["round"]: r["rps"] for r in rb}
            return [round(r["rps"] / by_round[r["round"]], 3) for r in ra
                    if by_round.get(r["round"])]

        ratios["connections"] = top
        ratios["infera_over_nginx_rps"] = ratio("infera", "nginx")
        ratios["infera_over_nginx_rps_rounds"] = paired("infera", "nginx")
        ratios["infera_over_nginx_rps_paired_median"] = median(ratios["infera_over_nginx_rps_rounds"])
        ratios["infera_over_direct_rps"] = ratio("infera", "direct")
        ratios["nginx_over_direct_rps"] = ratio("nginx", "direct")
        if res.get(str(top), {}).get("baseline"):
            ratios["infera_over_baseline_rps"] = ratio("infera", "baseline")
            ratios["infera_over_baseline_rps_rounds"] = paired("infera", "baseline")
            ratios["baseline_over_nginx_rps"] = ratio("baseline", "nginx")
        added = {}
        if 1 in conns:
            direct = {r["round"]: r["p50_us"] for r in select(v, 1, "direct")}
            for p in ("nginx", "infera", "baseline", "nats"):
                diffs = [r["p50_us"] - direct[r["round"]] for r in select(v, 1, p)
                         if r["round"] in direct]
                if not diffs:
                    continue
                added[p] = median(diffs)
                added[p + "_rounds"] = diffs
        ratios["added_p50_us_1conn"] = added
        out["ratios"][v] = ratios
        rr = " ".join(f"{x:.2f}" for x in ratios["infera_over_nginx_rps_rounds"])
        pm = fmt(ratios["infera_over_nginx_rps_paired_median"], 2)
        lines.append(
            f"{v:<12} {fmt(ratios['infera_over_nginx_rps'], 2):>18} {('(' + rr + '; ' + pm + ')'):<26}"
            f" {fmt(ratios['infera_over_direct_rps'], 2):>13}"
            f" {fmt(ratios['nginx_over_direct_rps'], 2):>12}"
            f"   {'':>26}{fmt(added.get('nginx')):>6} {fmt(added.get('infera')):>7}")
        if res.get(str(top), {}).get("nats"):
            ratios["nats_over_infera_rps"] = ratio("nats", "infera")
            ratios["nats_over_infera_rps_rounds"] = paired("nats", "infera")
            ratios["nats_over_infera_rps_paired_median"] = median(ratios["nats_over_infera_rps_rounds"])
            if added.get("infera") and added.get("nats") is not None:
                ratios["nats_over_infera_added_p50"] = added["nats"] / added["infera"]
            per_round = {}
            for a, b in zip(added.get("nats_rounds", []), added.get("infera_rounds", [])):
                per_round.setdefault("r", []).append(round(a / b, 2) if b > 0 else None)
            ratios["nats_over_infera_added_p50_rounds"] = per_round.get("r", [])
        if "infera_over_baseline_rps" in ratios:
            rb = " ".join(f"{x:.2f}" for x in ratios["infera_over_baseline_rps_rounds"])
            lines.append(
                f"{'':<12} infera/baseline req/s {fmt(ratios['infera_over_baseline_rps'], 2)}"
                f" (rounds {rb}); baseline/nginx {fmt(ratios['baseline_over_nginx_rps'], 2)};"
                f" baseline added p50 at 1 conn {fmt(added.get('baseline'))} us")
    for v in variants:
        r = out["ratios"][v]
        if "nats_over_infera_rps" not in r:
            continue
        res = out["results"][v][str(top)]
        rr = " ".join(f"{x:.2f}" for x in r["nats_over_infera_rps_rounds"])
        lines.append(
            f"{v:<12} nats/infera (http) at {top} conns: req/s {fmt(r['nats_over_infera_rps'], 2)}"
            f" (rounds {rr}; paired median {fmt(r['nats_over_infera_rps_paired_median'], 2)}),"
            f" tokens/s {fmt(res['nats']['tokens_per_s'])} vs {fmt(res['infera']['tokens_per_s'])};"
            f" added p50 at 1 conn: nats {fmt(r['added_p50_us_1conn'].get('nats'))} us,"
            f" http {fmt(r['added_p50_us_1conn'].get('infera'))} us,"
            f" ratio {fmt(r.get('nats_over_infera_added_p50'), 2)}")
    tokens = []
    for v in variants:
        t = [a["prompt_tokens"] for a in (out["results"][v].get(str(c), {}).get("infera")
                                          for c in conns) if a and a.get("prompt_tokens")]
        if t:
            tokens.append(f"{v} {median(t):,.0f}")
    if tokens:
        lines.append("")
        lines.append("prompt tokens per request (infera_prompt_tokens_total): " + ", ".join(tokens))
    print("\n".join(lines))
    print("")
    print(json.dumps(rounded(out), separators=(",", ":")))


if __name__ == "__main__":
    main()
