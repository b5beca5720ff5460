// Throughput of @huggingface/tokenizers (the Hugging Face JavaScript port) on the texts the C++
// tokenizer_bench encodes, for the ratio the benchmark report quotes. Same conditions: Qwen3,
// one thread, add_special_tokens false, one warm-up encode (its BPE cache warm, as the C++ word
// cache is in BM_Encode), then repeated encodes for at least two seconds.
// Usage: node tests/tools/tokenizer/bench_node.mjs MODELS_DIR BENCH_TEXTS_DIR
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "..", "node", "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");

const [modelsDir, textsDir] = process.argv.slice(2);
if (!modelsDir || !textsDir) {
  console.error("usage: node bench_node.mjs MODELS_DIR BENCH_TEXTS_DIR");
  process.exit(2);
}

const t0 = performance.now();
const json = JSON.parse(readFileSync(join(modelsDir, "qwen3", "tokenizer.json"), "utf8"));
const tok = new Tokenizer(json, {});
console.log(`load qwen3: ${(performance.now() - t0).toFixed(0)} ms`);

for (const name of ["english", "cjk", "code"]) {
  const text = readFileSync(join(textsDir, `${name}.txt`), "utf8");
  const bytes = Buffer.byteLength(text, "utf8");
  const cold0 = performance.now();
  const tokens = tok.encode(text, { add_special_tokens: false }).ids.length;
  const cold = performance.now() - cold0;
  let runs = 0;
  const start = performance.now();
  while (performance.now() - start < 2000 || runs < 3) {
    tok.encode(text, { add_special_tokens: false });
    ++runs;
  }
  const ms = (performance.now() - start) / runs;
  console.log(
    `${name}: ${bytes} bytes, ${tokens} tokens, first ${(bytes / cold / 1e3).toFixed(2)} MB/s, ` +
      `warm ${(bytes / ms / 1e3).toFixed(2)} MB/s (${ms.toFixed(1)} ms/encode, ${runs} runs)`,
  );
  // tokenizers.js slows down on megabyte strings; prompts are usually a few KB, so also encode
  // the same text as ~4 KB chunks cut at line ends.
  const chunks = [];
  let chunk = "";
  for (const line of text.split(/(?<=\n)/)) {
    chunk += line;
    if (chunk.length >= 4096) {
      chunks.push(chunk);
      chunk = "";
    }
  }
  if (chunk) chunks.push(chunk);
  let chunkRuns = 0;
  const chunkStart = performance.now();
  while (performance.now() - chunkStart < 2000 || chunkRuns < 2) {
    for (const c of chunks) tok.encode(c, { add_special_tokens: false });
    ++chunkRuns;
  }
  const chunkMs = (performance.now() - chunkStart) / chunkRuns;
  console.log(`${name} in ${chunks.length} chunks of ~4 KB: warm ${(bytes / chunkMs / 1e3).toFixed(2)} MB/s`);
}
