// An independent NATS peer (npm `nats`, the official JavaScript client) against infera's NATS
// transports: it subscribes to NS.kv-events.*, asks the server for one completion (so that
// the worker stores blocks), decodes the first envelope it sees with its own msgpack reader
// (docs/contracts.md section 11: {"worker_id", "seq", "topic", "batch"}), then calls the worker's
// request subject directly with the wire of docs/nats.md and reads the streamed answer.
// usage: node peer.mjs NATS_URL WORKER_ID SERVER_PORT      (prints "envelope ok", "request ok")
import { createRequire } from "node:module";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "..", "node", "package.json"));
const { connect, headers, createInbox } = require("nats");

const [natsUrl, worker, serverPort] = process.argv.slice(2);
const token = worker.replace(/[.:*> \t]/g, "_");
const fail = (m) => { console.error("FAIL: " + m); process.exit(1); };

// A msgpack reader for what the envelope holds: maps, strings, unsigned ints, bin, bool, nil.
function unpack(buf) {
  let i = 0;
  const u8 = () => buf[i++];
  const be = (n) => { let v = 0n; for (let k = 0; k < n; k++) v = (v << 8n) | BigInt(u8()); return v; };
  const str = (n) => { const s = Buffer.from(buf.subarray(i, i + n)).toString("utf8"); i += n; return s; };
  const bin = (n) => { const b = buf.subarray(i, i + n); i += n; return b; };
  const map = (n) => { const o = {}; for (let k = 0; k < n; k++) { const key = value(); o[key] = value(); } return o; };
  const arr = (n) => { const a = []; for (let k = 0; k < n; k++) a.push(value()); return a; };
  function value() {
    const b = u8();
    if (b <= 0x7f) return b;
    if (b >= 0x80 && b <= 0x8f) return map(b & 0x0f);
    if (b >= 0x90 && b <= 0x9f) return arr(b & 0x0f);
    if (b >= 0xa0 && b <= 0xbf) return str(b & 0x1f);
    if (b >= 0xe0) return b - 256;
    switch (b) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return bin(Number(be(1)));
      case 0xc5: return bin(Number(be(2)));
      case 0xc6: return bin(Number(be(4)));
      case 0xcb: { const v = Buffer.from(buf.subarray(i, i + 8)).readDoubleBE(0); i += 8; return v; }
      case 0xcc: return Number(be(1));
      case 0xcd: return Number(be(2));
      case 0xce: return Number(be(4));
      case 0xcf: return be(8);
      case 0xd9: return str(Number(be(1)));
      case 0xda: return str(Number(be(2)));
      case 0xdc: return arr(Number(be(2)));
      case 0xde: return map(Number(be(2)));
      default: throw new Error("msgpack byte 0x" + b.toString(16));
    }
  }
  return value();
}

const nc = await connect({ servers: natsUrl, timeout: 5000 });
// Every worker's events: the server routes the completion to whichever worker it picks.
const events = nc.subscribe("infera.kv-events.*", { max: 1 });
await nc.flush();
const body = JSON.stringify({ model: "m", prompt: Array.from({ length: 64 }, (_, k) => 1000 + k), max_tokens: 2 });
const res = await fetch(`http://127.0.0.1:${serverPort}/v1/completions`, {
  method: "POST", headers: { "Content-Type": "application/json" }, body,
});
if (res.status !== 200) fail("server answered " + res.status);
await res.text();
const timer = setTimeout(() => fail("no KV-event envelope within 10 s"), 10000);
for await (const m of events) {
  const env = unpack(m.data);
  if (typeof env.worker_id !== "string" || m.subject !== "infera.kv-events." + env.worker_id.replace(/[.:*> \t]/g, "_")) {
    fail("worker_id " + env.worker_id + " on " + m.subject);
  }
  if (typeof env.seq !== "number" && typeof env.seq !== "bigint") fail("seq missing");
  if (!(env.batch instanceof Uint8Array) || env.batch.length === 0) fail("batch missing");
  const batch = unpack(env.batch);  // the engine's vLLM payload, unchanged: [ts, [events], rank]
  if (!Array.isArray(batch) || !Array.isArray(batch[1])) fail("batch is not vLLM's array");
  console.log("envelope ok", env.topic, String(env.seq), batch[1].length, "events");
}
clearTimeout(timer);

// Call the worker directly: one streamed completion over its request subject.
const inbox = createInbox();
const frames = nc.subscribe(inbox);
const req = JSON.stringify({ model: "m", prompt: [5, 6, 7, 8], max_tokens: 5, stream: true });
const h = headers();
h.set("Infera-Method", "POST");
h.set("Infera-Target", "/v1/completions");
h.set("Infera-Window", "64");
h.set("Infera-Body-Length", String(Buffer.byteLength(req)));
h.set("Http-Content-Type", "application/json");
nc.publish(`infera.requests.${token}`, Buffer.from(req), { reply: inbox, headers: h });
let next = 0, status = 0, text = "", control = "";
const deadline = setTimeout(() => fail("no end frame within 20 s"), 20000);
for await (const m of frames) {
  const seq = Number(m.headers.get("Infera-Seq"));
  if (seq !== next++) fail("frame " + seq + " out of order");
  const kind = m.headers.get("Infera-Kind");
  const last = m.headers.get("Infera-Last") === "1";  // a head or data frame that also ends it
  if (kind === "head") { status = Number(m.headers.get("Infera-Status")); control = m.headers.get("Infera-Control"); }
  if (kind === "head" || kind === "data") text += Buffer.from(m.data).toString("utf8");
  if (kind === "data" && !last) {
    const ack = headers(); ack.set("Infera-Ack", String(seq));
    nc.publish(control, new Uint8Array(0), { headers: ack });
  }
  if (kind === "error") fail("error frame: " + m.headers.get("Infera-Error"));
  if (kind === "end" || last) break;
}
clearTimeout(deadline);
if (status !== 200) fail("status " + status);
if (!text.includes("data: [DONE]")) fail("no [DONE] in " + text);
console.log("request ok", status, text.split("\n\n").length - 1, "SSE events");
await nc.close();
