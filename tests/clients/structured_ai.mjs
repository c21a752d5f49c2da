// The Vercel AI SDK's generateObject and streamObject through modelshim in
// front of a DeepSeek-like upstream that refuses `json_schema` (run by
// tests/it/structured.rs from the npm folder of the major under test; the
// model name names the scenario). The provider says it supports structured
// outputs, so the SDK sends `json_schema` and parses what comes back.
import assert from "node:assert/strict";

import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import * as ai from "ai";
import { z } from "zod";

const BASE = process.env.MODELSHIM_BASE_URL;
const PERSON = { name: "Ada Lovelace", age: 36 };
const schema = z.object({ name: z.string(), age: z.number().int() });
const compat = createOpenAICompatible({
  name: "modelshim",
  baseURL: BASE,
  apiKey: "sk-test",
  includeUsage: true,
  supportsStructuredOutputs: true,
});
const base = { maxRetries: 0, timeout: 20000, schema, prompt: "Who wrote the first program?" };

const checks = {
  async generate_object() {
    for (const scenario of ["fenced", "prose", "once"]) {
      const r = await ai.generateObject({ ...base, model: compat(`deepseek/${scenario}`) });
      assert.deepEqual(r.object, PERSON, scenario);
      assert.equal(r.finishReason, "stop", scenario);
    }
  },
  async stream_object() {
    for (const scenario of ["fenced", "once"]) {
      const r = ai.streamObject({ ...base, model: compat(`deepseek/${scenario}`), onError: () => {} });
      const partials = [];
      for await (const p of r.partialObjectStream) partials.push(p);
      assert.deepEqual(partials.at(-1), PERSON, scenario);
      assert.deepEqual(await r.object, PERSON, scenario);
    }
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
