"""Throwaway TLS material for broker tests: a CA and a server certificate it signs.

The server certificate covers ``127.0.0.1`` (as an IP SAN) and ``localhost``.
Files are PEM; the private key is unencrypted, PKCS#8 (``BEGIN PRIVATE KEY``)
by default, or PKCS#1 RSA (``BEGIN RSA PRIVATE KEY``) or SEC1 EC (``BEGIN EC
PRIVATE KEY``).  Tansu 0.6.0 cannot load any of them: its ``--cert`` and
``--key`` options are mutually exclusive (see ``broker.py``), so TLS is served
by a Python ``ssl`` proxy in front of it, which accepts all three.
"""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import NamedTuple, Union

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = Union[rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey]

#: Accepted values for ``generate_test_certs(key_format=...)``.
KEY_FORMATS = ("pkcs8", "rsa", "ec")


class TestCerts(NamedTuple):
    """Paths of the generated PEM files."""

    __test__ = False  # not a pytest test class

    ca_file: str
    cert_file: str
    key_file: str


def _new_key(kind: str) -> PrivateKey:
    if kind == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "streamkit tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: PrivateKey, key_format: str) -> bytes:
    fmt = (serialization.PrivateFormat.PKCS8 if key_format == "pkcs8"
           else serialization.PrivateFormat.TraditionalOpenSSL)
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())


def generate_test_certs(directory: Union[str, Path], *, key_format: str = "pkcs8",
                        common_name: str = "streamkit-test-ca") -> TestCerts:
    """Write ``ca.pem``, ``server.pem`` and ``server.key`` into ``directory``.

    ``key_format`` is ``"pkcs8"`` (RSA key, PKCS#8), ``"rsa"`` (RSA key, PKCS#1)
    or ``"ec"`` (P-256 key, SEC1).  Certificates are valid from one hour ago for
    one day.
    """
    if key_format not in KEY_FORMATS:
        raise ValueError(f"key_format must be one of {KEY_FORMATS}, not {key_format!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)

    ca_key = _new_key("rsa")
    ca_name = _name(common_name)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    server_key = _new_key("ec" if key_format == "ec" else "rsa")
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost")).issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    ca_file, cert_file, key_file = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(_key_pem(server_key, key_format))
    key_file.chmod(0o600)
    return TestCerts(str(ca_file), str(cert_file), str(key_file))
