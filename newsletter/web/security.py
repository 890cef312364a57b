"""CSRF tokens for forms, security headers, the client address, and slash redirects.

CSRF: a random value in a ``SameSite=Strict`` HttpOnly cookie, and in each form a signed copy
of it (purpose ``csrf``, valid for hours). A forged cross-site POST carries neither. Links
authorized by their own signed token (confirm, unsubscribe) need no CSRF token: the token is
the authority, and RFC 8058 one-click POSTs come without cookies.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable

from fastapi import Request, Response
from fastapi.responses import RedirectResponse
from starlette.routing import Match, Router
from starlette.types import Receive, Scope, Send

from newsletter.services.link_tokens import Purpose, TokenError, Tokens

CSRF_COOKIE = "nl_csrf"
CSRF_FIELD = "csrf"

#: The default policy: no scripts at all, styles from our own stylesheet, forms to ourselves.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
#: For the "view in browser" digest: the email HTML carries inline styles.
CSP_DIGEST = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src https: data:; form-action 'none'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


def client_address(request: Request) -> str:
    """The client's IP (uvicorn's proxy-headers handling sets it from trusted proxies)."""
    return request.client.host if request.client else "unknown"


def csrf_cookie_value(request: Request) -> str:
    """The browser's CSRF cookie value, or a new one (set it with :func:`set_csrf_cookie`)."""
    value = request.cookies.get(CSRF_COOKIE, "")
    if 20 <= len(value) <= 100 and value.replace("-", "").replace("_", "").isalnum():
        return value
    return secrets.token_urlsafe(32)


def set_csrf_cookie(request: Request, response: Response, value: str) -> None:
    """Set the CSRF cookie on ``response`` (HttpOnly, SameSite=Strict; Secure over https)."""
    response.set_cookie(
        CSRF_COOKIE,
        value,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def csrf_field(tokens: Tokens, cookie_value: str) -> str:
    """The form field value for the CSRF cookie ``cookie_value``: a signed copy."""
    return tokens.make(Purpose.CSRF, cookie_value)


def csrf_ok(tokens: Tokens, request: Request, field: object) -> bool:
    """Whether the form's CSRF field is a valid signed copy of the request's cookie."""
    cookie = request.cookies.get(CSRF_COOKIE)
    if not cookie or not isinstance(field, str) or len(field) > 500:
        return False
    try:
        signed = tokens.read(Purpose.CSRF, field)
    except TokenError:
        return False
    return isinstance(signed, str) and hmac.compare_digest(signed, cookie)


async def security_headers(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Middleware: add the security headers (CSP, framing, referrer) the response does not set."""
    response = await call_next(request)
    h = response.headers
    h.setdefault("Content-Security-Policy", CSP)
    h.setdefault("X-Frame-Options", "DENY")
    h.setdefault("X-Content-Type-Options", "nosniff")
    # Token links must never leak to the sites a digest links to.
    h.setdefault("Referrer-Policy", "no-referrer")
    h.setdefault("Cross-Origin-Opener-Policy", "same-origin")
    h.setdefault("Permissions-Policy", "interest-cohort=()")
    h.setdefault("Cache-Control", "no-store")
    return response


def slash_redirects(router: Router, base_url: str) -> None:
    """Answer ``/subscribe/`` with a redirect to ``/subscribe`` (and the reverse) on ``base_url``.

    Starlette's own ``redirect_slashes`` builds the ``Location`` from the request's ``Host``
    header, which the client chooses: ``Host: evil.example`` was sent back as
    ``http://evil.example/subscribe`` to whatever follows or caches the redirect. This one
    points at the configured public URL (``sender.base_url``, as every mailed link does), keeps
    the query, and redirects only to a path a route serves.
    """
    router.redirect_slashes = False
    fallback = router.default
    base = base_url.rstrip("/")

    async def default(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path not in ("", "/") and not path.startswith("//"):
            other = path.rstrip("/") if path.endswith("/") else path + "/"
            elsewhere = {**scope, "path": other}
            if other.startswith("/") and any(
                route.matches(elsewhere)[0] is not Match.NONE for route in router.routes
            ):
                query = scope.get("query_string", b"").decode("latin-1")
                location = f"{base}{other}" + (f"?{query}" if query else "")
                await RedirectResponse(location, status_code=307)(scope, receive, send)
                return
        await fallback(scope, receive, send)

    router.default = default
