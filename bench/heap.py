#!/usr/bin/env python3
"""What the heap holds per open stream, by allocation site (valgrind's DHAT).

    cargo build --release --no-default-features --bin modelshim   # system malloc: DHAT sees every block
    python3 bench/heap.py target/release/modelshim [--streams 300] [--depth 2]

Starts the binary under `valgrind --tool=dhat` behind bench.py's upstreams, sends 50 plain
requests, opens N streams from the slow paced upstream (one chunk every 500 ms) and holds them
until each has its first content chunk, then stops the process. DHAT's heap at its peak (t-gmax:
all N streams open) is grouped by the first frames outside the standard library and printed per
stream; what the process holds whatever the load (compiled regexes, the config) is divided in too,
so a site far under one block per stream is not per stream. These are bytes allocated, not resident: an untouched page of a buffer is not in RSS
(bench/memab.py measures RSS). For readable frames, build with
`CARGO_PROFILE_RELEASE_DEBUG=1 CARGO_PROFILE_RELEASE_STRIP=none` (and LTO off to build faster).
Everything listens on 127.0.0.1; every wait is bounded.
"""

import argparse
import asyncio
import http.client
import json
import os
import re
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

# Frames that say nothing about who allocated: the allocator, std's collections, bytes, Arc.
LIBRARY = re.compile(r"vgpreload|library/(alloc|core|std)/|bytes_mut\.rs|bytes\.rs|/raw_vec|"
                     r"sync/mpsc/(block|list)\.rs|arc\.rs|boxed\.rs|\?\?\?")
GENERICS = re.compile(r"<[^<>]*(<[^<>]*(<[^<>]*>[^<>]*)*>[^<>]*)*>")


def site(frames: list[str], depth: int) -> str:
    out = []
    for f in frames:
        if LIBRARY.search(f):
            continue
        m = re.match(r"0x[0-9A-Fa-f]+: (.*)", f)
        out.append(GENERICS.sub("<…>", m.group(1) if m else f)[:120])
        if len(out) >= depth:
            break
    return "\n      <- ".join(out)


def report(dump: Path, streams: int, depth: int, top: int = 25) -> str:
    d = json.loads(dump.read_text())
    ftbl = d["ftbl"]
    pps = [p for p in d["pps"] if p.get("gb", 0) > 0]
    by: dict[str, list[int]] = {}
    for p in pps:
        a = by.setdefault(site([ftbl[i] for i in p["fs"]], depth), [0, 0])
        a[0] += p["gb"]
        a[1] += p["gbk"]
    total = sum(p["gb"] for p in pps)
    lines = [f"heap at its peak: {total / streams:,.0f} bytes, {sum(p['gbk'] for p in pps) / streams:.1f} blocks "
             f"per open stream ({streams} open)"]
    for k, (b, n) in sorted(by.items(), key=lambda x: -x[1][0])[:top]:
        lines.append(f"{b / streams:8,.0f} B {n / streams:5.2f} blocks  {k}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--streams", type=int, default=300)
    ap.add_argument("--depth", type=int, default=2, help="frames per allocation site")
    a = ap.parse_args()
    work, ports, conf = bench.one_proxy_work("bench-heap")
    dump = work / "dhat.json"
    procs = bench.Procs(work / "logs")
    try:
        procs.start("nginx-upstream", ["nginx", "-p", str(work / "nginx-upstream"), "-c",
                                       str(work / "nginx-upstream" / "nginx.conf")])
        procs.start("slow-upstream", [sys.executable, str(bench.BENCH / "paced_upstream.py"), "--port",
                                      str(ports["slow"]), "--chunks", "120", "--interval-ms", "500"])
        if bench.wait_ready(ports["up"], "/healthz", 10, None, 0.01) is None or not bench.wait_port(ports["slow"], 10):
            raise RuntimeError(f"the upstreams did not start (see {work}/logs)")
        env = dict(os.environ, RUST_LOG="warn")
        env.setdefault("MODELSHIM_BENCH_KEY", f"bench-upstream-key-{os.getpid()}")
        p = procs.start("modelshim", ["valgrind", "--tool=dhat", f"--dhat-out-file={dump}", a.binary, "serve",
                                      "--config", str(conf)], env=env)
        if bench.wait_ready(ports["modelshim"], "/healthz", 120, p, 0.2) is None:
            raise RuntimeError(f"modelshim did not start under DHAT (see {work}/logs/modelshim.log)")
        plain = (work / "requests" / "plain.json").read_bytes()
        c = http.client.HTTPConnection("127.0.0.1", ports["modelshim"], timeout=60)
        for _ in range(50):
            c.request("POST", "/v1/chat/completions", plain, {"Content-Type": "application/json"})
            c.getresponse().read()
        c.close()
        slow = (work / "requests" / "slow.json").read_bytes()
        held = asyncio.run(bench._hold_streams(ports["modelshim"], "/v1/chat/completions", slow, a.streams, 120,
                                               lambda: 0, 50))
        if held["ready"] != a.streams:
            raise RuntimeError(f"{held['ready']} of {a.streams} streams opened")
        p.send_signal(signal.SIGTERM)
        p.wait(120)
    finally:
        procs.stop_all()
    print(report(dump, a.streams, a.depth))
    return 0


if __name__ == "__main__":
    sys.exit(main())
