"""LangChain's ChatOpenAI and LangGraph's ReAct agent through modelshim
(run by tests/it/clients.rs; scenario = upstream model name)."""
import json
import warnings

import openai
from langchain_core.messages import AIMessageChunk
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from _harness import (BASE, BOTH, DEMO, DEMO_ANSWER, DEMO_PROMPT, KEY, PERSON, QUESTION, WEATHER, check, eq,
                      main)

warnings.filterwarnings("ignore")


@tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return WEATHER[city]


class Person(BaseModel):
    name: str
    age: int


def llm(scenario, base=BASE, **kw):
    return ChatOpenAI(model=f"v/{scenario}" if base == BASE and "/" not in scenario else scenario, base_url=base, api_key=KEY,
                      max_retries=0, timeout=20, **kw)


def calls(msg):
    """(name, args) of each parsed call; ids must be there and distinct."""
    ids = [c["id"] for c in msg.tool_calls]
    assert all(ids) and len(set(ids)) == len(ids), ids
    eq(msg.invalid_tool_calls, [], "invalid_tool_calls")
    return [(c["name"], c["args"]) for c in msg.tool_calls]


def gather(stream):
    """The streamed chunks summed the way LangChain apps do; also the
    tool_call_chunks seen on the way."""
    total, pieces = None, []
    for c in stream:
        assert isinstance(c, AIMessageChunk), type(c)
        pieces.extend(c.tool_call_chunks)
        total = c if total is None else total + c
    return total, pieces


PARIS = [("get_weather", {"city": "Paris"})]
BOTH_CALLS = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]


@check
def plain():
    m = llm("plain").invoke(QUESTION)
    eq(m.content, "Hello from upstream.")
    eq(m.response_metadata["finish_reason"], "stop")
    eq(m.usage_metadata["total_tokens"], 10)


@check
def stream():
    total, _ = gather(llm("plain", stream_usage=True).stream(QUESTION))
    eq(total.content, "Hello from upstream.")
    eq(total.usage_metadata["input_tokens"], 7)
    eq(total.usage_metadata["output_tokens"], 3)


@check
def tools_streamed_chunks():
    total, pieces = gather(llm("weather").bind_tools([get_weather]).stream(QUESTION))
    eq(calls(total), PARIS)
    eq(total.tool_calls[0]["id"], "call_w1", "upstream id kept")
    # The first chunk names the call; the arguments arrive in pieces.
    assert pieces and pieces[0]["name"] == "get_weather" and pieces[0]["index"] == 0, pieces
    eq(json.loads("".join(p["args"] or "" for p in pieces)), {"city": "Paris"})
    eq(total.response_metadata.get("finish_reason"), "tool_calls")


@check
def tools_invoke():
    m = llm("weather").bind_tools([get_weather]).invoke(QUESTION)
    eq(calls(m), PARIS)
    eq(m.response_metadata["finish_reason"], "tool_calls")


@check
def parallel():
    m = llm("parallel").bind_tools([get_weather]).invoke(BOTH)
    eq(calls(m), BOTH_CALLS)
    total, _ = gather(llm("parallel").bind_tools([get_weather]).stream(BOTH))
    eq(calls(total), BOTH_CALLS)


@check
def structured_json_schema():
    eq(llm("person").with_structured_output(Person).invoke("Who wrote the first program?"), Person(**PERSON))


@check
def structured_function_calling():
    s = llm("person").with_structured_output(Person, method="function_calling")
    eq(s.invoke("Who wrote the first program?"), Person(**PERSON))


@check
def text_formats():
    for fmt in ["hermes", "deepseek", "kimi"]:
        m = llm(fmt).bind_tools([get_weather]).invoke(QUESTION)
        eq(calls(m), PARIS, fmt)
        eq(m.content, "Let me check.", fmt)


@check
def text_formats_streamed():
    for fmt in ["hermes", "deepseek", "kimi"]:
        total, pieces = gather(llm(fmt).bind_tools([get_weather]).stream(QUESTION))
        eq(calls(total), PARIS, fmt)
        eq(total.content, "Let me check.", fmt)
        assert pieces, fmt


KIMI_TEXT = ("Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
             "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>")


@check
def profile_formats():
    # The bundled profiles' model globs pick the formats (providers/*.toml).
    for model in ["moonshot/kimi-k2.6", "vllm/qwen3-32b", "vllm/deepseek-v3.1"]:
        for streamed in [False, True]:
            bound = llm(model).bind_tools([get_weather])
            m = gather(bound.stream(QUESTION))[0] if streamed else bound.invoke(QUESTION)
            eq((calls(m), m.content), (PARIS, "Let me check."), f"{model} streamed={streamed}")
    # A format the profile does not name for that model stays text.
    m = llm("vllm/qwen3-kimi").bind_tools([get_weather]).invoke(QUESTION)
    eq((m.tool_calls, m.content), ([], KIMI_TEXT))


@check
def errors():
    for scenario, exc, text in [("err429", openai.RateLimitError, "rate limit reached"),
                                ("err401", openai.AuthenticationError, "Incorrect API key provided"),
                                ("err400", openai.BadRequestError, "max_tokens is too large")]:
        for streamed in [False, True]:
            try:
                m = llm(scenario)
                list(m.stream(QUESTION)) if streamed else m.invoke(QUESTION)
            except exc as e:
                assert text in str(e), (scenario, str(e))
            else:
                raise AssertionError(f"{scenario}: no {exc.__name__}")


