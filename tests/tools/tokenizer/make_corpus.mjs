// Builds the tokenizer parity corpus: the hand-written texts of corpus_source.mjs plus generated
// cases (empty and one-character strings, whitespace runs, digits, long runs, invalid UTF-8 and
// a deterministic ~100 kB document), one JSON object per line:
//   {"id": "...", "category": "...", "text": "..."}   or   {..., "text_b64": "..."}
// (text_b64 holds raw bytes that are not valid UTF-8; the reference sees them decoded with
// U+FFFD replacement, the C++ test feeds the raw bytes).
// Usage: node tests/tools/tokenizer/make_corpus.mjs tests/testdata/tokenizer/corpus.jsonl
import { writeFileSync } from "node:fs";
import * as src from "./corpus_source.mjs";

const out = process.argv[2];
if (!out) {
  console.error("usage: node make_corpus.mjs OUT.jsonl");
  process.exit(2);
}

const entries = [];
const add = (category, text) => {
  entries.push({ id: `${category}-${String(entries.filter((e) => e.category === category).length).padStart(3, "0")}`, category, text });
};
const addBytes = (category, bytes) => {
  entries.push({
    id: `${category}-${String(entries.filter((e) => e.category === category).length).padStart(3, "0")}`,
    category,
    text_b64: Buffer.from(bytes).toString("base64"),
  });
};

for (const [category, texts] of Object.entries(src)) {
  for (const t of texts) add(category, t);
}

// Empty and one-character strings.
add("tiny", "");
for (const c of [
  " ", "\n", "\t", "\r", "a", "Z", "0", "9", "'", "\"", "<", ">", "|", "_", "-", ".", ",", "!", "?", "#",
  "é", "ß", "中", "あ", "한", "ب", "न", "Ж", "Ω", "😀", "👍🏽", "🇯🇵", "\u00a0", "\u3000", "\u200b", "\u200d",
  "\ufeff", "\ufffd", "\u0000", "\u0007", "\u001b", "\u007f", "\u0085", "\u2028", "ℌ", "𝔘", "\u0301", "\ue000",
]) {
  add("tiny", c);
}

// Runs of spaces, tabs and newlines, alone and around words.
for (const n of [1, 2, 3, 4, 7, 8, 16, 33]) add("whitespace", " ".repeat(n));
for (const n of [1, 2, 3, 5]) add("whitespace", "\t".repeat(n));
for (const n of [1, 2, 3, 4, 10]) add("whitespace", "\n".repeat(n));
for (const t of [
  "\r\n\r\n\r\n", " \t \n \t\n", "  \n  \n", "word   ", "   word", "a \n b", "\n\n\nx", "x\n\n\n",
  "a\t\tb", "a \t b\n\n c", "\u3000\u3000全角", "\u00a0 \u00a0", "end with newline\n", " \n",
  "x \u2028 y \u2029 z", "tab\t\n\tnewline", "    ", "\t\n\r\u000b\u000c",
]) {
  add("whitespace", t);
}

// Digits and numbers.
for (const t of [
  "0", "12", "123", "1234", "12345678901234567890", "3.14159", "1,234,567.89", "-42", "+1e-10",
  "٠١٢٣٤", "１２３４", "2024-01-01T12:34:56Z", "1st 2nd 3rd 4th", "v1.2.3", "0000", "9999999999",
  "1 2 3 4 5", "1\n2\n3", "½ ² ③ Ⅻ", "0x1F 0b101 1_000_000", "$1,000.00 and 50%", "IPv4 192.168.0.1",
]) {
  add("digits", t);
}

// Long runs: one word far beyond any cache limit, repeated symbols, long space runs.
for (const t of [
  "a".repeat(3000), "ab".repeat(700), "😀".repeat(200), "中".repeat(1000), "-".repeat(500),
  "=".repeat(80), " ".repeat(1000), "\n".repeat(300), "ha".repeat(50) + "!", "x ".repeat(400),
  "Lorem" + "ipsum".repeat(200),
]) {
  add("long", t);
}

