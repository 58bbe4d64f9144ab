"""RabbitMQ's AMQP URIs as shovels take them (``amqp_uri:parse/1`` of RabbitMQ 3.10's Erlang client).

Rules:

1. The scheme is everything before the first ``:`` (none: ``{unable_to_parse_uri,no_scheme}``); only
   ``amqp`` and ``amqps``, in any case, are accepted (``{unexpected_uri_scheme,"..."}``).
2. After ``//`` the authority runs to the first ``/``, ``?`` or ``#``: ``user:password@`` (split at
   every ``:``, the first two parts count; percent-decoded), the host (``[...]`` for IPv6) and
   ``:port``. A part left empty is absent.
3. No host (``amqp://``, ``amqp:///vhost``) is the local broker ("direct"); a port without a host is
   refused (``port_requires_host``), a port outside 1-65535 too (``port_out_of_range``).
4. The path is the vhost, percent-decoded; absent, it is ``/``; a second ``/`` in it is refused
   (``invalid_vhost``), so is a ``%`` not followed by two hexadecimal digits.
5. The query is ``key=value`` pairs split at ``&`` (a pair without ``=`` is ignored; of a key given
   twice the first counts). A network URI takes ``heartbeat``, ``channel_max``, ``frame_max`` and
   ``connection_timeout`` (integers) and ``password``; naming any other field of the connection's
   parameters (``host``, ``port``, ``username``...) is refused (``parameter_unconfigurable_in_query``);
   ``auth_mechanism`` may be given several times (``plain``, ``amqplain``, ``external``). A local
   URI takes ``password`` only. ``amqps`` adds the TLS options ``cacertfile``, ``certfile``,
   ``keyfile`` (paths, percent-decoded), ``verify`` (``verify_peer``; anything else does not verify,
   RabbitMQ 3.10's default on Erlang 25), ``fail_if_no_peer_cert`` (``true``/``false``),
   ``password`` (the key's), ``server_name_indication`` (a host name, or ``disable``) and ``depth``.
   Other keys are ignored.
6. A refusal is a ``UriError`` whose ``term`` is RabbitMQ's error term, so the validation text is
   RabbitMQ's (``"<uri>" not a valid URI: <term>``). A port that is not a number makes RabbitMQ
   print a stack trace; ottermq prints ``badarg`` there.
7. ``without_credentials`` is ``amqp_uri:remove_credentials``: ``scheme://host:port/path``, what the
   status, logs and forward headers show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ottermq.amqp.erlang import Atom, Charlist

__all__ = ["AmqpUri", "UriError", "parse_uri", "without_credentials"]

# the fields of amqp_client's connection parameter records, in order (broker_add_query walks them)
NETWORK_FIELDS = (
    "username",
    "password",
    "virtual_host",
    "host",
    "port",
    "channel_max",
    "frame_max",
    "heartbeat",
    "connection_timeout",
    "ssl_options",
    "auth_mechanisms",
    "client_properties",
    "socket_options",
)
DIRECT_FIELDS = ("username", "password", "virtual_host", "node", "adapter_info", "client_properties")
INTEGER_FIELDS = frozenset({"channel_max", "frame_max", "heartbeat", "connection_timeout", "depth"})
TLS_OPTIONS = (  # (key, kind) in amqp_uri's order
    ("cacertfile", "path"),
    ("certfile", "path"),
    ("keyfile", "path"),
    ("verify", "atom"),
    ("fail_if_no_peer_cert", "boolean"),
    ("password", "identity"),
    ("server_name_indication", "sni"),
    ("depth", "integer"),
)
MECHANISMS = ("plain", "amqplain", "external")
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")


class UriError(ValueError):
    """A URI ``amqp_uri`` refuses; ``term`` is RabbitMQ's ``{Reason, Uri}`` error term."""

    def __init__(self, term: object) -> None:
        super().__init__(str(term))
        self.term = term


@dataclass(frozen=True, slots=True)
class AmqpUri:
    """A parsed URI (see the module rules).

    Attributes:
        direct: no host: the local broker.
        username, password: None when the URI names none (the local broker's own principal, or
            RabbitMQ's default ``guest``/``guest`` for a network URI).
        tls_options: the ``amqps`` options given, decoded (``verify`` as given).
    """

    text: str
    direct: bool
    vhost: str = "/"
    host: str | None = None
    port: int | None = None
    username: str | None = None
    password: str | None = None
    tls: bool = False
    heartbeat: int | None = None
    channel_max: int | None = None
    frame_max: int | None = None
    connection_timeout: int | None = None
    mechanisms: tuple[str, ...] = ()
    tls_options: dict[str, str | bool | int] = field(default_factory=dict)

    @property
    def safe(self) -> str:
        """The URI without credentials (rule 7)."""
        return without_credentials(self.text)


