"""The official OpenAI Python SDK's model calls through the proxy: one
provider `x` naming no models, whose upstream lists `y` and `Org/Model`."""

import os

import openai

client = openai.OpenAI(base_url=os.environ["MODELSHIM_BASE_URL"], api_key="unused", max_retries=0, timeout=20)

ids = [m.id for m in client.models.list()]
assert ids == ["x/y", "x/Org/Model"], ids

m = client.models.retrieve("x/y")
assert (m.id, m.object, m.owned_by) == ("x/y", "model", "x"), m
assert client.models.retrieve("x/Org/Model").id == "x/Org/Model"

try:
    client.models.retrieve("x/nope")
    raise AssertionError("an unknown model was found")
except openai.NotFoundError as e:
    assert e.code == "model_not_found", e

print("models ok")
