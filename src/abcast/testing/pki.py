"""A throwaway PKI for TLS tests and benchmarks: a CA and one node certificate it signed
(SAN 127.0.0.1 and localhost), made with `cryptography`; `make_pki(dir)` writes one,
`shared_pki()` makes one per process in a temporary directory removed at exit.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca: str
    cert: str
    key: str


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))


def make_pki(directory: Path, *, ca_name: str = "abcast test CA") -> Pki:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder().subject_name(_name(ca_name)).issuer_name(_name(ca_name))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(_name("abcast node")).issuer_name(_name(ca_name))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(str(directory / "ca.pem"), str(directory / "node.pem"), str(directory / "node.key"))
    Path(pki.ca).write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    Path(pki.cert).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(Path(pki.key), key)
    return pki


_tmp = tempfile.TemporaryDirectory(prefix="abcast-tls-")


@functools.cache
def shared_pki() -> Pki:
    """This process's throwaway PKI (removed when the process exits)."""
    return make_pki(Path(_tmp.name) / "pki")
