"""TLS for the AMQP listener (AMQPS, RabbitMQ's ``listeners.ssl``) and the HTTP listeners, and the
identity a client certificate gives for SASL EXTERNAL (RabbitMQ's ``rabbitmq_auth_mechanism_ssl``).

Rules:
- A server context needs a certificate and its key; TLS 1.2 is the minimum. ``verify_peer`` asks
  for a client certificate and checks it against the CA file (or the system's CAs when there is
  none); ``fail_if_no_peer_cert`` refuses a client without one. ``verify_none`` never asks.
- Start-up checks name the file at fault: missing or unreadable, not a PEM certificate, a key that
  does not match the certificate, a certificate that has expired or is not valid yet.
- ``reload`` (SIGHUP) loads the files again into the same context: new connections get the new
  certificate, open ones keep theirs. A reload that fails keeps the old ones and says why.
- EXTERNAL's user name comes from the verified peer certificate: its subject's common name
  (default), the whole distinguished name as RabbitMQ prints it (``CN=client,O=Org,C=GB``, most
  specific first), or the first subject alternative name of a type.
"""

from __future__ import annotations

import datetime
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography import x509

if TYPE_CHECKING:
    from ..config import Settings

log = logging.getLogger(__name__)

VERIFY = ("verify_none", "verify_peer")
LOGIN_FROM = ("common_name", "distinguished_name", "subject_alternative_name")
SAN_TYPES = {"dns": "DNS", "email": "email", "uri": "URI", "ip": "IP Address"}
# RabbitMQ's short names for DN attributes (rabbit_ssl:format_rdn)
RDN_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "emailAddress": "emailAddress",
    "domainComponent": "DC",
    "serialNumber": "serialNumber",
}


class TLSConfigError(Exception):
    """A TLS setting that cannot work: ``field`` (a ``Settings`` field), its ``value`` and why."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        super().__init__(f"{field}={value}: {reason}")
        self.field, self.value, self.reason = field, value, reason


@dataclass(frozen=True)
class TLSFiles:
    """Where one listener's certificate, key and CA bundle are, and how it verifies peers."""

    cert_file: Path | None
    key_file: Path | None
    ca_file: Path | None
    verify: str = "verify_none"
    fail_if_no_peer_cert: bool = False
    prefix: str = "ssl"  # the settings' prefix, for error messages (ssl_cert_file, web_ssl_cert_file)


def _readable(field: str, path: Path | None) -> Path:
    if path is None:
        raise TLSConfigError(field, "", "not set (TLS needs a certificate and its key)")
    try:
        with path.open("rb") as f:
            f.read(1)
    except FileNotFoundError:
        raise TLSConfigError(field, path, "no such file") from None
    except IsADirectoryError:
        raise TLSConfigError(field, path, "is a directory, not a file") from None
    except OSError as exc:
        raise TLSConfigError(field, path, f"cannot be read ({exc.strerror or exc})") from None
    return path


@dataclass(frozen=True)
class Validity:
    """A certificate's validity period (UTC)."""

    not_before: datetime.datetime
    not_after: datetime.datetime


def openssl_time(moment: datetime.datetime) -> str:
    """``Jan  1 00:00:00 2030 GMT``: how OpenSSL (and ``getpeercert``) print a certificate time."""
    return f"{moment:%b} {moment.day:2d} {moment:%H:%M:%S %Y} GMT"


def read_validity(path: Path) -> Validity:
    """The validity period of the first certificate in the PEM file ``path`` (``cryptography``).

    Raises:
        OSError: the file cannot be read.
        ValueError: it holds no PEM certificate.
    """
    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    return Validity(certificate.not_valid_before_utc, certificate.not_valid_after_utc)


def check_validity(field: str, path: Path, now: datetime.datetime | None = None) -> None:
    """The certificate in ``path`` must be valid now.

    Raises:
        TLSConfigError: not a PEM certificate, expired, or not valid yet.
    """
    try:
        validity = read_validity(path)
    except (OSError, ValueError) as exc:
        raise TLSConfigError(field, path, f"not a PEM certificate ({exc})") from None
    now = now or datetime.datetime.now(datetime.UTC)
    if now > validity.not_after:
        raise TLSConfigError(field, path, f"the certificate expired on {openssl_time(validity.not_after)}")
    if now < validity.not_before:
        raise TLSConfigError(
            field, path, f"the certificate is not valid before {openssl_time(validity.not_before)}"
        )


