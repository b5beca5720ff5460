// A traced client: the OpenTelemetry SDK for Node (npm @opentelemetry/sdk-trace-node, from
// tests/node) starts a span, its W3C context is injected into the request headers by the SDK's
// propagator, and the official OpenAI client sends a streamed chat completion with them through
// an `infera server`. Prints one JSON line with the client span's ids (the router span must name
// it as its parent) and exits 0, or prints the failure and exits 1.
// Usage: node tests/tools/gateway/otel_client.mjs SERVER_URL MODEL
import { createRequire } from "node:module";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { openai, check } from "../openai_common.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "..", "node", "package.json"));
const { NodeTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require("@opentelemetry/sdk-trace-node");
const api = require("@opentelemetry/api");

const [baseURL, model] = process.argv.slice(2);
if (!baseURL || !model) {
  console.error("usage: node otel_client.mjs SERVER_URL MODEL");
  process.exit(2);
}

const spans = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
provider.register();  // the W3C trace-context propagator and an async context manager
const tracer = api.trace.getTracer("infera-e2e-client");

const out = {};
try {
  await tracer.startActiveSpan("ask the router", async (span) => {
    const headers = {};
    api.propagation.inject(api.context.active(), headers);
    check(typeof headers.traceparent === "string", "the SDK injected a traceparent");
    const client = new openai.OpenAI({
      baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000, defaultHeaders: headers,
    });
    const stream = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "trace me" }], max_tokens: 3, stream: true, ignore_eos: true,
    });
    let chunks = 0;
    for await (const chunk of stream) chunks += chunk.choices.length;
    check(chunks >= 3, `streamed ${chunks} choice chunks`);
    const ctx = span.spanContext();
    out.trace_id = ctx.traceId;
    out.span_id = ctx.spanId;
    out.traceparent = headers.traceparent;
    span.end();
  });
  await provider.shutdown();
  console.log(JSON.stringify(out));
} catch (e) {
  console.error(String(e?.stack ?? e));
  process.exit(1);
}
