"""litellm as a client library (`openai/…` models with api_base = modelshim),
run by tests/it/clients.rs; scenario = upstream model name."""
import json
import warnings

import litellm

from _harness import BASE, BOTH, DEMO, DEMO_ANSWER, DEMO_PROMPT, KEY, QUESTION, check, eq, main

warnings.filterwarnings("ignore")
litellm.telemetry = False
litellm.suppress_debug_info = True

MSGS = [{"role": "user", "content": QUESTION}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
PARIS = [("get_weather", {"city": "Paris"})]
BOTH_CALLS = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]


def complete(scenario, base=BASE, **kw):
    model = f"openai/v/{scenario}" if base == BASE else f"openai/{scenario}"
    kw.setdefault("messages", MSGS)
    return litellm.completion(model=model, api_base=base, api_key=KEY, num_retries=0, timeout=20, **kw)


def streamed(scenario, **kw):
    chunks = list(complete(scenario, stream=True, **kw))
    return litellm.stream_chunk_builder(chunks, messages=kw.get("messages", MSGS))


def calls(msg):
    ids = [c.id for c in msg.tool_calls or []]
    assert all(ids) and len(set(ids)) == len(ids), ids
    return [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]


@check
def plain():
    r = complete("plain")
    eq(r.choices[0].message.content, "Hello from upstream.")
    eq(r.choices[0].finish_reason, "stop")
    eq(r.usage.total_tokens, 10)


@check
def stream():
    parts = [c.choices[0].delta.content or "" for c in complete("plain", stream=True) if c.choices]
    eq("".join(parts), "Hello from upstream.")


@check
def tools():
    r = complete("weather", tools=TOOLS)
    eq(calls(r.choices[0].message), PARIS)
    eq(r.choices[0].message.tool_calls[0].id, "call_w1")
    eq(r.choices[0].finish_reason, "tool_calls")


@check
def tools_streamed():
    r = streamed("weather", tools=TOOLS)
    eq(calls(r.choices[0].message), PARIS)
    eq(r.choices[0].finish_reason, "tool_calls")


@check
def parallel():
    eq(calls(complete("parallel", tools=TOOLS).choices[0].message), BOTH_CALLS)
    eq(calls(streamed("parallel", tools=TOOLS).choices[0].message), BOTH_CALLS)


@check
def text_formats():
    for fmt in ["hermes", "deepseek", "kimi"]:
        for r in [complete(fmt, tools=TOOLS), streamed(fmt, tools=TOOLS)]:
            m = r.choices[0].message
            eq(calls(m), PARIS, fmt)
            eq(m.content, "Let me check.", fmt)
            eq(r.choices[0].finish_reason, "tool_calls", fmt)


@check
def reasoning():
    m = complete("reason").choices[0].message
    eq(m.content, "Paris is 22C.")
    eq(m.reasoning_content, "22C in Paris; answer.")
    parts, content = [], []
    for c in complete("reason", stream=True):
        if c.choices:
            parts.append(getattr(c.choices[0].delta, "reasoning_content", None) or "")
            content.append(c.choices[0].delta.content or "")
    eq("".join(parts), "22C in Paris; answer.", "streamed reasoning")
    eq("".join(content), "Paris is 22C.", "streamed content")


@check
def errors():
    for scenario, exc, text in [("err429", litellm.RateLimitError, "rate limit reached"),
                                ("err401", litellm.AuthenticationError, "Incorrect API key provided"),
                                ("err400", litellm.BadRequestError, "max_tokens is too large")]:
        for stream in [False, True]:
            try:
                r = complete(scenario, stream=stream)
                if stream:
                    list(r)
            except exc as e:
                assert text in str(e), (scenario, str(e))
                eq(e.status_code, int(scenario[3:]), scenario)
            else:
                raise AssertionError(f"{scenario}: no {exc.__name__}")


@check
def idless():
    eq(calls(complete("idless", tools=TOOLS).choices[0].message), BOTH_CALLS)


@check
def idless_streamed():
    eq(calls(streamed("idless", tools=TOOLS).choices[0].message), BOTH_CALLS)


@check
def cached_usage():
    u = complete("cached", messages=[{"role": "user", "content": "hi"}]).usage
    eq(u.prompt_tokens_details.cached_tokens, 80)
    eq(u.completion_tokens_details.reasoning_tokens, 5)


@check
def demo_skills():
    msgs = [{"role": "user", "content": DEMO_PROMPT}]
    r = complete("demo/skills", base=DEMO, messages=msgs)
    eq(r.choices[0].message.content, DEMO_ANSWER)
    eq(r.choices[0].message.tool_calls, None)
    parts = [c.choices[0].delta.content or "" for c in complete("demo/skills", base=DEMO, messages=msgs, stream=True)
             if c.choices]
    eq("".join(parts), DEMO_ANSWER, "streamed")


@check
def demo_skills_traced():
    # Every trace mode must be safe for the client (issue #27 item 5).
    msgs = [{"role": "user", "content": DEMO_PROMPT}]
    for mode in ["comments", "events"]:
        h = {"x-modelshim-trace": mode}
        r = complete("demo/skills", base=DEMO, messages=msgs, extra_headers=h)
        eq(r.choices[0].message.content, DEMO_ANSWER, mode)
        chunks = complete("demo/skills", base=DEMO, messages=msgs, stream=True, extra_headers=h)
        eq("".join(c.choices[0].delta.content or "" for c in chunks if c.choices), DEMO_ANSWER, f"{mode} streamed")


if __name__ == "__main__":
    main()
