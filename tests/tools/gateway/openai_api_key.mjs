// The official OpenAI client (npm `openai`, from tests/node) against an `infera server` started
// with --api-key-file: with a wrong key every call is the SDK's AuthenticationError (401, code
// invalid_api_key), with a right one models, completions and a streamed chat work.
// Prints one JSON summary line and exits 0, or prints the failure and exits 1.
// Usage: node tests/tools/gateway/openai_api_key.mjs SERVER_URL MODEL GOOD_KEY
import { openai, check, readChatStream } from "../openai_common.mjs";

const [baseURL, model, key] = process.argv.slice(2);
if (!baseURL || !model || !key) {
  console.error("usage: node openai_api_key.mjs SERVER_URL MODEL GOOD_KEY");
  process.exit(2);
}
const client = (apiKey) =>
  new openai.OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });

const summary = { denied: 0 };
const wrong = client(`${key}-not`);
for (const call of [
  () => wrong.models.list(),
  () => wrong.completions.create({ model, prompt: "hello", max_tokens: 2 }),
  () => wrong.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
]) {
  try {
    await call();
    check(false, "a wrong key was accepted");
  } catch (e) {
    check(e instanceof openai.AuthenticationError, `a wrong key gives AuthenticationError, got ${e}`);
    check(e.status === 401 && e.code === "invalid_api_key", `401 invalid_api_key, got ${e.status} ${e.code}`);
    summary.denied += 1;
  }
}

const right = client(key);
const models = await right.models.list();
check(models.data.some((m) => m.id === model), `models.list lists ${model}`);
const completion = await right.completions.create({ model, prompt: "hello there", max_tokens: 4, ignore_eos: true });
check(completion.usage.completion_tokens === 4, "completion usage");
const stream = await right.chat.completions.create({
  model, messages: [{ role: "user", content: "hi" }], max_tokens: 3, stream: true,
  stream_options: { include_usage: true }, ignore_eos: true,
});
const chat = await readChatStream(stream);
check(chat.finish !== null && chat.usage.completion_tokens === 3, "streamed chat with usage");
summary.served = 3;
console.log(JSON.stringify(summary));