def _split(text: str, pattern: str, skip_left: int = 1, skip_right: int = 1) -> tuple[str, str] | None:
    """``uri_parser:split_uri``: around the first match of ``pattern`` (None: no match)."""
    found = re.search(pattern, text)
    if found is None:
        return None
    at = found.start()
    return text[: at + 1 - skip_left], text[at + skip_right :]


def _parse_parts(text: str) -> dict[str, object]:
    """``uri_parser:parse`` with amqp_uri's defaults (empty parts absent).

    Raises:
        UriError: no scheme, or a malformed authority.
    """
    scheme_rest = _split(text, ":")
    if scheme_rest is None:
        raise UriError((Atom("unable_to_parse_uri"), Atom("no_scheme")))
    scheme, rest = scheme_rest
    parts: dict[str, object] = {"scheme": scheme}
    if rest.startswith("//"):
        authority, rest = _split(rest[2:], r"/|\?|#", 1, 0) or (rest[2:], "")
        userinfo, hostport = _split(authority, "@") or ("", authority)
        parts["userinfo"] = [] if userinfo == "" else userinfo.split(":")
        if hostport.startswith("["):
            host, colon_port = _split(hostport[1:], r"\]") or (hostport[1:], "")
            parts["host"] = host
            if colon_port:
                found = _split(colon_port, ":", 0, 1)
                if found is None:
                    raise UriError(_malformed(text, (Atom("invalid_port"), Charlist(colon_port))))
                parts["port"] = _port(text, found[1])
        else:
            host, port = _split(hostport, ":") or (hostport, None)
            parts["host"] = host
            if port is not None:
                parts["port"] = _port(text, port)
    path_query, _ = _split(rest, "#") or (rest, "")
    path, query = _split(path_query, r"\?") or (path_query, "")
    parts["path"] = path
    parts["query"] = (
        [] if query == "" else [tuple(p.split("=", 1)) if "=" in p else p for p in query.split("&")]
    )
    return {k: v for k, v in parts.items() if v not in ("", [])} | {"query": parts["query"]}


def _port(text: str, port: str) -> int:
    if not _INTEGER.match(port):
        raise UriError(_malformed(text, (Atom("EXIT"), Atom("badarg"))))
    return int(port)


def _malformed(text: str, reason: object) -> tuple[object, ...]:
    return (Atom("unable_to_parse_uri"), (Atom("malformed_uri"), Charlist(text), reason))


