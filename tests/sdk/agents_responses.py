"""The OpenAI Agents SDK runs a small agent with one function tool through
modelshim's Responses API (OpenAIResponsesModel on an AsyncOpenAI client
pointed at the proxy). The scripted upstream (`v/weather`) first calls
get_weather, then answers with the tool's result. No tracing export.
"""
import asyncio
import os
import sys

from openai import AsyncOpenAI

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

set_tracing_disabled(True)
called = []


@function_tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    called.append(city)
    return "22C"


def agent():
    # A client per event loop: run_sync and asyncio.run each make their own.
    client = AsyncOpenAI(base_url=os.environ["MODELSHIM_BASE_URL"], api_key="sk-test", max_retries=0, timeout=20)
    return Agent(
        name="weather",
        instructions="Answer with the weather.",
        model=OpenAIResponsesModel(model="v/weather", openai_client=client),
        tools=[get_weather],
    )


failed = 0
result = Runner.run_sync(agent(), "Weather in Paris?")
if called == ["Paris"] and result.final_output == "It is 22C in Paris.":
    print("PASS run_sync")
else:
    failed += 1
    print(f"FAIL run_sync: called={called} final_output={result.final_output!r}")


async def streamed():
    called.clear()
    run = Runner.run_streamed(agent(), "Weather in Paris?")
    async for _ in run.stream_events():
        pass
    return run.final_output


out = asyncio.run(streamed())
if called == ["Paris"] and out == "It is 22C in Paris.":
    print("PASS run_streamed")
else:
    failed += 1
    print(f"FAIL run_streamed: called={called} final_output={out!r}")
print(f"agents: {2 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
