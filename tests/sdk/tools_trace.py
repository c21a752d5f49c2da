"""The official OpenAI Python SDK against the agent loop (run by tests/it/agent.rs).

Without the trace header a streaming consumer sees nothing unusual: ordinary
chunks, no hidden tool calls, no empty choices. With `x-modelshim-trace:
comments` it sees the very same chunks, and the trace lines are in the raw
stream; a non-streamed answer carries `modelshim_trace` only when asked.
"""
import json
import os

import openai

BASE = os.environ["MODELSHIM_BASE_URL"]
client = openai.OpenAI(base_url=BASE, api_key="sk-test", max_retries=0, timeout=30)
MSGS = [{"role": "user", "content": "what time is it?"}]
TRACE = {"x-modelshim-trace": "comments"}
EXPECTED = "Let me look.\n\nGot it: true"


def consume(**kw):
    chunks = list(client.chat.completions.create(model="v/m", messages=MSGS, stream=True, **kw))
    for c in chunks:
        assert c.object == "chat.completion.chunk", c
        assert c.choices, "no empty choices list unasked: %r" % c
        assert not c.choices[0].delta.tool_calls, "server calls are hidden: %r" % c
        assert not (c.model_extra or {}), "no unknown chunk fields: %r" % c.model_extra
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == EXPECTED, text
    assert chunks[-1].choices[0].finish_reason == "stop", chunks[-1]
    return [c.model_dump(exclude={"id", "created"}) for c in chunks]


plain = consume()
traced = consume(extra_headers=TRACE)
assert plain == traced, "the trace changes nothing the SDK parses"
print("ok   streaming consumer sees nothing unusual, trace on or off")

with client.chat.completions.with_streaming_response.create(
    model="v/m", messages=MSGS, stream=True, extra_headers=TRACE
) as r:
    lines = list(r.iter_lines())
entries = [json.loads(l[len(": tool_trace "):]) for l in lines if l.startswith(": tool_trace ")]
assert len(entries) == 1 and entries[0]["tool"] == "current_time" and entries[0]["status"] == "ok", lines
print("ok   trace comment lines in the raw stream:", entries[0]["tool"], entries[0]["status"])

with client.chat.completions.with_streaming_response.create(model="v/m", messages=MSGS, stream=True) as r:
    assert not any("tool_trace" in l for l in r.iter_lines())
print("ok   no trace lines without the header")

r = client.chat.completions.create(model="v/m", messages=MSGS)
assert r.choices[0].message.content == EXPECTED and "modelshim_trace" not in (r.model_extra or {}), r
r = client.chat.completions.create(model="v/m", messages=MSGS, extra_headers=TRACE)
assert r.model_extra["modelshim_trace"][0]["tool"] == "current_time", r.model_extra
print("ok   modelshim_trace only when asked (non-streamed)")

# `events` mode: every event's data is a chunk the SDK can parse (the trace
# rides in a chunk with no choices), so its stream helpers do not break.
EVENTS = {"x-modelshim-trace": "events"}
chunks = list(client.chat.completions.create(model="v/m", messages=MSGS, stream=True, extra_headers=EVENTS))
traces = [c.model_extra["modelshim_trace"] for c in chunks if not c.choices]
assert len(traces) == 1 and traces[0]["tool"] == "current_time" and traces[0]["status"] == "ok", chunks
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
assert text == EXPECTED, text
with client.chat.completions.stream(model="v/m", messages=MSGS, extra_headers=EVENTS) as stream:
    kinds = [e.type for e in stream]
    final = stream.get_final_completion()
assert final.choices[0].message.content == EXPECTED, final
assert final.choices[0].finish_reason == "stop", final
print("ok   events trace mode: SDK stream and stream helper work:", kinds.count("content.delta"), "content deltas")
