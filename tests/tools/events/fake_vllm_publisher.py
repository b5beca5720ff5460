#!/usr/bin/env python3
"""A stand-in for vLLM's KV-event publisher, driven by a test over stdin/stdout.

Written from the protocol in shared/wire/KV_EVENTS.md (sections 1.1-1.7, 2), not from vLLM code:

  * PUB socket (an XPUB here, identical on the wire, so the test can wait until a subscription
    has arrived instead of sleeping): 3 frames [topic, seq as 8 bytes big-endian, payload],
    seq from 0 per process, payload = msgpack KVEventBatch [ts, events, dp_rank];
  * ROUTER replay socket: [identity, b"", start_seq] -> [identity, b"", seq, payload] for each
    buffered batch with seq >= start_seq, then [identity, b"", ff*8, b""]; the buffer is a
    deque(maxlen=buffer_steps) of encoded payloads, like vLLM's;
  * a small prefix cache modelled on vLLM's BlockPool: chained block hashes (sha256 of the parent
    digest and the block's tokens; the int form on the wire is the last 8 digest bytes, as
    vLLM's maybe_convert_block_hash), one BlockStored per newly cached run of a request (parent
    = the request's last cached block, None at block 0), LRU eviction of leaf blocks with one
    BlockRemoved per hash, AllBlocksCleared on clear (GPU only, as /reset_prefix_cache);
  * options: --format map (current vLLM, tagged maps), array (last positional schema) or sglang
    (positional, signed int64 hashes = first 8 digest bytes); --hybrid adds a sliding-window
    KV-cache group (group_idx 1) that stores the same hashes and drops blocks early;
    --offload moves evicted blocks to a CPU tier with tokenless stores (OffloadingConnector).

With --connect ENDPOINT the PUB socket connects to a subscriber that binds (a router's
--kv-events-bind), as vLLM's does for an endpoint without '*'; the replay socket still binds.

Protocol with the test: first line on stdout {"pub": endpoint, "replay": endpoint}; then one
JSON command per stdin line, one JSON answer per stdout line:
  {"op": "wait_subscriber", "timeout_ms": T}  -> {"ok": bool}
  {"op": "steps", "n": N, "drop_first": K, "drop_every": M}
        run N scheduler steps; the first K batches and every M-th are buffered for replay but
        not sent live (a lossy network)                 -> {"seq": last seq used}
  {"op": "serve", "ms": T}  answer replay requests for T ms  -> {"ok": true}
  {"op": "clear"}                                       -> {"seq": ...}
  {"op": "dump"}  the true cache -> {"gpu_blocks": n, "cpu_blocks": n, "paths": [[tokens]]}
  {"op": "exit"}
Dependencies: Debian python3-zmq, python3-msgpack. Run with /usr/bin/python3.
"""
import argparse
import collections
import hashlib
import json
import os
import random
import sys
import time

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class Cache:
    """GPU prefix cache (+ optional CPU tier) that records vLLM-shaped events."""

    def __init__(self, args, rng):
        self.args = args
        self.rng = rng
        self.bs = args.block_size
        self.blocks = collections.OrderedDict()  # digest -> {parent, tokens, children}; LRU order
        self.cpu = collections.OrderedDict()  # digest -> True
        self.events = []
        # Prompt families: shared system prompts of a few blocks each.
        self.families = [[rng.randrange(150000) for _ in range(self.bs * rng.randint(2, 6))]
                         for _ in range(args.families)]

    # ---- wire forms ----
    def wire_hash(self, digest):
        if self.args.format == "sglang":
            return int.from_bytes(digest[:8], "big", signed=True)
        if self.args.bytes_hashes:
            return digest
        return int.from_bytes(digest, "big") & (2**64 - 1)

    def stored(self, digests, parent, tokens, medium="GPU", group=0, kind="full_attention"):
        f = self.args.format
        hashes = [self.wire_hash(d) for d in digests]
        par = None if parent is None else self.wire_hash(parent)
        if f == "map":
            ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": par,
                  "token_ids": tokens, "block_size": self.bs, "lora_id": None, "medium": medium,
                  "lora_name": None, "extra_keys": [None] * len(hashes), "group_idx": group,
                  "kv_cache_spec_kind": kind}
            if kind == "sliding_window":
                ev["kv_cache_spec_sliding_window"] = 128
            return ev
        if f == "array":
            ev = ["BlockStored", hashes, par, tokens, self.bs, None, medium, None,
                  [None] * len(hashes), group, kind]
            if kind == "sliding_window":
                ev.append(128)
            return ev
        return ["BlockStored", hashes, par, tokens, self.bs, None, medium]  # sglang

    def removed(self, digests, medium="GPU", group=0):
        hashes = [self.wire_hash(d) for d in digests]
        if self.args.format == "map":
            return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium,
                    "group_idx": group}
        if self.args.format == "array":
            return ["BlockRemoved", hashes, medium, group]
        return ["BlockRemoved", hashes, medium]

    def cleared(self):
        if self.args.format == "map":
            return {"type": "AllBlocksCleared"}
        return ["AllBlocksCleared"]

    # ---- cache behaviour ----
    def digest(self, parent, tokens):
        h = hashlib.sha256(parent or b"\x00" * 32)
        h.update(b"".join(t.to_bytes(4, "little") for t in tokens))
        return h.digest()

    def serve(self, prompt):
        """Caches every full block of `prompt` that is not cached yet (one request)."""
        parent = None
        run, run_tokens, run_parent = [], [], None
        for i in range(len(prompt) // self.bs):
            tokens = prompt[i * self.bs:(i + 1) * self.bs]
            d = self.digest(parent, tokens)
            if d in self.blocks:
                self.blocks.move_to_end(d)
            else:
                if not run:
                    run_parent = parent
                self.blocks[d] = {"parent": parent, "tokens": tokens, "children": 0}
                if parent is not None:
                    self.blocks[parent]["children"] += 1
                run.append(d)
                run_tokens.extend(tokens)
            parent = d
        if run:
            self.events.append(self.stored(run, run_parent, run_tokens))
            if self.args.hybrid and self.args.format != "sglang":
                # The sliding-window group caches the same blocks and forgets old ones at once.
                self.events.append(self.stored(run, run_parent, run_tokens, group=1,
                                               kind="sliding_window"))
                self.events.append(self.removed(run[:1], group=1))
        while len(self.blocks) > self.args.capacity:
            self.evict()

    def evict(self):
        for d, b in self.blocks.items():  # least recently used leaf first
            if b["children"] == 0:
                break
        b = self.blocks.pop(d)
        if b["parent"] is not None:
            self.blocks[b["parent"]]["children"] -= 1
        if self.args.offload and d not in self.cpu:
            # OffloadingConnector: a tokenless store on the CPU tier, before the GPU copy goes.
            self.cpu[d] = True
            if self.args.format == "map":
                self.events.append({"type": "BlockStored", "block_hashes": [self.wire_hash(d)],
                                    "parent_block_hash": None, "token_ids": [],
                                    "block_size": self.bs, "lora_id": None, "medium": "CPU",
                                    "lora_name": None})
            else:
                self.events.append(["BlockStored", [self.wire_hash(d)], None, [], self.bs, None,
                                    "CPU"])
            while len(self.cpu) > self.args.cpu_capacity:
                old, _ = self.cpu.popitem(last=False)
                self.events.append(self.removed([old], medium="CPU"))
        self.events.append(self.removed([d]))

    def step(self):
        for _ in range(self.rng.randint(1, 3)):
            fam = self.rng.choice(self.families)
            prefix = fam[:self.bs * self.rng.randint(1, len(fam) // self.bs)]
            question = [self.rng.randrange(150000) for _ in range(self.bs * self.rng.randint(1, 3))]
            self.serve(prefix + question + [1, 2, 3])  # a partial last block is never cached

    def clear(self):
        self.blocks.clear()
        self.events.append(self.cleared())

    def take(self):
        ev, self.events = self.events, []
        return ev

    def dump(self):
        paths = []
        for d, b in self.blocks.items():
            if b["children"]:
                continue
            chain = []
            while d is not None:
                chain.append(self.blocks[d]["tokens"])
                d = self.blocks[d]["parent"]
            paths.append([t for blk in reversed(chain) for t in blk])
        return {"gpu_blocks": len(self.blocks), "cpu_blocks": len(self.cpu), "paths": paths}


class Publisher:
    def __init__(self, args):
        self.args = args
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.pub.setsockopt(zmq.SNDHWM, args.hwm)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        if args.connect:
            # vLLM connects its PUB socket when the endpoint has no '*' (the router binds).
            self.pub.connect(args.connect)
            self.pub_ep = args.connect
        else:
            self.pub_ep = self.bind(self.pub, args.pub_port)
        self.replay_ep = self.bind(self.router, args.replay_port)
        self.topic = args.topic.encode()
        self.seq = 0
        self.buffer = collections.deque(maxlen=args.buffer_steps)
        self.subscribed = False
        self.poller = zmq.Poller()
        self.poller.register(self.pub, zmq.POLLIN)
        self.poller.register(self.router, zmq.POLLIN)

    @staticmethod
    def bind(sock, port):
        if port:
            # A restarted engine binds the same port again; retry while the old one lets go.
            deadline = time.monotonic() + 10
            while True:
                try:
                    sock.bind(f"tcp://127.0.0.1:{port}")
                    break
                except zmq.ZMQError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        else:
            sock.bind("tcp://127.0.0.1:*")
        return sock.getsockopt(zmq.LAST_ENDPOINT).decode()

    def publish(self, events, live=True):
        batch = [time.time(), events, self.args.dp_rank]
        payload = msgpack.packb(batch, use_bin_type=True)
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, payload))
        if live:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def service(self, timeout_ms):
        """Serves replay requests and subscriptions for up to timeout_ms."""
        for sock, _ in self.poller.poll(timeout_ms):
            if sock is self.pub:
                while True:
                    try:
                        m = self.pub.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if m[:1] == b"\x01" and self.topic.startswith(m[1:]):
                        self.subscribed = True
            else:
                while True:
                    try:
                        frames = self.router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if len(frames) != 3:
                        continue  # vLLM logs and ignores malformed requests
                    identity, _, start = frames
                    start_seq = int.from_bytes(start, "big")
                    for seq, payload in self.buffer:
                        if seq >= start_seq:
                            self.router.send_multipart(
                                [identity, b"", seq.to_bytes(8, "big"), payload])
                    self.router.send_multipart([identity, b"", END_SEQ, b""])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pub-port", type=int, default=0)
    ap.add_argument("--replay-port", type=int, default=0)
    ap.add_argument("--topic", default="kv-events")
    ap.add_argument("--connect", default="", help="connect the PUB socket here instead of binding")
    ap.add_argument("--buffer-steps", type=int, default=10000)
    ap.add_argument("--hwm", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--format", choices=["map", "array", "sglang"], default="map")
    ap.add_argument("--bytes-hashes", action="store_true")
    ap.add_argument("--hybrid", action="store_true")
    ap.add_argument("--offload", action="store_true")
    ap.add_argument("--capacity", type=int, default=64)
    ap.add_argument("--cpu-capacity", type=int, default=32)
    ap.add_argument("--families", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--dp-rank", type=int, default=0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    cache = Cache(args, rng)
    pub = Publisher(args)
    out = sys.stdout

    def reply(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    reply({"pub": pub.pub_ep, "replay": pub.replay_ep})
    stdin = sys.stdin.fileno()
    pub.poller.register(stdin, zmq.POLLIN)
    pending = b""
    while True:
        events = dict(pub.poller.poll(1000))
        if any(s not in (stdin,) for s in events):
            pub.service(0)
        if stdin not in events:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            return  # the test went away
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "wait_subscriber":
                deadline = time.monotonic() + cmd.get("timeout_ms", 5000) / 1000
                while not pub.subscribed and time.monotonic() < deadline:
                    pub.service(20)
                reply({"ok": pub.subscribed})
            elif op == "steps":
                drop_first = cmd.get("drop_first", 0)
                drop_every = cmd.get("drop_every", 0)
                seq = pub.seq - 1
                for i in range(cmd["n"]):
                    cache.step()
                    lost = i < drop_first or (drop_every and i % drop_every == drop_every - 1)
                    seq = pub.publish(cache.take(), live=not lost)
                    pub.service(0)  # answer replays between steps, as vLLM's thread does
                reply({"seq": seq})
            elif op == "serve":
                # Answers replay requests for ms milliseconds (between commands nothing does).
                deadline = time.monotonic() + cmd.get("ms", 50) / 1000
                while time.monotonic() < deadline:
                    pub.service(max(1, int((deadline - time.monotonic()) * 1000)))
                reply({"ok": True})
            elif op == "clear":
                cache.clear()
                reply({"seq": pub.publish(cache.take())})
            elif op == "dump":
                reply(cache.dump())
            elif op == "exit":
                reply({"ok": True})
                return
            else:
                reply({"error": f"unknown op {op}"})


if __name__ == "__main__":
    main()
