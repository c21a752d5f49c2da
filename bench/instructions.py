#!/usr/bin/env python3
"""Instructions per proxied request, A/B, by valgrind's callgrind.

Time-based A/Bs on a shared 2-CPU VM move by more than the effects we look
for (bench/results/: the same binary measured 11.5k and 28.7k req/s an hour
apart). Instruction counts do not: this runs each side under callgrind,
sends the same requests one at a time on one keep-alive connection, zeroes
the counters after a warm-up and reads them after N more, so what is left is
the proxy's own work per request (upstream: bench.py's nginx with canned
bodies). Each side runs `--repeats` times, alternating, to show the spread.

    python3 bench/instructions.py --binary target/release/modelshim \\
        --config-extra bench/console-on.toml            # console enabled, none open vs off
    python3 bench/instructions.py --binary NEW --baseline OLD --lane stream
    RUST_LOG=warn python3 bench/instructions.py --peers FLOOR_BINARY  # + nginx and the floor

`--peers` also runs nginx `proxy_pass` (one process, no master) and
bench/floor (one thread) the same way, for the instructions modelshim spends
beside what nginx and hyper with no logic spend. bench.py runs modelshim with
RUST_LOG=warn; this inherits RUST_LOG (unset: info, the access line written).

Needs valgrind and nginx (bench/run installs nginx). Everything listens on
127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the fixtures, configs and process handling are bench.py's)


def totals(out: Path) -> int | None:
    """Instructions in a callgrind dump (its `totals:` or `summary:` line);
    None while the dump is not complete."""
    for line in out.read_text().splitlines():
        m = re.match(r"(?:totals|summary):\s+(\d+)", line)
        if m:
            return int(m.group(1))
    return None


def send(port: int, path: str, body: bytes, n: int) -> None:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for _ in range(n):
        c.request("POST", path, body=body, headers={"content-type": "application/json"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError(f"status {r.status} from {path}")
    c.close()


def control(pid: int, flag: str) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], check=True, capture_output=True, timeout=60)


def measure(side: str, argv: list[str], port: int, lane: str, work: Path, a, procs: bench.Procs, k: int,
            proxy_path: str = "/v1/chat/completions", ready: str = "/readyz") -> int:
    """Instructions of the process `argv` over `a.requests` requests of
    `lane` to `proxy_path` on `port`, after `a.warmup` more."""
    out = work / f"callgrind.{side}.{k}.out"
    name = f"{side}-{k}"
    p = procs.start(name, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv])
    try:
        if bench.wait_ready(port, ready, 120, p, poll=0.2) is None:
            raise RuntimeError(f"{side} did not start (see {work}/logs/{name}.log)")
        body = (work / "requests" / f"{lane}.json").read_bytes()
        send(port, proxy_path, body, a.warmup)
        control(p.pid, "--zero")
        send(port, proxy_path, body, a.requests)
        control(p.pid, "--dump")
        # The process writes the dump itself, maybe after callgrind_control
        # returns: read it once its closing totals line is there.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for dump in sorted(work.glob(f"callgrind.{side}.{k}.out.*")):
                if (ir := totals(dump)) is not None:
                    return ir
            time.sleep(0.1)
        raise RuntimeError(f"no complete dump from {side} in 30 s")
    finally:
        procs.stop(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=str(bench.ROOT / "target" / "release" / "modelshim"))
    ap.add_argument("--baseline", default="", help="another binary (default: the same one)")
    ap.add_argument("--config-extra", default="", help="a TOML file appended to the new side's config")
    ap.add_argument("--baseline-config-extra", default="", help="a TOML file appended to the baseline's config")
    ap.add_argument("--lane", default="plain", choices=list(bench.LANES))
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peers", default="", metavar="FLOOR_BINARY",
                    help="also measure nginx proxy_pass and bench/floor (this binary), once each")
    a = ap.parse_args()
    a.baseline = a.baseline or a.binary
    os.environ.setdefault("MODELSHIM_ADMIN_KEY", "bench-admin-key-" + str(os.getpid()))
    os.environ.setdefault("MODELSHIM_BENCH_KEY", "bench-upstream-key-" + str(os.getpid()))

    work = bench.ROOT / "target" / "bench-instructions"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    for d in ("logs", "nginx-upstream/tmp-body", "nginx-upstream/tmp-proxy", "nginx-proxy/tmp-body", "nginx-proxy/tmp-proxy"):
        (work / d).mkdir(parents=True, exist_ok=True)
    bench.write_fixtures(work)
    ports = {k: bench.free_port() for k in ("up", "new", "base", "nginx", "floor")}
    (work / "nginx-upstream" / "nginx.conf").write_text(bench.nginx_upstream_conf(work, ports["up"]))
    extra = lambda f: "\n" + Path(f).read_text() if f else ""  # noqa: E731
    confs = {}
    for side, f in (("new", a.config_extra), ("base", a.baseline_config_extra)):
        confs[side] = work / f"{side}.toml"
        confs[side].write_text(bench.modelshim_conf(ports[side], ports["up"], ports["up"], ports["up"]) + extra(f))

    procs = bench.Procs(work / "logs")
    res: dict[str, list[int]] = {"new": [], "base": []}
    try:
        procs.start("nginx-upstream", ["nginx", "-p", str(work / "nginx-upstream"),
                                       "-c", str(work / "nginx-upstream" / "nginx.conf")])
        if not bench.wait_port(ports["up"], 10):
            raise RuntimeError("the nginx upstream did not start")
        for k in range(a.repeats):
            for side, binary in (("new", a.binary), ("base", a.baseline))[:: 1 if k % 2 == 0 else -1]:
                argv = [binary, "serve", "--config", str(confs[side])]
                ir = measure(side, argv, ports[side], a.lane, work, a, procs, k)
                res[side].append(ir)
                print(f"{side} #{k}: {ir / a.requests:,.0f} instructions/request", flush=True)
        if a.peers:
            # One nginx process (no master, one worker) and one floor thread,
            # so the one process callgrind follows does all the work.
            conf = bench.nginx_proxy_conf(work, ports["nginx"], ports["up"], ports["up"], ports["up"])
            conf = conf.replace("master_process on;", "master_process off;").replace("worker_processes auto;", "worker_processes 1;")
            (work / "nginx-proxy" / "nginx.conf").write_text(conf)
            path = f"/{a.lane}/v1/chat/completions"
            for side, argv in (("nginx", ["nginx", "-p", str(work / "nginx-proxy"), "-c", str(work / "nginx-proxy" / "nginx.conf")]),
                               ("floor", [a.peers, f"127.0.0.1:{ports['floor']}", f"127.0.0.1:{ports['up']}", "1"])):
                ir = measure(side, argv, ports[side], a.lane, work, a, procs, 0, path, "/healthz")
                res[side] = [ir]
                print(f"{side}: {ir / a.requests:,.0f} instructions/request", flush=True)
    finally:
        procs.stop_all()

    new, base = (sorted(x / a.requests for x in res[s]) for s in ("new", "base"))
    mid = lambda xs: xs[len(xs) // 2]  # noqa: E731
    d = (mid(new) - mid(base)) / mid(base) * 100
    print(f"\nlane {a.lane}, {a.requests} requests after {a.warmup} warm-up, {a.repeats} runs a side")
    print(f"new  ({a.binary}{' + ' + a.config_extra if a.config_extra else ''}): "
          + ", ".join(f"{x:,.0f}" for x in new))
    print(f"base ({a.baseline}{' + ' + a.baseline_config_extra if a.baseline_config_extra else ''}): "
          + ", ".join(f"{x:,.0f}" for x in base))
    print(f"instructions/request: {mid(new):,.0f} vs {mid(base):,.0f} ({d:+.2f}%)")
    for side, what in (("nginx", "nginx proxy_pass"), ("floor", f"floor ({a.peers})")):
        if side in res:
            ir = res[side][0] / a.requests
            print(f"{what}: {ir:,.0f} ({mid(new) / ir:.2f}× of it new, {mid(base) / ir:.2f}× base)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
