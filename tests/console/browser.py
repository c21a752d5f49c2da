"""The console in a real browser (tests/it/console.rs): Debian's Chromium under
Playwright. Signs in with the admin key, sends requests to the proxy (plain,
streamed, a hidden server-tool loop, a failing upstream) while the list is
open, sees them appear without a reload, opens the tool loop and reads its
timeline, looks at the Proxy view; screenshots go to $ARTIFACTS."""

import json
import os
import re
import sys
import threading
import urllib.error
import urllib.request

from playwright.sync_api import expect, sync_playwright

BASE = os.environ["MODELSHIM_BASE_URL"].rstrip("/")
ADMIN = os.environ["MODELSHIM_ADMIN"]
KEY = os.environ["MODELSHIM_KEY"]
ART = os.environ["ARTIFACTS"]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def chat(model, text, stream=False):
    body = json.dumps({"model": model, "stream": stream,
                       "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(BASE + "/v1/chat/completions", data=body, method="POST",
                                 headers={"authorization": "Bearer " + KEY, "content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            return r.status, r.headers["x-request-id"]
    except urllib.error.HTTPError as e:
        e.read()
        return e.code, e.headers["x-request-id"]


def chat_id(model, text, rid):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(BASE + "/v1/chat/completions", data=body, method="POST",
                                 headers={"authorization": "Bearer " + KEY, "content-type": "application/json",
                                          "x-request-id": rid})
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
        return r.status


def skills_generation():
    req = urllib.request.Request(BASE + "/console/api/proxy", headers={"authorization": "Bearer " + ADMIN})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["skills"]["generation"]


def main():
    # Generous: CI runs this beside every other test on two cores.
    expect.set_options(timeout=15_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1440, "height": 1000}, device_scale_factor=1)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        page.goto(BASE + "/console")
        expect(page.locator("#key")).to_be_visible()
        page.screenshot(path=os.path.join(ART, "console-login.png"))
        page.fill("#key", "not the key")
        page.click("button[type=submit]")
        expect(page.locator("#login-message")).to_contain_text("not the admin key")
        page.fill("#key", ADMIN)
        page.click("button[type=submit]")
        expect(page.locator("#live.on")).to_be_visible()
        page.evaluate("window.__stay = 1")

        sent = {}
        def send():
            sent["plain"] = chat("v/m", "hi there")
            sent["stream"] = chat("v/m", "stream me a hello", stream=True)
            sent["tool"] = chat("v/m", "what time is it in Paris?", stream=True)
            sent["fail"] = chat("v/broken", "hi")
        t = threading.Thread(target=send)
        t.start()
        t.join(20)
        assert sent["plain"][0] == 200 and sent["stream"][0] == 200 and sent["tool"][0] == 200, sent
        assert sent["fail"][0] >= 500, sent

        rows = page.locator("#requests tbody tr")
        expect(rows).to_have_count(4)
        for name, (status, rid) in sent.items():
            row = page.locator(f'#requests tbody tr[data-id="{rid}"]')
            expect(row).to_be_visible()
            expect(row.locator(".badge").first).not_to_have_text("running")
            expect(row).to_contain_text(str(status))
        expect(page.locator(f'tr[data-id="{sent["plain"][1]}"]')).to_contain_text("team-a")
        expect(page.locator(f'tr[data-id="{sent["tool"][1]}"]')).to_contain_text("→ v/m")
        assert page.evaluate("window.__stay") == 1, "the list updated without a reload"
        page.mouse.move(0, 0)
        page.screenshot(path=os.path.join(ART, "console-list.png"), full_page=True)

        page.click(f'tr[data-id="{sent["tool"][1]}"]')
        expect(page.locator("#request-id")).to_have_text(sent["tool"][1])
        call = page.locator('.tool-call[data-tool="current_time"]')
        expect(call).to_have_count(1)
        expect(call.locator(".args")).to_contain_text('"utc_offset": "+02:00"')
        expect(call.locator(".result")).to_contain_text("+02:00")
        expect(call.locator(".badge")).to_have_text("ok")
        expect(page.locator(".tl.iteration")).to_have_count(2)
        # What the model said in each iteration; the last one is the answer the client got.
        expect(page.locator(".tl.model-turn")).to_have_count(2)
        expect(page.locator(".tl.model-turn").first).to_contain_text("calls: current_time")
        expect(page.locator(".tl.model-turn.final")).to_have_count(1)
        expect(page.locator(".tl.model-turn.final .said")).to_contain_text("The tool said")
        page.screenshot(path=os.path.join(ART, "console-request.png"), full_page=True)
        page.click('button[data-tab="upstream"]')
        expect(page.locator("#body-upstream")).to_contain_text("call_t1")
        assert KEY not in page.content(), "the proxy key is on the page"
        assert page.url.endswith("/console/requests/" + sent["tool"][1]), page.url

        # A loop watched while it runs: its tool call shows before the answer. The page is
        # open and live before the request starts, so the loop's 2.5 s cover only the update.
        page.goto(BASE + "/console/requests/req-live-browser")
        expect(page.locator("#live.on")).to_be_visible()
        expect(page.locator(".panel.empty")).to_be_visible()
        slow = threading.Thread(target=lambda: sent.__setitem__("slow", chat_id("v/m", "what time is it, slowly?", "req-live-browser")))
        slow.start()
        live_call = page.locator('.tool-call[data-tool="current_time"] .result')
        expect(live_call).to_contain_text("+02:00")
        expect(page.locator(".detail-head .badge").first).to_have_text(re.compile("running|live"))
        page.screenshot(path=os.path.join(ART, "console-live.png"), full_page=True)
        slow.join(10)
        assert sent["slow"] == 200, sent
        expect(page.locator(".detail-head .badge").first).to_have_text("200")

        # The address of one request opens it directly.
        page.goto(BASE + "/console/requests/" + sent["fail"][1])
        expect(page.locator("#request-error")).to_contain_text("upstream exploded")

        page.goto(BASE + "/console#proxy")
        expect(page.locator('#providers .provider[data-name="v"]')).to_contain_text("closed")
        expect(page.locator("#errors")).to_contain_text("upstream exploded")
        page.screenshot(path=os.path.join(ART, "console-proxy.png"), full_page=True)

        # The page's own script sends the session's CSRF token with a change.
        before = skills_generation()
        page.click("#reload-skills")
        page.wait_for_function("!document.querySelector('#reload-skills') || !document.querySelector('#reload-skills').disabled")
        for _ in range(50):
            if skills_generation() != before:
                break
            page.wait_for_timeout(100)
        assert skills_generation() != before, "the console's Reload skills button did not reload"

        assert not errors, errors
        browser.close()
    print("ALL OK")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the test prints what went wrong
        print("FAILED:", repr(e), file=sys.stderr)
        raise
