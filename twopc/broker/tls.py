"""TLS material for the embedded broker, made at start time: a CA, a broker certificate it signed, and
a client certificate for mutual TLS.

Made with the `cryptography` package (a test extra, imported only here). The broker gets a PKCS#12
keystore (Kafka reads it natively; a file-based PEM keystore would need an encrypted PKCS#8 key) and
the CA as a PEM truststore; clients get PEM files, the names librdkafka and twopc's control client
take (`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`).
The certificates name 127.0.0.1 and localhost, the addresses the brokers advertise.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twopc.broker.errors import BrokerSetupError

_VALID_DAYS = 2


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA: its certificate (PEM file) and, to sign with, its key (kept in memory only)."""

    cert_path: Path
    name: str
    _key: Any
    _cert: Any

    def sign(self, common_name: str, key: Any, *, server: bool) -> Any:
        x509, hashes, _ = _crypto()
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        oid = x509.oid.ExtendedKeyUsageOID
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([oid.SERVER_AUTH, oid.CLIENT_AUTH]), critical=False)
        return builder.sign(self._key, hashes.SHA256())


@dataclass(frozen=True)
class TlsMaterial:
    """What a TLS-enabled LocalKafka made in `directory`.

    Client settings: `client_config()` (server authentication only) or `client_config(mutual=True)`
    (also the client certificate, for the SSL listener, which requires one)."""

    directory: Path
    ca: CertificateAuthority
    broker_keystore: Path          # PKCS#12: the brokers' key and certificate
    keystore_password: str
    client_cert: Path              # PEM, signed by the CA
    client_key: Path               # PEM, PKCS#8, encrypted with client_key_password
    client_key_password: str

    @property
    def ca_location(self) -> Path:
        return self.ca.cert_path

    def client_config(self, *, mutual: bool = False) -> dict[str, str]:
        config = {"ssl.ca.location": str(self.ca_location)}
        if mutual:
            config.update({"ssl.certificate.location": str(self.client_cert),
                           "ssl.key.location": str(self.client_key),
                           "ssl.key.password": self.client_key_password})
        return config

    def broker_properties(self) -> dict[str, str]:
        """The ssl.* settings every TLS listener of a broker uses."""
        return {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.broker_keystore),
            "ssl.keystore.password": self.keystore_password,
            "ssl.key.password": self.keystore_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_location),
        }


def make_ca(directory: Path, name: str = "twopc test CA") -> CertificateAuthority:
    """A self-signed CA; its certificate goes to `directory`/ca.pem."""
    x509, hashes, serialization = _crypto()
    key = _new_key()
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = _name(name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return CertificateAuthority(path, name, key, cert)


def make_tls_material(directory: Path) -> TlsMaterial:
    """A fresh CA, the brokers' keystore and a client certificate, in `directory`."""
    _, _, serialization = _crypto()
    from cryptography.hazmat.primitives.serialization import pkcs12

    ca = make_ca(directory)
    broker_key = _new_key()
    broker_cert = ca.sign("twopc-broker", broker_key, server=True)
    password = secrets.token_hex(12)
    keystore = directory / "broker.p12"
    keystore.write_bytes(pkcs12.serialize_key_and_certificates(
        b"kafka", broker_key, broker_cert, [ca._cert],
        serialization.BestAvailableEncryption(password.encode())))
    client_key = _new_key()
    client_cert = ca.sign("twopc-client", client_key, server=False)
    client_password = secrets.token_hex(12)
    cert_path, key_path = directory / "client.pem", directory / "client.key"
    cert_path.write_bytes(client_cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(client_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(client_password.encode())))
    for secret in (keystore, key_path):
        secret.chmod(0o600)
    return TlsMaterial(directory, ca, keystore, password, cert_path, key_path, client_password)


def _new_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> Any:
    x509, _, _ = _crypto()
    return x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, common_name)])


def _crypto() -> tuple[Any, Any, Any]:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
    except ImportError as exc:  # a test extra, not a dependency of twopc itself
        raise BrokerSetupError(
            "a TLS broker needs the `cryptography` package to make its certificates: "
            "pip install 'twopc[test]' (or pip install cryptography)") from exc
    return x509, hashes, serialization
