"""One local HTTP server for the sandbox's stand-ins of Google's REST APIs.

The promote code talks to it through the real client libraries (REST transport, endpoint
override, anonymous credentials), so it must answer as Google's front end does: JSON
bodies, the real HTTP status codes, and errors as a `google.rpc.Status` wrapped in
`{"error": {...}}`, which is what makes the client raise NotFound, Conflict,
TooManyRequests or ServiceUnavailable.

Each stand-in is an `Api`: the path prefixes it serves and a `handle(request)`. The
server routes by the longest matching prefix and runs a `before` hook on every request,
which is where injected faults (bursts of 429/503) come in.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

# google.rpc.Code names by HTTP status, as Google's front end pairs them.
RPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes

    def json(self) -> dict[str, Any]:
        return json.loads(self.body or b"{}")

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any] | str  # a dict is sent as JSON; a str is already JSON text
    headers: dict[str, str] = field(default_factory=dict)


class ApiError(Exception):
    """An error answered the way Google's APIs answer it."""

    def __init__(self, status: int, message: str, rpc_status: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.rpc_status = rpc_status or RPC_STATUS.get(status, "UNKNOWN")

    def response(self) -> Response:
        return Response(self.status, {"error": {"code": self.status, "message": self.message,
                                                "status": self.rpc_status}})


class Api(Protocol):
    prefixes: Sequence[str]

    def handle(self, request: Request) -> Response: ...


Hook = Callable[[Request], None]  # raises ApiError to answer instead of the stand-in


class SandboxServer:
    """Serves the stand-ins on 127.0.0.1 (an ephemeral port unless one is given)."""

    def __init__(self, apis: Sequence[Api], before: Hook | None = None, port: int = 0):
        self.apis = sorted(((p, api) for api in apis for p in api.prefixes), key=lambda pa: -len(pa[0]))
        self.before = before
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status), for tests and status
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> SandboxServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="sandbox-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def dispatch(self, request: Request) -> Response:
        try:
            if self.before is not None:
                self.before(request)
            for prefix, api in self.apis:
                if request.path.startswith(prefix):
                    return api.handle(request)
            raise ApiError(404, f"no stand-in serves {request.path}")
        except ApiError as error:
            return error.response()
        except Exception as error:  # noqa: BLE001 - a stand-in bug must reach the client as a 500, not hang it
            return ApiError(500, f"sandbox stand-in failed: {type(error).__name__}: {error}").response()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm
            # holds the body until the client's delayed ACK, ~40 ms on every call.
            disable_nagle_algorithm = True

            def _serve(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(self.command, url.path, parse_qs(url.query), self.rfile.read(length))
                response = server.dispatch(request)
                payload = (response.body if isinstance(response.body, str) else json.dumps(response.body)).encode()
                with server._lock:
                    server.requests.append((request.method, request.path, response.status))
                self.send_response(response.status, HTTPStatus(response.status).phrase)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in response.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass  # requests are recorded on the server, not printed

        return Handler
