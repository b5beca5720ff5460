// Drives a running `infera server` (in front of `infera engine mock` workers that share one
// model and tokenizer) with the official OpenAI client (npm `openai`, from tests/node) the way
// an application does: /v1/models, completions and chat completions, streamed and not, with
// usage, and the server's own errors and a worker's error relayed. Every response goes through
// the SDK's parsing; this script then checks the fields applications read. Between a prompt and
// its repeat it polls the server's admin API until the worker's KV events have reached the
// router, so the repeat must be routed to that worker and hit its cache.
// Prints one JSON summary line and exits 0, or prints the failure and exits 1.
// Usage: node tests/tools/gateway/openai_client.mjs SERVER_URL MODEL
import { openai, check, makeClient, readCompletionStream, readChatStream } from "../openai_common.mjs";

const { APIError, NotFoundError, BadRequestError } = openai;

const [baseURL, model] = process.argv.slice(2);
if (!baseURL || !model) {
  console.error("usage: node openai_client.mjs SERVER_URL MODEL");
  process.exit(2);
}

const client = makeClient(baseURL);
const summary = {};

// The server's routing view of a request body, without routing it.
async function explain(body) {
  const r = await fetch(`${baseURL}/v1/admin/route-explain`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  check(r.ok, `route-explain answered ${r.status}`);
  return r.json();
}

// Polls until the router holds every full block of the prompt on one worker, that worker is
// idle, and it would win: the KV events of the request just made have arrived. Bounded.
async function untilCached(body) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const e = await explain(body);
    const stage = e.stages[0];
    const full = Math.floor(e.prompt_tokens / e.block_size);
    const holder = stage.workers.find((w) => w.cache_hits === full);
    if (full > 0 && holder && holder.active_requests === 0 && stage.winner === holder.worker_id) {
      return e;
    }
    check(Date.now() < deadline, `the router never saw the prompt cached: ${JSON.stringify(e)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

// Models: two workers serve one model, the server lists it once.
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === model, `models.list returns ${model}`);
check(models.data[0].object === "model", "model object");

// Completions, not streamed.
const prompt =
  "A KV-aware gateway sends each request to the worker that already caches the longest part " +
  "of its prompt, unless that worker is too busy; workers stream their cache events to it.";
const completion = await client.completions.create({ model, prompt, max_tokens: 12, ignore_eos: true });
check(completion.id.startsWith("cmpl-"), "completion id");
check(completion.object === "text_completion", "completion object");
check(completion.model === model, "completion model");
check(completion.choices.length === 1, "one choice");
check(typeof completion.choices[0].text === "string" && completion.choices[0].text.length > 0, "text");
check(completion.choices[0].finish_reason === "length", "finish_reason length");
check(completion.usage.completion_tokens === 12, "usage.completion_tokens");
check(completion.usage.total_tokens === completion.usage.prompt_tokens + 12, "usage.total_tokens");
check(completion.usage.prompt_tokens_details.cached_tokens === 0, "first request: nothing cached");
// The router tokenizes the prompt exactly as the engine did.
const completionView = await untilCached({ model, prompt });
check(completionView.prompt_tokens === completion.usage.prompt_tokens,
  `router tokens ${completionView.prompt_tokens} = engine tokens ${completion.usage.prompt_tokens}`);
summary.completion_prompt_tokens = completion.usage.prompt_tokens;

// Completions, streamed, with usage: the repeat goes to the same worker and hits its cache.
const stream = await client.completions.create({
  model, prompt, max_tokens: 12, ignore_eos: true, stream: true, stream_options: { include_usage: true },
});
const { streamed, chunks, usage, finish } = await readCompletionStream(stream);
// The engine detokenizes incrementally (as vLLM does): a token that ends inside a UTF-8
// character is held back and sent with the next, so 12 tokens may come in fewer chunks.
check(chunks >= 1 && chunks <= 12, `12 streamed tokens in at most 12 chunks (got ${chunks})`);
check(streamed === completion.choices[0].text, "streamed text equals the non-streamed text");
check(finish === "length", "stream finish_reason");
check(usage && usage.completion_tokens === 12, "stream usage");
check(usage.prompt_tokens_details.cached_tokens > 0, "repeated prompt hits the worker's cache");
summary.completion_cached_tokens = usage.prompt_tokens_details.cached_tokens;

// Chat, not streamed: the server renders the chat template and tokenizes like the engine.
const messages = [
  { role: "system", content: "You are a helpful assistant who answers in one short sentence." },
  { role: "user", content: "Explain prefix caching and why a router should know about it." },
];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, ignore_eos: true });
check(chat.id.startsWith("chatcmpl-"), "chat id");
check(chat.object === "chat.completion", "chat object");
check(chat.choices[0].message.role === "assistant", "chat role");
check(typeof chat.choices[0].message.content === "string", "chat content");
check(chat.choices[0].finish_reason === "length", "chat finish_reason");
check(chat.usage.completion_tokens === 10, "chat usage");
const chatView = await untilCached({ model, messages });
check(chatView.prompt_tokens === chat.usage.prompt_tokens,
  `router chat tokens ${chatView.prompt_tokens} = engine tokens ${chat.usage.prompt_tokens}`);
summary.chat_prompt_tokens = chat.usage.prompt_tokens;

// Chat, streamed, with usage.
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

// Errors come back as the SDK's error classes with OpenAI's fields: the server's own...
try {
  await client.completions.create({ model: "no-such-model", prompt: "x" });
  check(false, "unknown model must fail");
} catch (e) {
  check(e instanceof NotFoundError && e.status === 404, `unknown model: 404 (got ${e})`);
  check(e.code === "model_not_found", "unknown model: code");
  check(e.param === "model", "unknown model: param");
}
try {
  await client.chat.completions.create({ model, messages: [] });
  check(false, "empty messages must fail");
} catch (e) {
  check(e instanceof BadRequestError && e.status === 400, `empty messages: 400 (got ${e})`);
  check(e.type === "invalid_request_error", "empty messages: type");
  check(e.param === "messages", "empty messages: param");
}
// ...and a worker's, relayed unchanged.
try {
  await client.completions.create({ model, prompt: "x", max_tokens: 0 });
  check(false, "max_tokens 0 must fail");
} catch (e) {
  check(e instanceof APIError && e.status === 400, `max_tokens 0: 400 (got ${e})`);
  check(e.param === "max_tokens", "max_tokens 0: param");
}

console.log(JSON.stringify({ ok: true, ...summary }));
