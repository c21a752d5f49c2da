#!/usr/bin/env python3
"""Memory per 1,000 open streams, A/B between modelshim builds.

    python3 bench/memab.py [--rounds 4] [--burst 200] BINARY [BINARY ...]

A BINARY may carry environment settings for its runs: `path:KEY=VALUE:KEY=VALUE`.

The harness (`bench.py`) measures one process, after its load lanes; a change of a MiB per
1,000 streams needs more than that to be seen. Here every measurement is a fresh process:
start it, send 200 plain requests on one connection, then open 1,000 streams from the slow
paced upstream and read the growth of its RSS (`bench.hold_streams`, two waves; `--burst`
of them connecting at once, 200 as in the harness). The builds take turns within each
round; the medians are printed at the end. Needs nginx (the canned upstream, as in the
harness; `bench/run` installs it).
"""

import argparse
import http.client
import os
import resource
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+", help="modelshim binaries, each optionally path:KEY=VALUE...")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--burst", type=int, default=200, help="streams connecting at once (the harness: 200)")
    a = ap.parse_args()

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work, ports, conf = bench.one_proxy_work("bench-memab")
    plain = (work / "requests" / "plain.json").read_bytes()

    procs = bench.Procs(work / "logs")
    results: dict[str, list[float]] = {b: [] for b in a.binaries}
    try:
        procs.start("nginx-upstream", ["nginx", "-p", str(work / "nginx-upstream"), "-c", str(work / "nginx-upstream" / "nginx.conf")])
        procs.start("slow-upstream", [sys.executable, str(bench.BENCH / "paced_upstream.py"), "--port", str(ports["slow"]),
                                      "--chunks", "120", "--interval-ms", "500"])
        if bench.wait_ready(ports["up"], "/healthz", 10, None, 0.01) is None or not bench.wait_port(ports["slow"], 10):
            raise RuntimeError(f"the upstreams did not start (see {work}/logs)")
        for r in range(a.rounds):
            for spec in a.binaries:
                path, *settings = spec.split(":")
                env = dict(os.environ, RUST_LOG="warn")
                env.update(s.split("=", 1) for s in settings)
                p = procs.start("modelshim", [path, "serve", "--config", str(conf)], env=env)
                if bench.wait_ready(ports["modelshim"], "/healthz", 10, p) is None:
                    raise RuntimeError(f"{path} did not start (see {work}/logs/modelshim.log)")
                c = http.client.HTTPConnection("127.0.0.1", ports["modelshim"])
                for _ in range(200):
                    c.request("POST", "/v1/chat/completions", plain, {"Content-Type": "application/json"})
                    c.getresponse().read()
                c.close()
                m = bench.hold_streams(bench.Target("modelshim", ports["modelshim"], p.pid, False), a.streams, 60, work, a.burst)
                procs.stop("modelshim")
                if m.get("ready") != a.streams:
                    raise RuntimeError(f"{path}: {m.get('ready')} of {a.streams} streams opened")
                results[spec].append(m["kib_per_1000"] / 1024)
                mib = lambda k: f"{m[k] / 1024:.1f}"  # noqa: E731
                bench.log(f"round {r + 1}: {spec}: {results[spec][-1]:.1f} MiB per 1,000 open streams "
                          f"(RSS before {mib('rss_before_kib')}, open {mib('rss_open_kib')}, after close "
                          f"{mib('rss_after_close_kib')}; second wave open {mib('rss_open2_kib')}, after close "
                          f"{mib('rss_after_close2_kib')} MiB)")
    finally:
        procs.stop_all()
    for spec, xs in results.items():
        print(f"{statistics.median(xs):5.1f} MiB per 1,000 open streams (rounds: {', '.join(f'{x:.1f}' for x in xs)})  {spec}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