def _load(context: ssl.SSLContext, files: TLSFiles) -> None:
    p = files.prefix
    cert = _readable(f"{p}_cert_file", files.cert_file)
    key = _readable(f"{p}_key_file", files.key_file)
    check_validity(f"{p}_cert_file", cert)
    try:
        context.load_cert_chain(str(cert), str(key))
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
            raise TLSConfigError(f"{p}_key_file", key, f"does not match the certificate in {cert}") from None
        reason = f"cannot load the certificate and key ({exc.reason or exc})"
        raise TLSConfigError(f"{p}_key_file", key, reason) from None
    if files.ca_file is not None:
        ca = _readable(f"{p}_ca_file", files.ca_file)
        try:
            context.load_verify_locations(cafile=str(ca))
        except ssl.SSLError as exc:
            raise TLSConfigError(f"{p}_ca_file", ca, f"not a PEM CA bundle ({exc.reason or exc})") from None


def server_context(files: TLSFiles) -> ssl.SSLContext:
    """A server-side context for ``files``.

    Raises:
        TLSConfigError: a file is missing, unreadable, not PEM, mismatched or out of its validity.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(context, files)
    if files.verify == "verify_peer":
        if files.ca_file is None:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        context.verify_mode = ssl.CERT_REQUIRED if files.fail_if_no_peer_cert else ssl.CERT_OPTIONAL
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


def reload(context: ssl.SSLContext, files: TLSFiles) -> bool:
    """Load ``files`` again into ``context`` (SIGHUP); False (logged) if they are not usable now."""
    try:
        _load(context, files)
    except TLSConfigError as exc:
        log.error("TLS files not reloaded, the previous ones stay in use: %s", exc)
        return False
    log.info("TLS certificate reloaded from %s", files.cert_file)
    return True


def distinguished_name(cert: dict[str, Any]) -> str:
    """The subject as RabbitMQ prints it for ``ssl_cert_login_from = distinguished_name``: RDNs
    most specific first (``CN=client,O=Org,C=GB``), RFC 4514 style."""
    parts = []
    for rdn in reversed(cert.get("subject", ())):
        for name, value in rdn:
            text = str(value)
            for char in '\\,+"<>;=':
                text = text.replace(char, "\\" + char)
            parts.append(f"{RDN_NAMES.get(name, name)}={text}")
    return ",".join(parts)


def peer_identity(
    cert: dict[str, Any] | None, login_from: str = "common_name", san_type: str = "dns"
) -> str | None:
    """The EXTERNAL user name from a peer certificate (``ssl.SSLObject.getpeercert()``), or None."""
    if not cert:
        return None
    if login_from == "distinguished_name":
        return distinguished_name(cert) or None
    if login_from == "subject_alternative_name":
        wanted = SAN_TYPES.get(san_type, san_type)
        for kind, value in cert.get("subjectAltName", ()):
            if kind == wanted:
                return str(value)
        return None
    for rdn in cert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return None


def amqps_files(settings: Settings) -> TLSFiles:
    """The AMQPS listener's files (``OTTERMQ_SSL_*``)."""
    return TLSFiles(
        settings.ssl_cert_file,
        settings.ssl_key_file,
        settings.ssl_ca_file,
        settings.ssl_verify,
        settings.ssl_fail_if_no_peer_cert,
        "ssl",
    )


def web_files(settings: Settings) -> TLSFiles:
    """The HTTPS listeners' files: ``OTTERMQ_WEB_SSL_*``, each defaulting to its ``OTTERMQ_SSL_*``."""
    return TLSFiles(
        settings.web_ssl_cert_file or settings.ssl_cert_file,
        settings.web_ssl_key_file or settings.ssl_key_file,
        settings.web_ssl_ca_file or settings.ssl_ca_file,
        "verify_none",
        False,
        "web_ssl",
    )


def amqps_context(settings: Settings) -> ssl.SSLContext:
    """Raises: TLSConfigError (see :func:`server_context`)."""
    return server_context(amqps_files(settings))


def web_context(settings: Settings) -> ssl.SSLContext | None:
    """The HTTPS context shared by the management and metrics listeners, or None when neither uses TLS.

    Raises: TLSConfigError (see :func:`server_context`).
    """
    if not (settings.web_ssl or settings.prometheus_ssl):
        return None
    return server_context(web_files(settings))
