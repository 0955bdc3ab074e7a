"""A client certificate for mutual-TLS tests: its own CA (the server trusts it with
``--http-tls-client-ca``) and a certificate for client authentication that CA signed.
(tests/kafka/certs.py makes the server side; its certificate is for servers only.)"""
from __future__ import annotations

import datetime
from pathlib import Path
from typing import NamedTuple, Union

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class ClientCerts(NamedTuple):
    __test__ = False

    ca_file: str
    cert_file: str
    key_file: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def generate_client_certs(directory: Union[str, Path]) -> ClientCerts:
    """Write ``client-ca.pem``, ``client.pem`` and ``client.key`` (P-256, PKCS#8) into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("streamkit-test-client-ca"))
          .issuer_name(_name("streamkit-test-client-ca")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("streamkit-test-client")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = ClientCerts(str(directory / "client-ca.pem"), str(directory / "client.pem"), str(directory / "client.key"))
    Path(paths.ca_file).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    Path(paths.cert_file).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    Path(paths.key_file).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    Path(paths.key_file).chmod(0o600)
    return paths
