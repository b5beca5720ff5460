#!/usr/bin/env python3
"""Seed corpus for the KV-event decoder fuzzer (src/infera/events/decoder_fuzz.cc).

One file per payload of vllm_kv_events_golden.json (every profile and case, plus the
dp-rank-unset variants), and a few hand-made malformed inputs so the replay in CI also walks the
error paths. Deterministic; rerun after the golden file changes:
    /usr/bin/python3 make_fuzz_corpus.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fuzz_corpus")


def main():
    golden = json.load(open(os.path.join(HERE, "vllm_kv_events_golden.json")))
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        os.remove(os.path.join(OUT, name))
    seeds = {}
    for profile, cases in golden["vectors"].items():
        for case, c in cases.items():
            seeds[f"{profile}__{case}"] = bytes.fromhex(c["hex"])
            if "hex_dp_rank_unset" in c:
                seeds[f"{profile}__{case}__dp_unset"] = bytes.fromhex(c["hex_dp_rank_unset"])
    full = seeds["vllm_map__a_block_stored"]
    seeds["malformed__truncated"] = full[: len(full) // 2]
    seeds["malformed__trailing_byte"] = full + b"\x00"
    seeds["malformed__invalid_byte"] = b"\x93\xc1"
    seeds["malformed__huge_events_list"] = b"\x92\xcb" + b"\x00" * 8 + b"\xdd\xff\xff\xff\xff"
    seeds["malformed__deep_nesting"] = b"\x92\x00\x91" + b"\x91" * 200 + b"\xc0"
    seeds["malformed__map_event_without_type"] = b"\x92\x00\x91\x81\xacblock_hashes\x90"
    seeds["malformed__empty"] = b""
    for name, data in sorted(seeds.items()):
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {OUT}")


if __name__ == "__main__":
    main()
