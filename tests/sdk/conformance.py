"""Conformance of modelshim with the official OpenAI Python SDK.

Run by tests/it/sdk.rs against a proxy whose upstream is a scripted wiremock
server (scenario = model name). Prints one line per check and exits non-zero
if any check fails.
"""
import json
import os
import sys
import traceback

import openai

BASE = os.environ["MODELSHIM_BASE_URL"]
client = openai.OpenAI(base_url=BASE, api_key="sk-test", max_retries=0, timeout=20)
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
checks = []


def check(fn):
    checks.append(fn)
    return fn


@check
def plain_chat():
    r = client.chat.completions.create(model="v/plain", messages=MSGS)
    assert r.choices[0].message.content == "Hello from upstream.", r
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == 2


@check
def plain_stream():
    parts = []
    for chunk in client.chat.completions.create(model="v/plain", messages=MSGS, stream=True):
        assert chunk.choices, "a stock client never gets an empty choices list unasked"
        parts.append(chunk.choices[0].delta.content or "")
    assert "".join(parts) == "Hello from upstream.", parts


@check
def stream_usage_when_asked():
    chunks = list(client.chat.completions.create(model="v/plain", messages=MSGS, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 2, chunks[-1]


@check
def reasoning_is_split_out():
    r = client.chat.completions.create(model="v/think", messages=MSGS)
    m = r.choices[0].message
    assert m.content == "It is sunny.", m
    assert m.model_extra.get("reasoning_content") == "Paris in June.", m.model_extra


def helper_stream(model, messages=MSGS):
    names = []
    with client.chat.completions.stream(model=model, messages=messages, tools=TOOLS) as s:
        for ev in s:
            if ev.type == "tool_calls.function.arguments.done":
                names.append(ev.name)
        final = s.get_final_completion()
    return names, final


def assert_weather_call(msg, content=None):
    calls = msg.tool_calls
    assert calls and len(calls) == 1, msg
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}, calls[0].function.arguments
    assert calls[0].id and calls[0].type == "function"
    if content is not None:
        assert (msg.content or "") == content, repr(msg.content)


@check
def native_tool_calls_via_stream_helper():
    # Ollama-style deltas without index: the helper must still assemble them.
    names, final = helper_stream("v/native")
    assert names == ["get_weather"], names
    assert final.choices[0].finish_reason == "tool_calls"
    assert_weather_call(final.choices[0].message)


@check
def text_tool_call_recovered_non_streamed():
    r = client.chat.completions.create(model="v/text", messages=MSGS, tools=TOOLS)
    assert r.choices[0].finish_reason == "tool_calls", r
    assert_weather_call(r.choices[0].message, content="Let me check.")


@check
def text_tool_call_recovered_streamed():
    names, final = helper_stream("v/text")
    assert names == ["get_weather"], names
    assert final.choices[0].finish_reason == "tool_calls"
    assert_weather_call(final.choices[0].message, content="Let me check.")


@check
def text_tool_call_recovered_in_text_mode_provider():
    r = client.chat.completions.create(model="t/text", messages=MSGS, tools=TOOLS)
    assert_weather_call(r.choices[0].message, content="Let me check.")
    names, final = helper_stream("t/text")
    assert_weather_call(final.choices[0].message, content="Let me check.")


def prompt_mode_loop(stream):
    # The upstream 400s on any request with `tools`: the proxy must describe
    # them in the prompt, parse the call from the text, and rewrite the
    # history (call as text, result as a user message) on the next turn.
    messages = list(MSGS)
    if stream:
        names, final = helper_stream("p/ploop", messages)
        assert names == ["get_weather"], names
        first = final.choices[0]
    else:
        first = client.chat.completions.create(model="p/ploop", messages=messages, tools=TOOLS).choices[0]
    assert first.finish_reason == "tool_calls", first
    msg = first.message
    assert_weather_call(msg, content="Let me check.")
    call = msg.tool_calls[0]
    messages.append({"role": "assistant", "content": msg.content, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 22, "sky": "sunny"})})
    if stream:
        parts, finish = [], None
        for chunk in client.chat.completions.create(model="p/ploop", messages=messages, tools=TOOLS, stream=True):
            d = chunk.choices[0].delta
            assert not d.tool_calls, d
            parts.append(d.content or "")
            finish = chunk.choices[0].finish_reason or finish
        text = "".join(parts)
    else:
        r = client.chat.completions.create(model="p/ploop", messages=messages, tools=TOOLS)
        assert not r.choices[0].message.tool_calls, r
        text, finish = r.choices[0].message.content, r.choices[0].finish_reason
    assert text == "It is 22C and sunny in Paris.", text
    assert finish == "stop", finish


@check
def prompt_mode_two_turn_tool_loop():
    prompt_mode_loop(stream=False)


@check
def prompt_mode_two_turn_tool_loop_streamed():
    prompt_mode_loop(stream=True)


@check
def errors_raise_the_right_exceptions():
    cases = [("v/err401", openai.AuthenticationError), ("v/err429", openai.RateLimitError),
             ("v/err400", openai.BadRequestError), ("v/err404", openai.NotFoundError),
             ("v/err500", openai.InternalServerError), ("nowhere/x", openai.NotFoundError)]
    for model, cls in cases:
        for stream in (False, True):
            try:
                r = client.chat.completions.create(model=model, messages=MSGS, stream=stream)
                if stream:
                    list(r)
            except cls as e:
                assert e.message, e
                continue
            except Exception as e:  # noqa: BLE001
                raise AssertionError(f"{model} stream={stream}: {type(e).__name__}, expected {cls.__name__}") from e
            raise AssertionError(f"{model} stream={stream}: no exception")


@check
def mid_stream_error_raises():
    try:
        for _ in client.chat.completions.create(model="v/midfail", messages=MSGS, stream=True):
            pass
    except openai.APIError as e:
        assert "overloaded" in str(e), e
        return
    raise AssertionError("no exception for an in-band error")


failed = 0
for fn in checks:
    try:
        fn()
        print(f"PASS {fn.__name__}")
    except Exception:  # noqa: BLE001
        failed += 1
        print(f"FAIL {fn.__name__}\n{traceback.format_exc()}")
print(f"python sdk: {len(checks) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
