"""SeaweedFS, the team deployment's object storage: its ports and keys, its TLS certificates and JWT keys
(``security.toml``), which hosts each gRPC server lets in, and its bucket."""

from __future__ import annotations

import secrets
import urllib.request
from pathlib import Path

from nyc_taxi.core import team
from nyc_taxi.core.processes import free_port, write_private, write_private_text
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.deployment.certificates import Authority
from nyc_taxi_proving.deployment.service import Service, answers_now

# SeaweedFS's JWT signing keys, each the record's and security.toml's name for it
JWT_KEYS = {
    "jwt_volume_write_key": "jwt.signing",  # the master signs a write to a volume, the volume server checks
    "jwt_filer_write_key": "jwt.filer_signing",  # the S3 gateway signs its writes to the filer
    "jwt_filer_read_key": "jwt.filer_signing.read",  # and its reads
}
SEAWEEDFS_CERTIFICATE = "seaweedfs"  # every SeaweedFS program's of a host, as server and as client
# Across hosts, the programs whose hosts a SeaweedFS gRPC server lets in (by their certificate's name): the
# master, its volume servers (their heartbeats), the filer, the S3 gateway and every mount of Metaflow's home;
# a volume server, the master, the filer and the gateway (not another host's tasks or volume server); the
# filer, the gateway and the mounts; the gateway, the filer.
GRPC_CLIENTS = {
    "master": ("seaweedfs-master", "seaweedfs-volume", "seaweedfs-filer", "seaweedfs-s3", "metaflow-metadata"),
    "volume": ("seaweedfs-master", "seaweedfs-filer", "seaweedfs-s3"),
    "filer": ("seaweedfs-filer", "seaweedfs-s3", "metaflow-metadata"),
    "s3": ("seaweedfs-filer", "seaweedfs-s3"),
}


def certificate_name(settings: Settings) -> str:
    """The name a host's SeaweedFS certificate carries: across hosts its host's, on one machine the programs'."""
    name, address = team.this_host(settings)
    return name if address != team.LOOPBACK else SEAWEEDFS_CERTIFICATE


def grpc_clients(record: dict) -> dict[str, list[str]]:
    """Across hosts (the record names every host each program runs on), each gRPC server's allowed
    certificate names (``GRPC_CLIENTS``); on one machine none: one certificate serves every program."""
    runs_on = record.get("runs_on") or {}
    if not runs_on:
        return {}
    return {
        part: sorted(
            {
                h
                for p, placed in runs_on.items()
                if any(p == c or p.startswith(f"{c}-") for c in clients)
                for h in placed
            }
        )
        for part, clients in GRPC_CLIENTS.items()
    }


class ObjectStorage(Service):
    """SeaweedFS: master, volume server, filer and S3 gateway, each a process of its own."""

    name, key, given_by = "object storage", "seaweedfs", "S3_ENDPOINT_URL"
    programs = ("seaweedfs-master", "seaweedfs-volume", "seaweedfs-filer", "seaweedfs-s3")

    @property
    def given(self) -> bool:
        return self.settings.s3_endpoint_url is not None

    @property
    def store(self) -> team.ObjectStore:
        return team.ObjectStore(self.settings)

    def ports(self) -> dict:
        ports = {
            f"{part}_{kind}": free_port()
            for part in ("master", "volume", "filer", "s3")
            for kind in ("port", "grpc_port")
        }
        keys = {"access_key": secrets.token_hex(10).upper(), "secret_key": secrets.token_urlsafe(30)}
        return ports | keys | {key: secrets.token_urlsafe(30) for key in JWT_KEYS}

    @property
    def directory(self) -> Path:
        return team.team_dir(self.settings) / "seaweedfs"

    @property
    def authority(self) -> Authority:
        return Authority(self.directory / "tls", "nyc-taxi SeaweedFS")

    def prepare(self) -> None:
        for part in ("master", "volume", "filer"):
            (self.directory / part).mkdir(parents=True, exist_ok=True)
        self._write_security()
        access, secret = self.store.keys()
        identity = {"name": "nyc-taxi", "credentials": [{"accessKey": access, "secretKey": secret}]}
        identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
        identities = self.directory / "s3-identities.json"
        if team.address(self.settings, "seaweedfs-s3") == team.this_host(self.settings)[1]:  # the gateway runs here
            write_private(identities, {"identities": [identity]})
        else:
            identities.unlink(missing_ok=True)

    def _write_security(self) -> None:
        """``security.toml``, which every SeaweedFS program reads from its working directory (supervisord
        runs them in this one): mutual TLS on every gRPC and HTTP port but the S3 gateway's (which checks
        S3 signatures), a JWT the master signs for each write to a volume, and JWTs the S3 gateway signs
        for the filer's HTTP reads and writes. Across hosts each host's certificate names the host, and each
        gRPC server lets in only the hosts whose programs talk to it (``GRPC_CLIENTS``)."""
        cert, key = self.authority.issue(
            SEAWEEDFS_CERTIFICATE,
            sorted({team.LOOPBACK, team.this_host(self.settings)[1]}),
            common_name=certificate_name(self.settings),
        )
        record, ca = self.record["seaweedfs"], self.authority.certificate
        pair = f'cert = "{cert}"\nkey = "{key}"\n'
        # across hosts, a host holds the keys its programs check or sign with (across_hosts.SECRETS_OF)
        sections = [f'[{section}]\nkey = "{record[name]}"\n' for name, section in JWT_KEYS.items() if name in record]
        sections += [f'[grpc]\nca = "{ca}"\n']
        allowed = grpc_clients(self.record)
        sections += [
            f"[grpc.{part}]\n{pair}"
            + (f'allowed_commonNames = "{",".join(allowed[part])}"\n' if part in allowed else "")
            for part in ("master", "volume", "filer", "s3", "client")
        ]
        sections += [f'[https.client]\nenabled = true\n{pair}ca = "{ca}"\n']
        sections += [f'[https.{part}]\n{pair}ca = "{ca}"\n' for part in ("master", "volume", "filer")]
        write_private_text(self.directory / "security.toml", "\n".join(sections))

    def ready(self) -> bool:
        self.store.client(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}).list_buckets()
        return True

    def answers(self, program: str) -> bool:
        """Each process on its own HTTP port: the master's cluster status, the volume server's status, the
        filer's root, the S3 gateway's bucket list."""
        if program == "seaweedfs-s3":
            return answers_now(self.ready)
        part, path = {
            "seaweedfs-master": ("master", "/cluster/status"),
            "seaweedfs-volume": ("volume", "/status"),
            "seaweedfs-filer": ("filer", "/healthz"),  # its other paths want the filer's JWT
        }[program]
        url = f"https://{team.address(self.settings, program)}:{self.record['seaweedfs'][f'{part}_port']}{path}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        context = self.authority.client_context(SEAWEEDFS_CERTIFICATE)
        return answers_now(lambda: urllib.request.urlopen(request, timeout=3, context=context).status == 200)

    def after(self) -> None:
        """The bucket, and the key pair as a credentials file for what finds its keys through the AWS SDK's
        chain (Metaflow's datastore)."""
        s3 = self.store.client()
        if self.store.bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=self.store.bucket)
        if keys := self.store.keys():
            write_private_text(
                self.store.credentials_file,
                f"[default]\naws_access_key_id = {keys[0]}\naws_secret_access_key = {keys[1]}\n",
            )

    given_up = after

    def address(self) -> str:
        return f"s3://{self.store.bucket} on {self.store.endpoint()} (SeaweedFS, data {self.directory})"
