"""The official Anthropic Python SDK against modelshim's Messages front
(tests/it/messages.rs runs it against its scripted upstream): messages.create
and messages.stream with text, a tool-use round trip (Hermes text calls),
parallel tool use, thinking with a DeepSeek-like upstream that requires its
reasoning back, an image, and errors as the SDK's exception classes."""

import os
import sys

import anthropic

BASE = os.environ["MODELSHIM_BASE_URL"]
KEY = os.environ["MODELSHIM_KEY"]
client = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=20)

WEATHER = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def check(got, want, what):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}")
        sys.exit(1)


# Text, created and streamed; a claude-* name routed by a glob alias.
m = client.messages.create(model="claude-sonnet-4-5", max_tokens=64, system="Be brief.",
                           messages=[{"role": "user", "content": "Hi"}])
check([b.text for b in m.content], ["Hello from upstream."], "create text")
check((m.stop_reason, m.usage.input_tokens, m.usage.output_tokens, m.usage.cache_read_input_tokens),
      ("end_turn", 9, 5, 8), "create stop and usage")

with client.messages.stream(model="claude-sonnet-4-5", max_tokens=64,
                            messages=[{"role": "user", "content": "Hi"}]) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
check(streamed, "Hello from upstream.", "stream text")
check((final.stop_reason, final.usage.output_tokens, final.usage.input_tokens), ("end_turn", 5, 9), "stream final")

# Tool-use round trip: the Qwen-like upstream writes its call as Hermes text.
msgs = [{"role": "user", "content": "Weather in Paris?"}]
with client.messages.stream(model="v/qwen", max_tokens=64, tools=[WEATHER], messages=msgs) as s:
    first = s.get_final_message()
check(first.stop_reason, "tool_use", "tool stop")
uses = [b for b in first.content if b.type == "tool_use"]
check([(u.name, u.input) for u in uses], [("get_weather", {"city": "Paris"})], "tool use")
msgs += [{"role": "assistant", "content": first.content},
         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "22C"}]}]
second = client.messages.create(model="v/qwen", max_tokens=64, tools=[WEATHER], messages=msgs)
check(second.content[0].text, "Qwen says: 22C", "tool result answer")

# Parallel tool use.
msgs = [{"role": "user", "content": "Paris and Rome?"}]
first = client.messages.create(model="v/parallel", max_tokens=64, tools=[WEATHER], messages=msgs)
uses = [b for b in first.content if b.type == "tool_use"]
check([u.input["city"] for u in uses], ["Paris", "Rome"], "parallel calls")
results = [{"type": "tool_result", "tool_use_id": u.id, "content": r} for u, r in zip(uses, ["22C", "25C"])]
msgs += [{"role": "assistant", "content": first.content}, {"role": "user", "content": results}]
second = client.messages.create(model="v/parallel", max_tokens=64, tools=[WEATHER], messages=msgs)
check(second.content[0].text, "Paris 22C, Rome 25C.", "parallel answer")

# Thinking: DSML calls in text, reasoning required back on the next turn.
msgs = [{"role": "user", "content": "Weather in Paris?"}]
thinking = {"type": "enabled", "budget_tokens": 2048}
with client.messages.stream(model="v/deepseek", max_tokens=4096, thinking=thinking, tools=[WEATHER],
                            messages=msgs) as s:
    first = s.get_final_message()
check([b.type for b in first.content], ["thinking", "tool_use"], "thinking blocks")
check(first.content[0].thinking, "The user wants Paris; call get_weather.", "thinking text")
check(first.content[0].signature.startswith("modelshim."), True, "our signature")
msgs += [{"role": "assistant", "content": first.content},
         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": first.content[1].id, "content": "22C"}]}]
second = client.messages.create(model="v/deepseek", max_tokens=4096, thinking=thinking, tools=[WEATHER],
                                messages=msgs)
check([b.type for b in second.content], ["thinking", "text"], "second turn blocks")
check(second.content[1].text, "Paris is 22C.", "thinking round trip answer")

# An image.
m = client.messages.create(model="v/images", max_tokens=64, messages=[{"role": "user", "content": [
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    {"type": "text", "text": "What is this?"}]}])
check(m.content[0].text, "I see 1: data:image/png;base64,iVBORw0KGgo=", "image")

# Errors as the SDK's classes.
def raises(cls, fn, what):
    try:
        fn()
    except cls as e:
        check(type(e.body), dict, what + " body")
        return
    except Exception as e:  # noqa: BLE001
        print(f"FAIL {what}: raised {type(e).__name__}: {e}")
        sys.exit(1)
    print(f"FAIL {what}: nothing raised")
    sys.exit(1)


raises(anthropic.RateLimitError, lambda: client.messages.create(
    model="v/err429", max_tokens=8, messages=[{"role": "user", "content": "x"}]), "429")
bad = anthropic.Anthropic(base_url=BASE, api_key="wrong-key-0000", max_retries=0)
raises(anthropic.AuthenticationError, lambda: bad.messages.create(
    model="v/hello", max_tokens=8, messages=[{"role": "user", "content": "x"}]), "401")
raises(anthropic.BadRequestError, lambda: client.messages.create(
    model="v/hello", max_tokens=8, messages=[{"role": "user", "content": "x"}],
    thinking={"type": "sometimes"}), "400")
raises(anthropic.NotFoundError, lambda: client.messages.create(
    model="nowhere", max_tokens=8, messages=[{"role": "user", "content": "x"}]), "404")

# count_tokens and the model list.
n = client.messages.count_tokens(model="claude-sonnet-4-5", system="abcdefgh",
                                 messages=[{"role": "user", "content": "12345678"}])
check(n.input_tokens, 4, "count_tokens")
check([x.id for x in client.models.list()], ["claude-*", "claude-*haiku*"], "models")
print("ALL OK")
