"""The web UI: static files served by the management listener, no build step.

Rules:
- ``GET /`` is the single page (``ui/index.html``) with the API path filled in; ``GET /ui/<file>``
  serves the page's scripts and style sheet. Neither needs a login: the page logs in itself and
  sends Basic auth with every API request, exactly as any API client does.
- The files are plain JavaScript and CSS written for this project (no framework, no third-party
  code), so nothing is fetched from the internet and nothing is built at install time.
- Served only with ``OTTERMQ_ENABLE_UI`` (default true) and the management API enabled.
"""

from __future__ import annotations

import html
from pathlib import Path

from aiohttp import web

UI_DIR = Path(__file__).with_name("ui")
TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}
# No inline scripts or styles, nothing from elsewhere: a name that slips past escaping cannot run
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
UI_PATHS = ("/", "/ui/")


def is_ui_path(path: str) -> bool:
    """Whether ``path`` is one of the UI's (served without a login)."""
    return path == "/" or path.startswith("/ui/")


def add_ui(app: web.Application, api_prefix: str) -> None:
    """Serve the UI on ``app``, talking to the API under ``api_prefix``."""
    page = (UI_DIR / "index.html").read_text(encoding="utf-8")
    page = page.replace("{{API_PREFIX}}", html.escape(api_prefix or "/api", quote=True))

    async def index(_request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html", headers=HEADERS)

    async def asset(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = UI_DIR / name
        if "/" in name or name.startswith(".") or path.suffix not in TYPES or not path.is_file():
            raise web.HTTPNotFound()
        return web.Response(body=path.read_bytes(), content_type=TYPES[path.suffix], headers=HEADERS)

    app.router.add_get("/", index)
    app.router.add_get("/ui/{name}", asset)
