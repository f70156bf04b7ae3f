"""The deployment's own certificate authority, and the certificates it issues to SeaweedFS.

SeaweedFS authenticates its servers' connections with mutual TLS: a client without a certificate of the
deployment's authority is refused at the handshake, on gRPC (master, volume server, filer, S3 gateway)
and on HTTPS (master, volume server, filer). `team up` makes the authority once, in a 0600 key beside its
certificate, and issues each certificate once for the addresses it serves; both are kept, so a
restarted program presents the same one. A certificate whose addresses changed is issued again. Across
hosts the authority's key stays in the deployment's own state directory, and each host is given only
the authority's certificate and its own certificate and key.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from pathlib import Path

from nyc_taxi.core.processes import ServiceError, write_private_text

VALID_FOR = dt.timedelta(days=3650)  # a deployment's lifetime: nothing here renews a certificate
AUTHORITY_USAGE = dict.fromkeys(
    ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement", "encipher_only", "decipher_only"),
    False,
) | {"digital_signature": True, "key_cert_sign": True, "crl_sign": True}


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key) -> str:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _certificate_pem(certificate) -> str:
    from cryptography.hazmat.primitives import serialization

    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _builder(subject, issuer, public_key):
    from cryptography import x509

    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
    )


def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issued(path: Path, authority, addresses: list[str], common_name: str) -> bool:
    """Whether the certificate at ``path`` is signed by ``authority``, names ``common_name`` and serves
    exactly ``addresses``."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.x509.oid import NameOID

    kept = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        kept.verify_directly_issued_by(authority)
    except (ValueError, TypeError, InvalidSignature):
        return False
    named = [a.value for a in kept.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    served = kept.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return named == [common_name] and sorted(map(str, served.get_values_for_type(x509.IPAddress))) == sorted(addresses)


class Authority:
    """``<directory>/ca.crt`` and its 0600 key ``ca.key``; certificates as ``<name>.crt`` / ``<name>.key``."""

    def __init__(self, directory: Path, name: str):
        self.directory, self.name = directory, name

    @property
    def certificate(self) -> Path:
        return self.directory / "ca.crt"

    def ensure(self) -> None:
        """The authority: made once, here; a directory given only its certificate cannot issue."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes

        if self.certificate.is_file():
            if not (self.directory / "ca.key").is_file():
                raise ServiceError(
                    f"{self.directory} holds the authority's certificate without its key: its certificates "
                    "are issued where the key is (the deployment's own state directory)"
                )
            return
        key, subject = _key(), _name(f"{self.name} certificate authority")
        certificate = (
            _builder(subject, subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(**AUTHORITY_USAGE), critical=True)
            .sign(key, hashes.SHA256())
        )
        write_private_text(self.directory / "ca.key", _key_pem(key))
        write_private_text(self.certificate, _certificate_pem(certificate))
        self.certificate.chmod(0o644)

    def issue(
        self, name: str, addresses: list[str], into: Path | None = None, common_name: str | None = None
    ) -> tuple[Path, Path]:
        """``name``'s certificate and key, for a server on ``addresses`` and as a client, in ``into`` (this
        directory unless given; with a copy of the authority's certificate), naming ``common_name`` (``name``
        unless given: across hosts, the host's name, which a server's allowed names check): the kept ones
        when they were issued by this authority for exactly these addresses and that name."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID

        into, common_name = into or self.directory, common_name or name
        cert_path, key_path = into / f"{name}.crt", into / f"{name}.key"
        authority_here = into / "ca.crt" if into != self.directory else self.certificate
        if authority_here.is_file() and cert_path.is_file() and key_path.is_file():
            authority = x509.load_pem_x509_certificate(authority_here.read_bytes())
            if _issued(cert_path, authority, addresses, common_name):
                if into == self.directory or not self.certificate.is_file():
                    return cert_path, key_path
                if self.certificate.read_bytes() == authority_here.read_bytes():
                    return cert_path, key_path
        self.ensure()
        authority = x509.load_pem_x509_certificate(self.certificate.read_bytes())
        authority_key = serialization.load_pem_private_key((self.directory / "ca.key").read_bytes(), None)
        key = _key()
        certificate = (
            _builder(_name(common_name), authority.subject, key.public_key())
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]),
                critical=False,
            )
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .sign(authority_key, hashes.SHA256())
        )
        write_private_text(key_path, _key_pem(key))
        write_private_text(cert_path, _certificate_pem(certificate))
        cert_path.chmod(0o644)
        if into != self.directory:
            write_private_text(into / "ca.crt", self.certificate.read_text())
            (into / "ca.crt").chmod(0o644)
        return cert_path, key_path

    def client_context(self, name: str) -> ssl.SSLContext:
        """A TLS client that trusts only this authority and presents ``name``'s certificate."""
        context = ssl.create_default_context(cafile=str(self.certificate))
        context.load_cert_chain(str(self.directory / f"{name}.crt"), str(self.directory / f"{name}.key"))
        return context
