"""The pages a person sees while connecting an app: sign in with an API key, consent, and errors.

Plain server-rendered HTML with one small stylesheet and no script, so it works in any browser
and any in-app web view. Every value from the request is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from fastapi.responses import HTMLResponse

from memory_mcp.store.models import Grant

from .brand import inline_icon

CSRF_FIELD = "csrf"
CSRF_COOKIE = "memory_mcp_oauth_csrf"
# No script, no framing (a consent page inside someone else's frame is a clickjacking target).
# No form-action: the browser applies it to the redirect back to the app after the form, too.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}
_STYLE = """
body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.4rem}label{display:block;margin:.6rem 0}input[type=password]{width:100%;padding:.5rem;
font-size:1rem;box-sizing:border-box}button{font-size:1rem;padding:.5rem 1.2rem;margin:.8rem .6rem 0 0}
.error{color:#a40000}.muted{color:#555;font-size:.9rem}fieldset{border:1px solid #ccc;padding:.6rem 1rem}
"""


def _page(
    title: str, body: str, status: int = 200, cookie: str | None = None, secure: bool = False
) -> HTMLResponse:
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} - Memory-MCP</title><style>{_STYLE}</style></head>"
        f"<body><h1>{inline_icon()}{escape(title)}</h1>{body}</body></html>"
    )
    response = HTMLResponse(html, status_code=status, headers=HEADERS)
    if cookie is not None:
        response.set_cookie(
            CSRF_COOKIE, cookie, httponly=True, samesite="strict", secure=secure, path="/authorize"
        )
    return response


def _hidden(fields: Mapping[str, str | None]) -> str:
    return "".join(
        f'<input type="hidden" name="{escape(name)}" value="{escape(value)}">'
        for name, value in fields.items()
        if value is not None
    )


def _error_line(message: str | None) -> str:
    return f'<p class="error" role="alert">{escape(message)}</p>' if message else ""


def sign_in_page(
    client_name: str,
    redirect_host: str,
    fields: Mapping[str, str | None],
    csrf: str,
    secure: bool,
    error: str | None = None,
) -> HTMLResponse:
    body = (
        f"<p><strong>{escape(client_name)}</strong> ({escape(redirect_host)}) asks to use your memory.</p>"
        "<p>Sign in with one of your Memory-MCP API keys. The key stays here: the app gets a token "
        "worth at most this key, for the spaces you choose next.</p>"
        f"{_error_line(error)}"
        '<form method="post" action="/authorize">'
        f"{_hidden({**fields, CSRF_FIELD: csrf})}"
        '<label for="api_key">API key</label>'
        '<input type="password" id="api_key" name="api_key" autocomplete="off" required autofocus>'
        '<button type="submit">Continue</button></form>'
    )
    return _page(
        "Connect an app to Memory-MCP", body, status=401 if error else 200, cookie=csrf, secure=secure
    )


def consent_page(
    client_name: str,
    redirect_host: str,
    grants: Sequence[Grant],
    sign_in: str,
    csrf: str,
    error: str | None = None,
) -> HTMLResponse:
    boxes = "".join(
        f'<label><input type="checkbox" name="space" value="{escape(g.space.key)}" checked> '
        f"{escape(g.space.display_name or g.space.key)} ({escape(g.space.key)}): {escape(g.effective.value)}</label>"
        for g in grants
    )
    body = (
        f"<p><strong>{escape(client_name)}</strong> will be sent back to <strong>{escape(redirect_host)}</strong> "
        "and may use these spaces, with the access shown. Untick any it should not see.</p>"
        f"{_error_line(error)}"
        '<form method="post" action="/authorize/consent">'
        f"{_hidden({'sign_in': sign_in, CSRF_FIELD: csrf})}"
        f"<fieldset><legend>Spaces</legend>{boxes}</fieldset>"
        '<button type="submit" name="decision" value="allow">Allow</button>'
        '<button type="submit" name="decision" value="deny">Deny</button></form>'
        '<p class="muted">You can revoke this later: revoke the key, or ask an administrator to '
        "revoke the app (memory-mcp oauth clients revoke).</p>"
    )
    return _page("Allow access to your memory?", body, status=400 if error else 200)


def error_page(message: str, status: int = 400) -> HTMLResponse:
    """A request that cannot go back to the app (unknown client, wrong redirect URI): said here,
    never by a redirect to an address nobody vouched for."""
    return _page("This connection cannot continue", f'<p class="error">{escape(message)}</p>', status=status)
