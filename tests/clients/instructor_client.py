"""instructor's response_model over the OpenAI SDK pointed at modelshim (run
by tests/it/clients.rs; scenario = upstream model name)."""
import warnings

import instructor
import openai
from pydantic import BaseModel

from _harness import BASE, KEY, PERSON, check, eq, main

warnings.filterwarnings("ignore")
MSGS = [{"role": "user", "content": "Who wrote the first program?"}]


class Person(BaseModel):
    name: str
    age: int


def client(mode):
    return instructor.from_openai(openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=20), mode=mode)


def extract(mode, scenario="person", **kw):
    # instructor returns its own subclass of the model: compare the fields.
    return client(mode).chat.completions.create(model=f"v/{scenario}", response_model=Person, messages=MSGS,
                                                max_retries=1, **kw).model_dump()


@check
def tools_mode():
    eq(extract(instructor.Mode.TOOLS), PERSON)
    # Streamed partials end with the whole object.
    partials = list(client(instructor.Mode.TOOLS).chat.completions.create_partial(
        model="v/person", response_model=Person, messages=MSGS, max_retries=1))
    eq(partials[-1].model_dump(), PERSON, "create_partial")


@check
def json_mode():
    eq(extract(instructor.Mode.JSON), PERSON)


@check
def md_json_mode():
    eq(extract(instructor.Mode.MD_JSON), PERSON)


@check
def errors():
    for scenario, exc, text in [("err429", openai.RateLimitError, "rate limit reached"),
                                ("err401", openai.AuthenticationError, "Incorrect API key provided"),
                                ("err400", openai.BadRequestError, "max_tokens is too large")]:
        try:
            extract(instructor.Mode.TOOLS, scenario)
        except Exception as e:  # noqa: BLE001 - the class is the check
            # instructor wraps the SDK's error after its attempts; the
            # SDK's own exception is the cause.
            eq(type(e).__name__, "InstructorRetryException", scenario)
            inner = e.__cause__
            assert isinstance(inner, exc), (scenario, type(inner).__name__, repr(inner))
            assert text in str(inner), (scenario, str(inner))
        else:
            raise AssertionError(f"{scenario}: no {exc.__name__}")


if __name__ == "__main__":
    main()
