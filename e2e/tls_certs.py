"""A throwaway CA and certificates for the TLS tests (the ``cryptography`` package, dev extra)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


@dataclass
class Issued:
    cert: Path
    key: Path
    serial: int


class CA:
    """A CA in ``folder`` that issues server and client certificates."""

    def __init__(self, folder: Path, name: str = "ottermq test CA") -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.key = _key()
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        slug = name.replace(" ", "-")
        self.cert_file = _write_cert(self.cert, folder / f"{slug}.pem")

    def issue(
        self,
        common_name: str,
        *,
        server: bool,
        days: int = 30,
        expired: bool = False,
        sans: list[x509.GeneralName] | None = None,
        org: str | None = None,
    ) -> Issued:
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        start, end = (
            (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
            if expired
            else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=days))
        )
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if org:
            attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        names = (
            sans
            if sans is not None
            else ([x509.DNSName("localhost"), x509.IPAddress(_loopback())] if server else [])
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        slug = f"{common_name}-{cert.serial_number % 100000}"
        cert_file = _write_cert(cert, self.folder / f"{slug}.crt")
        return Issued(cert_file, _write_key(key, self.folder / f"{slug}.key"), cert.serial_number)


def _loopback() -> object:
    import ipaddress

    return ipaddress.ip_address("127.0.0.1")
