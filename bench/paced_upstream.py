#!/usr/bin/env python3
"""A paced OpenAI-style SSE upstream for the streaming measurements.

nginx (the fast upstream) sends a whole canned stream in one write, which is
right for throughput but hides time-to-first-token. This mock answers every
POST with a `text/event-stream` body whose chunks are written one at a time,
`--interval-ms` apart: the first content chunk goes out together with the
response headers, so a client's time-to-first-token through a proxy minus the
same measured directly is the proxy's added TTFT.

HTTP/1.1 keep-alive with chunked transfer encoding, so proxies reuse their
upstream connections the way they do with a real vendor. Standard library
only; one asyncio loop holds thousands of open streams (the memory test).
"""

import argparse
import asyncio
import json
import resource


def events(chunks: int) -> list[bytes]:
    """The SSE events of one answer: `chunks` content deltas, a finish chunk, [DONE]."""
    out = []
    for i in range(chunks):
        delta = {"content": f"word{i} "}
        if i == 0:
            delta["role"] = "assistant"
        obj = {
            "id": "chatcmpl-paced",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        out.append(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
    fin = {
        "id": "chatcmpl-paced",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    out.append(b"data: " + json.dumps(fin, separators=(",", ":")).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


def chunked(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


async def serve(port: int, chunks: int, interval: float) -> None:
    evs = [chunked(e) for e in events(chunks)]
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: one request after the other
                req = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in req.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length:
                    await reader.readexactly(length)
                # Headers and the first chunk in one write, then one chunk per tick.
                writer.write(head + evs[0])
                await writer.drain()
                for ev in evs[1:]:
                    await asyncio.sleep(interval)
                    writer.write(ev)
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--interval-ms", type=float, default=1.0)
    a = ap.parse_args()
    # Thousands of open streams need thousands of descriptors.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        asyncio.run(serve(a.port, a.chunks, a.interval_ms / 1000.0))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
