// Computes the expected token ids and decodes of the parity corpus with @huggingface/tokenizers
// (the Hugging Face JavaScript port of `tokenizers`), for the real Qwen3, Llama 3 and Gemma 3
// tokenizer.json files and for the synthetic variants of variants.json (a base file with some
// components replaced, exercising components the real files do not use).
//
// Usage (from the repository root, after the extract_tokenizers test wrote the models):
//   node tests/tools/tokenizer/make_expected.mjs build/dev/testdata/models tests/testdata/tokenizer
// Writes tests/testdata/tokenizer/expected/<name>.jsonl, one line per corpus text:
//   {"id", "ids"}                 ids of encode(text, add_special_tokens=false)
//   "ids_special"                 encode(text, add_special_tokens=true), when different
//   "decoded"                     decode(ids, skip_special_tokens=false), when != text
//   "decoded_special"             decode(ids_special, false), when != decoded
//   "decoded_skip"                decode(ids_special, true), when != decoded
// Decoding passes clean_up_tokenization_spaces: false, because that clean-up is a transformers
// (Python) convention, not part of the Rust tokenizer the C++ code reproduces.
//
// Where tokenizers.js is known to differ from the Rust crate, the affected texts are left out
// of a variant (its "exclude" list in variants.json):
//   final_sigma       JS toLowerCase maps a word-final capital sigma to ς; Rust's per-character
//                     lowercase (NormalizedString::lowercase) always gives σ.
//   js_whitespace     JS \s and trim() include U+FEFF and omit U+0085; Rust and Oniguruma use
//                     the Unicode White_Space property (the reverse).
//   nonascii_numeric  JS Digits uses \d (ASCII); Rust's Digits splits on char::is_numeric.
//   non_ascii         JS Whitespace uses ASCII \w; Rust's regex crate \w is Unicode.
// The 100 kB document is encoded for the three real tokenizers only (to keep the files small).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "..", "node", "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");

const [modelsDir, dataDir, ...only] = process.argv.slice(2);
if (!modelsDir || !dataDir) {
  console.error("usage: node make_expected.mjs MODELS_DIR TESTDATA_TOKENIZER_DIR [names...]");
  process.exit(2);
}

const corpus = readFileSync(join(dataDir, "corpus.jsonl"), "utf8")
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l));
const variants = JSON.parse(readFileSync(join(dataDir, "variants.json"), "utf8"));

const textOf = (e) =>
  e.text !== undefined ? e.text : new TextDecoder("utf-8").decode(Buffer.from(e.text_b64, "base64"));

const predicates = {
  final_sigma: (t) => t.normalize("NFKC").includes("\u03a3"),
  js_whitespace: (t) => /[\u0085\ufeff\u180e]/.test(t),
  nonascii_numeric: (t) => /(?![\x00-\x7f])\p{N}/u.test(t),
  non_ascii: (t) => /[^\x00-\x7f]/.test(t),
};

function load(base, variant) {
  const json = JSON.parse(readFileSync(join(modelsDir, base, "tokenizer.json"), "utf8"));
  if (variant) {
    for (const [k, v] of Object.entries(variant.set ?? {})) json[k] = v;
    const flags = variant.added_tokens_flags ?? {};
    for (const t of json.added_tokens) if (flags[t.content]) Object.assign(t, flags[t.content]);
    json.added_tokens.push(...(variant.added_tokens_append ?? []));
  }
  return new Tokenizer(json, {});
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

const targets = [
  { name: "qwen3", base: "qwen3" },
  { name: "llama3", base: "llama3" },
  { name: "gemma3", base: "gemma3" },
  ...Object.entries(variants).map(([name, v]) => ({ name, base: v.base, variant: v })),
].filter((t) => only.length === 0 || only.includes(t.name));

mkdirSync(join(dataDir, "expected"), { recursive: true });
for (const target of targets) {
  const tok = load(target.base, target.variant);
  const decode = (ids, skip) =>
    ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
  const lines = [];
  let excluded = 0;
  for (const e of corpus) {
    if (target.variant && e.category === "document") continue;
    const text = textOf(e);
    if ((target.variant?.exclude ?? []).some((p) => predicates[p](text))) {
      ++excluded;
      continue;
    }
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    const idsSpecial = tok.encode(text, { add_special_tokens: true }).ids;
    const rec = { id: e.id, ids };
    if (!same(ids, idsSpecial)) rec.ids_special = idsSpecial;
    const decoded = decode(ids, false);
    if (decoded !== text) rec.decoded = decoded;
    const decodedSpecial = decode(idsSpecial, false);
    if (decodedSpecial !== decoded) rec.decoded_special = decodedSpecial;
    const decodedSkip = decode(idsSpecial, true);
    if (decodedSkip !== decoded) rec.decoded_skip = decodedSkip;
    lines.push(JSON.stringify(rec));
  }
  const file = join(dataDir, "expected", `${target.name}.jsonl`);
  writeFileSync(file, lines.join("\n") + "\n");
  console.log(`${target.name}: ${lines.length} texts (${excluded} excluded) -> ${file}`);
}
