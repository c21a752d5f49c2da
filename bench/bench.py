#!/usr/bin/env python3
"""modelshim benchmark harness (issue #9). Run it through `bash bench/run`,
which installs the tools first; see bench/README.md for the lanes and method.

Everything listens on 127.0.0.1 only, every load run is bounded in time, and
every process this script starts is stopped by its pid when it ends.

Targets (what a request is sent to):
  direct     the upstream itself (nginx serving canned bodies / the paced mock)
  nginx      nginx `proxy_pass` in front of the same upstream: the practical limit
  modelshim  the release binary, one provider per lane pointing at the upstream
  litellm    `litellm --config`, one openai-compatible model per lane (plain lanes)

Lanes (what is asked): see LANES below.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import re
import resource
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# lane -> (description, upstream body file, streamed?, tools declared?)
LANES = {
    "plain": ("non-streamed chat completion (64-token answer)", "plain.json", False, False),
    "stream": ("streamed, 64 content chunks", "stream.sse", True, False),
    "stream8": ("streamed, 8 content chunks (for the per-chunk CPU slope)", "stream8.sse", True, False),
    "tools": ("non-streamed, hermes <tool_call> in the text, recovered", "tools.json", False, True),
    "toolsstream": ("streamed 64 chunks, hermes <tool_call> split across chunks, recovered", "toolsstream.sse", True, True),
}
# The paced-stream CPU lane (issue 50): 64 chunks 2 ms apart from
# bench/paced_upstream.py, many streams at once, CPU per request of each
# server's own process tree. Named in --lanes like the others.
PACED_LANE = "paced2ms"
PACED_INTERVAL_MS = 2.0
# The upstream that holds --many-streams open: one chunk a second, ten minutes at most.
HOLD_CHUNKS, HOLD_INTERVAL_MS = 600, 1000.0
# Issue 50's goals against nginx proxy_pass (ratio of proxy CPU per request,
# or of RSS per 1,000 open streams); None: no figure set, the ratio is reported.
GOALS_VS_NGINX = {"plain": 1.1, "stream": 1.3, PACED_LANE: None, "memory": 1.0}
# LiteLLM runs the plain lanes only (it recovers no text tool calls).
LITELLM_LANES = ["plain", "stream"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city"],
            },
        },
    }
]


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- fixtures


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _sse(pieces: list[str]) -> bytes:
    """An upstream stream: one content delta per piece, a finish chunk, [DONE]."""
    out = []
    for i, p in enumerate(pieces):
        d = {"role": "assistant", "content": p} if i == 0 else {"content": p}
        out.append(_chunk(d))
    out.append(_chunk({}, "stop"))
    body = b"".join(b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n" for c in out)
    return body + b"data: [DONE]\n\n"


def _completion(text: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 64, "total_tokens": 76},
        },
        separators=(",", ":"),
    ).encode()


def _split(text: str, n: int) -> list[str]:
    """`text` in `n` nearly equal consecutive pieces."""
    k, r = divmod(len(text), n)
    out, at = [], 0
    for i in range(n):
        size = k + (1 if i < r else 0)
        out.append(text[at : at + size])
        at += size
    return out


def write_fixtures(work: Path) -> None:
    """Upstream bodies (served by nginx) and client request bodies (sent by wrk)."""
    up = work / "upstream"
    words = [f"word{i} " for i in range(64)]
    tool_text = (
        "Let me look that up for you; one moment while I check the current conditions. "
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
    )
    bodies = {
        "plain": _completion("".join(words)),
        "stream": _sse(words),
        "stream8": _sse(words[:8]),
        "tools": _completion(tool_text),
        "toolsstream": _sse(_split(tool_text, 64)),
    }
    for lane, body in bodies.items():
        d = up / lane / "v1" / "chat"
        d.mkdir(parents=True, exist_ok=True)
        (d / "completions").write_bytes(body)
    req = work / "requests"
    req.mkdir(exist_ok=True)
    for lane in list(LANES) + ["paced", "slow", PACED_LANE, "hold"]:
        streamed = LANES[lane][2] if lane in LANES else True
        tools = LANES[lane][3] if lane in LANES else False
        r: dict = {"model": f"{lane}/m", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 128}
        if streamed:
            r["stream"] = True
        if tools:
            r["tools"] = TOOLS
        (req / f"{lane}.json").write_text(json.dumps(r))


# ---------------------------------------------------------------- configs


def nginx_upstream_conf(work: Path, port: int) -> str:
    p = work / "nginx-upstream"
    locs = []
    for lane, (_, _, streamed, _) in LANES.items():
        ctype = "text/event-stream" if streamed else "application/json"
        # The static module answers POST with 405; error_page turns that into
        # the file itself, so the canned body is served for a POST.
        locs.append(f"    location /{lane}/ {{ default_type {ctype}; error_page 405 =200 $uri; }}")
    return f"""# Fast upstream: canned bodies from static files (generated by bench/bench.py).
daemon off;
master_process on;
worker_processes 1;
error_log {p}/error.log warn;
pid {p}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {p}/tmp-body;
  proxy_temp_path {p}/tmp-proxy;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  etag off;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    root {work}/upstream;
    location = /healthz {{ return 200 "ok"; }}
{chr(10).join(locs)}
  }}
}}
"""


def nginx_proxy_conf(work: Path, port: int, up: int, paced: int, slow: int,
                     paced2: int | None = None, hold: int | None = None, max_streams: int = 0) -> str:
    """`paced2` and `hold`: the paced-stream CPU lane's upstream and the one
    that holds --many-streams (both optional). `max_streams`: open streams
    it must hold at once; each takes two connections (client and upstream),
    and one worker may get most of them."""
    p = work / "nginx-proxy"
    try:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    except (ValueError, OSError):
        hard = 20000
    nofile = max(20000, min(hard, 2 * max_streams + 600))
    conns = max(8192, min(2 * max_streams + 512, nofile))
    extra_up = "".join(f"  upstream {n} {{ server 127.0.0.1:{pt}; keepalive 256; }}\n"
                       for n, pt in ((PACED_LANE, paced2), ("hold", hold)) if pt)
    extra_loc = "".join(f"    location /{n}/ {{ proxy_pass http://{n}; }}\n"
                        for n, pt in ((PACED_LANE, paced2), ("hold", hold)) if pt)
    return f"""# The practical limit: nginx proxy_pass, keep-alive upstream, no buffering