@check
def idless():
    eq(calls(llm("idless").bind_tools([get_weather]).invoke(BOTH)), BOTH_CALLS)


@check
def idless_streamed():
    total, _ = gather(llm("idless").bind_tools([get_weather]).stream(BOTH))
    eq(calls(total), BOTH_CALLS)


@check
def cached_usage():
    want = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
            "input_token_details": {"cache_read": 80}, "output_token_details": {"reasoning": 5}}
    eq(llm("cached").invoke("hi").usage_metadata, want, "non-streamed")
    total, _ = gather(llm("cached", stream_usage=True).stream("hi"))
    eq(total.usage_metadata, want, "streamed")


def agent_run(scenario, streaming=False):
    from langgraph.prebuilt import create_react_agent
    agent = create_react_agent(llm(scenario, streaming=streaming), [get_weather])
    out = agent.invoke({"messages": [("user", QUESTION)]})
    return out["messages"]


def assert_weather_loop(msgs, what):
    eq([m.type for m in msgs], ["human", "ai", "tool", "ai"], what)
    eq(calls(msgs[1]), PARIS, what)
    eq(msgs[2].content, "22C and sunny", what)
    eq(msgs[2].tool_call_id, msgs[1].tool_calls[0]["id"], what)
    eq(msgs[3].content, "It is 22C and sunny in Paris.", what)


@check
def react_agent():
    for streaming in [False, True]:
        assert_weather_loop(agent_run("weather", streaming), f"streaming={streaming}")


@check
def react_agent_text_calls():
    for fmt in ["hermes", "deepseek", "kimi"]:
        for streaming in [False, True]:
            assert_weather_loop(agent_run(fmt, streaming), f"{fmt} streaming={streaming}")


@check
def react_agent_reasoning():
    # LangChain drops reasoning_content; the DeepSeek-like upstream still gets
    # it back on the second turn (400 otherwise).
    for streaming in [False, True]:
        assert_weather_loop(agent_run("thinker", streaming), f"streaming={streaming}")


@check
def demo_skills():
    m = llm("demo/skills", base=DEMO).invoke(DEMO_PROMPT)
    eq(m.content, DEMO_ANSWER)
    eq(m.tool_calls, [])
    total, _ = gather(llm("demo/skills", base=DEMO).stream(DEMO_PROMPT))
    eq(total.content, DEMO_ANSWER, "streamed")


@check
def demo_skills_traced():
    # Every trace mode must be safe for the client (issue #27 item 5).
    for mode in ["comments", "events"]:
        h = {"x-modelshim-trace": mode}
        eq(llm("demo/skills", base=DEMO, default_headers=h).invoke(DEMO_PROMPT).content, DEMO_ANSWER, mode)
        total, _ = gather(llm("demo/skills", base=DEMO, default_headers=h).stream(DEMO_PROMPT))
        eq(total.content, DEMO_ANSWER, f"{mode} streamed")


def rllm(scenario, **kw):
    return llm(scenario, use_responses_api=True, **kw)


def reasoning_text(msg):
    return "".join(b.get("reasoning", "") for b in msg.content_blocks if b["type"] == "reasoning")


@check
def responses_plain():
    eq(rllm("plain").invoke(QUESTION).text, "Hello from upstream.")
    total, _ = gather(rllm("plain").stream(QUESTION))
    eq(total.text, "Hello from upstream.", "streamed")


@check
def responses_tools():
    eq(calls(rllm("weather").bind_tools([get_weather]).invoke(QUESTION)), PARIS)
    total, _ = gather(rllm("weather").bind_tools([get_weather]).stream(QUESTION))
    eq(calls(total), PARIS, "streamed")
    eq(calls(rllm("parallel").bind_tools([get_weather]).invoke(BOTH)), BOTH_CALLS, "parallel")


@check
def responses_react_agent():
    from langgraph.prebuilt import create_react_agent
    for streaming in [False, True]:
        for scenario in ["weather", "hermes"]:
            agent = create_react_agent(rllm(scenario, streaming=streaming), [get_weather])
            msgs = agent.invoke({"messages": [("user", QUESTION)]})["messages"]
            what = f"{scenario} streaming={streaming}"
            eq([m.type for m in msgs], ["human", "ai", "tool", "ai"], what)
            eq(calls(msgs[1]), PARIS, what)
            eq(msgs[3].text, "It is 22C and sunny in Paris.", what)


@check
def responses_reasoning_summary():
    # Asked for a summary, LangChain shows the reasoning (item 4).
    r = {"effort": "low", "summary": "auto"}
    m = rllm("reason", reasoning=r).invoke(QUESTION)
    eq((m.text, reasoning_text(m)), ("Paris is 22C.", "22C in Paris; answer."), f"content {m.content!r}")
    total, _ = gather(rllm("reason", reasoning=r).stream(QUESTION))
    eq((total.text, reasoning_text(total)), ("Paris is 22C.", "22C in Paris; answer."), f"streamed {total.content!r}")


if __name__ == "__main__":
    main()
