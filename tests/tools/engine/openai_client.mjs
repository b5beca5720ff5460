// Drives a running `infera engine mock` with the official OpenAI client (npm `openai`, from
// tests/node) the way an application does: completions and chat completions, streamed and not,
// with usage, plus /v1/models and an error. Every response goes through the SDK's own parsing;
// this script then checks the fields applications read. Prints one JSON summary line and exits
// 0, or prints the failure and exits 1.
// Usage: node tests/tools/engine/openai_client.mjs BASE_URL MODEL
import { openai, check, makeClient, readCompletionStream, readChatStream } from "../openai_common.mjs";

const { APIError } = openai;

const [baseURL, model] = process.argv.slice(2);
if (!baseURL || !model) {
  console.error("usage: node openai_client.mjs BASE_URL MODEL");
  process.exit(2);
}

const client = makeClient(baseURL);
const summary = {};

// Models.
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === model, `models.list returns ${model}`);
check(models.data[0].object === "model", "model object");

// Completions, not streamed. ignore_eos is a vLLM extension: the SDK passes it through.
const prompt = "The simulated engine answers every prompt with";
const completion = await client.completions.create({ model, prompt, max_tokens: 12, ignore_eos: true });
check(completion.id.startsWith("cmpl-"), "completion id");
check(completion.object === "text_completion", "completion object");
check(completion.model === model, "completion model");
check(Number.isInteger(completion.created), "completion created");
check(completion.choices.length === 1, "one choice");
check(typeof completion.choices[0].text === "string" && completion.choices[0].text.length > 0, "text");
check(completion.choices[0].finish_reason === "length", "finish_reason length");
check(completion.usage.completion_tokens === 12, "usage.completion_tokens");
check(completion.usage.total_tokens === completion.usage.prompt_tokens + 12, "usage.total_tokens");
check(completion.usage.prompt_tokens_details.cached_tokens === 0, "first request: nothing cached");
summary.completion_text = completion.choices[0].text;

// Completions, streamed, with usage.
const stream = await client.completions.create({
  model, prompt, max_tokens: 12, ignore_eos: true, stream: true, stream_options: { include_usage: true },
});
const { streamed, chunks, usage, finish } = await readCompletionStream(stream);
check(chunks === 12, `12 streamed tokens (got ${chunks})`);
check(streamed === completion.choices[0].text, "streamed text equals the non-streamed text");
check(finish === "length", "stream finish_reason");
check(usage && usage.completion_tokens === 12, "stream usage");
check(usage.prompt_tokens_details.cached_tokens >= 0, "stream usage cached_tokens");
summary.completion_stream_chunks = chunks;

// Chat, not streamed.
const messages = [
  { role: "system", content: "You are a helpful assistant." },
  { role: "user", content: "Explain prefix caching in one sentence." },
];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, ignore_eos: true });
check(chat.id.startsWith("chatcmpl-"), "chat id");
check(chat.object === "chat.completion", "chat object");
check(chat.choices[0].message.role === "assistant", "chat role");
check(typeof chat.choices[0].message.content === "string", "chat content");
check(chat.choices[0].finish_reason === "length", "chat finish_reason");
check(chat.usage.completion_tokens === 10, "chat usage");
summary.chat_prompt_tokens = chat.usage.prompt_tokens;

// Chat, streamed, with usage: the same prompt again hits the cache.
const chatStream = await client.chat.completions.create({
  model, messages, max_tokens: 10, ignore_eos: true, stream: true, stream_options: { include_usage: true },
});
const { content, role, usage: chatUsage, finish: chatFinish } = await readChatStream(chatStream);
check(role === "assistant", "chat stream role");
check(content === chat.choices[0].message.content, "chat stream content equals non-stream content");
check(chatFinish === "length", "chat stream finish_reason");
check(chatUsage && chatUsage.completion_tokens === 10, "chat stream usage");
check(chatUsage.prompt_tokens === chat.usage.prompt_tokens, "chat stream prompt_tokens");
check(chatUsage.prompt_tokens_details.cached_tokens > 0, "repeated chat prompt hits the cache");
summary.chat_cached_tokens = chatUsage.prompt_tokens_details.cached_tokens;

// An error comes back as the SDK's APIError with OpenAI's fields.
try {
  await client.completions.create({ model, prompt: "x", max_tokens: 0 });
  check(false, "max_tokens 0 must fail");
} catch (e) {
  check(e instanceof APIError, `APIError (got ${e})`);
  check(e.status === 400, "status 400");
  check(e.type === "invalid_request_error", "error type");
  check(e.param === "max_tokens", "error param");
}
try {
  await client.completions.create({ model: "no-such-model", prompt: "x" });
  check(false, "unknown model must fail");
} catch (e) {
  check(e instanceof APIError && e.status === 404, "unknown model: 404");
}

console.log(JSON.stringify({ ok: true, ...summary }));
