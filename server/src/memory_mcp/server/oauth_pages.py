"""The pages a person sees while connecting an app: sign in with an API key, consent, and errors.

Plain server-rendered HTML with one small stylesheet and no script, so it works in any browser
and any in-app web view. Every value from the request is escaped.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from html import escape
from typing import Literal

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
# Light or dark as the person's system is (`color-scheme` also darkens the form controls).
_STYLE = """
:root{color-scheme:light dark;--fg:#1b1b1b;--bg:#fff;--muted:#555;--error:#a40000;--line:#ccc;
--code:#f1f1f1;--accent:#0b57d0;--on-accent:#fff}
@media (prefers-color-scheme:dark){:root{--fg:#e6e6e6;--bg:#17181c;--muted:#a8abb3;--error:#ff8f85;
--line:#4a4c52;--code:#2a2c31;--accent:#8ab4f8;--on-accent:#0b1a33}}
body{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:var(--fg);
background:var(--bg);line-height:1.45}
h1{font-size:1.4rem}h2{font-size:1.05rem;margin-top:1.6rem}label{display:block;margin:.6rem 0}
input[type=password]{width:100%;padding:.5rem;font-size:1rem;box-sizing:border-box}
button{font-size:1rem;padding:.5rem 1.2rem;margin:.8rem .6rem 0 0}
button[value=allow],form>button:only-of-type{background:var(--accent);color:var(--on-accent);
border:1px solid var(--accent);border-radius:4px}
.error{color:var(--error)}.muted{color:var(--muted);font-size:.9rem}
fieldset{border:1px solid var(--line);padding:.6rem 1rem}ul{padding-left:1.2rem}li{margin:.4rem 0}
code{background:var(--code);padding:0 .25rem;border-radius:3px;font-size:.85rem;overflow-wrap:anywhere}
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


# Where a person finds a key to sign in with: the three ways keys are handed out (docs/clients.md).
_WHERE_KEYS_COME_FROM = (
    "<h2>Where to find an API key</h2><ul>"
    "<li><strong>On your own computer</strong> (<code>memory-mcp serve</code>): the key its first "
    "start printed, also kept in the file <code>bootstrap-key</code> of its data folder "
    "(<code>~/.local/share/memory-mcp/bootstrap-key</code> unless it was started with "
    "<code>--data-dir</code>).</li>"
    "<li><strong>A key of your own</strong>: whoever runs the server makes one with "
    "<code>memory-mcp key create NAME --user YOU --grant SPACE=ReadWrite</code>; it is shown once.</li>"
    "<li><strong>In your organisation's cluster</strong>: the platform team keeps your key in a "
    "Kubernetes Secret (<code>kubectl get secret NAME -n NAMESPACE -o jsonpath='{.data.api-key}' | base64 -d</code>), "
    "or hands it to you.</li></ul>"
    '<p class="muted">Keys begin with <code>mmk_</code>.</p>'
)


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
        f"{_WHERE_KEYS_COME_FROM}"
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
    chosen: Collection[str] | None = None,
    error: str | None = None,
) -> HTMLResponse:
    """The key's spaces as boxes: all ticked at first; shown again after a refusal, only ``chosen``."""
    boxes = "".join(
        f'<label><input type="checkbox" name="space" value="{escape(g.space.key)}"'
        f"{' checked' if chosen is None or g.space.key in chosen else ''}> "
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


NextStep = Literal[
    "unknown",
    "revoked",
    "malformed",
    "unreachable",
    "private",
    "document",
    "redirect_missing",
    "redirect_unknown",
    "bad_request",
    "stale",
    "expired",
    "rate_limited",
    "no_grants",
    "key_gone",
]
_AGAIN = "Start again from the app: its <em>Connect</em> (or <em>Sign in</em>) button opens a fresh page."
# What a person can do about each refusal (the first six are oauth_cimd's kinds of refusal).
NEXT_STEPS: dict[NextStep, str] = {
    "unknown": (
        "This server has no app registered under that client id: the app may have registered with "
        "another Memory-MCP server, or this server's database was replaced since. Remove the "
        "connector in the app and add it again with this server's <code>/mcp</code> address, so "
        "that it registers afresh. If that does not help, give the client id in the address bar to "
        "whoever runs the server (<code>memory-mcp oauth clients list</code> shows the apps it knows)."
    ),
    "revoked": (
        "Whoever runs this server revoked the app (<code>memory-mcp oauth clients revoke</code>). "
        "Ask them why, and whether it may connect again."
    ),
    "malformed": (
        "The address that opened this page is not one an app would build. " + _AGAIN + " If the "
        "app keeps sending you here, report it to the app's maker."
    ),
    "unreachable": (
        "The app names itself by the web address of a metadata document, and this server could not "
        "fetch it. This is often brief: wait a minute and start again from the app. If it lasts, "
        "whoever runs the server should check that the server can resolve and reach that address "
        "(DNS, an outbound proxy, a firewall); otherwise report it to the app's maker."
    ),
    "private": (
        "The app's metadata address leads to a private or local network, which this server never "
        "fetches from (a guard against requests into its own network). Use the app's public "
        "address; someone testing an app on their own machine can let the server fetch from "
        "loopback with <code>MEMORY_MCP_OAUTH_CIMD_ALLOW_LOOPBACK=true</code>."
    ),
    "document": (
        "The app's metadata document does not describe a client this server can accept (the "
        "message says what is wrong). Only the app's maker can correct it: report the message to "
        "them."
    ),
    "redirect_missing": (
        "The app did not say where to send you back, and it has registered several addresses. "
        + _AGAIN
        + " If it happens again, report it to the app's maker."
    ),
    "redirect_unknown": (
        "The app asked to send you back to an address it did not register, or one this server does "
        "not allow (<code>MEMORY_MCP_OAUTH_REDIRECT_HOSTS</code>). You are not sent there. Remove the "
        "connector in the app and add it again, so it registers its current address; if the "
        "address is right, whoever runs the server can add its host to the allowed ones."
    ),
    "bad_request": _AGAIN + " If the app keeps sending you here, report it to the app's maker.",
    "stale": (
        _AGAIN + " Finish in the same browser tab; a browser that blocks this site's cookies must "
        "allow them, because the page checks that the form came from itself."
    ),
    "expired": _AGAIN + " Nothing was granted; you will sign in with your key again.",
    "rate_limited": (
        "Wait that long, then go back and sign in again with a valid key (see where keys come "
        "from on the sign-in page). Other keys keep working meanwhile."
    ),
    "no_grants": (
        "Sign in with another key, or ask whoever manages your keys to grant this one a space "
        "(<code>memory-mcp key grant KEY SPACE=ReadWrite</code>; in a cluster, in the key's manifest)."
    ),
    "key_gone": (
        "The key was revoked or expired, its user was deactivated, or its grants changed while "
        "this page was open. " + _AGAIN + " Then sign in with a key that works."
    ),
}


def error_page(message: str, next_step: NextStep, status: int = 400) -> HTMLResponse:
    """A request that cannot go back to the app (unknown client, wrong redirect URI): said here,
    never by a redirect to an address nobody vouched for, with what the person can do about it."""
    body = (
        f'<p class="error" role="alert">{escape(message)}</p>'
        f"<h2>What to do next</h2><p>{NEXT_STEPS[next_step]}</p>"
    )
    return _page("This connection cannot continue", body, status=status)
