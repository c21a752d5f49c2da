"""A three-turn tool conversation through the official Python SDK, which (like
most apps) rebuilds the history without `reasoning_content`. The upstream
behaves like DeepSeek thinking mode and rejects such a history; modelshim must
restore the reasoning of each earlier turn (or strip it for a `reject` vendor).
"""
import json
import os
import sys

import openai

client = openai.OpenAI(base_url=os.environ["MODELSHIM_BASE_URL"], api_key="sk-test", max_retries=0, timeout=20)
TOOLS = [{"type": "function", "function": {"name": "get_weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def turn(model, messages, stream):
    if not stream:
        return client.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message
    with client.chat.completions.stream(model=model, messages=messages, tools=TOOLS) as s:
        for _ in s:
            pass
        return s.get_final_completion().choices[0].message


def conversation(model, stream, keep_reasoning):
    messages = [{"role": "user", "content": "Weather in Paris, then Rome?"}]
    for _ in range(5):
        msg = turn(model, messages, stream)
        if not msg.tool_calls:
            return msg.content
        # What LangChain and most apps do: rebuild the assistant turn by hand.
        rebuilt = {"role": "assistant", "content": msg.content,
                   "tool_calls": [{"id": c.id, "type": "function",
                                   "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                  for c in msg.tool_calls]}
        if keep_reasoning:
            rebuilt["reasoning_content"] = (msg.model_extra or {}).get("reasoning_content") or "kept by the app"
        messages.append(rebuilt)
        for c in msg.tool_calls:
            city = json.loads(c.function.arguments)["city"]
            messages.append({"role": "tool", "tool_call_id": c.id, "content": f"{city}: 22C"})
    raise AssertionError("conversation did not end")


failed = 0
for model, keep in (("required/deepseek-v4", False), ("reject/deepseek-reasoner", True)):
    for stream in (False, True):
        name = f"{model} stream={stream}"
        try:
            answer = conversation(model, stream, keep)
            assert answer == "Paris and Rome are both 22C.", answer
            print(f"PASS {name}")
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
print(f"reasoning round-trip: {4 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