def _unescape(text: str) -> str:
    """``amqp_uri:unescape_string``: ``%XX`` -> the octet (the result holds octets as characters).

    Raises:
        _Thrown: RabbitMQ's ``invalid_entitiy`` (sic) or ``unterminated_entity``.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        if len(text) - i < 3:
            raise _Thrown((Atom("unterminated_entity"), [Atom("%"), *map(ord, text[i + 1 :])]))
        digits = text[i + 1 : i + 3]
        if not re.fullmatch(r"[0-9a-fA-F]{2}", digits):
            raise _Thrown((Atom("invalid_entitiy"), [Atom("%"), ord(digits[0]), ord(digits[1])]))
        out.append(chr(int(digits, 16)))
        i += 3
    return "".join(out)


class _Thrown(Exception):
    """A term amqp_uri throws (caught in :func:`parse_uri`, which adds the URI)."""

    def __init__(self, term: object) -> None:
        super().__init__(str(term))
        self.term = term


def _octets_text(chars: str) -> str:
    """Characters that are octets (a decoded ``%XX`` or the URI's UTF-8 octets) as text."""
    return chars.encode("latin-1").decode("utf-8", "replace")


def parse_uri(text: str) -> AmqpUri:
    """Parse ``text`` as RabbitMQ does (see the module rules).

    Raises:
        UriError: what ``amqp_uri:parse/1`` refuses, with its error term.
    """
    chars = text.encode("utf-8").decode("latin-1")  # binary_to_list: one character per octet
    uri_term = Charlist(chars)
    try:
        parts = _parse_parts(chars)
        return _build(text, parts)
    except UriError as exc:
        raise UriError((exc.term, uri_term)) from None
    except _Thrown as exc:
        raise UriError((exc.term, uri_term)) from None


def _build(text: str, parts: dict[str, object]) -> AmqpUri:
    scheme = str(parts["scheme"]).lower()
    if scheme not in ("amqp", "amqps"):
        raise _Thrown((Atom("unexpected_uri_scheme"), Charlist(scheme)))
    host, port, path = parts.get("host"), parts.get("port"), parts.get("path")
    if port is not None and not (isinstance(port, int) and 0 < port <= 65535):
        raise _Thrown((Atom("port_out_of_range"), port))
    if path is None:
        vhost = "/"
    elif isinstance(path, str) and path.startswith("/"):
        if "/" in path[1:]:
            raise _Thrown((Atom("invalid_vhost"), Charlist(path[1:])))
        vhost = _octets_text(_unescape(path[1:]))
    else:
        raise _Thrown((Atom("case_clause"), Charlist(str(path))))
    query: list[object] = parts["query"]  # type: ignore[assignment]
    pairs = [p for p in query if isinstance(p, tuple)]
    userinfo: list[str] = parts.get("userinfo", [])  # type: ignore[assignment]
    username = _octets_text(_unescape(userinfo[0])) if userinfo else None
    password = _octets_text(_unescape(userinfo[1])) if len(userinfo) > 1 else None
    direct = host is None
    if direct and port is not None:
        raise _Thrown(Atom("port_requires_host"))
    values: dict[str, object] = {}
    tls_options: dict[str, str | bool | int] = {}
    mechanisms: tuple[str, ...] = ()
    if not direct:
        host = _octets_text(_unescape(str(host)))
        mechanisms = _mechanisms(pairs)
        if scheme == "amqps":
            tls_options = _tls_options(pairs, query)
    reason: tuple[object, ...]
    for name in DIRECT_FIELDS if direct else NETWORK_FIELDS:
        value = next((v for k, v in pairs if k == name), None)
        if value is None:
            continue
        if name in INTEGER_FIELDS:
            if not _INTEGER.match(value):
                reason = (Atom("not_an_integer"), Charlist(value))
                raise _Thrown(
                    (Atom("invalid_amqp_params_parameter"), Atom(name), Charlist(value), _q(query), reason)
                )
            values[name] = int(value)
        elif name == "password":
            password = _octets_text(value)
        else:
            reason = (Atom("parameter_unconfigurable_in_query"), Atom(name), Charlist(value))
            raise _Thrown(
                (Atom("invalid_amqp_params_parameter"), Atom(name), Charlist(value), _q(query), reason)
            )
    return AmqpUri(
        text=text,
        direct=direct,
        vhost=vhost,
        host=None if direct else str(host),
        port=port if isinstance(port, int) else None,
        username=username,
        password=password,
        tls=scheme == "amqps",
        heartbeat=_int(values.get("heartbeat")),
        channel_max=_int(values.get("channel_max")),
        frame_max=_int(values.get("frame_max")),
        connection_timeout=_int(values.get("connection_timeout")),
        mechanisms=mechanisms,
        tls_options=tls_options,
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _q(query: list[object]) -> list[object]:
    """The query as RabbitMQ prints it: ``[{"k","v"},"bare"]``."""
    return [tuple(Charlist(x) for x in p) if isinstance(p, tuple) else Charlist(str(p)) for p in query]


def _tls_options(pairs: list[tuple[str, str]], query: list[object]) -> dict[str, str | bool | int]:
    options: dict[str, str | bool | int] = {}
    reason: tuple[object, ...]
    for key, kind in TLS_OPTIONS:
        value = next((v for k, v in pairs if k == key), None)
        if value is None:
            continue
        if kind == "boolean":
            if value not in ("true", "false"):
                reason = (Atom("require_boolean"), Atom(value))
                raise _Thrown((Atom("invalid_ssl_parameter"), Atom(key), Charlist(value), _q(query), reason))
            options[key] = value == "true"
        elif kind == "integer":
            if not _INTEGER.match(value):
                reason = (Atom("not_an_integer"), Charlist(value))
                raise _Thrown((Atom("invalid_ssl_parameter"), Atom(key), Charlist(value), _q(query), reason))
            options[key] = int(value)
        elif kind == "atom":
            options[key] = value
        else:
            try:
                options[key] = _octets_text(_unescape(value))
            except _Thrown as exc:
                raise _Thrown(
                    (Atom("invalid_ssl_parameter"), Atom(key), Charlist(value), _q(query), exc.term)
                ) from None
    return options


def _mechanisms(pairs: list[tuple[str, str]]) -> tuple[str, ...]:
    """``auth_mechanism`` values (default: plain, then amqplain), as given: an unknown one fails
    when connecting, as in RabbitMQ (which takes ``module:function`` too).

    Raises:
        _Thrown: a value of no or more than two ``:``-separated names (``not_mechanism``).
    """
    given = [v for k, v in pairs if k == "auth_mechanism"]
    for value in given:
        parts = [p for p in value.split(":") if p]
        if len(parts) not in (1, 2):
            raise _Thrown((Atom("not_mechanism"), [Atom(p) for p in parts]))
    return tuple(given) if given else ("plain", "amqplain")


def without_credentials(text: str) -> str:
    """``amqp_uri:remove_credentials``: ``scheme://host:port/path`` (rule 7); what is not a URI at
    all is shown as RabbitMQ shows it, ``scheme://`` of what precedes the first ``:``."""
    chars = text.encode("utf-8").decode("latin-1")
    try:
        parts = _parse_parts(chars)
    except UriError:
        return chars.partition(":")[0] + "://"
    port = parts.get("port")
    shown = "{}://{}{}{}".format(
        parts["scheme"], parts.get("host", ""), f":{port}" if port is not None else "", parts.get("path", "")
    )
    return _octets_text(shown)