// Invalid UTF-8: stray and truncated sequences, surrogates, overlongs, out of range.
const enc = (s) => [...Buffer.from(s, "utf8")];
for (const bytes of [
  [0xff],
  [0xc3],
  [0xe4, 0xb8],
  [...enc("abc"), 0xff, ...enc("def")],
  [0xed, 0xa0, 0x80],
  [0xf4, 0x90, 0x80, 0x80],
  [0xc0, 0xaf, ...enc(" overlong slash")],
  [...enc("valid é then latin-1 "), 0xe9, ...enc(" byte")],
  [0xf0, 0x9f, 0x98, ...enc("x truncated emoji")],
  [...enc("<|im_start|>"), 0xfe, ...enc("<|im_end|>"), 0x80, 0x80],
]) {
  addBytes("invalid_utf8", bytes);
}

// A deterministic ~100 kB document: prose, lists, code, tables and other scripts, mixed the way
// long prompts (RAG contexts, books, logs) mix them.
function mulberry32(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rng = mulberry32(20240601);
const pick = (a) => a[Math.floor(rng() * a.length)];
const words = (
  "the of and to in is was for on that with as by at from this be are an or it which not have " +
  "had one were all their there been has more when who will would can about other into than " +
  "system model token router cache prefix request engine worker block hash latency throughput " +
  "memory queue batch stream server client protocol event index policy weight cost budget " +
  "quickly carefully never always often rarely exactly roughly clearly silently eventually " +
  "network river mountain library garden window kitchen morning evening winter summer " +
  "analysis experiment measurement result figure table section chapter appendix reference"
).split(" ");
const names = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy"];
function sentence() {
  const n = 6 + Math.floor(rng() * 14);
  const ws = [];
  for (let i = 0; i < n; i++) {
    let w = pick(words);
    const r = rng();
    if (r < 0.05) w = pick(names);
    else if (r < 0.08) w = String(Math.floor(rng() * 100000));
    else if (r < 0.10) w = w + "'s";
    else if (r < 0.12) w = w.toUpperCase();
    ws.push(w);
    if (rng() < 0.08) ws[ws.length - 1] += ",";
  }
  const s = ws.join(" ");
  return s[0].toUpperCase() + s.slice(1) + pick([".", ".", ".", "?", "!", ";", ":"]);
}
const inserts = [...src.chinese, ...src.japanese, ...src.korean, ...src.russian, ...src.arabic,
  ...src.hindi, ...src.other_languages, ...src.emoji, ...src.code.slice(0, 12), ...src.json.slice(0, 6)];
let doc = "";
let section = 1;
while (Buffer.byteLength(doc, "utf8") < 102400) {
  const r = rng();
  if (r < 0.05) {
    doc += `\n## ${section++}. ${sentence().slice(0, -1)}\n\n`;
  } else if (r < 0.12) {
    for (let i = 0, n = 2 + Math.floor(rng() * 4); i < n; i++) doc += `- ${sentence()}\n`;
    doc += "\n";
  } else if (r < 0.20) {
    doc += pick(inserts) + "\n\n";
  } else if (r < 0.23) {
    doc += "| key | value | note |\n|-----|------:|------|\n";
    for (let i = 0, n = 2 + Math.floor(rng() * 3); i < n; i++) {
      doc += `| ${pick(words)} | ${(rng() * 1000).toFixed(2)} | ${pick(words)} ${pick(words)} |\n`;
    }
    doc += "\n";
  } else if (r < 0.25) {
    doc += "    " + sentence() + "\n\t" + sentence() + "\n\n";
  } else {
    let p = "";
    for (let i = 0, n = 2 + Math.floor(rng() * 6); i < n; i++) p += (i ? " " : "") + sentence();
    doc += p + "\n\n";
  }
}
add("document", doc);

const lines = entries.map((e) => JSON.stringify(e)).join("\n") + "\n";
writeFileSync(out, lines);
console.log(`wrote ${entries.length} texts (${Buffer.byteLength(lines)} bytes) to ${out}`);
