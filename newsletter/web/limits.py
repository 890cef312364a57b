"""What an unauthenticated request may cost: a capped body, and errors that do not echo it.

:class:`BodyLimit` answers 413 to a request whose ``Content-Length`` is over ``web.max_body_bytes``
before reading any of it, and counts the bytes of a body without one (chunked) as they arrive,
stopping at the cap; nothing downstream ever holds more. :func:`validation_problem` answers a
request that does not match its schema with the fields and what is wrong with them, never the
values sent (FastAPI's default handler returns them as ``input``).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BODY_BYTES = 64 * 1024


class BodyLimit:
    """ASGI middleware: request bodies over ``max_bytes`` are answered 413, unread."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> str:
        return f"the request body is over the {self.max_bytes}-byte limit"

    async def _answer_413(self, send: Send) -> None:
        body = json.dumps({"detail": self._too_large()}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and (
                not value.strip().isdigit() or int(value) > self.max_bytes
            ):
                await self._answer_413(send)
                return
        received = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    raise HTTPException(413, self._too_large())
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:  # whatever the app made of the interrupted body, the answer is 413
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await self._answer_413(send)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
            if not started:
                await self._answer_413(send)


def _field(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:] or parts
    return ".".join(parts) or "body"


def describe_errors(errors: list[Any]) -> tuple[str, str | None]:
    """A one-line description of validation errors (field: problem; ...) and the first field."""
    items: list[tuple[str, str]] = []
    for err in errors:
        loc = tuple(err.get("loc", ()))
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "json_invalid":
            msg = "the body is not valid JSON"
            loc = ("body",)
        elif err.get("type") == "extra_forbidden":  # the key itself is input: not repeated
            msg = "unknown field (see /api/openapi.json for the fields)"
            loc = loc[:-1]
        items.append((_field(loc), msg))
    if not items:
        return "the request is invalid", None
    detail = "; ".join(f"{field}: {msg}" for field, msg in items[:10])
    if len(items) > 10:
        detail += f"; and {len(items) - 10} more"
    return detail, items[0][0]


def validation_problem(errors: list[Any]) -> JSONResponse:
    """422 naming each invalid field and what is wrong, never the value that was sent."""
    detail, field = describe_errors(errors)
    return JSONResponse({"detail": detail, "field": field}, status_code=422)


async def request_validation_handler(request: Request, exc: Exception) -> JSONResponse:
    """The 422 answer for a request that fails validation."""
    assert isinstance(exc, RequestValidationError | ValidationError)
    return validation_problem(list(exc.errors()))