# (so streams are relayed chunk by chunk, like modelshim does).
daemon off;
master_process on;
worker_processes auto;
worker_rlimit_nofile {nofile};
error_log {p}/error.log warn;
pid {p}/nginx.pid;
events {{ worker_connections {conns}; }}
http {{
  access_log off;
  client_body_temp_path {p}/tmp-body;
  proxy_temp_path {p}/tmp-proxy;
  keepalive_requests 1000000;
{extra_up}  upstream fast  {{ server 127.0.0.1:{up};    keepalive 256; keepalive_requests 1000000; }}
  upstream paced {{ server 127.0.0.1:{paced}; keepalive 256; }}
  upstream slow  {{ server 127.0.0.1:{slow};  keepalive 256; }}
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_buffering off;
  proxy_read_timeout 300s;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location = /healthz {{ return 200 "ok"; }}
    location /paced/ {{ proxy_pass http://paced; }}
    location /slow/  {{ proxy_pass http://slow; }}
{extra_loc}    location /       {{ proxy_pass http://fast; }}
  }}
}}
"""


def modelshim_conf(port: int, up: int, paced: int, slow: int, paced2: int | None = None, hold: int | None = None) -> str:
    lines = [f'listen = "127.0.0.1:{port}"', ""]

    def provider(name: str, base: str, mode: str, formats: list[str] | None = None) -> None:
        lines.append(f"[providers.{name}]")
        lines.append('profile = "vllm"            # a self-hosted OpenAI-compatible server')
        lines.append(f'base_url = "{base}"')
        # A key, as every real provider has: the redactor then works as in
        # production on both sides of an A/B (a secret added by the feature
        # under test, like the console's admin key, changes nothing else).
        lines.append('api_key_env = "MODELSHIM_BENCH_KEY"')
        lines.append(f'tool_calls = "{mode}"')
        if formats:
            lines.append(f"formats = {json.dumps(formats)}")
        lines.append('models = ["m"]')
        lines.append("")

    for lane, (_, _, _, tools) in LANES.items():
        if tools:
            provider(lane, f"http://127.0.0.1:{up}/{lane}/v1", "auto", ["hermes"])
        else:
            provider(lane, f"http://127.0.0.1:{up}/{lane}/v1", "native")
    provider("paced", f"http://127.0.0.1:{paced}/paced/v1", "native")
    provider("slow", f"http://127.0.0.1:{slow}/slow/v1", "native")
    for name, pt in ((PACED_LANE, paced2), ("hold", hold)):
        if pt:
            provider(name, f"http://127.0.0.1:{pt}/{name}/v1", "native")
    # The lanes measure the proxy path; the repo's ./skills would turn on the agent loop.
    lines += ["[skills]", "enabled = false", ""]
    # The stream lanes open 1,000 connections from one address.
    lines += ["[limits]", "max_connections_per_ip = 0", ""]
    return "\n".join(lines)


def litellm_conf(up: int, paced: int, slow: int) -> str:
    models = []
    bases = {lane: f"http://127.0.0.1:{up}/{lane}/v1" for lane in LITELLM_LANES}
    bases["paced"] = f"http://127.0.0.1:{paced}/paced/v1"
    bases["slow"] = f"http://127.0.0.1:{slow}/slow/v1"
    for lane, base in bases.items():
        models.append(
            f"  - model_name: {lane}/m\n"
            f"    litellm_params:\n"
            f"      model: openai/m\n"
            f"      api_base: {base}\n"
            f"      api_key: none\n"
        )
    return "model_list:\n" + "".join(models) + "litellm_settings:\n  telemetry: false\n  drop_params: true\n"


# ---------------------------------------------------------------- processes


def one_proxy_work(name: str) -> tuple[Path, dict[str, int], Path]:
    """A fresh target/NAME for the tools that measure one modelshim at a time
    (memab.py, heap.py): fixtures, ports, the canned upstream's nginx config
    and modelshim's config."""
    work = ROOT / "target" / name
    subprocess.run(["rm", "-rf", str(work)], check=True)
    for d in ("logs", "nginx-upstream/tmp-body", "nginx-upstream/tmp-proxy"):
        (work / d).mkdir(parents=True, exist_ok=True)
    write_fixtures(work)
    ports = {k: free_port() for k in ("up", "paced", "slow", "modelshim")}
    (work / "nginx-upstream" / "nginx.conf").write_text(nginx_upstream_conf(work, ports["up"]))
    conf = work / "modelshim.toml"
    conf.write_text(modelshim_conf(ports["modelshim"], ports["up"], ports["paced"], ports["slow"]))
    return work, ports, conf


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Procs:
    """The processes this run started; stopped by pid (their own session) at exit."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        out = open(self.logs / f"{name}.log", "ab")
        p = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, cwd=str(ROOT),
        )
        self.procs[name] = p
        return p

    def stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)  # its own process group only
            p.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)


def http_status(port: int, path: str, timeout: float = 1.0) -> int | None:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status
    except (OSError, http.client.HTTPException):
        return None


def wait_ready(port: int, path: str, timeout: float, proc: subprocess.Popen | None = None, poll: float = 0.0005) -> float | None:
    """Seconds until GET path answers 200 (polled every `poll` s), None on timeout."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            return None
        if http_status(port, path, timeout=2.0) == 200:
            return time.perf_counter() - t0
        time.sleep(poll)
    return None


def wait_port(port: int, timeout: float) -> bool:
    """True once something accepts TCP connections on the port."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.01)
    return False


def _tree(pid: int) -> list[int]:
    """pid and all its descendants (nginx workers, uvicorn workers)."""
    parents: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def rss_kib(pid: int) -> int:
    """VmRSS of a process and its descendants, KiB."""
    total = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process (all threads) and its live descendants, seconds."""
    ticks = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return ticks / CLK_TCK


# ---------------------------------------------------------------- measurements


class Target:
    def __init__(self, name: str, port: int, pid: int | None, direct_paths: bool):
        self.name, self.port, self.pid, self.direct_paths = name, port, pid, direct_paths

    def path(self, lane: str) -> str:
        # direct and nginx take the upstream's path; the proxies their own.
        return f"/{lane}/v1/chat/completions" if self.direct_paths else "/v1/chat/completions"


def sanity(t: Target, lane: str, port: int, work: Path) -> str | None:
    """One request end to end; an error string, or None when the answer is right."""
    body = (work / "requests" / f"{lane}.json").read_bytes()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", t.path(lane), body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
    except (OSError, http.client.HTTPException) as e:
        return f"{type(e).__name__}: {e}"
    if r.status != 200:
        return f"HTTP {r.status}: {data[:300]!r}"
    streamed = LANES[lane][2] if lane in LANES else True
    if streamed:
        n = data.count(b"data:")
        if b"[DONE]" not in data or n < 3:
            return f"not a complete SSE stream ({n} data lines): {data[:300]!r}"
    else:
        try:
            json.loads(data)
        except ValueError:
            return f"not JSON: {data[:300]!r}"
    tools = LANES[lane][3] if lane in LANES else False
    # The point of the tools lanes: the call in the text comes back as tool_calls.
    if tools and t.name == "modelshim" and b'"tool_calls"' not in data:
        return "tool call not recovered"
    return None


def wrk(url: str, body: Path, conns: int, threads: int, secs: float) -> dict:
    argv = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{max(1, round(secs))}s", "--timeout", "30s",
            "-s", str(BENCH / "post.lua"), url]
    env = dict(os.environ, WRK_BODY=str(body))
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=secs + 60)
    for line in out.stdout.splitlines():
        if line.startswith("WRK_JSON "):
            r = json.loads(line[len("WRK_JSON "):])
            r["rps"] = r["requests"] / (r["duration_us"] / 1e6) if r["duration_us"] else 0.0
            r["errors"] = r["err_connect"] + r["err_read"] + r["err_write"] + r["err_status"] + r["err_timeout"]
            return r
    raise RuntimeError(f"wrk printed no summary: {out.stdout[-500:]} {out.stderr[-500:]}")


def rotated(xs: list, r: int) -> list:
    """xs starting at position r: each round starts with another target, so
    none is always the one measured right after another's load."""
    k = r % len(xs) if xs else 0
    return xs[k:] + xs[:k]


def load_lane(ts: list[Target], lane: str, a: argparse.Namespace, work: Path) -> dict[str, dict]:
    """Throughput at fixed concurrency (with proxy CPU per request), then
    latency at concurrency 1, for every target of `ts` on one lane, in
    interleaved rounds: the VM's noise comes and goes over seconds, and
    measured one target after another it would land on whichever target ran
    at that moment. Per target: the median of its rounds' requests/s, p50
    and p99; CPU per request over all its rounds together."""
    body = work / "requests" / f"{lane}.json"
    url = {t.name: f"http://127.0.0.1:{t.port}{t.path(lane)}" for t in ts}
    for t in ts:
        wrk(url[t.name], body, a.connections, a.threads, a.warmup)  # warm pools and caches
    tp: dict[str, list[dict]] = {t.name: [] for t in ts}
    cpu: dict[str, float] = {t.name: 0.0 for t in ts}
    for r in range(a.rounds):
        for t in rotated(ts, r):
            cpu0 = cpu_seconds(t.pid) if t.pid else None
            tp[t.name].append(wrk(url[t.name], body, a.connections, a.threads, a.duration / a.rounds))
            if cpu0 is not None:
                cpu[t.name] += cpu_seconds(t.pid) - cpu0
    lat: dict[str, list[dict]] = {t.name: [] for t in ts}
    for r in range(a.rounds):
        for t in rotated(ts, r):
            lat[t.name].append(wrk(url[t.name], body, 1, 1, a.latency_duration / a.rounds))
    out = {}
    for t in ts:
        rounds, c1 = tp[t.name], lat[t.name]
        requests = sum(x["requests"] for x in rounds)
        res = {"rps": statistics.median(x["rps"] for x in rounds), "requests": requests,
               "errors": sum(x["errors"] for x in rounds), "rps_rounds": [round(x["rps"]) for x in rounds],
               "c1_p50_us": statistics.median(x["p50_us"] for x in c1),
               "c1_p99_us": statistics.median(x["p99_us"] for x in c1),
               "c1_p50_rounds": [x["p50_us"] for x in c1], "c1_p99_rounds": [x["p99_us"] for x in c1],
               "c1_requests": sum(x["requests"] for x in c1), "c1_errors": sum(x["errors"] for x in c1)}
        if t.pid and requests:
            res["cpu_us_per_req"] = cpu[t.name] * 1e6 / requests
        out[t.name] = res
    return out


def paced_lane(ts: list[Target], ports: dict[str, int], a: argparse.Namespace, work: Path, mock_pid: int | None = None) -> dict[str, dict]:
    """CPU per request of a paced stream (issue 50): the upstream writes 64
    content chunks 2 ms apart (bench/paced_upstream.py), so each reaches the
    proxy in a read of its own and costs its own wake-up, where the `stream`
    lane's 64 arrive together. wrk holds `a.paced_connections` streams open
    at once, each connection asking for the next stream when one ends, for
    `a.paced_duration` seconds per target in `a.rounds` interleaved rounds
    (as `load_lane`); the server's own process tree's CPU over those rounds
    divided by the streams it completed. direct is the Python mock itself:
    its figure is the upstream's cost, not a proxy's."""
    body = work / "requests" / f"{PACED_LANE}.json"
    url = {t.name: f"http://127.0.0.1:{ports[PACED_LANE] if t.name == 'direct' else t.port}{t.path(PACED_LANE)}" for t in ts}
    pid = {t.name: mock_pid if t.name == "direct" else t.pid for t in ts}
    for t in ts:
        wrk(url[t.name], body, a.paced_connections, a.threads, a.warmup)
    runs: dict[str, list[dict]] = {t.name: [] for t in ts}
    cpu: dict[str, float] = {t.name: 0.0 for t in ts}
    for r in range(a.rounds):
        for t in rotated(ts, r):
            cpu0 = cpu_seconds(pid[t.name]) if pid[t.name] else None
            runs[t.name].append(wrk(url[t.name], body, a.paced_connections, a.threads, a.paced_duration / a.rounds))
            if cpu0 is not None:
                cpu[t.name] += cpu_seconds(pid[t.name]) - cpu0
    out = {}
    for t in ts:
        rs = runs[t.name]
        requests = sum(x["requests"] for x in rs)
        res = {"rps": statistics.median(x["rps"] for x in rs), "requests": requests,
               "errors": sum(x["errors"] for x in rs), "rps_rounds": [round(x["rps"]) for x in rs],
               "stream_p50_us": statistics.median(x["p50_us"] for x in rs), "cpu_s": cpu[t.name],
               "connections": a.paced_connections}
        if pid[t.name] and requests:
            res["cpu_us_per_req"] = cpu[t.name] * 1e6 / requests
        out[t.name] = res
    return out


def load_litellm(t: Target, lane: str, a: argparse.Namespace, work: Path) -> dict:
    """LiteLLM's lane on its own: it answers tens of requests per second, two
    orders of magnitude from the others, so the noise that interleaving
    evens out is far below what it measures. At 64 connections a short run
    would end before the first answers, so it always gets at least 10 s."""
    url = f"http://127.0.0.1:{t.port}{t.path(lane)}"
    body = work / "requests" / f"{lane}.json"
    wrk(url, body, a.connections, a.threads, a.warmup)
    cpu0 = cpu_seconds(t.pid) if t.pid else None
    tp = wrk(url, body, a.connections, a.threads, max(a.duration, 10))
    cpu1 = cpu_seconds(t.pid) if t.pid else None
    res = {"rps": tp["rps"], "requests": tp["requests"], "errors": tp["errors"]}
    if cpu0 is not None and tp["requests"]:
        res["cpu_us_per_req"] = (cpu1 - cpu0) * 1e6 / tp["requests"]
    lat = wrk(url, body, 1, 1, max(a.latency_duration, 5))
    res.update({"c1_p50_us": lat["p50_us"], "c1_p99_us": lat["p99_us"], "c1_requests": lat["requests"],
                "c1_errors": lat["errors"]})
    return res


def ttft_run(t: Target, lane: str, port: int, n: int, work: Path, max_secs: float = 90.0) -> dict:
    """n sequential streams on one keep-alive connection (stopping early after
    max_secs): time to the first content token, and to the end of the stream,
    from just before the request is sent."""
    deadline = time.perf_counter() + max_secs
    body = (work / "requests" / f"{lane}.json").read_bytes()
    hdrs = {"Content-Type": "application/json"}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    ttfts, totals, chunks, errors = [], [], [], 0
    for i in range(n + 3):  # 3 warm-up streams, not recorded
        if time.perf_counter() > deadline:
            break
        t0 = time.perf_counter_ns()
        try:
            c.request("POST", t.path(lane), body, hdrs)
            r = c.getresponse()
            first, count = None, 0
            while True:
                line = r.readline()
                if not line:
                    break
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    continue
                count += 1
                if first is None:
                    try:
                        ch = json.loads(payload).get("choices") or [{}]
                        if (ch[0].get("delta") or {}).get("content"):
                            first = time.perf_counter_ns()
                    except ValueError:
                        pass
            end = time.perf_counter_ns()
            if r.status != 200 or first is None:
                errors += 1
                continue
        except (OSError, http.client.HTTPException):
            errors += 1
            c.close()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            continue
        if i >= 3:
            ttfts.append((first - t0) / 1000)
            totals.append((end - t0) / 1000)
            chunks.append(count)
    c.close()
    return {"ttfts": ttfts, "totals": totals, "chunks": chunks, "errors": errors}


def ttft_rounds(ts: list[tuple[Target, int]], a: argparse.Namespace, work: Path) -> dict[str, dict]:
    """`a.streams` streams per target in `a.rounds` interleaved rounds (see
    `load_lane` for why), their samples pooled per target."""
    runs: dict[str, list[dict]] = {t.name: [] for t, _ in ts}
    per_round = max(1, a.streams // a.rounds)
    for r in range(a.rounds):
        for t, port in rotated(ts, r):
            runs[t.name].append(ttft_run(t, "paced", port, per_round, work, max_secs=90.0 / a.rounds))
    out = {}
    for name, rs in runs.items():
        ttfts = [x for r in rs for x in r["ttfts"]]
        errors = sum(r["errors"] for r in rs)
        if not ttfts:
            out[name] = {"errors": errors}
            continue
        out[name] = {"streams": len(ttfts), "errors": errors,
                     "ttft_p50_us": pct(ttfts, 50), "ttft_p99_us": pct(ttfts, 99),
                     "ttft_p50_rounds": [round(pct(r["ttfts"], 50)) for r in rs if r["ttfts"]],
                     "total_p50_us": pct([x for r in rs for x in r["totals"]], 50),
                     "chunks": statistics.median(x for r in rs for x in r["chunks"])}
    return out


def idle_c1(ts: list[Target], a: argparse.Namespace, work: Path, gap: float = 0.02) -> dict[str, dict]:
    """Plain requests one at a time with `gap` seconds of quiet before each,
    on one keep-alive connection per target, the targets interleaved request
    by request. wrk's c=1 runs back to back, with every cache warm; after a
    pause the proxy's code and data must come back from memory first, which is
    what a request to a lightly used proxy (and a stream's first token) pays."""
    body = (work / "requests" / "plain.json").read_bytes()
    conns: dict[str, http.client.HTTPConnection] = {}
    times: dict[str, list[float]] = {t.name: [] for t in ts}
    hdrs = {"Content-Type": "application/json"}
    for i in range(a.idle_requests + 3):  # the first 3 rounds unrecorded
        for t in rotated(ts, i):
            c = conns.get(t.name) or conns.setdefault(t.name, http.client.HTTPConnection("127.0.0.1", t.port, timeout=30))
            time.sleep(gap)
            t0 = time.perf_counter_ns()
            try:
                c.request("POST", t.path("plain"), body, hdrs)
                r = c.getresponse()
                r.read()
            except (OSError, http.client.HTTPException):
                c.close()
                conns.pop(t.name, None)
                continue
            if r.status == 200 and i >= 3:
                times[t.name].append((time.perf_counter_ns() - t0) / 1000)
    for c in conns.values():
        c.close()
    return {name: {"requests": len(xs), "p50_us": pct(xs, 50), "p99_us": pct(xs, 99)} for name, xs in times.items() if xs}


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


async def _hold_streams(port: int, path: str, body: bytes, n: int, timeout: float, sample, burst: int) -> dict:
    """Open n concurrent streams, at most `burst` of them connecting at once,
    wait until each got its first content chunk, sample memory while all are
    open, then close them all."""
    req = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    ready = 0
    all_ready = asyncio.Event()
    release = asyncio.Event()
    writers = []
    sem = asyncio.Semaphore(burst)

    async def one() -> None:
        nonlocal ready
        try:
            async with sem:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writers.append(writer)
                writer.write(req)
                await writer.drain()
                buf = b""
                while b'"content":"word' not in buf:
                    data = await reader.read(65536)
                    if not data:
                        return
                    buf = (buf + data)[-4096:]
            ready += 1
            if ready == n:
                all_ready.set()
            await release.wait()
        except (OSError, asyncio.IncompleteReadError):
            return

    tasks = [asyncio.create_task(one()) for _ in range(n)]
    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(all_ready.wait(), timeout)
    except asyncio.TimeoutError:
        pass
    open_secs = time.perf_counter() - t0
    await asyncio.sleep(1.0)  # let allocations settle
    peak = max(sample() for _ in range(3))
    release.set()
    for task in tasks:  # also the ones still connecting or waiting for a first chunk
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for w in writers:
        w.close()
    return {"ready": ready, "open_secs": open_secs, "rss_open_kib": peak}


def hold_streams(t: Target, n: int, timeout: float, work: Path, burst: int = 200) -> dict:
    """Two waves of n open streams, closed in between: the first wave's growth
    is the per-stream figure; the second wave's peak shows whether the memory
    the first one freed is used again (an allocator that fragments grows on).
    `burst` streams open at a time: the proxy holds what their requests use on
    the way to their answers at once, and how much of that stays resident is
    the allocator's call (bench/README.md, twenty-second run)."""
    body = (work / "requests" / "slow.json").read_bytes()
    before = rss_kib(t.pid)
    r = asyncio.run(_hold_streams(t.port, t.path("slow"), body, n, timeout, lambda: rss_kib(t.pid), burst))
    time.sleep(2.0)
    r["rss_before_kib"] = before
    r["rss_after_close_kib"] = rss_kib(t.pid)
    if r["ready"]:
        r["kib_per_1000"] = (r["rss_open_kib"] - before) * 1000 / r["ready"]
    again = asyncio.run(_hold_streams(t.port, t.path("slow"), body, n, timeout, lambda: rss_kib(t.pid), burst))
    time.sleep(2.0)
    r["ready2"] = again["ready"]
    r["rss_open2_kib"] = again["rss_open_kib"]
    r["rss_after_close2_kib"] = rss_kib(t.pid)
    return r


def fd_stream_cap() -> int:
    """The most streams one proxy process can hold under this RLIMIT_NOFILE
    hard limit: two descriptors per stream (the client's connection and the
    upstream's), and some to spare for listeners, logs and the runtime."""
    return max(0, (resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 256) // 2)


async def _many_streams(port: int, path: str, body: bytes, n: int, timeout: float, sample, burst: int,
                        while_open) -> dict:
    """Open n streams (at most `burst` connecting at once), counting those
    that fail to connect, end or error before their first content chunk, or
    have none within `timeout`; sample RSS every 0.25 s from the first
    connection to the close (the peak); once all are settled, run
    `while_open()` in a thread (the extra streams' TTFT) with all still open;
    then close them all."""
    req = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    counts = {"ready": 0, "connect_failed": 0, "no_first_chunk": 0}
    settled = 0
    all_settled = asyncio.Event()
    release = asyncio.Event()
    writers = []
    sem = asyncio.Semaphore(burst)
    peak = [sample()]

    def done() -> None:
        nonlocal settled
        settled += 1
        if settled == n:
            all_settled.set()

    async def one() -> None:
        try:
            async with sem:
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    counts["connect_failed"] += 1
                    return done()
                writers.append(writer)
                try:
                    writer.write(req)
                    await writer.drain()
                    buf = b""
                    while b'"content":"word' not in buf:
                        data = await reader.read(65536)
                        if not data:
                            counts["no_first_chunk"] += 1
                            return done()
                        buf = (buf + data)[-4096:]
                except OSError:
                    counts["no_first_chunk"] += 1
                    return done()
            counts["ready"] += 1
            done()
            await release.wait()
        except asyncio.CancelledError:
            raise

    async def sampler() -> None:
        while not release.is_set():
            peak[0] = max(peak[0], sample())
            await asyncio.sleep(0.25)

    smp = asyncio.create_task(sampler())
    tasks = [asyncio.create_task(one()) for _ in range(n)]
    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(all_settled.wait(), timeout)
    except asyncio.TimeoutError:
        pass
    open_secs = time.perf_counter() - t0
    await asyncio.sleep(1.0)  # let allocations settle
    rss_open = max(sample() for _ in range(3))
    extra = await asyncio.to_thread(while_open)
    peak[0] = max(peak[0], rss_open, sample())
    release.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, smp, return_exceptions=True)
    for w in writers:
        w.close()
    return {**counts, "timed_out": n - sum(counts.values()), "open_secs": open_secs,
            "rss_open_kib": rss_open, "rss_peak_kib": peak[0], "extra": extra}


def extra_ttft(t: Target, direct: Target, ports: dict[str, int], n: int, work: Path) -> dict:
    """TTFT of `n` extra streams through `t` and `n` straight to the paced
    upstream, taking turns in rounds of 5 (each round on a fresh keep-alive
    connection after 3 unrecorded streams), so both see the same load."""
    xs: dict[str, list[float]] = {"proxy": [], "direct": []}
    errors = 0
    for r in range((n + 4) // 5):
        for side in rotated(["proxy", "direct"], r):
            port = t.port if side == "proxy" else ports["paced"]
            run = ttft_run(t if side == "proxy" else direct, "paced", port, 5, work, max_secs=20.0)
            xs[side] += run["ttfts"]
            errors += run["errors"] if side == "proxy" else 0
    out: dict = {"streams": len(xs["proxy"]), "errors": errors}
    if xs["proxy"] and xs["direct"]:
        out.update(proxy_p50_us=statistics.median(xs["proxy"]), direct_p50_us=statistics.median(xs["direct"]))
        out["added_us"] = out["proxy_p50_us"] - out["direct_p50_us"]
    return out


def many_streams(t: Target, direct: Target, ports: dict[str, int], n: int, a: argparse.Namespace, work: Path) -> dict:
    """--many-streams (issue 50): `t` holds n streams from the hold upstream
    (one chunk a second) at once. Errors: streams that failed to connect or
    got no first content chunk (in time). RSS before, peak (sampled every
    0.25 s) and settled with all open; per 1,000 from the settled figure.
    The added TTFT of an extra stream (the paced lane, target minus the
    direct paced upstream, medians of `a.many_extra` each, interleaved) both
    idle, just before, and with the n open."""
    body = (work / "requests" / "hold.json").read_bytes()
    idle = extra_ttft(t, direct, ports, a.many_extra, work)
    before = rss_kib(t.pid)
    timeout = max(60.0, n / 100)
    r = asyncio.run(_many_streams(t.port, t.path("hold"), body, n, timeout, lambda: rss_kib(t.pid), 200,
                                  lambda: extra_ttft(t, direct, ports, a.many_extra, work)))
    time.sleep(2.0)
    r.update(n=n, rss_before_kib=before, rss_after_close_kib=rss_kib(t.pid), idle=idle,
             errors=n - r["ready"])
    if r["ready"]:
        r["kib_per_1000"] = (r["rss_open_kib"] - before) * 1000 / r["ready"]
    return r


def startup(binary: Path, conf: Path, port: int, runs: int, procs: Procs) -> dict:
    """Exec to the first 200 on /healthz, `runs` times; idle RSS of the last one."""
    times, idle = [], None
    for i in range(runs):
        t0 = time.perf_counter()
        p = procs.start("modelshim-startup", [str(binary), "serve", "--config", str(conf)])
        ok = wait_ready(port, "/healthz", 10.0, p, poll=0.0002)
        if ok is not None:
            times.append((time.perf_counter() - t0) * 1000)
        if i == runs - 1 and ok is not None:
            time.sleep(1.0)
            idle = rss_kib(p.pid)
        procs.stop("modelshim-startup")
        time.sleep(0.3)
    return {"runs": len(times), "ms_p50": statistics.median(times) if times else None,
            "ms_max": max(times) if times else None, "idle_rss_kib": idle}


def perf_profile(pid: int, url: str, body: Path, secs: float, work: Path) -> str:
    """Flat perf profile of modelshim under the streamed lane (self time per symbol)."""
    data = work / "perf.data"
    rec = subprocess.Popen(["perf", "record", "-F", "1999", "-g", "-p", str(pid), "-o", str(data), "--", "sleep", str(secs)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.3)
    wrk(url, body, 16, 1, secs)
    _, err = rec.communicate(timeout=secs + 60)
    if rec.returncode != 0:
        return f"perf record failed: {err.decode(errors='replace')[-500:]}"
    rep = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "dso,symbol",
                          "-g", "none", "--percent-limit", "0.7"], capture_output=True, text=True, timeout=300)
    return rep.stdout


# ---------------------------------------------------------------- report


def floor_hyper() -> str:
    """The hyper bench/floor is built with (its Cargo.lock), for the report."""
    lock = (BENCH / "floor" / "Cargo.lock").read_text()
    m = re.search(r'name = "hyper"\nversion = "([^"]+)"', lock)
    return f"hyper {m.group(1)}" if m else "hyper ?"


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) // 1024
    load = open("/proc/loadavg").read().split()[:3]
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem_mib": mem, "kernel": platform.release(),
            "loadavg_start": " ".join(load)}


def fmt(x, unit: str = "", digits: int = 0) -> str:
    if x is None:
        return "–"
    return f"{x:,.{digits}f}{unit}"


def render(res: dict) -> str:
    m, a = res["machine"], res["args"]
    L: list[str] = []
    L.append("# modelshim benchmark results\n")
    if res.get("label"):
        L.append(f"> **{res['label']}**\n")
    L.append(f"- date: {res['date']}")
    L.append(f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['mem_mib']:,} MiB RAM, Linux {m['kernel']}")
    L.append(f"- load average at start / end: {m['loadavg_start']} / {res.get('loadavg_end', '?')}")
    L.append(f"- modelshim: {res['modelshim_version']}; nginx: {res['versions'].get('nginx', '?')}; "
             f"wrk: {res['versions'].get('wrk', '?')}; LiteLLM: {res['versions'].get('litellm', 'not run')}")
    L.append(f"- command: `{res['command']}`")
    rounds = a.get("rounds", 1)
    L.append(f"- load: wrk, {a['threads']} threads, {a['connections']} connections, {a['duration']} s per lane "
             f"(after {a['warmup']} s warm-up); latency at concurrency 1 for {a['latency_duration']} s; "
             f"all on 127.0.0.1, everything sharing the same {m['nproc']} CPUs")
    L.append(f"- interleaved: each lane's time (and the TTFT streams) split into {rounds} rounds, every round "
             f"running direct, nginx and modelshim one after the other (each round starting with the next); "
             f"requests/s, p50 and p99 are the median of a target's rounds, CPU per request is over all its rounds, "
             f"TTFT percentiles over all its streams; LiteLLM is measured apart, once per lane\n")

    L += nginx_ratios(res)
    if res.get("baseline"):
        L += ab_table(res)
    L.append("## Throughput (requests/s at fixed concurrency)\n")
    L.append("| lane | direct | nginx proxy_pass | modelshim | LiteLLM | modelshim / nginx | modelshim / LiteLLM |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    lr = res["load"]
    for lane in LANES:
        g = lambda t: (lr.get(t, {}).get(lane) or {}).get("rps")  # noqa: E731
        d, n, s, ll = g("direct"), g("nginx"), g("modelshim"), g("litellm")
        L.append(f"| {lane} | {fmt(d)} | {fmt(n)} | {fmt(s)} | {fmt(ll)} | "
                 f"{fmt(s / n if s and n else None, '×', 2)} | {fmt(s / ll if s and ll else None, '×', 1)} |")
    errs = [f"{t}/{lane}: {v['errors']}" for t, lanes in lr.items() for lane, v in lanes.items() if v and v.get("errors")]
    if errs:
        L.append(f"\nwrk errors (timeouts, non-2xx): {', '.join(errs)}")

    L.append("\n## Latency at concurrency 1 (µs; added = target − direct)\n")
    L.append("| lane | direct p50 / p99 | nginx p50 / p99 (added) | modelshim p50 / p99 (added) | LiteLLM p50 / p99 (added) |")
    L.append("| --- | ---: | ---: | ---: | ---: |")
    for lane in LANES:
        d = lr.get("direct", {}).get(lane)
        cells = []
        for t in ("nginx", "modelshim", "litellm"):
            v = lr.get(t, {}).get(lane)
            if not v or not d:
                cells.append("–")
                continue
            if not v.get("c1_requests"):
                cells.append("no request finished")
                continue
            cells.append(f"{v['c1_p50_us']:,} / {v['c1_p99_us']:,} ({v['c1_p50_us'] - d['c1_p50_us']:+,} / "
                         f"{v['c1_p99_us'] - d['c1_p99_us']:+,})")
        dd = f"{d['c1_p50_us']:,} / {d['c1_p99_us']:,}" if d else "–"
        L.append(f"| {lane} | {dd} | " + " | ".join(cells) + " |")

    ic = res.get("idle_c1", {})
    if ic:
        d = ic.get("direct") or {}
        L.append("\nAfter 20 ms of quiet (plain lane, one request at a time, targets interleaved; "
                 "back to back above, every cache warm):\n")
        L.append("| target | requests | p50 / p99 | added p50 / p99 |")
        L.append("| --- | ---: | ---: | ---: |")
        for t, v in ic.items():
            added = (f"{v['p50_us'] - d['p50_us']:+,.0f} / {v['p99_us'] - d['p99_us']:+,.0f}" if d and t != "direct" else "–")
            L.append(f"| {t} | {v['requests']} | {v['p50_us']:,.0f} / {v['p99_us']:,.0f} | {added} |")

    L.append("\n## Proxy CPU per request (µs, from /proc utime+stime during the throughput run)\n")
    L.append("| lane | nginx proxy_pass | modelshim | LiteLLM |")
    L.append("| --- | ---: | ---: | ---: |")
    for lane in LANES:
        cells = [fmt((lr.get(t, {}).get(lane) or {}).get("cpu_us_per_req"), "", 1) for t in ("nginx", "modelshim", "litellm")]
        L.append(f"| {lane} | " + " | ".join(cells) + " |")
    pc = res.get("per_chunk_cpu_us", {})
    L.append(f"\nCPU per re-emitted chunk = (CPU/request of `stream` − of `stream8`) / 56: "
             f"modelshim {fmt(pc.get('modelshim'), ' µs', 2)}, nginx {fmt(pc.get('nginx'), ' µs', 2)}.")

    pr = res.get("paced") or {}
    if pr:
        L.append(f"\n## Paced streams: CPU per stream (`{PACED_LANE}`: 64 chunks {PACED_INTERVAL_MS:g} ms apart, "
                 f"{pr[next(iter(pr))].get('connections', '?')} streams open at once)\n")
        L.append("| target | streams/s | stream p50 | CPU per stream | vs nginx | errors |")
        L.append("| --- | ---: | ---: | ---: | ---: | ---: |")
        n = (pr.get("nginx") or {}).get("cpu_us_per_req")
        for t, v in pr.items():
            c = v.get("cpu_us_per_req")
            L.append(f"| {t} | {fmt(v['rps'])} | {fmt(v['stream_p50_us'] / 1000, ' ms', 1)} | {fmt(c, ' µs', 1)} | "
                     f"{fmt(c / n if c and n and t not in ('direct', 'nginx') else None, '×', 2)} | {v['errors']} |")
        L.append("\nCPU of each server's own process tree over its rounds ÷ the streams it completed; "
                 "direct is the Python mock (the upstream's own cost, not a proxy's).")

    L.append("\n## Streams: time to first token (paced upstream, 64 chunks 1 ms apart, sequential streams)\n")
    L.append("| target | streams | TTFT p50 | TTFT p99 | added TTFT p50 | stream total p50 | chunks seen |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    tt = res.get("ttft", {})
    d = tt.get("direct") or {}
    for t, v in tt.items():
        if not v or "ttft_p50_us" not in v:
            L.append(f"| {t} | failed ({v}) | | | | | |")
            continue
        added = v["ttft_p50_us"] - d["ttft_p50_us"] if d.get("ttft_p50_us") is not None else None
        L.append(f"| {t} | {v['streams']} | {fmt(v['ttft_p50_us'], ' µs')} | {fmt(v['ttft_p99_us'], ' µs')} | "
                 f"{fmt(added, ' µs')} | {fmt(v['total_p50_us'] / 1000, ' ms', 1)} | {v['chunks']:.0f} |")

    L.append("\n## Memory and startup\n")
    L.append("| target | idle RSS | RSS before streams | RSS with N open streams | per 1,000 open streams | after close | second wave: open / after close | startup to first 200 |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    mem = res.get("memory", {})
    for t in ("nginx", "modelshim", "litellm"):
        v = mem.get(t)
        idle = res.get("idle_rss_kib", {}).get(t)
        st = res.get("startup", {}).get(t) or {}
        if v is None and idle is None:
            continue
        v = v or {}
        L.append(
            f"| {t} | {fmt(idle / 1024 if idle else None, ' MiB', 1)} | "
            f"{fmt(v.get('rss_before_kib', 0) / 1024 if v else None, ' MiB', 1)} | "
            f"{fmt(v.get('rss_open_kib', 0) / 1024 if v else None, ' MiB', 1)} (N={v.get('ready', '–')}) | "
            f"{fmt(v.get('kib_per_1000', 0) / 1024 if v.get('kib_per_1000') is not None else None, ' MiB', 1)} | "
            f"{fmt(v.get('rss_after_close_kib', 0) / 1024 if v else None, ' MiB', 1)} | "
            f"{fmt(v['rss_open2_kib'] / 1024 if v.get('rss_open2_kib') else None, ' MiB', 1)} / "
            f"{fmt(v['rss_after_close2_kib'] / 1024 if v.get('rss_after_close2_kib') else None, ' MiB', 1)} | "
            f"{fmt(st.get('ms_p50'), ' ms', 1)}{' (max ' + fmt(st.get('ms_max'), ' ms', 1) + ')' if st.get('ms_max') else ''} |")
    L.append("\nRSS is VmRSS summed over the process and its children (nginx workers, uvicorn workers). "
             "The second wave opens as many streams again after the first closed: a peak near the first's "
             "means the freed memory was used again.")

    L += many_table(res)

    L.append("\n## Targets\n")
    L.append("| target | measured | verdict |")
    L.append("| --- | --- | --- |")
    for name, measured, ok in res.get("targets", []):
        L.append(f"| {name} | {measured} | {'met' if ok else 'missed' if ok is not None else 'not measured'} |")

    if res.get("sanity_failures"):
        L.append("\n## End-to-end check failures\n")
        for f in res["sanity_failures"]:
            L.append(f"- {f}")
    if res.get("profile"):
        L.append("\n## Profile (perf, modelshim, streamed lane; self time)\n")
        L.append("```")
        prof = [ln.rstrip()[:160] for ln in res["profile"].splitlines() if ln.strip() and not ln.startswith("#")]
        L.append("\n".join(prof[:40]))
        L.append("```")
    return "\n".join(L) + "\n"


def _ratio_cell(x, n, goal, unit: str = " µs", digits: int = 1) -> str:
    """`x (r×, met/missed)` against nginx's `n`; the verdict only where a goal is set."""
    if x is None:
        return "–"
    if not n:
        return fmt(x, unit, digits)
    r = x / n
    verdict = "" if goal is None else (" ✓" if r <= goal else " ✗")
    return f"{fmt(x, unit, digits)} (**{r:.2f}×**{verdict})"


def nginx_ratios(res: dict) -> list[str]:
    """Issue 50's table: modelshim (and the baseline) over nginx proxy_pass,
    proxy CPU per request lane by lane (each server's own process tree, the
    targets interleaved) and RSS per 1,000 open streams, beside the goals."""
    lr, pr, mem, many = res.get("load", {}), res.get("paced") or {}, res.get("memory", {}), res.get("many") or {}
    sides = ["modelshim"] + (["baseline"] if res.get("baseline") else [])
    floor = "floor" in lr
    sides += ["floor"] if floor else []
    head = " | ".join(f"{s}{' (new)' if s == 'modelshim' and res.get('baseline') else ''}: value (÷ nginx)" for s in sides)
    L = ["## Against nginx proxy_pass (issue 50)\n",
         f"| figure | nginx | {head} | goal |",
         "| --- | ---: | " + " | ".join("---:" for _ in sides) + " | --- |"]

    def goal_text(g) -> str:
        return f"≤ {g:g}×" if g is not None else "– (ratio reported)"

    for lane in LANES:
        n = (lr.get("nginx", {}).get(lane) or {}).get("cpu_us_per_req")
        xs = [(lr.get(s, {}).get(lane) or {}).get("cpu_us_per_req") for s in sides]
        if n is None and all(x is None for x in xs):
            continue
        what = {"plain": "plain", "stream": "burst stream: `stream` (64 chunks arriving together)"}.get(lane, f"`{lane}`")
        g = GOALS_VS_NGINX.get(lane)
        L.append(f"| CPU per request, {what} | {fmt(n, ' µs', 1)} | "
                 + " | ".join(_ratio_cell(x, n, None if s == "floor" else g) for s, x in zip(sides, xs)) + f" | {goal_text(g) if lane in GOALS_VS_NGINX else '–'} |")
    if pr:
        n = (pr.get("nginx") or {}).get("cpu_us_per_req")
        g = GOALS_VS_NGINX.get(PACED_LANE)
        L.append(f"| CPU per stream, paced stream: `{PACED_LANE}` (64 chunks {PACED_INTERVAL_MS:g} ms apart) | {fmt(n, ' µs', 1)} | "
                 + " | ".join(_ratio_cell((pr.get(s) or {}).get("cpu_us_per_req"), n, None if s == "floor" else g) for s in sides) + f" | {goal_text(g)} |")
    g = GOALS_VS_NGINX["memory"]
    mib = lambda v: v / 1024 if v is not None else None  # noqa: E731
    n = mib((mem.get("nginx") or {}).get("kib_per_1000"))
    if n is not None or any(mem.get(s) for s in sides):
        L.append(f"| RSS per 1,000 open streams ({res.get('args', {}).get('open_streams', 1000):,} open) | {fmt(n, ' MiB', 1)} | "
                 + " | ".join(_ratio_cell(mib((mem.get(s) or {}).get("kib_per_1000")), n, None if s == "floor" else g, " MiB") for s in sides)
                 + f" | {goal_text(g)} (≤ nginx's) |")
    if many:
        n = mib((many.get("nginx") or {}).get("kib_per_1000"))
        N = next(iter(many.values()))["n"]
        L.append(f"| RSS per 1,000 open streams ({N:,} open) | {fmt(n, ' MiB', 1)} | "
                 + " | ".join(_ratio_cell(mib((many.get(s) or {}).get("kib_per_1000")), n, None if s == "floor" else g, " MiB") for s in sides)
                 + f" | {goal_text(g)} (≤ nginx's) |")
    L.append("\nCPU: utime + stime of each server's own process tree (nginx: master and workers) over its "
             "interleaved rounds, divided by the requests it answered. ✓/✗: the ratio against the goal; "
             "one run on a shared machine, see the lane tables for the spread.\n")
    if floor:
        L.append("floor: bench/floor, a reverse proxy with no logic on modelshim's HTTP stack (hyper's HTTP/1 server "
                 "and pooled client, a current-thread runtime per SO_REUSEPORT listener, mimalloc), forwarding as "
                 "nginx does; what modelshim pays above it is its own work, what the floor pays above nginx is the "
                 "stack's. Load lanes only.\n")
    return L


def many_table(res: dict) -> list[str]:
    many = res.get("many") or {}
    if not many:
        return []
    N = next(iter(many.values()))["n"]
    L = [f"\n## {N:,} open streams at once (issue 50)\n"]
    if res.get("many_requested") and res["many_requested"] != N:
        L.append(f"Asked for {res['many_requested']:,}; this machine's RLIMIT_NOFILE hard limit "
                 f"({res.get('fd_hard_limit', '?'):,}) lets one proxy process hold {N:,} (two descriptors per stream).\n")
    L.append("| target | errors (connect / no first chunk / timed out) | opened in | RSS before | peak RSS | "
             "RSS with all open | per 1,000 | after close | extra stream TTFT p50: target / direct, added | "
             "added TTFT idle | goal |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for t, v in many.items():
        ex, idle = v.get("extra") or {}, v.get("idle") or {}
        ok = v["errors"] == 0 and v["rss_peak_kib"] / 1024 <= 200
        L.append(
            f"| {t} | {v['errors']:,} ({v['connect_failed']} / {v['no_first_chunk']} / {v['timed_out']}) | "
            f"{v['open_secs']:.1f} s | {v['rss_before_kib'] / 1024:.1f} MiB | **{v['rss_peak_kib'] / 1024:.1f} MiB** | "
            f"{v['rss_open_kib'] / 1024:.1f} MiB | {fmt(v['kib_per_1000'] / 1024 if v.get('kib_per_1000') is not None else None, ' MiB', 1)} | "
            f"{v['rss_after_close_kib'] / 1024:.1f} MiB | "
            f"{fmt(ex.get('proxy_p50_us'), ' µs')} / {fmt(ex.get('direct_p50_us'), ' µs')}, **{fmt(ex.get('added_us'), ' µs')}** | "
            f"{fmt(idle.get('added_us'), ' µs')} | "
            + (f"no error, peak ≤ 200 MiB: {'met' if ok else 'missed'} |" if t != "nginx" else "(the comparison) |"))
    L.append(f"\nThe hold upstream (bench/paced_upstream.py, one Python asyncio process) sends a chunk every "
             f"{HOLD_INTERVAL_MS / 1000:g} s; {'200'} streams connect at once. Errors: streams that failed to connect, "
             f"ended before their first content chunk, or had none within max(60 s, N/100 s). Peak RSS: sampled every 0.25 s "
             f"from the first connection until the close. Per 1,000: (RSS with all open − before) × 1000 / open. "
             f"Extra stream TTFT: with the N open, streams on the 1 ms paced lane through the target and straight "
             f"to the paced upstream, taking turns in rounds of 5 ({res['args'].get('many_extra', 20)} each); the medians; "
             f"added = target − direct **under the same load**; \"added TTFT idle\" is the same measured just before "
             f"the N opened. Targets run one after the other, not interleaved (each holds N for its turn), each a fresh process "
             f"started for it (after the other lanes, so what they left resident does not count); nginx's "
             f"worker_connections are raised to hold them (its idle RSS above includes that).")
    return L


def ab_table(res: dict) -> list[str]:
    """modelshim against the baseline binary, lane by lane (both interleaved in the same rounds)."""
    lr, b = res["load"], res["baseline"]
    L = ["## A/B: modelshim vs baseline\n",
         f"baseline: `{b['binary']}` ({b['version']}), interleaved with modelshim in every round of every lane.\n",
         *([f"configs: new + `{b.get('new_config_extra') or '-'}`, baseline + `{b.get('config_extra') or '-'}`.\n"]
           if b.get("config_extra") or b.get("new_config_extra") else []),
         "| lane | req/s new / base (Δ) | c=1 p50 new / base µs | c=1 p99 new / base µs | CPU µs/req new / base (Δ) |",
         "| --- | ---: | ---: | ---: | ---: |"]
    for lane in LANES:
        n, o = lr.get("modelshim", {}).get(lane), lr.get("baseline", {}).get(lane)
        if not n or not o:
            continue
        d = lambda k: f"{(n[k] - o[k]) / o[k] * 100:+.1f}%" if n.get(k) and o.get(k) else "–"  # noqa: E731
        L.append(f"| {lane} | {fmt(n.get('rps'))} / {fmt(o.get('rps'))} ({d('rps')}) | "
                 f"{fmt(n.get('c1_p50_us'))} / {fmt(o.get('c1_p50_us'))} | {fmt(n.get('c1_p99_us'))} / {fmt(o.get('c1_p99_us'))} | "
                 f"{fmt(n.get('cpu_us_per_req'), '', 1)} / {fmt(o.get('cpu_us_per_req'), '', 1)} ({d('cpu_us_per_req')}) |")
    pr = res.get("paced") or {}
    n, o = pr.get("modelshim"), pr.get("baseline")
    if n and o:
        d = lambda k: f"{(n[k] - o[k]) / o[k] * 100:+.1f}%" if n.get(k) and o.get(k) else "–"  # noqa: E731
        L.append(f"| {PACED_LANE} (streams/s) | {fmt(n.get('rps'))} / {fmt(o.get('rps'))} ({d('rps')}) | – | – | "
                 f"{fmt(n.get('cpu_us_per_req'), '', 1)} / {fmt(o.get('cpu_us_per_req'), '', 1)} ({d('cpu_us_per_req')}) |")
    tt = res.get("ttft", {})
    n, o = (tt.get("modelshim") or {}).get("ttft_p50_us"), (tt.get("baseline") or {}).get("ttft_p50_us")
    L.append(f"\nTTFT p50: {fmt(n, ' µs')} new, {fmt(o, ' µs')} baseline.\n")
    return L


def targets(res: dict) -> list[tuple[str, str, bool | None]]:
    lr, out = res["load"], []
    ms, ng, d, ll = (lr.get(k, {}) for k in ("modelshim", "nginx", "direct", "litellm"))

    def g(x: dict, lane: str, k: str):
        return (x.get(lane) or {}).get(k)

    s, n = g(ms, "plain", "rps"), g(ng, "plain", "rps")
    out.append(("non-streamed throughput ≥ 0.8× nginx proxy_pass",
                f"{fmt(s)} vs {fmt(n)} req/s = {fmt(s / n if s and n else None, '×', 2)}", s / n >= 0.8 if s and n else None))
    for k, lim in (("c1_p50_us", 100), ("c1_p99_us", 300)):
        a, b = g(ms, "plain", k), g(d, "plain", k)
        added = a - b if a is not None and b is not None else None
        out.append((f"added latency at c=1, {k[3:6]} ≤ {lim} µs (plain lane)", fmt(added, " µs"),
                    added <= lim if added is not None else None))
    tt = res.get("ttft", {})
    a, b = (tt.get("modelshim") or {}).get("ttft_p50_us"), (tt.get("direct") or {}).get("ttft_p50_us")
    added = a - b if a is not None and b is not None else None
    out.append(("added time-to-first-token ≤ 200 µs (p50)", fmt(added, " µs"), added <= 200 if added is not None else None))
    pc = res.get("per_chunk_cpu_us", {}).get("modelshim")
    out.append(("≤ 2 µs CPU per re-emitted chunk", fmt(pc, " µs", 2), pc <= 2 if pc is not None else None))
    idle = res.get("idle_rss_kib", {}).get("modelshim")
    out.append(("idle RSS ≤ 20 MiB", fmt(idle / 1024 if idle else None, " MiB", 1), idle / 1024 <= 20 if idle else None))
    per = (res.get("memory", {}).get("modelshim") or {}).get("kib_per_1000")
    out.append(("≤ 32 MiB per 1,000 open streams", fmt(per / 1024 if per is not None else None, " MiB", 1),
                per / 1024 <= 32 if per is not None else None))
    st = (res.get("startup", {}).get("modelshim") or {}).get("ms_p50")
    out.append(("ready ≤ 100 ms after start", fmt(st, " ms", 1), st <= 100 if st is not None else None))
    for lane in LITELLM_LANES:
        s, l2 = g(ms, lane, "rps"), g(ll, lane, "rps")
        out.append((f"≥ 50× LiteLLM throughput ({lane} lane)", fmt(s / l2 if s and l2 else None, "×", 1),
                    s / l2 >= 50 if s and l2 else None))
    return out


# ---------------------------------------------------------------- main


def version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        text = (out.stdout + out.stderr).strip().splitlines()
        return text[0] if text else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description="modelshim benchmark harness")
    ap.add_argument("--quick", action="store_true", help="short runs (validation, not numbers)")
    ap.add_argument("--binary", default=str(ROOT / "target" / "release" / "modelshim"))
    ap.add_argument("--litellm", default="", help="path to the litellm executable; empty = skip LiteLLM")
    ap.add_argument("--baseline", default="", help="another modelshim binary, run as target `baseline` "
                    "interleaved with modelshim in every lane (an A/B in one run)")
    ap.add_argument("--config-extra", default="", help="a TOML file appended to modelshim's config")
    ap.add_argument("--baseline-config-extra", default="", help="a TOML file appended to the baseline's config")
    ap.add_argument("--console-ab", action="store_true",
                    help="A/B of one binary: [console] enabled and no console open (modelshim) vs disabled (baseline); "
                         "the same as --baseline self --config-extra bench/console-on.toml")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--latency-duration", type=float, default=None)
    ap.add_argument("--warmup", type=float, default=None)
    ap.add_argument("--rounds", type=int, default=None,
                    help="interleaved rounds per lane: the duration, the latency duration and the streams are split over them")
    ap.add_argument("--streams", type=int, default=None, help="sequential streams for TTFT")
    ap.add_argument("--idle-requests", type=int, default=None, help="plain requests per target after 20 ms of quiet")
    ap.add_argument("--open-streams", type=int, default=1000, help="concurrent streams for the memory test")
    ap.add_argument("--startup-runs", type=int, default=None)
    ap.add_argument("--profile", action="store_true", help="perf profile of modelshim in the streamed lane")
    ap.add_argument("--lanes", default=",".join([*LANES, PACED_LANE]),
                    help=f"comma-separated subset of lanes ({PACED_LANE}: the paced-stream CPU lane)")
    ap.add_argument("--paced-connections", type=int, default=64,
                    help=f"streams open at once in the {PACED_LANE} lane (64 chunks 2 ms apart)")
    ap.add_argument("--paced-duration", type=float, default=None,
                    help=f"seconds per target in the {PACED_LANE} lane, split over the rounds (default: --duration)")
    ap.add_argument("--many-streams", type=int, default=None,
                    help="streams held open at once by nginx, modelshim (and the baseline), issue 50's "
                         "10,000-stream run; default 10000, 0 with --quick unless given; 0 skips it")
    ap.add_argument("--many-extra", type=int, default=20,
                    help="extra streams whose TTFT is measured while the --many-streams are held (and idle)")
    ap.add_argument("--floor", default="", help="the hyper floor's binary (bench/floor; bench/run --floor builds it): "
                    "a reverse proxy with no logic on modelshim's HTTP stack, run as target `floor` beside nginx "
                    "in the load lanes, so the report shows what the stack alone costs")
    ap.add_argument("--label", default="", help="a note printed at the top of the results")
    ap.add_argument("--out", default=str(BENCH / "results" / "latest.md"))
    ap.add_argument("--command", default="", help="the command line to record (set by bench/run)")
    a = ap.parse_args()
    if a.console_ab:
        a.baseline = a.baseline or "self"
        a.config_extra = a.config_extra or str(BENCH / "console-on.toml")
        a.label = a.label or "A/B: [console] enabled, no console open (new) vs [console] off (base), same binary"
    # `--baseline self`: the same binary, so two configs are compared.
    if a.baseline == "self":
        a.baseline = a.binary
    # A config with [console] on wants its admin key (nothing logs in here).
    os.environ.setdefault("MODELSHIM_ADMIN_KEY", "bench-admin-key-" + str(os.getpid()))
    os.environ.setdefault("MODELSHIM_BENCH_KEY", "bench-upstream-key-" + str(os.getpid()))
    q = a.quick
    a.duration = a.duration or (3 if q else 15)
    a.latency_duration = a.latency_duration or (3 if q else 10)
    a.warmup = a.warmup or (1 if q else 2)
    a.rounds = a.rounds or (3 if q else 5)
    a.streams = a.streams or (30 if q else 300)
    a.idle_requests = a.idle_requests or (60 if q else 300)
    a.startup_runs = a.startup_runs or (3 if q else 10)
    paced = PACED_LANE in a.lanes.split(",")
    lanes = [x for x in a.lanes.split(",") if x in LANES]
    a.paced_duration = a.paced_duration or a.duration
    if a.many_streams is None:
        a.many_streams = 0 if q else 10000

    # Thousands of open streams: raise the descriptor limit for us and our children.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    work = ROOT / "target" / "bench-run"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    for d in ("logs", "nginx-upstream/tmp-body", "nginx-upstream/tmp-proxy", "nginx-proxy/tmp-body", "nginx-proxy/tmp-proxy"):
        (work / d).mkdir(parents=True, exist_ok=True)
    write_fixtures(work)

    ports = {k: free_port() for k in ("up", "paced", "slow", "nginx", "modelshim", "litellm", "baseline", PACED_LANE, "hold", "floor")}
    # A proxy holds two descriptors per stream; the hard limit caps how many.
    many_requested = a.many_streams
    if a.many_streams > fd_stream_cap():
        a.many_streams = fd_stream_cap()
        log(f"--many-streams {many_requested} lowered to {a.many_streams}: RLIMIT_NOFILE hard limit "
            f"{resource.getrlimit(resource.RLIMIT_NOFILE)[1]} (two descriptors per stream in a proxy)")
    (work / "nginx-upstream" / "nginx.conf").write_text(nginx_upstream_conf(work, ports["up"]))
    (work / "nginx-proxy" / "nginx.conf").write_text(
        nginx_proxy_conf(work, ports["nginx"], ports["up"], ports["paced"], ports["slow"], ports[PACED_LANE], ports["hold"],
                         max(a.many_streams, a.open_streams)))
    extra = lambda f: "\n" + Path(f).read_text() if f else ""  # noqa: E731
    (work / "modelshim.toml").write_text(modelshim_conf(ports["modelshim"], ports["up"], ports["paced"], ports["slow"],
                                                        ports[PACED_LANE], ports["hold"]) + extra(a.config_extra))
    (work / "baseline.toml").write_text(modelshim_conf(ports["baseline"], ports["up"], ports["paced"], ports["slow"],
                                                       ports[PACED_LANE], ports["hold"]) + extra(a.baseline_config_extra))
    (work / "litellm.yaml").write_text(litellm_conf(ports["up"], ports["paced"], ports["slow"]))

    res: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(), "label": a.label,
        "command": a.command or " ".join(shlex.quote(x) for x in sys.argv),
        "args": {k: getattr(a, k) for k in ("connections", "threads", "duration", "latency_duration", "warmup", "rounds", "streams", "idle_requests", "open_streams",
                                            "paced_connections", "paced_duration", "many_streams", "many_extra")},
        "versions": {"nginx": version(["nginx", "-v"]).replace("nginx version: ", ""),
                     "wrk": version(["wrk", "-v"]).split(" [")[0]},
        "modelshim_version": version([a.binary, "--version"]),
        "baseline": a.baseline and {"binary": a.baseline, "version": version([a.baseline, "--version"]),
                                    "config_extra": a.baseline_config_extra, "new_config_extra": a.config_extra},
        "load": {}, "ttft": {}, "memory": {}, "idle_rss_kib": {}, "startup": {}, "sanity_failures": [],
        "paced": {}, "many": {}, "many_requested": many_requested, "fd_hard_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
    }
    procs = Procs(work / "logs")

    def on_signal(signum, _frame):
        procs.stop_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        # Upstreams and the nginx proxy.
        log(f"work dir {work}; ports {ports}")
        up = procs.start("nginx-upstream", ["nginx", "-p", str(work / "nginx-upstream"), "-c", str(work / "nginx-upstream" / "nginx.conf")])
        procs.start("paced-upstream", [sys.executable, str(BENCH / "paced_upstream.py"), "--port", str(ports["paced"]),
                                       "--chunks", "64", "--interval-ms", "1"])
        procs.start("slow-upstream", [sys.executable, str(BENCH / "paced_upstream.py"), "--port", str(ports["slow"]),
                                      "--chunks", "120", "--interval-ms", "500"])
        pacedmock = procs.start(f"{PACED_LANE}-upstream", [sys.executable, str(BENCH / "paced_upstream.py"), "--port", str(ports[PACED_LANE]),
                                               "--chunks", "64", "--interval-ms", str(PACED_INTERVAL_MS)])
        procs.start("hold-upstream", [sys.executable, str(BENCH / "paced_upstream.py"), "--port", str(ports["hold"]),
                                      "--chunks", str(HOLD_CHUNKS), "--interval-ms", str(HOLD_INTERVAL_MS)])
        ng = procs.start("nginx-proxy", ["nginx", "-p", str(work / "nginx-proxy"), "-c", str(work / "nginx-proxy" / "nginx.conf")])
        for name, port in (("upstream", ports["up"]), ("nginx proxy", ports["nginx"])):
            if wait_ready(port, "/healthz", 10, None, 0.01) is None:
                raise RuntimeError(f"{name} did not start (see {work}/logs)")
        for name in ("paced", "slow", PACED_LANE, "hold"):
            if not wait_port(ports[name], 10):
                raise RuntimeError(f"{name} upstream did not start (see {work}/logs)")

        # modelshim: startup time (several fresh starts), then the instance under test.
        log("modelshim: startup time and idle RSS")
        res["startup"]["modelshim"] = st = startup(Path(a.binary), work / "modelshim.toml", ports["modelshim"], a.startup_runs, procs)
        res["idle_rss_kib"]["modelshim"] = st["idle_rss_kib"]
        ms = procs.start("modelshim", [a.binary, "serve", "--config", str(work / "modelshim.toml")],
                         env=dict(os.environ, RUST_LOG="warn"))
        if wait_ready(ports["modelshim"], "/healthz", 10, ms) is None:
            raise RuntimeError(f"modelshim did not start (see {work}/logs/modelshim.log)")
        res["idle_rss_kib"]["nginx"] = rss_kib(ng.pid)

        targets_ = [Target("direct", ports["up"], up.pid, True), Target("nginx", ports["nginx"], ng.pid, True),
                    Target("modelshim", ports["modelshim"], ms.pid, False)]
        if a.baseline:
            bl = procs.start("baseline", [a.baseline, "serve", "--config", str(work / "baseline.toml")],
                             env=dict(os.environ, RUST_LOG="warn"))
            if wait_ready(ports["baseline"], "/healthz", 10, bl) is None:
                raise RuntimeError(f"the baseline did not start (see {work}/logs/baseline.log)")
            res["idle_rss_kib"]["baseline"] = rss_kib(bl.pid)
            targets_.append(Target("baseline", ports["baseline"], bl.pid, False))
        if a.floor:
            fl = procs.start("floor", [a.floor, f"127.0.0.1:{ports['floor']}", f"127.0.0.1:{ports['up']}"])
            if wait_ready(ports["floor"], "/healthz", 10, fl) is None:
                raise RuntimeError(f"the floor did not start (see {work}/logs/floor.log)")
            res["versions"]["floor"] = floor_hyper()
            targets_.append(Target("floor", ports["floor"], fl.pid, True))
        if a.litellm:
            log("litellm: starting (slow)")
            env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False",
                       LITELLM_LOG="ERROR", NO_DOCS="True", DISABLE_ADMIN_UI="True",
                       # No master key, like modelshim here (no auth); it listens on 127.0.0.1 only.
                       LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY="true")
            t0 = time.perf_counter()
            llp = procs.start("litellm", [a.litellm, "--config", str(work / "litellm.yaml"), "--host", "127.0.0.1",
                                          "--port", str(ports["litellm"]), "--num_workers", "1"], env=env)
            took = wait_ready(ports["litellm"], "/health/liveliness", 180, llp, 0.05)
            if took is None:
                res["sanity_failures"].append(f"litellm did not start (see {work}/logs/litellm.log)")
            else:
                res["startup"]["litellm"] = {"ms_p50": (time.perf_counter() - t0) * 1000, "runs": 1}
                time.sleep(2)
                res["idle_rss_kib"]["litellm"] = rss_kib(llp.pid)
                res["versions"]["litellm"] = version([str(Path(a.litellm).parent / "python"), "-c",
                                                      "import importlib.metadata as m; print(m.version('litellm'))"])
                targets_.append(Target("litellm", ports["litellm"], llp.pid, False))

        # End-to-end check of every target × lane before any load.
        runnable: dict[str, list[str]] = {}
        for t in targets_:
            runnable[t.name] = []
            for lane in lanes + ["paced"] + ([PACED_LANE] if paced else []):
                if t.name == "litellm" and lane not in LITELLM_LANES + ["paced"]:
                    continue
                # The floor forwards to the fast upstream only: the load lanes.
                if t.name == "floor" and lane not in LANES:
                    continue
                port = ports[lane] if t.name == "direct" and lane in ("paced", PACED_LANE) else t.port
                err = sanity(t, lane, port, work)
                if err:
                    res["sanity_failures"].append(f"{t.name}/{lane}: {err}")
                    log(f"CHECK FAILED {t.name}/{lane}: {err}")
                elif lane in LANES or lane == PACED_LANE:
                    runnable[t.name].append(lane)
        log(f"end-to-end checks done; failures: {len(res['sanity_failures'])}")

        # Throughput and concurrency-1 latency, lane by lane, the targets
        # interleaved (LiteLLM apart, see `load_litellm`).
        for t in targets_:
            res["load"][t.name] = {}
        for lane in lanes:
            ts = [t for t in targets_ if t.name != "litellm" and lane in runnable[t.name]]
            log(f"load {lane}: {', '.join(t.name for t in ts)} in {a.rounds} rounds")
            for name, r in load_lane(ts, lane, a, work).items():
                res["load"][name][lane] = r
                log(f"  {name}: {r['rps']:.0f} req/s, c1 p50 {r['c1_p50_us']} µs p99 {r['c1_p99_us']} µs, errors {r['errors']}")
            for t in targets_:
                if t.name == "litellm" and lane in runnable[t.name]:
                    log(f"load litellm/{lane}")
                    res["load"]["litellm"][lane] = r = load_litellm(t, lane, a, work)
                    log(f"  {r['rps']:.0f} req/s, c1 p50 {r['c1_p50_us']} µs p99 {r['c1_p99_us']} µs, errors {r['errors']}")
        if paced:
            ts = [t for t in targets_ if t.name != "litellm" and PACED_LANE in runnable[t.name]]
            log(f"paced stream CPU ({PACED_LANE}): {', '.join(t.name for t in ts)}, {a.paced_connections} streams at once, "
                f"{a.paced_duration} s each in {a.rounds} rounds")
            res["paced"] = paced_lane(ts, ports, a, work, pacedmock.pid)
            for name, r in res["paced"].items():
                log(f"  {name}: {r['rps']:.0f} streams/s, CPU {fmt(r.get('cpu_us_per_req'), ' µs', 1)} per stream, "
                    f"stream p50 {r['stream_p50_us'] / 1000:.1f} ms, errors {r['errors']}")
        pc = {}
        for t in ("nginx", "modelshim"):
            s64 = (res["load"].get(t, {}).get("stream") or {}).get("cpu_us_per_req")
            s8 = (res["load"].get(t, {}).get("stream8") or {}).get("cpu_us_per_req")
            if s64 is not None and s8 is not None:
                pc[t] = (s64 - s8) / 56
        res["per_chunk_cpu_us"] = pc

        # Time to first token, sequential streams from the paced upstream,
        # the targets interleaved (LiteLLM apart: a stream takes it ~100 ms).
        ts = [(t, ports["paced"] if t.name == "direct" else t.port) for t in targets_ if t.name not in ("litellm", "floor")]
        log(f"ttft {', '.join(t.name for t, _ in ts)} ({a.streams} streams each, {a.rounds} rounds)")
        res["ttft"] = ttft_rounds(ts, a, work)
        log(f"c=1 after 20 ms idle: {', '.join(t.name for t, _ in ts)} ({a.idle_requests} requests each)")
        res["idle_c1"] = idle_c1([t for t, _ in ts if "plain" in runnable[t.name]], a, work)
        for t in targets_:
            if t.name == "litellm":
                log(f"ttft litellm ({a.streams} streams)")
                res["ttft"]["litellm"] = ttft_rounds([(t, t.port)], argparse.Namespace(streams=a.streams, rounds=1), work)["litellm"]

        # Memory with many open slow streams.
        for t in targets_:
            if t.name in ("direct", "floor"):
                continue
            log(f"memory {t.name}: {a.open_streams} open streams")
            res["memory"][t.name] = r = hold_streams(t, a.open_streams, 120 if t.name == "litellm" else 60, work)
            log(f"  {r}")
            time.sleep(1)

        if a.profile and "stream" in runnable.get("modelshim", []):
            log("perf profile of modelshim, streamed lane")
            res["profile"] = perf_profile(ms.pid, f"http://127.0.0.1:{ports['modelshim']}/v1/chat/completions",
                                          work / "requests" / "stream.json", 10 if not q else 4, work)

        # Issue 50's many-streams run: each proxy in turn holds N at once, a
        # fresh process each (what the lanes above left resident would count).
        if a.many_streams:
            direct = next(t for t in targets_ if t.name == "direct")
            for t in targets_:
                if t.name in ("direct", "litellm", "floor"):
                    continue
                name = "nginx-proxy" if t.name == "nginx" else t.name
                argv = procs.procs[name].args
                procs.stop(name)
                time.sleep(0.5)
                p = procs.start(name, argv, env=None if t.name == "nginx" else dict(os.environ, RUST_LOG="warn"))
                if wait_ready(t.port, "/healthz", 10, p, 0.01) is None:
                    res["sanity_failures"].append(f"{t.name} did not restart for the many-streams run")
                    continue
                t.pid = p.pid
                time.sleep(1.0)
                log(f"many streams {t.name} (fresh process): {a.many_streams} open at once, {a.many_extra} extra streams' TTFT")
                res["many"][t.name] = r = many_streams(t, direct, ports, a.many_streams, a, work)
                log(f"  ready {r['ready']}, errors {r['errors']} (connect {r['connect_failed']}, no first chunk "
                    f"{r['no_first_chunk']}, timed out {r['timed_out']}), peak {r['rss_peak_kib'] / 1024:.1f} MiB, "
                    f"opened in {r['open_secs']:.1f} s, extra TTFT {r['extra']}, idle {r['idle']}")
                time.sleep(2)
    finally:
        procs.stop_all()

    res["loadavg_end"] = " ".join(open("/proc/loadavg").read().split()[:3])
    res["targets"] = targets(res)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    md = render(res)
    out.write_text(md)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    print(md)
    log(f"wrote {out} and {out.with_suffix('.json')}")
    return 1 if res["sanity_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
