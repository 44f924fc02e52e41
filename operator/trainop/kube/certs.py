"""The progress endpoint's TLS material (issue 35): a CA trainop manages in a Secret, the
serving certificate it signs, and when either is due for renewal. Pure computation with the
`cryptography` package (already trainop's, for the MPI SSH keys in `kube.secrets`); the
clock is an argument, and nothing here talks to the API server.

Neighbours: `kube.client.KubeApi.read_secret` / `write_secret` keep the bundle in the
Secret; `handlers.tls` loads it at start-up, rotates it and reloads the server's context;
`trainop.progress.wire_pod` gives pods the CA bundle beside their token; the trainer side,
`trainop.launcher.progress`, verifies the server with it. docs/progress.md.

Keys are ECDSA P-256 (a CA certificate of about 600 bytes, small enough to travel to every
pod as an annotation the downward API projects into a file). The CA lives 5 years, the
serving certificate 90 days; each is renewed once less than a third of its life is left
(the CA 20 months before it expires). A renewed CA keeps the previous one in the bundle
(`ca.crt` plus `previous-ca.crt`) until it expires, so pods created after a rotation trust
both; a pod created before one holds only the old CA and fails to verify the new serving
certificate until its gang restarts (its reports fail, its training goes on): once every
three years and four months.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 5 * 365
SERVER_DAYS = 90
RENEW_FRACTION = 1 / 3  # renewed once less than this fraction of its life is left
ORG = "trainop"


@dataclass(frozen=True)
class Bundle:
    """What the Secret holds (PEM text): the CA and its key, the serving certificate and its
    key, and the previous CA while it has not expired (pods may still trust only it)."""

    ca_crt: str
    ca_key: str
    tls_crt: str
    tls_key: str
    previous_ca: str = ""

    def ca_bundle(self) -> str:
        """The CAs a client should trust: the current one and the previous one."""
        return self.ca_crt + self.previous_ca


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def new_ca(now: datetime, common_name: str = "trainop progress CA") -> tuple[str, str]:
    """(certificate, key) of a new self-signed CA valid from `now` for CA_DAYS."""
    key = _key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORG),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _pem(cert), _pem_key(key)


def _san(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def new_server(ca_crt: str, ca_key: str, names: Sequence[str], now: datetime) -> tuple[str, str]:
    """(certificate, key) for the endpoint, valid for `names` (DNS names or IPs), signed
    by the CA, from `now` for SERVER_DAYS (never past the CA's own end)."""
    ca = x509.load_pem_x509_certificate(ca_crt.encode())
    signer = serialization.load_pem_private_key(ca_key.encode(), password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = _key()
    end = min(now + timedelta(days=SERVER_DAYS), ca.not_valid_after_utc.replace(tzinfo=None))
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORG),
                    x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else "trainop"),
                ]
            )
        )
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(_san(names)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
            critical=False,
        )
        .sign(signer, hashes.SHA256())
    )
    return _pem(cert), _pem_key(key)


def issue(now: datetime, names: Sequence[str], old: Bundle | None, renew: str) -> Bundle:
    """A bundle with what `renew` says renewed: "ca" (a new CA, the old one kept as
    previous, and a new serving certificate), "server" (a new serving certificate)."""
    if old is None or renew == "ca":
        ca_crt, ca_key = new_ca(now)
        previous = old.ca_crt if old is not None and not _expired(old.ca_crt, now) else ""
    else:
        ca_crt, ca_key, previous = old.ca_crt, old.ca_key, old.previous_ca
        if previous and _expired(previous, now):
            previous = ""
    tls_crt, tls_key = new_server(ca_crt, ca_key, names, now)
    return Bundle(ca_crt, ca_key, tls_crt, tls_key, previous)


def _expired(pem: str, now: datetime) -> bool:
    return not_after(pem) <= now


def not_after(pem: str) -> datetime:
    return x509.load_pem_x509_certificate(pem.encode()).not_valid_after_utc.replace(tzinfo=None)


def _life_left(pem: str, now: datetime) -> float:
    cert = x509.load_pem_x509_certificate(pem.encode())
    start = cert.not_valid_before_utc.replace(tzinfo=None)
    end = cert.not_valid_after_utc.replace(tzinfo=None)
    total = (end - start).total_seconds()
    return (end - now).total_seconds() / total if total > 0 else 0.0


def names_of(pem: str) -> set[str]:
    """The DNS names and IPs a certificate is valid for."""
    cert = x509.load_pem_x509_certificate(pem.encode())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)
    }


def signed_by(cert_pem: str, ca_pem: str) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    ca = x509.load_pem_x509_certificate(ca_pem.encode())
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception):
        return False
    return True


def due(bundle: Bundle | None, names: Sequence[str], now: datetime) -> str:
    """What must be renewed now: "ca" (none yet, unreadable, or a third of its life left),
    "server" (a third of its life left, other names, not signed by the CA), or ""."""
    if bundle is None:
        return "ca"
    try:
        if _life_left(bundle.ca_crt, now) < RENEW_FRACTION:
            return "ca"
        if not bundle.tls_crt or _life_left(bundle.tls_crt, now) < RENEW_FRACTION:
            return "server"
        if not set(names) <= names_of(bundle.tls_crt) or not signed_by(
            bundle.tls_crt, bundle.ca_crt
        ):
            return "server"
    except ValueError:  # a Secret someone edited: start afresh
        return "ca"
    return ""


# The Secret's keys (the names cert-manager and kubernetes.io/tls Secrets use, plus two).
SECRET_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key", "previous-ca.crt")


def to_secret_data(bundle: Bundle) -> dict[str, str]:
    """The Secret's stringData."""
    values = (bundle.ca_crt, bundle.ca_key, bundle.tls_crt, bundle.tls_key, bundle.previous_ca)
    return dict(zip(SECRET_KEYS, values, strict=True))


def from_secret_data(data: Mapping[str, str] | None) -> Bundle | None:
    """The bundle in a Secret's (decoded) data; None when it holds none. A cert-manager
    Secret has no ca.key: it serves, and trainop never renews it."""
    if not data or not data.get("tls.crt") or not data.get("tls.key"):
        return None
    return Bundle(
        data.get("ca.crt", ""),
        data.get("ca.key", ""),
        data["tls.crt"],
        data["tls.key"],
        data.get("previous-ca.crt", ""),
    )


def service_names(service: str, namespace: str) -> list[str]:
    """The names the progress Service is reached by inside the cluster."""
    return [
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        f"{service}.{namespace}",
        service,
    ]
