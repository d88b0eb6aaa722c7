# SPDX-License-Identifier: Apache-2.0
"""The gateway's TLS files as the user supplies them (module_utils/gateway_tls.py): real PEM
certificates and keys made here with ``cryptography``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.gx10.cluster.plugins.module_utils.gateway_tls import check_pair

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(key: ec.EllipticCurvePrivateKey, start: datetime, days: int) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gx10-a.example.internal")])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=days))
        .sign(key, hashes.SHA256())
    )


def _write(
    tmp_path: Path,
    cert: x509.Certificate,
    key: ec.EllipticCurvePrivateKey,
    password: bytes | None = None,
) -> tuple[str, str]:
    cert_path, key_path = tmp_path / "gw.crt", tmp_path / "gw.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return str(cert_path), str(key_path)


def test_a_matching_valid_pair_passes(tmp_path: Path) -> None:
    key = _key()
    assert check_pair(*_write(tmp_path, _cert(key, NOW - timedelta(days=1), 90), key), NOW) == []


def test_a_key_of_another_certificate_is_refused(tmp_path: Path) -> None:
    cert, key = _write(tmp_path, _cert(_key(), NOW - timedelta(days=1), 90), _key())
    errors = check_pair(cert, key, NOW)
    assert len(errors) == 1
    assert "is not the private key of the certificate" in errors[0]
    assert "gx10_gateway_tls_key" in errors[0]
    assert "CN=gx10-a.example.internal" in errors[0]


def test_an_expired_or_future_certificate_is_refused(tmp_path: Path) -> None:
    key = _key()
    expired = check_pair(*_write(tmp_path, _cert(key, NOW - timedelta(days=100), 90), key), NOW)
    assert len(expired) == 1
    assert "expired on 2026-05-22" in expired[0]
    future = check_pair(*_write(tmp_path, _cert(key, NOW + timedelta(days=2), 90), key), NOW)
    assert len(future) == 1
    assert "not valid before 2026-06-03" in future[0]


def test_an_encrypted_key_is_refused_with_how_to_decrypt_it(tmp_path: Path) -> None:
    key = _key()
    cert, key_path = _write(tmp_path, _cert(key, NOW, 90), key, password=b"pass")
    errors = check_pair(cert, key_path, NOW)
    assert len(errors) == 1
    assert "encrypted private key" in errors[0]
    assert "openssl pkey" in errors[0]


def test_files_that_are_no_pem_are_refused(tmp_path: Path) -> None:
    key = _key()
    cert, key_path = _write(tmp_path, _cert(key, NOW, 90), key)
    Path(cert).write_text("not a certificate\n")
    Path(key_path).write_text("not a key\n")
    errors = check_pair(cert, key_path, NOW)
    assert len(errors) == 2
    assert "gx10_gateway_tls_cert" in errors[0]
    assert "holds no PEM certificate" in errors[0]
    assert "gx10_gateway_tls_key" in errors[1]
    assert "holds no PEM private key" in errors[1]


def test_the_certificate_and_key_in_one_file_are_accepted(tmp_path: Path) -> None:
    key = _key()
    cert, key_path = _write(tmp_path, _cert(key, NOW, 90), key)
    both = tmp_path / "both.pem"
    both.write_bytes(Path(cert).read_bytes() + Path(key_path).read_bytes())
    assert check_pair(str(both), str(both), NOW) == []


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    errors = check_pair(str(tmp_path / "none.crt"), str(tmp_path / "none.key"), NOW)
    assert len(errors) == 2
    assert "cannot be read on the controller" in errors[0]
