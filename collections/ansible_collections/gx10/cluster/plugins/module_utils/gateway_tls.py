# SPDX-License-Identifier: Apache-2.0
"""The API gateway's TLS certificate and key, as the user supplies them, checked on the controller.

Runs in the validate stage (the ``validate_cluster`` action plugin), before any node changes: the
certificate file must hold PEM certificates (the server's first, then any intermediates), the
key file one unencrypted PEM private key, the key must be the certificate's, and the certificate
must be valid now. HAProxy would refuse the rest only when the gateway starts, on the node, after
the engine was already moved behind it. Uses ``cryptography`` (a dependency of ansible-core), so
it is controller-side only.
"""

from __future__ import annotations

from datetime import UTC, datetime

CERT_VAR = "gx10_gateway_tls_cert"
KEY_VAR = "gx10_gateway_tls_key"


def check_pair(cert_path: str, key_path: str, now: datetime | None = None) -> list[str]:
    """Every problem with the certificate and key files (empty: usable by HAProxy)."""
    from cryptography import x509  # noqa: PLC0415 - controller only, and only with TLS
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    errors: list[str] = []
    cert_data = _read(CERT_VAR, cert_path, errors)
    key_data = _read(KEY_VAR, key_path, errors)
    if cert_data is None or key_data is None:
        return errors
    try:
        chain = x509.load_pem_x509_certificates(cert_data)
    except ValueError as exc:
        errors.append(
            f"{CERT_VAR} {cert_path!r} holds no PEM certificate ({exc}): give the server's "
            "certificate in PEM ('-----BEGIN CERTIFICATE-----'), followed by any intermediates"
        )
        chain = []
    try:
        key = serialization.load_pem_private_key(key_data, password=None)
    except TypeError:
        errors.append(
            f"{KEY_VAR} {key_path!r} is an encrypted private key: HAProxy starts unattended and "
            "cannot ask for its passphrase; give the key unencrypted (e.g. `openssl pkey -in "
            "KEY -out KEY.plain`), readable by root only"
        )
        return errors
    except ValueError as exc:
        errors.append(
            f"{KEY_VAR} {key_path!r} holds no PEM private key ({exc}): give the certificate's "
            "private key in PEM ('-----BEGIN PRIVATE KEY-----' or '-----BEGIN RSA/EC PRIVATE "
            "KEY-----')"
        )
        return errors
    if not chain:
        return errors
    leaf = chain[0]
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, spki) != leaf.public_key().public_bytes(der, spki):
        errors.append(
            f"{KEY_VAR} {key_path!r} is not the private key of the certificate in {CERT_VAR} "
            f"{cert_path!r} (subject {leaf.subject.rfc4514_string()}): give the key the "
            "certificate was issued for, or the certificate of this key (the server's own "
            "certificate must come first in the file)"
        )
    moment = now or datetime.now(UTC)
    if moment < leaf.not_valid_before_utc:
        errors.append(
            f"{CERT_VAR} {cert_path!r} is not valid before {leaf.not_valid_before_utc:%Y-%m-%d}: "
            "clients would refuse it; give a certificate that is valid now (or check the "
            "controller's clock)"
        )
    if moment > leaf.not_valid_after_utc:
        errors.append(
            f"{CERT_VAR} {cert_path!r} expired on {leaf.not_valid_after_utc:%Y-%m-%d}: clients "
            "would refuse it; renew it and give the new certificate"
        )
    return errors


def _read(variable: str, path: str, errors: list[str]) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        errors.append(
            f"{variable} {path!r} cannot be read on the controller ({exc.strerror or exc}): "
            "give the path of a readable PEM file on the machine that runs the playbooks"
        )
        return None
