"""The management HTTP API as the command-line programs reach it: which API (``--url``, else the
broker's own settings, ``config.admin_defaults``), as whom, and the line on stderr naming the broker
that answers. Stdlib only (``urllib``), so it speaks to ottermq's API and RabbitMQ's alike.

Rules (another broker on the same ports, e.g. a RabbitMQ on 15672 while OtterMQ's ports were moved on
one shell's command line only, must never be changed by mistake):

- Every command asks ``/api/overview`` who answers first. When it is not OtterMQ, a command that only
  reads prints a ``WARNING`` line naming the broker and where the URL came from; a command that changes
  something (``CHANGES``) refuses with exit status 1 and changes nothing.
- ``--any-broker`` is how one asks for another broker: then the commands work on any RabbitMQ
  management API without a warning (they speak only RabbitMQ's API).
- A broker that cannot be identified (``/api/overview`` answers an error status) is left to the
  command's own request, which fails the same way.
"""

from __future__ import annotations

import argparse
import base64
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any


class AdminError(Exception):
    """The API answered with an error status (``status``), or could not be reached (``status`` None)."""

    def __init__(self, text: str, status: int | None = None) -> None:
        super().__init__(text)
        self.status = status


class AdminClient:
    """Requests to one management API with HTTP Basic auth.

    Args:
        url: the management listener's base URL, without the API path (``http://localhost:15672``).
        user, password: a user with a management tag.
        api_path: where the API is under ``url`` (RabbitMQ: ``/api``; ottermq: ``OTTERMQ_WEB_API_PATH``).
        cafile: a CA bundle to verify an https ``url`` with (None: the system's).
    """

    def __init__(
        self, url: str, user: str, password: str, api_path: str = "/api", cafile: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.api_path = api_path.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.auth = f"Basic {token}"
        self.context = ssl.create_default_context(cafile=cafile) if cafile else None

    def request(
        self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Any:
        """The decoded JSON answer of ``method /api{path}`` (None when the answer is empty).

        Raises:
            AdminError: an error status (with RabbitMQ's ``error``/``reason``), or no connection.
        """
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{self.api_path}{path}", data=data, method=method)
        req.add_header("Authorization", self.auth)
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.context) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise AdminError(f"{err.code} {_reason(err.read()) or err.reason}", err.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise AdminError(f"cannot reach {self.url}: {getattr(exc, 'reason', exc)}") from None
        return json.loads(raw) if raw.strip() else None


def _reason(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()
    if isinstance(body, dict):
        return ": ".join(str(body[k]) for k in ("error", "reason") if body.get(k))
    return str(body)


def quote(name: str) -> str:
    """One path segment (``/`` -> ``%2F``, as the API wants vhost names)."""
    return urllib.parse.quote(name, safe="")


def add_target_options(parser: argparse.ArgumentParser, defaults: Mapping[str, str]) -> None:
    """``--url`` and what :func:`add_auth_options` adds: which management API, as whom."""
    where = defaults["url"] + ("" if defaults["api_path"] == "/api" else f" (API at {defaults['api_path']})")
    parser.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help="management API base URL, without /api (default: OTTERMQ_ADMIN_URL, else the broker that"
        f" OTTERMQ_WEB_* and ./.env describe: {where})",
    )
    add_auth_options(parser, defaults)


def add_auth_options(parser: argparse.ArgumentParser, defaults: Mapping[str, str]) -> None:
    """``--user``, ``--password``, ``--cacert`` and ``--quiet``; the defaults go into ``admin_target``."""
    parser.add_argument(
        "--user", default=defaults["user"], help="API user (OTTERMQ_ADMIN_USER, else OTTERMQ_USERNAME)"
    )
    parser.add_argument(
        "--password",
        default=argparse.SUPPRESS,
        help="its password (default: OTTERMQ_ADMIN_PASSWORD, else OTTERMQ_PASSWORD)",
    )
    parser.add_argument(
        "--cacert",
        default=argparse.SUPPRESS,
        help="CA bundle (PEM) to verify an https URL with (default: the system's; for the broker's own"
        " https URL, OTTERMQ_WEB_SSL_CA_FILE or OTTERMQ_SSL_CA_FILE)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no line on stderr naming the broker that answers"
    )
    parser.add_argument(
        "--any-broker",
        action="store_true",
        help="work on a broker that is not OtterMQ (e.g. a RabbitMQ): without it, a command that"
        " changes something refuses such a broker, and one that reads warns",
    )
    parser.set_defaults(admin_target=dict(defaults))


def client_of(args: argparse.Namespace) -> AdminClient:
    """The client for ``--url`` (its API at ``/api``, as RabbitMQ's), else for ``admin_target``.

    Raises:
        AdminError: the CA bundle cannot be read.
    """
    target = args.admin_target
    url, cafile = getattr(args, "url", None), getattr(args, "cacert", None)
    api_path = "/api"
    if not url:
        url, api_path, cafile = target["url"], target["api_path"], cafile or target["cafile"] or None
    password = getattr(args, "password", None)
    try:
        return AdminClient(
            url, args.user, target["password"] if password is None else password, api_path, cafile
        )
    except (OSError, ssl.SSLError) as exc:
        raise AdminError(f"cannot read the CA bundle {cafile}: {exc}") from None


OTTERMQ = "OtterMQ"  # ``/api/overview``'s ``product_name`` of ours


def origin_of(args: argparse.Namespace) -> str:
    """Where the target URL came from, for people: ``--url``, ``OTTERMQ_ADMIN_URL`` or the setting
    that gives the broker's own port (``config.admin_defaults``)."""
    return "--url" if getattr(args, "url", None) else str(args.admin_target.get("origin") or "")


def announce(
    client: AdminClient,
    doing: str,
    scope: str = "",
    *,
    quiet: bool = False,
    changes: bool = False,
    any_broker: bool = False,
    origin: str = "",
) -> None:
    """Say on stderr which broker answers: ``{doing} RabbitMQ 3.10.8 at http://host:15672/{scope}``,
    from ``/api/overview``'s ``product_name`` and ``product_version`` (RabbitMQ before 3.8:
    ``rabbitmq_version``; ``quiet``: not said), then apply the module rules to a broker that is not
    OtterMQ. An error status is left to the command's own request to report.

    Raises:
        AdminError: the API cannot be reached; or a command that ``changes`` something reached a broker
            that is not OtterMQ without ``any_broker``.
    """
    try:
        overview = client.request("GET", "/overview")
    except AdminError as exc:
        if exc.status is None:
            raise
        return
    overview = overview if isinstance(overview, Mapping) else {}
    product = str(overview.get("product_name") or "RabbitMQ")
    version = overview.get("product_version") or overview.get("rabbitmq_version") or "(version unknown)"
    where = f"{product} {version} at {client.url}/"
    other = product != OTTERMQ and not any_broker
    came = f"the URL comes from {origin}; " if origin else ""
    hint = (
        f"{came}if OtterMQ listens elsewhere, set its ports in ./.env or give --url"
        " (docs/getting-started.md#beside-a-rabbitmq); --any-broker works on this broker"
    )
    if other and changes:  # refused before it says what it would do: nothing was done
        raise AdminError(f"refusing to change {where}: it is not OtterMQ ({hint} anyway)")
    if not quiet:
        print(f"{doing} {where}" + (f" {scope}" if scope else ""), file=sys.stderr)
    if other:
        print(f"WARNING: {where} is not OtterMQ ({hint} without this warning)", file=sys.stderr)
