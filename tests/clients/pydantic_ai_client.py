"""pydantic-ai agents on OpenAIChatModel with an OpenAI-compatible provider
whose base_url is modelshim (run by tests/it/clients.rs; scenario = upstream
model name)."""
import asyncio
import warnings

from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

from _harness import BASE, BOTH, KEY, PERSON, QUESTION, WEATHER, check, eq, main

warnings.filterwarnings("ignore")


class Person(BaseModel):
    name: str
    age: int


def model(scenario):
    client = AsyncOpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=20)
    return OpenAIChatModel(f"v/{scenario}", provider=OpenAICompatibleProvider("modelshim", openai_client=client))


def get_weather(city: str) -> str:
    """Weather for a city."""
    return WEATHER[city]


def weather_agent(scenario):
    return Agent(model(scenario), tools=[get_weather], retries=0)


def tool_calls(result):
    out = []
    for m in result.all_messages():
        if isinstance(m, ModelResponse):
            out.extend((p.tool_name, p.args_as_dict()) for p in m.parts if isinstance(p, ToolCallPart))
    return out


PARIS = [("get_weather", {"city": "Paris"})]
BOTH_CALLS = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]


@check
def plain():
    r = Agent(model("plain")).run_sync(QUESTION)
    eq(r.output, "Hello from upstream.")
    eq(r.usage().total_tokens, 10)


@check
def stream():
    async def go():
        async with Agent(model("plain")).run_stream(QUESTION) as r:
            deltas = [d async for d in r.stream_text(delta=True)]
        return deltas

    eq("".join(asyncio.run(go())), "Hello from upstream.")


@check
def tool_loop():
    r = weather_agent("weather").run_sync(QUESTION)
    eq(r.output, "It is 22C and sunny in Paris.")
    eq(tool_calls(r), PARIS)


@check
def tool_loop_text_calls():
    for fmt in ["hermes", "deepseek", "kimi"]:
        r = weather_agent(fmt).run_sync(QUESTION)
        eq(r.output, "It is 22C and sunny in Paris.", fmt)
        eq(tool_calls(r), PARIS, fmt)


@check
def parallel():
    r = weather_agent("parallel").run_sync(BOTH)
    eq(r.output, "Paris: 22C and sunny; Rome: 18C and cloudy.")
    eq(tool_calls(r), BOTH_CALLS)


@check
def output_type():
    r = Agent(model("person"), output_type=Person, retries=0).run_sync("Who wrote the first program?")
    eq(r.output, Person(**PERSON))


@check
def thinking():
    r = Agent(model("reason")).run_sync(QUESTION)
    eq(r.output, "Paris is 22C.")
    parts = r.all_messages()[-1].parts
    eq([(type(p).__name__, p.content) for p in parts if isinstance(p, (ThinkingPart, TextPart))],
       [("ThinkingPart", "22C in Paris; answer."), ("TextPart", "Paris is 22C.")])


@check
def errors():
    for scenario, name, text in [("err429", "ModelRateLimitError", "rate limit reached"),
                                 ("err401", "ModelAuthenticationError", "Incorrect API key provided"),
                                 ("err400", "ModelHTTPError", "max_tokens is too large")]:
        try:
            Agent(model(scenario)).run_sync(QUESTION)
        except Exception as e:  # noqa: BLE001 - the class name is the check
            names = [c.__name__ for c in type(e).__mro__]
            assert name in names, (scenario, names, str(e))
            eq(getattr(e, "status_code", None), int(scenario[3:]), scenario)
            assert text in str(e), (scenario, str(e))
        else:
            raise AssertionError(f"{scenario}: no {name}")


@check
def idless():
    r = weather_agent("idless").run_sync(BOTH)
    eq(tool_calls(r), BOTH_CALLS)
    eq(r.output, "Paris: 22C and sunny; Rome: 18C and cloudy.")


if __name__ == "__main__":
    main()
