"""LlamaIndex's OpenAILike LLM and a FunctionAgent through modelshim (run by
tests/it/clients.rs; scenario = upstream model name)."""
import asyncio
import warnings

import openai
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import ChatMessage
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike

from _harness import BASE, BOTH, KEY, QUESTION, WEATHER, check, eq, main

warnings.filterwarnings("ignore")


def get_weather(city: str) -> str:
    """Weather for a city."""
    return WEATHER[city]


TOOL = FunctionTool.from_defaults(fn=get_weather)
PARIS = [("get_weather", {"city": "Paris"})]
BOTH_CALLS = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]


def llm(scenario):
    return OpenAILike(model=f"v/{scenario}", api_base=BASE, api_key=KEY, is_chat_model=True,
                      is_function_calling_model=True, max_retries=0, timeout=20, context_window=32000)


def selections(model, response):
    sel = model.get_tool_calls_from_response(response, error_on_no_tool_call=False)
    ids = [s.tool_id for s in sel]
    assert all(ids) and len(set(ids)) == len(ids), ids
    return [(s.tool_name, s.tool_kwargs) for s in sel]


def with_tools(scenario, prompt, streamed):
    # LlamaIndex keeps only the first call unless parallel calls are allowed.
    m, kw = llm(scenario), {"user_msg": prompt, "allow_parallel_tool_calls": True}
    if streamed:
        last = None
        for last in m.stream_chat_with_tools([TOOL], **kw):
            pass
        return selections(m, last)
    return selections(m, m.chat_with_tools([TOOL], **kw))


def agent_run(scenario, prompt=QUESTION):
    async def go():
        return await FunctionAgent(tools=[TOOL], llm=llm(scenario), timeout=30).run(user_msg=prompt)

    r = asyncio.run(go())
    return r.response.content, [(t.tool_name, t.tool_kwargs) for t in r.tool_calls]


@check
def plain():
    r = llm("plain").chat([ChatMessage(role="user", content=QUESTION)])
    eq(r.message.content, "Hello from upstream.")


@check
def stream():
    deltas = [c.delta for c in llm("plain").stream_chat([ChatMessage(role="user", content=QUESTION)])]
    eq("".join(d or "" for d in deltas), "Hello from upstream.")


@check
def function_agent():
    eq(with_tools("weather", QUESTION, False), PARIS)
    eq(with_tools("weather", QUESTION, True), PARIS)
    eq(agent_run("weather"), ("It is 22C and sunny in Paris.", PARIS))


@check
def function_agent_text_calls():
    for fmt in ["hermes", "deepseek", "kimi"]:
        eq(with_tools(fmt, QUESTION, False), PARIS, fmt)
        eq(with_tools(fmt, QUESTION, True), PARIS, fmt)
        eq(agent_run(fmt), ("It is 22C and sunny in Paris.", PARIS), fmt)


@check
def parallel():
    eq(with_tools("parallel", BOTH, False), BOTH_CALLS)
    eq(with_tools("parallel", BOTH, True), BOTH_CALLS)
    eq(agent_run("parallel", BOTH), ("Paris: 22C and sunny; Rome: 18C and cloudy.", BOTH_CALLS))


@check
def errors():
    for scenario, exc, text in [("err429", openai.RateLimitError, "rate limit reached"),
                                ("err401", openai.AuthenticationError, "Incorrect API key provided"),
                                ("err400", openai.BadRequestError, "max_tokens is too large")]:
        try:
            llm(scenario).chat([ChatMessage(role="user", content=QUESTION)])
        except exc as e:
            assert text in str(e), (scenario, str(e))
        else:
            raise AssertionError(f"{scenario}: no {exc.__name__}")


@check
def idless():
    eq(with_tools("idless", BOTH, False), BOTH_CALLS, "non-streamed")
    eq(with_tools("idless", BOTH, True), BOTH_CALLS, "streamed")
    eq(agent_run("idless", BOTH), ("Paris: 22C and sunny; Rome: 18C and cloudy.", BOTH_CALLS))


if __name__ == "__main__":
    main()
