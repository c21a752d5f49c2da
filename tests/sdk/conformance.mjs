// Conformance of modelshim with the official OpenAI Node SDK. Run by
// tests/it/sdk.rs against a proxy whose upstream is a scripted wiremock server.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.MODELSHIM_BASE_URL, apiKey: "sk-test", maxRetries: 0, timeout: 20000 });
const MSGS = [{ role: "user", content: "What is the weather in Paris?" }];
const TOOLS = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const checks = [];
const check = (name, fn) => checks.push([name, fn]);
const assert = (cond, msg) => { if (!cond) throw new Error(msg); };

check("plain_chat", async () => {
  const r = await client.chat.completions.create({ model: "v/plain", messages: MSGS });
  assert(r.choices[0].message.content === "Hello from upstream.", JSON.stringify(r));
});

check("plain_stream", async () => {
  let text = "";
  for await (const c of await client.chat.completions.create({ model: "v/plain", messages: MSGS, stream: true })) {
    assert(c.choices.length > 0, "empty choices");
    text += c.choices[0].delta.content ?? "";
  }
  assert(text === "Hello from upstream.", text);
});

const weather = (msg, content) => {
  const calls = msg.tool_calls ?? [];
  assert(calls.length === 1, JSON.stringify(msg));
  assert(calls[0].function.name === "get_weather", JSON.stringify(calls));
  assert(JSON.parse(calls[0].function.arguments).city === "Paris", calls[0].function.arguments);
  if (content !== undefined) assert((msg.content ?? "") === content, JSON.stringify(msg.content));
};

for (const model of ["v/native", "v/text"]) {
  check(`stream_helper_${model}`, async () => {
    const s = client.chat.completions.stream({ model, messages: MSGS, tools: TOOLS });
    const final = await s.finalChatCompletion();
    assert(final.choices[0].finish_reason === "tool_calls", JSON.stringify(final));
    weather(final.choices[0].message, model === "v/text" ? "Let me check." : undefined);
  });
}

check("run_tools_loop_through_text_recovery", async () => {
  let called = null;
  const runner = client.chat.completions.runTools({
    model: "v/loop", messages: MSGS,
    tools: [{ type: "function", function: { name: "get_weather", parameters: TOOLS[0].function.parameters,
      function: (args) => { called = args; return "22C and sunny"; }, parse: JSON.parse } }],
  });
  const content = await runner.finalContent();
  assert(called && called.city === "Paris", `tool not called: ${JSON.stringify(called)}`);
  assert(content === "It is 22C and sunny in Paris.", content);
});

check("errors_raise_the_right_exceptions", async () => {
  const cases = [["v/err401", OpenAI.AuthenticationError], ["v/err429", OpenAI.RateLimitError],
    ["v/err400", OpenAI.BadRequestError], ["v/err404", OpenAI.NotFoundError],
    ["v/err500", OpenAI.InternalServerError], ["nowhere/x", OpenAI.NotFoundError]];
  for (const [model, cls] of cases) {
    for (const stream of [false, true]) {
      try {
        const r = await client.chat.completions.create({ model, messages: MSGS, stream });
        if (stream) for await (const _ of r) { /* drain */ }
      } catch (e) {
        assert(e instanceof cls, `${model} stream=${stream}: ${e.constructor.name}, expected ${cls.name}`);
        continue;
      }
      throw new Error(`${model} stream=${stream}: no exception`);
    }
  }
});

let failed = 0;
for (const [name, fn] of checks) {
  try { await fn(); console.log(`PASS ${name}`); }
  catch (e) { failed++; console.log(`FAIL ${name}\n${e.stack}`); }
}
console.log(`node sdk: ${checks.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
