"""A loopback `/v1/embeddings` stand-in that costs next to nothing per request, for bench/embed_http.py.

    python bench/canned_server.py [--latency 0.05] [--dimensions 384]

One asyncio process parses each request with h11 (httpx's own HTTP/1.1 parser), reads the JSON body for its
input count and encoding_format, waits `--latency` seconds without holding anything, and answers with a response
serialized once per (count, encoding): every input gets the same unit vector. The HTTP stand-in of the tests
(tests/support/embedserver.py, a thread per connection) spends ~4 ms of its own CPU per request, which four
requests in flight then queue behind; this one leaves the figures to the client. It prints its /v1 URL, then
serves until terminated; GET /_stats?clear=1 answers the request count and the most requests in flight, like
the tests' stand-in.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal

import h11
import numpy as np

MAX_BODY = 64 * 1024 * 1024


class Canned:
    def __init__(self, latency: float, dimensions: int) -> None:
        self.latency = latency
        rng = np.random.default_rng(7)
        vector = rng.standard_normal(dimensions)
        self.vector = (vector / np.linalg.norm(vector)).astype("<f4")
        self.answers: dict[tuple[int, str], bytes] = {}
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def answer(self, count: int, encoding: str) -> bytes:
        key = (count, encoding)
        if key not in self.answers:
            sent = base64.b64encode(self.vector.tobytes()).decode() if encoding == "base64" else self.vector.tolist()
            data = [{"object": "embedding", "index": i, "embedding": sent} for i in range(count)]
            usage = {"prompt_tokens": count, "total_tokens": count}
            body = {"object": "list", "data": data, "model": "canned", "usage": usage}
            self.answers[key] = json.dumps(body).encode()
        return self.answers[key]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request: h11.Request | None = None
                body = bytearray()
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await reader.read(65536)
                        conn.receive_data(data)
                        if not data and conn.their_state is not h11.DONE:
                            return
                        continue
                    if isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                        if len(body) > MAX_BODY:
                            return
                    elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                        break
                if request is None:
                    return
                status, payload = await self.respond(request, bytes(body))
                headers = [("content-type", "application/json"), ("content-length", str(len(payload)))]
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
                writer.write(conn.send(h11.Data(data=payload)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError, asyncio.CancelledError):  # cancelled: the server stops
            return
        finally:
            writer.close()

    async def respond(self, request: h11.Request, body: bytes) -> tuple[int, bytes]:
        target = request.target.decode()
        if request.method == b"GET" and target.startswith("/_stats"):
            stats = {"request_count": self.requests, "max_in_flight": self.max_in_flight}
            if "clear=1" in target:
                self.requests = self.max_in_flight = 0
            return 200, json.dumps(stats).encode()
        if request.method != b"POST" or target != "/v1/embeddings":
            return 404, b'{"error": {"message": "not found"}}'
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            parsed = json.loads(body)
            texts = parsed["input"]
            count = 1 if isinstance(texts, str) else len(texts)
            await asyncio.sleep(self.latency)
            return 200, self.answer(count, parsed.get("encoding_format", "float"))
        finally:
            self.in_flight -= 1


async def serve(latency: float, dimensions: int) -> None:
    canned = Canned(latency, dimensions)
    server = await asyncio.start_server(canned.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--dimensions", type=int, default=384)
    args = parser.parse_args()
    asyncio.run(serve(args.latency, args.dimensions))


if __name__ == "__main__":
    main()
