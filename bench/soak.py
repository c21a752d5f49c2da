#!/usr/bin/env python3
"""Soak: a million plain requests through modelshim, RSS after every slice (issue 50).

    python3 bench/soak.py --binary target/release/modelshim            # 1,000,000 requests
    python3 bench/soak.py --binary BIN --requests 100000 --slice-secs 2  # a short check

wrk cannot stop after a fixed number of requests, so it runs in slices of
`--slice-secs` (64 connections, 2 threads, bench/post.lua posting the lane's
body, as bench.py's load lanes) until `--requests` have been answered (the
last slice overshoots: every slice has the same length). modelshim's
RSS (VmRSS) is read before any request, after every slice, and once more
after 2 s of quiet at the end. Flat: the end's RSS within `--tolerance-pct`
(5%) or `--tolerance-mib` (2 MiB), whichever is larger, of the level after
the first slice (the first slice warms the allocator's pools and the upstream
connection pool; what grows after it is what a leak would be).

Bounded: at most `--max-secs` (300) of load, each wrk run bounded too; it
stops there and says how many requests it sent. The upstream is bench.py's
nginx serving canned bodies; everything on 127.0.0.1, every process this
starts stopped by its pid. Needs nginx and wrk (bench/run installs them).
Prints a markdown report (also to `--out` and its .json twin when given);
exits 1 when the RSS is not flat, a request failed, or modelshim died.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (fixtures, configs, processes, wrk, RSS are bench.py's)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(bench.ROOT / "target" / "release" / "modelshim"))
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--lane", default="plain", choices=list(bench.LANES))
    ap.add_argument("--slice-secs", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-secs", type=float, default=300.0, help="longest total load time (the bound)")
    ap.add_argument("--tolerance-pct", type=float, default=5.0)
    ap.add_argument("--tolerance-mib", type=float, default=2.0)
    ap.add_argument("--out", default="", help="also write the report here (and its .json twin)")
    a = ap.parse_args()

    os.environ.setdefault("MODELSHIM_BENCH_KEY", "bench-upstream-key-" + str(os.getpid()))
    work = bench.ROOT / "target" / "bench-soak"
    for d in ("logs", "nginx-upstream/tmp-body", "nginx-upstream/tmp-proxy"):
        (work / d).mkdir(parents=True, exist_ok=True)
    for f in (work / "logs").iterdir():
        f.unlink()
    bench.write_fixtures(work)
    ports = {k: bench.free_port() for k in ("up", "paced", "slow", "modelshim")}
    (work / "nginx-upstream" / "nginx.conf").write_text(bench.nginx_upstream_conf(work, ports["up"]))
    conf = work / "modelshim.toml"
    conf.write_text(bench.modelshim_conf(ports["modelshim"], ports["up"], ports["paced"], ports["slow"]))
    body = work / "requests" / f"{a.lane}.json"
    url = f"http://127.0.0.1:{ports['modelshim']}/v1/chat/completions"

    procs = bench.Procs(work / "logs")
    slices: list[dict] = []
    res: dict = {"binary": a.binary, "version": bench.version([a.binary, "--version"]), "lane": a.lane,
                 "requests_goal": a.requests, "connections": a.connections, "slice_secs": a.slice_secs,
                 "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "loadavg_start": open("/proc/loadavg").read().split()[:3],
                 "slices": slices}
    try:
        procs.start("nginx-upstream", ["nginx", "-p", str(work / "nginx-upstream"), "-c", str(work / "nginx-upstream" / "nginx.conf")])
        if bench.wait_ready(ports["up"], "/healthz", 10, None, 0.01) is None:
            raise RuntimeError(f"the upstream did not start (see {work}/logs)")
        ms = procs.start("modelshim", [a.binary, "serve", "--config", str(conf)], env=dict(os.environ, RUST_LOG="warn"))
        if bench.wait_ready(ports["modelshim"], "/healthz", 10, ms) is None:
            raise RuntimeError(f"modelshim did not start (see {work}/logs/modelshim.log)")
        time.sleep(1.0)
        res["rss_start_kib"] = bench.rss_kib(ms.pid)
        bench.log(f"soak {a.binary}: {a.requests:,} {a.lane} requests in slices of {a.slice_secs:g} s; "
                  f"RSS at start {res['rss_start_kib'] / 1024:.1f} MiB")
        total, errors, t0 = 0, 0, time.perf_counter()
        while total < a.requests and time.perf_counter() - t0 < a.max_secs and ms.poll() is None:
            # Every slice as long as the others (the last overshoots by less
            # than a slice): a last slice cut to 1-2 s read 2-3 MiB above the
            # 5 s ones before it in two runs (unexplained); equal slices
            # keep that variable out of the flatness verdict.
            secs = min(a.slice_secs, max(1.0, a.max_secs - (time.perf_counter() - t0)))
            cpu0 = bench.cpu_seconds(ms.pid)
            r = bench.wrk(url, body, a.connections, a.threads, secs)
            cpu = bench.cpu_seconds(ms.pid) - cpu0
            total += r["requests"]
            errors += r["errors"]
            s = {"requests": r["requests"], "total": total, "errors": r["errors"], "rps": r["rps"],
                 "secs": r["duration_us"] / 1e6, "rss_kib": bench.rss_kib(ms.pid),
                 "cpu_us_per_req": cpu * 1e6 / r["requests"] if r["requests"] else None}
            slices.append(s)
            bench.log(f"  slice {len(slices)}: {total:,} requests, {r['rps']:,.0f} req/s, RSS {s['rss_kib'] / 1024:.1f} MiB, "
                      f"errors {r['errors']}")
        res["load_secs"] = time.perf_counter() - t0
        res["alive"] = ms.poll() is None
        time.sleep(2.0)
        res["rss_end_kib"] = bench.rss_kib(ms.pid) if res["alive"] else None
        res["requests"], res["errors"] = total, errors
    finally:
        procs.stop_all()
    log_text = (work / "logs" / "modelshim.log").read_text(errors="replace")
    res["panics"] = log_text.count("panicked")

    first = slices[0]["rss_kib"] if slices else None
    end = res.get("rss_end_kib")
    tol = max(a.tolerance_pct / 100 * first, a.tolerance_mib * 1024) if first else None
    res["flat"] = end is not None and first is not None and end - first <= tol
    res["growth_kib"] = end - first if end is not None and first is not None else None
    # The trend after the first slice (least squares, KiB per million
    # requests): a leak grows with the requests; a step (a burst of faster
    # traffic, an allocator's pool) does not keep growing.
    pts = [(x["total"] / 1e6, x["rss_kib"]) for x in slices[1:]]
    if len(pts) >= 3:
        mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
        var = sum((p[0] - mx) ** 2 for p in pts)
        res["slope_kib_per_m"] = sum((p[0] - mx) * (p[1] - my) for p in pts) / var if var else None
    ok = res["flat"] and res["alive"] and res["errors"] == 0 and res["requests"] >= a.requests and not res["panics"]

    mib = lambda k: f"{k / 1024:.1f} MiB" if k is not None else "–"  # noqa: E731
    L = ["# modelshim soak (bench/soak.py)\n",
         f"- {res['date']}; `{a.binary}` ({res['version']}); load average at start {' '.join(res['loadavg_start'])}",
         f"- {a.lane} lane, wrk {a.threads} threads × {a.connections} connections in slices of {a.slice_secs:g} s, "
         f"upstream: nginx with canned bodies; all on 127.0.0.1",
         f"- requests: {res['requests']:,} of {a.requests:,} in {res['load_secs']:.0f} s; errors (wrk: connect, read, "
         f"write, timeout, non-2xx): {res['errors']}; modelshim alive at the end: {'yes' if res['alive'] else 'NO'}; "
         f"panics in its log: {res['panics']}\n",
         "| point | requests so far | req/s | CPU µs/req | RSS |", "| --- | ---: | ---: | ---: | ---: |",
         f"| start (before any request) | 0 | – | – | {mib(res.get('rss_start_kib'))} |"]
    for i, s in enumerate(slices, 1):
        L.append(f"| slice {i} | {s['total']:,} | {s['rps']:,.0f} | {bench.fmt(s['cpu_us_per_req'], '', 1)} | {mib(s['rss_kib'])} |")
    L.append(f"| end (2 s after the last slice) | {res['requests']:,} | – | – | {mib(end)} |")
    L.append(f"\nRSS after the first slice {mib(first)}, at the end {mib(end)}: "
             f"{'+' if (res['growth_kib'] or 0) >= 0 else ''}{mib(res['growth_kib'])} "
             f"(flat within max({a.tolerance_pct:g}%, {a.tolerance_mib:g} MiB) = {mib(tol)}): "
             f"**{'flat' if res['flat'] else 'NOT flat'}**; highest after a slice "
             f"{mib(max((s['rss_kib'] for s in slices), default=None))}; trend from slice 2 on "
             f"(least squares): {bench.fmt(res.get('slope_kib_per_m'), ' KiB', 0)} per million requests. "
             f"Verdict: **{'pass' if ok else 'FAIL'}**.")
    md = "\n".join(L) + "\n"
    print(md)
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(md)
        out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
