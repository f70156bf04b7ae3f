"""The deployment's certificate authority (deployment/certificates.py), on a real TLS connection over
127.0.0.1: a server of its certificate lets in a client of its certificate, and refuses a client with
none or with another authority's; a certificate is kept while its addresses stand and issued again when
they change; the keys are 0600."""

from __future__ import annotations

import socket
import ssl
import threading

from nyc_taxi_proving.deployment.certificates import Authority


def _server(authority: Authority, name: str):
    """A TLS server on 127.0.0.1 that requires a client certificate of ``authority``: (port, outcomes)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(authority.directory / f"{name}.crt", authority.directory / f"{name}.key")
    context.load_verify_locations(authority.certificate)
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    outcomes: list[str] = []

    def serve():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(connection, server_side=True) as tls:
                    outcomes.append(f"let in {tls.getpeercert()['subject'][0][0][1]}")
                    tls.sendall(b"hello")
            except (ssl.SSLError, OSError) as error:
                outcomes.append(f"refused: {error}")

    threading.Thread(target=serve, daemon=True).start()
    return listener, outcomes


def _connect(port: int, context: ssl.SSLContext) -> bytes | str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        try:
            with context.wrap_socket(connection, server_hostname="127.0.0.1") as tls:
                return tls.recv(5)
        except (ssl.SSLError, ConnectionResetError) as error:
            return f"refused: {error}"


def test_a_server_of_the_authority_lets_in_its_clients_only_and_certificates_are_kept_until_addresses_change(
    tmp_path,
):
    authority = Authority(tmp_path / "tls", "test")
    certificate, key = authority.issue("server", ["127.0.0.1"])
    authority.issue("client", ["127.0.0.1"])
    assert {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "tls").glob("*.key")} == {
        "ca.key": 0o600,
        "server.key": 0o600,
        "client.key": 0o600,
    }
    listener, outcomes = _server(authority, "server")
    port = listener.getsockname()[1]
    try:
        assert _connect(port, authority.client_context("client")) == b"hello"
        no_certificate = ssl.create_default_context(cafile=str(authority.certificate))
        assert "CERTIFICATE_REQUIRED" in str(_connect(port, no_certificate))
        stranger = Authority(tmp_path / "other", "stranger")
        stranger.issue("client", ["127.0.0.1"])
        with_theirs = stranger.client_context("client")
        with_theirs.load_verify_locations(authority.certificate)  # it trusts the server: only its own is foreign
        assert str(_connect(port, with_theirs)).startswith("refused")
    finally:
        listener.close()
    assert outcomes[0] == "let in client" and all(o.startswith("refused") for o in outcomes[1:]), outcomes
    # kept while its addresses stand; issued again (a new key) when they change; the authority kept
    before = (certificate.read_bytes(), key.read_bytes(), authority.certificate.read_bytes())
    assert authority.issue("server", ["127.0.0.1"]) == (certificate, key)
    assert (certificate.read_bytes(), key.read_bytes(), authority.certificate.read_bytes()) == before
    authority.issue("server", ["127.0.0.1", "198.18.0.10"])
    assert key.read_bytes() != before[1] and authority.certificate.read_bytes() == before[2]


def test_a_certificate_an_earlier_authority_signed_is_issued_again_by_the_new_one(tmp_path):
    Authority(tmp_path / "tls", "first").issue("server", ["127.0.0.1"])
    Authority(tmp_path / "other", "first").ensure()  # another authority of the same name: its signature tells
    for name in ("ca.crt", "ca.key"):  # replaces this one, leaving what this one issued
        (tmp_path / "tls" / name).write_bytes((tmp_path / "other" / name).read_bytes())
    again = Authority(tmp_path / "tls", "first")
    certificate, _ = again.issue("server", ["127.0.0.1"])
    from cryptography import x509

    authority = x509.load_pem_x509_certificate(again.certificate.read_bytes())
    x509.load_pem_x509_certificate(certificate.read_bytes()).verify_directly_issued_by(authority)
