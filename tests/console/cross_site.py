"""Pages on other origins against the proxy (tests/it/hardening.rs): Debian's
Chromium under Playwright. A page on another site (evil.test, resolved to
127.0.0.1) sends the no-cors text/plain POST an open proxy used to serve; a
page on another port of 127.0.0.1 submits a form to the console's skills
reload while the admin is logged in. The Rust side checks that neither
reached its target; this script only makes the browser do it."""

import http.server
import os
import sys
import threading

from playwright.sync_api import expect, sync_playwright

BASE = os.environ["MODELSHIM_BASE_URL"].rstrip("/")
ADMIN = os.environ["MODELSHIM_ADMIN"]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        "--host-resolver-rules=MAP evil.test 127.0.0.1"]

NO_CORS = """<!doctype html><title>page</title><script>
fetch(%r + "/v1/chat/completions", {method: "POST", mode: "no-cors",
  headers: {"content-type": "text/plain"},
  body: JSON.stringify({model: "v/m", messages: [{role: "user", content: "spend their key"}]})})
  .then(() => { document.title = "sent"; }, () => { document.title = "sent"; });
</script>""" % BASE

CSRF = """<!doctype html><title>page</title>
<form id="f" method="post" action="%s/console/api/skills/reload"><input name="x" value="1"></form>
<script>document.getElementById("f").submit();</script>""" % BASE

PAGES = {"/no-cors.html": NO_CORS, "/csrf.html": CSRF}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        page = PAGES.get(self.path)
        if page is None:
            self.send_response(404)
            self.end_headers()
            return
        body = page.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    expect.set_options(timeout=15_000)
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = site.server_address[1]
    threading.Thread(target=site.serve_forever, daemon=True).start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS, headless=True)
        page = browser.new_page()

        # Another site: the no-cors text/plain POST to the open proxy.
        page.goto("http://evil.test:%d/no-cors.html" % port)
        expect(page).to_have_title("sent")
        print("no-cors POST sent from http://evil.test:%d" % port)

        # The admin logs in, then visits a page on another port of 127.0.0.1.
        page.goto(BASE + "/console")
        page.fill("#key", ADMIN)
        page.click("button[type=submit]")
        expect(page.locator("#live.on")).to_be_visible()
        page.goto("http://127.0.0.1:%d/csrf.html" % port)
        page.wait_for_url("**/console/api/skills/reload")
        page.wait_for_load_state("load")
        page.wait_for_timeout(500)
        print("form POST from http://127.0.0.1:%d ended at %s: %s" % (port, page.url, page.content()[:300]))
        browser.close()
    site.shutdown()
    print("ALL SENT")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        print("FAILED:", repr(e), file=sys.stderr)
        raise
