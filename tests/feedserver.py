"""A real HTTP server on loopback that serves scripted answers, for fetcher and ingest tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    """Send the body in chunks without Content-Length (to test the streaming size cap)."""


Route = Callable[["Seen"], Answer]


@dataclass
class Seen:
    path: str
    headers: dict[str, str]


@dataclass
class FeedServer:
    host: str
    port: int
    routes: dict[str, list[Answer] | Route] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def script(self, path: str, *answers: Answer) -> None:
        """Answer ``path`` with these, in order; the last one repeats."""
        self.routes[path] = list(answers)

    def seen(self, path: str) -> list[Seen]:
        return [r for r in self.requests if r.path.split("?")[0] == path]

    def answer(self, seen: Seen) -> Answer:
        route = self.routes.get(seen.path.split("?")[0])
        if route is None:
            return Answer(404, b"not found")
        if callable(route):
            return route(seen)
        return route.pop(0) if len(route) > 1 else route[0]


@contextmanager
def feed_server() -> Iterator[FeedServer]:
    state = FeedServer("127.0.0.1", 0)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            seen = Seen(self.path, {k: v for k, v in self.headers.items()})
            state.requests.append(seen)
            answer = state.answer(seen)
            self.send_response(answer.status)
            for k, v in answer.headers.items():
                self.send_header(k, v)
            if answer.chunked:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for start in range(0, len(answer.body), 65536):
                    piece = answer.body[start : start + 65536]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that hangs up early (size cap, timeout) is what some tests do

    server = Server(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
