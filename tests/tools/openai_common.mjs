// What the OpenAI-client scripts (tests/tools/engine, tests/tools/gateway) share: the npm
// `openai` package from tests/node, a client with no retries, the check helper, and the
// readers that fold a streamed completion or chat completion through the SDK's parsing.
import { createRequire } from "node:module";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "node", "package.json"));
export const openai = require("openai");

export function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

export function makeClient(baseURL) {
  return new openai.OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
}

// A streamed completion: its text, chunk count, usage and finish reason.
export async function readCompletionStream(stream) {
  const out = { streamed: "", chunks: 0, usage: null, finish: null };
  for await (const chunk of stream) {
    check(chunk.object === "text_completion", "stream chunk object");
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      out.streamed += c.text;
      out.chunks += 1;
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}

// A streamed chat completion: its content, role, usage and finish reason.
export async function readChatStream(stream) {
  const out = { content: "", role: null, usage: null, finish: null };
  for await (const chunk of stream) {
    check(chunk.object === "chat.completion.chunk", "chat chunk object");
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) out.role = c.delta.role;
      if (c.delta.content) out.content += c.delta.content;
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}
