"""Certificate fields read with ``cryptography`` (no private ``ssl`` API): validity and its text."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from ottermq.broker.node.tls import TLSConfigError, check_validity, openssl_time, read_validity

UTC = datetime.UTC


def certificate(path: Path, not_before: datetime.datetime, not_after: datetime.datetime) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_openssl_time_pads_the_day_with_a_space():
    assert openssl_time(datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)) == "Jan  2 03:04:05 2030 GMT"
    assert openssl_time(datetime.datetime(2031, 11, 26, 22, 0, 0, tzinfo=UTC)) == "Nov 26 22:00:00 2031 GMT"


def test_validity_is_read_from_the_pem(tmp_path):
    start = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    end = datetime.datetime(2027, 6, 30, 12, 0, tzinfo=UTC)
    validity = read_validity(certificate(tmp_path / "c.pem", start, end))
    assert (validity.not_before, validity.not_after) == (start, end)


def test_expired_and_not_yet_valid_certificates_are_refused_with_openssl_dates(tmp_path):
    path = certificate(
        tmp_path / "c.pem",
        datetime.datetime(2026, 1, 1, tzinfo=UTC),
        datetime.datetime(2026, 2, 1, tzinfo=UTC),
    )
    with pytest.raises(TLSConfigError, match="the certificate expired on Feb  1 00:00:00 2026 GMT"):
        check_validity("ssl_cert_file", path, now=datetime.datetime(2026, 3, 1, tzinfo=UTC))
    with pytest.raises(TLSConfigError, match="the certificate is not valid before Jan  1 00:00:00 2026 GMT"):
        check_validity("ssl_cert_file", path, now=datetime.datetime(2025, 12, 1, tzinfo=UTC))
    check_validity("ssl_cert_file", path, now=datetime.datetime(2026, 1, 15, tzinfo=UTC))


def test_a_file_without_a_certificate_is_not_a_pem_certificate(tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("hello")
    with pytest.raises(TLSConfigError, match="not a PEM certificate"):
        check_validity("ssl_cert_file", garbage)
