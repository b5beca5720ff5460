// Writes the benchmark texts of the tokenizer benchmarks (tokenizer_bench and bench_node.mjs)
// from files every Debian system with the project's packages has, so both benchmarks read the
// same real text without committing megabytes to the repository:
//   english.txt  license texts (/usr/share/common-licenses) and package READMEs (/usr/share/doc)
//   cjk.txt      Chinese, Japanese and Korean translations from gettext catalogs
//                (/usr/share/locale/{zh_CN,zh_TW,ja,ko}/LC_MESSAGES/*.mo, the msgstr side)
//   code.txt     Python standard library and libstdc++ headers
// Each is cut at a line boundary after 1 MiB. Files are taken in sorted order: deterministic on
// a given machine. Usage: node tests/tools/tokenizer/make_bench_texts.mjs OUTDIR
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const out = process.argv[2];
if (!out) {
  console.error("usage: node make_bench_texts.mjs OUTDIR");
  process.exit(2);
}
const kTarget = 1 << 20;

function files(dir, accept) {
  let names;
  try {
    names = readdirSync(dir).sort();
  } catch {
    return [];
  }
  return names
    .map((n) => join(dir, n))
    .filter((p) => {
      try {
        return statSync(p).isFile() && accept(p);
      } catch {
        return false;
      }
    });
}

function collect(paths, read) {
  let text = "";
  for (const p of paths) {
    if (Buffer.byteLength(text) >= kTarget) break;
    let t;
    try {
      t = read(p);
    } catch {
      continue;
    }
    if (t.length > 0) text += t.endsWith("\n") ? t : t + "\n";
  }
  // Cut at the first line boundary after the target size.
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= kTarget) return text;
  const nl = buf.indexOf(0x0a, kTarget);
  return buf.subarray(0, nl < 0 ? buf.length : nl + 1).toString("utf8");
}

const utf8 = (p) => new TextDecoder("utf-8").decode(readFileSync(p));

// English: license texts, then plain-text READMEs.
const docDirs = readdirSync("/usr/share/doc").sort().map((d) => join("/usr/share/doc", d));
const english = collect(
  [
    ...files("/usr/share/common-licenses", () => true),
    ...docDirs.flatMap((d) => files(d, (p) => /\/README[^/]*$/.test(p) && !p.endsWith(".gz"))),
  ],
  utf8,
);

// CJK: msgstr strings of gettext catalogs that contain CJK characters.
function moStrings(p) {
  const b = readFileSync(p);
  const le = b.readUInt32LE(0) === 0x950412de;
  const u32 = (o) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  const n = u32(8);
  const table = u32(16);
  const strings = [];
  for (let i = 0; i < n; i++) {
    const len = u32(table + 8 * i);
    const off = u32(table + 8 * i + 4);
    for (const s of b.subarray(off, off + len).toString("utf8").split("\0")) {
      if (/[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]/.test(s)) strings.push(s);
    }
  }
  return strings.join("\n");
}
const cjk = collect(
  ["zh_CN", "ja", "ko", "zh_TW"].flatMap((l) =>
    files(`/usr/share/locale/${l}/LC_MESSAGES`, (p) => p.endsWith(".mo")),
  ),
  moStrings,
);

// Code: Python standard library modules and libstdc++ headers.
const pyDir = readdirSync("/usr/lib").filter((d) => /^python3\.\d+$/.test(d)).sort().pop();
const code = collect(
  [
    ...(pyDir ? files(join("/usr/lib", pyDir), (p) => p.endsWith(".py")) : []),
    ...files("/usr/include/c++/12/bits", (p) => p.endsWith(".h")),
  ],
  utf8,
);

mkdirSync(out, { recursive: true });
for (const [name, text] of [["english", english], ["cjk", cjk], ["code", code]]) {
  const file = join(out, `${name}.txt`);
  writeFileSync(file, text);
  console.log(`${file}: ${Buffer.byteLength(text)} bytes`);
}
