// The official OpenAI client (npm `openai`, from tests/node) calling every endpoint the gateway
// routes besides completions, against an `infera server --api-key KEY` in front of two mock
// engines: models.retrieve, embeddings.create (the SDK asks for base64 and decodes it) and
// responses.create, a conversation continued by previous_response_id over several turns (the
// mock engines, like vLLM, keep a response only on the instance that made it, so every turn
// must reach the first turn's worker). Without the key each call is the SDK's
// AuthenticationError. Prints one JSON summary line and exits 0, or prints the failure and
// exits 1. Usage: node tests/tools/gateway/openai_endpoints.mjs SERVER_URL MODEL KEY
import { openai, check } from "../openai_common.mjs";

const [baseURL, model, key] = process.argv.slice(2);
if (!baseURL || !model || !key) {
  console.error("usage: node openai_endpoints.mjs SERVER_URL MODEL KEY");
  process.exit(2);
}
const client = (apiKey) => new openai.OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });

const summary = { denied: 0 };
try {
  const wrong = client(`${key}-not`);
  for (const call of [
    () => wrong.models.retrieve(model),
    () => wrong.embeddings.create({ model, input: "hello" }),
    () => wrong.responses.create({ model, input: "hello", max_output_tokens: 2 }),
  ]) {
    try {
      await call();
      check(false, "a wrong key was accepted");
    } catch (e) {
      check(e instanceof openai.AuthenticationError, `a wrong key gives AuthenticationError, got ${e}`);
      summary.denied += 1;
    }
  }

  const right = client(key);
  const m = await right.models.retrieve(model);
  check(m.id === model, `models.retrieve names ${model}, got ${m.id}`);
  summary.model = m.id;

  const emb = await right.embeddings.create({ model, input: ["hello there", "general kenobi"] });
  check(emb.data.length === 2, "two embeddings");
  check(emb.data.every((d) => Array.isArray(d.embedding) && d.embedding.length > 0), "decoded vectors");
  const norm = Math.sqrt(emb.data[0].embedding.reduce((s, x) => s + x * x, 0));
  check(Math.abs(norm - 1) < 1e-3, `unit vectors, got norm ${norm}`);
  summary.embeddings = emb.data.length;
  summary.dimensions = emb.data[0].embedding.length;

  let r = await right.responses.create({
    model, instructions: "You are terse.", input: "Tell me a story about a router.", max_output_tokens: 4,
  });
  check(typeof r.output_text === "string" && r.output_text.length > 0, "the first turn's output_text");
  const tokens = [r.usage.input_tokens];
  for (let turn = 0; turn < 4; ++turn) {
    r = await right.responses.create({ model, previous_response_id: r.id, input: `And then? (${turn})`, max_output_tokens: 4 });
    check(r.output_text.length > 0, `turn ${turn} has output`);
    tokens.push(r.usage.input_tokens);
  }
  check(tokens.every((t, i) => i === 0 || t > tokens[i - 1]), `each turn's prompt holds the last: ${tokens}`);
  summary.turns = tokens.length;
  console.log(JSON.stringify(summary));
} catch (e) {
  console.error(String(e?.stack ?? e));
  process.exit(1);
}
