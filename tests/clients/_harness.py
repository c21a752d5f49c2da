"""Shared by the client scripts: checks by name, run the ones named on the
command line, one line each, exit non-zero if any fails."""
import os
import sys
import traceback

BASE = os.environ["MODELSHIM_BASE_URL"]
DEMO = os.environ.get("MODELSHIM_DEMO_URL")
KEY = "sk-test"
WEATHER = {"Paris": "22C and sunny", "Rome": "18C and cloudy"}
QUESTION = "What is the weather in Paris?"
BOTH = "What is the weather in Paris and in Rome?"
PERSON = {"name": "Ada Lovelace", "age": 36}
DEMO_PROMPT = ("Write a commit message: an empty modelshim.toml used to make serve exit with a "
               "TOML error; now it starts with the defaults.")
# fixtures/demo/skill_answer.json
DEMO_ANSWER = "```\nStart with defaults when the config file is empty\n\nAn empty modelshim.toml (as created by `touch`) made `serve` exit\nwith a TOML parse error. An empty file now means \"no settings\",\nlike a missing one, so the proxy starts with its defaults.\n```\n\nFollowing the commit-message skill: an imperative subject under 50 characters, and a body that says why the change was needed."

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def eq(got, want, what=""):
    assert got == want, f"{what}: got {got!r}, want {want!r}"


def main():
    names = sys.argv[1:] or list(CHECKS)
    failed = 0
    for name in names:
        try:
            CHECKS[name]()
            print(f"ok   {name}")
        except Exception:  # noqa: BLE001 - report every failure, keep going
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}")
    sys.exit(1 if failed else 0)
