// The Vercel AI SDK (6.x and 7.x, one script) through modelshim: the
// `@ai-sdk/openai-compatible` chat provider and the default `@ai-sdk/openai`
// provider (Responses API). Run by tests/it/clients.rs from the npm folder of
// the major under test; scenario = upstream model name. Prints one line per
// check and exits non-zero if any fails.
import assert from "node:assert/strict";

import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { APICallError, Output, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const BASE = process.env.MODELSHIM_BASE_URL;
const DEMO = process.env.MODELSHIM_DEMO_URL;
const KEY = "sk-test";
const WEATHER = { Paris: "22C and sunny", Rome: "18C and cloudy" };
const QUESTION = "What is the weather in Paris?";
const BOTH = "What is the weather in Paris and in Rome?";
const PARIS = [["get_weather", { city: "Paris" }]];
const BOTH_CALLS = [["get_weather", { city: "Paris" }], ["get_weather", { city: "Rome" }]];
const PERSON = { name: "Ada Lovelace", age: 36 };
// fixtures/demo/skill_answer.json
const DEMO_ANSWER =
  "```\nStart with defaults when the config file is empty\n\nAn empty modelshim.toml (as created by `touch`) made `serve` exit\nwith a TOML parse error. An empty file now means \"no settings\",\nlike a missing one, so the proxy starts with its defaults.\n```\n\nFollowing the commit-message skill: an imperative subject under 50 characters, and a body that says why the change was needed.";
const DEMO_PROMPT =
  "Write a commit message: an empty modelshim.toml used to make serve exit with a TOML error; now it starts with the defaults.";

const compat = createOpenAICompatible({ name: "modelshim", baseURL: BASE, apiKey: KEY, includeUsage: true });
const oai = createOpenAI({ baseURL: BASE, apiKey: KEY });
const tools = {
  get_weather: tool({
    description: "Weather for a city",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => WEATHER[city],
  }),
};
// A tool without execute: the loop stops at the call.
const declared = { get_weather: tool({ description: "Weather for a city", inputSchema: z.object({ city: z.string() }) }) };

const calls = (steps) => steps.flatMap((s) => s.toolCalls).map((c) => [c.toolName, c.input]);
const base = { maxRetries: 0, timeout: 20000 };

async function gen(model, opts) {
  return generateText({ ...base, model, ...opts });
}

async function stream(model, opts) {
  const r = streamText({ ...base, model, ...opts, onError: () => {} });
  const parts = [];
  for await (const p of r.fullStream) parts.push(p);
  const err = parts.find((p) => p.type === "error");
  if (err) throw err.error;
  return { text: await r.text, steps: await r.steps, reasoningText: await r.reasoningText, usage: await r.usage, parts };
}

async function loop(model, run, prompt = QUESTION) {
  const r = await run(model, { prompt, tools, stopWhen: stepCountIs(5) });
  return [r.text, calls(r.steps), r.steps.length];
}

async function expectApiError(fn, status, text) {
  try {
    await fn();
  } catch (e) {
    assert.ok(APICallError.isInstance(e), `want APICallError, got ${e?.constructor?.name}: ${e}`);
    assert.equal(e.statusCode, status);
    assert.ok(e.message.includes(text) || e.responseBody.includes(text), `${status}: ${e.message} ${e.responseBody}`);
    return;
  }
  assert.fail(`no APICallError ${status}`);
}

const ERRORS = [
  ["err429", 429, "rate limit reached"],
  ["err401", 401, "Incorrect API key provided"],
  ["err400", 400, "max_tokens is too large"],
];

const reasoningOptions = { openai: { forceReasoning: true, reasoningSummary: "auto" } };

async function reasoningShown(run) {
  const r = await run(oai("v/reason"), { prompt: QUESTION, providerOptions: reasoningOptions });
  assert.equal(r.text, "Paris is 22C.");
  assert.equal(r.reasoningText, "22C in Paris; answer.");
}

async function thinkerLoop(run, store = true) {
  const providerOptions = { openai: { ...reasoningOptions.openai, store } };
  const opts = { prompt: QUESTION, tools, stopWhen: stepCountIs(5), providerOptions };
  const r = await run(oai("v/thinker"), opts);
  assert.deepEqual([r.text, calls(r.steps)], ["It is 22C and sunny in Paris.", PARIS]);
}

const checks = {
  async compat_generate() {
    const r = await gen(compat("v/plain"), { prompt: QUESTION });
    assert.equal(r.text, "Hello from upstream.");
    assert.equal(r.finishReason, "stop");
    assert.equal(r.usage.totalTokens, 10);
  },
  async compat_stream() {
    const r = await stream(compat("v/plain"), { prompt: QUESTION });
    assert.equal(r.text, "Hello from upstream.");
    assert.ok(r.parts.filter((p) => p.type === "text-delta").length >= 2, "text arrives in deltas");
  },
  async compat_tool_loop() {
    assert.deepEqual(await loop(compat("v/weather"), gen), ["It is 22C and sunny in Paris.", PARIS, 2]);
    const one = await gen(compat("v/weather"), { prompt: QUESTION, tools: declared });
    assert.equal(one.finishReason, "tool-calls");
    assert.equal(one.toolCalls[0].toolCallId, "call_w1");
  },
  async compat_tool_loop_streamed() {
    assert.deepEqual(await loop(compat("v/weather"), stream), ["It is 22C and sunny in Paris.", PARIS, 2]);
  },
  async compat_parallel() {
    const want = ["Paris: 22C and sunny; Rome: 18C and cloudy.", BOTH_CALLS, 2];
    assert.deepEqual(await loop(compat("v/parallel"), gen, BOTH), want);
    assert.deepEqual(await loop(compat("v/parallel"), stream, BOTH), want, "streamed");
  },
  async compat_text_formats() {
    for (const fmt of ["hermes", "deepseek", "kimi"]) {
      for (const run of [gen, stream]) {
        const one = await run(compat(`v/${fmt}`), { prompt: QUESTION, tools: declared });
        assert.deepEqual(calls(one.steps), PARIS, fmt);
        assert.equal(one.text, "Let me check.", fmt);
        assert.deepEqual(await loop(compat(`v/${fmt}`), run), ["It is 22C and sunny in Paris.", PARIS, 2], fmt);
      }
    }
  },
  async compat_profile_formats() {
    // The bundled profiles' model globs pick the formats (providers/*.toml).
    for (const model of ["moonshot/kimi-k2.6", "vllm/qwen3-32b", "vllm/deepseek-v3.1"]) {
      for (const run of [gen, stream]) {
        const one = await run(compat(model), { prompt: QUESTION, tools: declared });
        assert.deepEqual([calls(one.steps), one.text], [PARIS, "Let me check."], `${model} ${run.name}`);
      }
    }
  },
  async compat_reasoning() {
    for (const run of [gen, stream]) {
      const r = await run(compat("v/reason"), { prompt: QUESTION });
      assert.equal(r.text, "Paris is 22C.");
      assert.equal(r.reasoningText, "22C in Paris; answer.");
    }
    // A DeepSeek-like thinker in a tool loop: the SDK sends the reasoning
    // back (or modelshim does), else the upstream answers 400.
    for (const run of [gen, stream]) {
      assert.deepEqual(await loop(compat("v/thinker"), run), ["It is 22C and sunny in Paris.", PARIS, 2]);
    }
  },
  async compat_structured() {
    const schema = z.object({ name: z.string(), age: z.number() });
    const r = await gen(compat("v/person"), { prompt: "Who wrote the first program?", output: Output.object({ schema }) });
    assert.deepEqual(r.output, PERSON);
  },
  async compat_errors() {
    for (const [scenario, status, text] of ERRORS) {
      await expectApiError(() => gen(compat(`v/${scenario}`), { prompt: QUESTION }), status, text);
      await expectApiError(() => stream(compat(`v/${scenario}`), { prompt: QUESTION }), status, text);
    }
  },
  async compat_idless() {
    const one = await gen(compat("v/idless"), { prompt: BOTH, tools: declared });
    assert.deepEqual(calls(one.steps), BOTH_CALLS);
    assert.deepEqual(await loop(compat("v/idless"), gen, BOTH), ["Paris: 22C and sunny; Rome: 18C and cloudy.", BOTH_CALLS, 2]);
  },
  async compat_idless_streamed() {
    const one = await stream(compat("v/idless"), { prompt: BOTH, tools: declared });
    assert.deepEqual(calls(one.steps), BOTH_CALLS);
  },
  async demo_skills() {
    const demo = createOpenAICompatible({ name: "demo", baseURL: DEMO, apiKey: KEY });
    for (const run of [gen, stream]) {
      const r = await run(demo("demo/skills"), { prompt: DEMO_PROMPT });
      assert.equal(r.text, DEMO_ANSWER);
      assert.deepEqual(calls(r.steps), []);
    }
  },
  async demo_skills_traced() {
    // Every trace mode must be safe for the client (issue #27 item 5).
    for (const mode of ["comments", "events"]) {
      const demo = createOpenAICompatible({ name: "demo", baseURL: DEMO, apiKey: KEY, headers: { "x-modelshim-trace": mode } });
      for (const run of [gen, stream]) {
        const r = await run(demo("demo/skills"), { prompt: DEMO_PROMPT });
        assert.equal(r.text, DEMO_ANSWER, `${mode} ${run.name}`);
      }
    }
  },
  async compat_cached_usage() {
    for (const [model, run] of [[compat("v/cached"), gen], [compat("v/cached"), stream], [oai("v/cached"), gen]]) {
      const r = await run(model, { prompt: "hi" });
      const u = await r.usage;
      const what = `${model.provider} ${run.name}`;
      assert.deepEqual([u.inputTokens, u.outputTokens], [100, 20], what);
      assert.equal(u.inputTokenDetails.cacheReadTokens, 80, what);
      assert.equal(u.outputTokenDetails.reasoningTokens, 5, what);
    }
  },
  // ---- @ai-sdk/openai: the Responses API ----
  async responses_generate() {
    const r = await gen(oai("v/plain"), { prompt: QUESTION });
    assert.equal(r.text, "Hello from upstream.");
    assert.equal(r.finishReason, "stop");
    assert.equal(r.usage.inputTokens, 7);
    assert.equal(r.usage.outputTokens, 3);
    const one = await gen(oai("v/weather"), { prompt: QUESTION, tools: declared });
    assert.deepEqual(calls(one.steps), PARIS);
    assert.equal(one.finishReason, "tool-calls");
  },
  async responses_stream() {
    const r = await stream(oai("v/plain"), { prompt: QUESTION });
    assert.equal(r.text, "Hello from upstream.");
    const one = await stream(oai("v/weather"), { prompt: QUESTION, tools: declared });
    assert.deepEqual(calls(one.steps), PARIS);
  },
  async responses_errors() {
    for (const [scenario, status, text] of ERRORS) {
      await expectApiError(() => gen(oai(`v/${scenario}`), { prompt: QUESTION }), status, text);
    }
  },
  async responses_tool_loop() {
    for (const run of [gen, stream]) {
      assert.deepEqual(await loop(oai("v/weather"), run), ["It is 22C and sunny in Paris.", PARIS, 2], run.name);
      const want = ["Paris: 22C and sunny; Rome: 18C and cloudy.", BOTH_CALLS, 2];
      assert.deepEqual(await loop(oai("v/parallel"), run, BOTH), want, `parallel ${run.name}`);
    }
  },
  // Prose before the call: the next step refers to that message item by
  // `item_reference` (item 2); the call items themselves are sent inline.
  async responses_prose_call_loop_generate() {
    for (const fmt of ["hermes", "deepseek", "kimi"]) {
      assert.deepEqual(await loop(oai(`v/${fmt}`), gen), ["It is 22C and sunny in Paris.", PARIS, 2], fmt);
    }
  },
  async responses_prose_call_loop_stream() {
    for (const fmt of ["hermes", "deepseek", "kimi"]) {
      assert.deepEqual(await loop(oai(`v/${fmt}`), stream), ["It is 22C and sunny in Paris.", PARIS, 2], fmt);
    }
  },
  // Asked for a summary, the provider shows the reasoning (item 4).
  async responses_reasoning_generate() {
    await reasoningShown(gen);
  },
  async responses_reasoning_stream() {
    await reasoningShown(stream);
  },
  // The DeepSeek-like upstream needs each call's reasoning back (items 2, 3).
  async responses_thinker_loop_generate() {
    await thinkerLoop(gen);
  },
  async responses_thinker_loop_stream() {
    await thinkerLoop(stream);
  },
  // store: false sends every item inline (no item_reference): the
  // reasoning still has to reach the next turn (item 3).
  async responses_thinker_loop_unstored_generate() {
    await thinkerLoop(gen, false);
  },
  async responses_thinker_loop_unstored_stream() {
    await thinkerLoop(stream, false);
  },
};

let failed = 0;
for (const name of process.argv.slice(2)) {
  try {
    await checks[name]();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n${e?.stack ?? e}`);
  }
}
process.exit(failed ? 1 : 0);
