"""Clients of the team deployment's listeners that ask without credentials, or with a certificate: what
each listener answers (tests/test_team_profile.py on one machine; tests/test_team_hosts.py from another
host, where this file runs as a script: ``python listener_probes.py KIND ADDRESS PORT [CA]``)."""

from __future__ import annotations

import json
import sys

SEAWEEDFS_HTTPS = {"master": "/cluster/status", "volume": "/status", "filer": "/healthz"}


def spark_rpc_refusal(address: str, port: int) -> str:
    """An RPC request to a Spark daemon from a client that skipped Spark's authentication handshake (the
    frame Spark's transport reads: its length, type 3 = RpcRequest, the request id, the body's size, the
    body): the error of the RpcFailure (type 5) it answers with."""
    import socket
    import struct

    body = b"\0" * 16
    with socket.create_connection((address, port), timeout=10) as connection:
        connection.sendall(struct.pack(">qbqi", 8 + 1 + 8 + 4 + len(body), 3, 42, len(body)) + body)
        answer = b""
        while len(answer) < 8 or len(answer) < struct.unpack(">q", answer[:8])[0]:
            chunk = connection.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer[8:9] == b"\x05", answer[:200]  # RpcFailure
    return answer[8 + 1 + 8 + 4 :].decode(errors="replace")


def tls_handshake(address: str, port: int, context) -> str:
    """A TLS handshake (offering HTTP/2, as gRPC does) and the server's first bytes, or why it failed."""
    import socket
    import ssl

    context.set_alpn_protocols(["h2"])
    with socket.create_connection((address, port), timeout=10) as connection:
        try:
            with context.wrap_socket(connection, server_hostname=address) as tls:
                tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                return f"spoke {tls.selected_alpn_protocol()}: {len(tls.recv(9))} bytes"
        except (ssl.SSLError, ConnectionResetError) as error:
            return f"refused: {error}"


def https(address: str, port: int, path: str, context, method: str = "GET", data: bytes | None = None) -> int | str:
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"https://{address}:{port}{path}", method=method, data=data)
    try:
        return urllib.request.urlopen(request, timeout=10, context=context).status
    except urllib.error.HTTPError as error:
        return error.code
    except urllib.error.URLError as error:
        return f"refused: {error.reason}"
    except (ssl.SSLError, ConnectionResetError) as error:  # TLS 1.3: refused after the client's handshake
        return f"refused: {error}"


def without_credentials(
    kind: str, address: str, port: int, ca: str | None = None, certificate: str | None = None
) -> str:
    """What a listener of ``kind`` answers a client that has no credentials (or, ``with-certificate-…``, the
    SeaweedFS certificate in the directory ``certificate``), said in one line."""
    import socket
    import ssl

    if kind == "spark":
        return spark_rpc_refusal(address, port)[:400]
    if kind in ("grpc", "https-master", "https-volume", "https-filer"):
        context = ssl.create_default_context(cafile=ca)
        if kind == "grpc":
            return tls_handshake(address, port, context)
        return str(https(address, port, SEAWEEDFS_HTTPS[kind.removeprefix("https-")], context))
    if kind.startswith("with-certificate-"):  # the server checked against ``ca``, the client's own in ``certificate``
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(f"{certificate}/seaweedfs.crt", f"{certificate}/seaweedfs.key")
        what = kind.removeprefix("with-certificate-")
        if what == "grpc":
            return tls_handshake(address, port, context)
        return str(https(address, port, SEAWEEDFS_HTTPS[what.removeprefix("https-")], context))
    if kind == "redis":
        with socket.create_connection((address, port), timeout=10) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(100).decode(errors="replace").strip()
    if kind == "postgres":
        import psycopg2

        try:
            # the role and database every host may reach (the superuser's are control's alone: no entry)
            psycopg2.connect(host=address, port=port, user="lakehouse", password="guessed", dbname="lakehouse").close()
        except psycopg2.OperationalError as error:
            return str(error).strip()
        return "let in"
    if kind in ("airflow", "log-server", "s3", "lineage-receiver"):
        import urllib.error
        import urllib.request

        path = {
            "airflow": "/api/v2/dags",
            "log-server": "/log/dag_id=any/attempt=1.log",
            "s3": "/",
            "lineage-receiver": "/config",
        }[kind]
        try:
            return str(urllib.request.urlopen(f"http://{address}:{port}{path}", timeout=10).status)
        except urllib.error.HTTPError as error:
            return f"{error.code} {error.read()[:200].decode(errors='replace')}"
    raise ValueError(kind)


if __name__ == "__main__":
    print(json.dumps(without_credentials(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:6])))
