"""Structured outputs through modelshim in front of a DeepSeek-like upstream
that refuses `json_schema` (run by tests/it/structured.rs; the model name
names the scenario): the official SDK's `.parse()` and a streamed create,
LangChain's `with_structured_output(method="json_schema")`, pydantic-ai's
native output and instructor's JSON_SCHEMA mode each get the object, never a
fence, prose or a wrong type. Each check imports its library, so one script
serves both venvs (instructor lives with openai 2)."""
import json
import warnings
from typing import Literal, Optional

import openai
from pydantic import BaseModel

from _harness import BASE, KEY, PERSON, check, eq, main

warnings.filterwarnings("ignore")
ASK = [{"role": "user", "content": "Who wrote the first program?"}]


class Person(BaseModel):
    name: str
    age: int


class Member(BaseModel):
    name: str
    role: Literal["dev", "ops"]
    email: Optional[str]


class Team(BaseModel):
    lead: Member
    members: list[Member]


TEAM = Team(lead=Member(name="Ada", role="dev", email=None), members=[Member(name="Bob", role="ops", email="b@x.org")])


class GetWeather(BaseModel):
    city: str


def sdk():
    return openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=20)


def parse(scenario, fmt=Person, **kw):
    return sdk().chat.completions.parse(model=f"deepseek/{scenario}", messages=ASK, response_format=fmt, **kw)


@check
def sdk_parse():
    # fenced, prose around it, a wrong type once (asked again, hidden)
    for scenario in ["fenced", "prose", "once"]:
        r = parse(scenario)
        eq(r.choices[0].message.parsed, Person(**PERSON), scenario)
        eq(json.loads(r.choices[0].message.content), PERSON, scenario)
        eq(r.choices[0].finish_reason, "stop", scenario)


@check
def sdk_parse_nested():
    # $defs/$ref, anyOf with null, an enum the first answer breaks
    eq(parse("nested", Team).choices[0].message.parsed, TEAM)


@check
def sdk_stream():
    fmt = openai.lib._parsing._completions.type_to_response_format_param(Person)
    text = ""
    for c in sdk().chat.completions.create(model="deepseek/once", messages=ASK, response_format=fmt, stream=True,
                                           stream_options={"include_usage": True}):
        if c.choices and c.choices[0].delta.content:
            text += c.choices[0].delta.content
    eq(json.loads(text), PERSON, "streamed create")
    with sdk().chat.completions.stream(model="deepseek/fenced", messages=ASK, response_format=Person) as s:
        final = s.get_final_completion()
    eq(final.choices[0].message.parsed, Person(**PERSON), "stream helper")


@check
def sdk_never():
    try:
        parse("never")
    except openai.UnprocessableEntityError as e:
        eq(e.status_code, 422)
        eq(e.code, "structured_output_invalid")
        assert "'age' is a required property" in e.message or '"age" is a required property' in e.message, e.message
    else:
        raise AssertionError("no error for an answer that never validates")


@check
def sdk_strict_tool():
    tool = openai.pydantic_function_tool(GetWeather, name="get_weather")
    r = sdk().chat.completions.parse(model="deepseek/tool-once", messages=ASK, tools=[tool])
    eq(r.choices[0].message.tool_calls[0].function.parsed_arguments, GetWeather(city="Paris"))


@check
def langchain():
    from langchain_openai import ChatOpenAI
    for scenario in ["fenced", "once"]:
        llm = ChatOpenAI(model=f"deepseek/{scenario}", base_url=BASE, api_key=KEY, max_retries=0, timeout=20)
        got = llm.with_structured_output(Person, method="json_schema").invoke("Who wrote the first program?")
        eq(got, Person(**PERSON), scenario)
    llm = ChatOpenAI(model="deepseek/nested", base_url=BASE, api_key=KEY, max_retries=0, timeout=20)
    eq(llm.with_structured_output(Team, method="json_schema").invoke("The team?"), TEAM, "nested")


@check
def pydantic_ai():
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.profiles import ModelProfile
    from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider
    for scenario in ["prose", "once"]:
        client = AsyncOpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=20)
        # modelshim gives every vendor json_schema output: the model says so.
        model = OpenAIChatModel(f"deepseek/{scenario}",
                                provider=OpenAICompatibleProvider("modelshim", openai_client=client),
                                profile=ModelProfile(supports_json_schema_output=True))
        r = Agent(model, output_type=NativeOutput(Person), retries=0).run_sync("Who wrote the first program?")
        eq(r.output, Person(**PERSON), scenario)


@check
def instructor():
    import instructor as ins
    client = ins.from_openai(sdk(), mode=ins.Mode.JSON_SCHEMA)
    for scenario in ["fenced", "prose", "once"]:
        got = client.chat.completions.create(model=f"deepseek/{scenario}", response_model=Person, messages=ASK,
                                             max_retries=0)
        eq(got.model_dump(), PERSON, scenario)
    partials = list(client.chat.completions.create_partial(model="deepseek/once", response_model=Person,
                                                           messages=ASK, max_retries=0))
    eq(partials[-1].model_dump(), PERSON, "create_partial")


if __name__ == "__main__":
    main()
