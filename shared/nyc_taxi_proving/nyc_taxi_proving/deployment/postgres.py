"""PostgreSQL of the team deployment: its cluster (initdb, as Debian's postgres user when run as root), who may
connect from the hosts' network, and each database owned by the role of its name."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
from pathlib import Path

from nyc_taxi.core import team
from nyc_taxi.core.processes import ServiceError, free_port, write_private_text
from nyc_taxi_proving.deployment.service import Service

POSTGRES_USER = "nyc_taxi"  # the superuser: it creates the roles and databases, and nothing else uses it
DATABASES = team.OWNED_DATABASES  # Airflow's metadata; the Iceberg catalog: each owned by the role of its name
HBA_MARK = "# nyc-taxi: who may connect from the hosts' network (written by `team up`)"


class Postgres(Service):
    name, key, programs, given_by = "PostgreSQL", "postgres", ("postgres",), "POSTGRES_URL"

    @property
    def given(self) -> bool:
        return self.settings.postgres_url is not None

    @property
    def client(self) -> team.Postgres:
        return team.Postgres(self.settings)

    def ports(self) -> dict:
        roles = {name: secrets.token_urlsafe(24) for name in DATABASES}
        return {"port": free_port(), "user": POSTGRES_USER, "password": secrets.token_urlsafe(24), "roles": roles}

    # PostgreSQL refuses to run as root: as root, its server runs as Debian's postgres user, with its
    # data under that user's home (a tree under a 0700 home such as /root is not reachable for it)
    @property
    def as_postgres(self) -> bool:
        return os.geteuid() == 0

    @property
    def directory(self) -> Path:
        if self.as_postgres:
            import pwd

            home = Path(pwd.getpwnam("postgres").pw_dir)
            key = hashlib.sha256(str(self.settings.state_dir.resolve()).encode()).hexdigest()[:12]
            return home / "nyc-taxi" / key
        return team.team_dir(self.settings) / "postgres"

    @property
    def user(self) -> str:
        import pwd

        return "postgres" if self.as_postgres else pwd.getpwuid(os.geteuid()).pw_name

    @staticmethod
    def bin_dir() -> Path:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
        if found:
            return found[-1].parent
        if shutil.which("postgres"):
            return Path(shutil.which("postgres")).parent
        raise ServiceError("PostgreSQL is missing: install Debian's postgresql (bash run setup does)")

    def prepare(self) -> None:
        if not (self.directory / "data" / "PG_VERSION").is_file():
            self._initdb()
        if network := self.record.get("network"):  # across hosts: the other hosts connect by address
            self._allow_the_hosts(network)

    def _allow_the_hosts(self, network: str) -> None:
        """Across hosts, who may connect by address (initdb's rules let every role in from the loopback
        only): the Iceberg catalog's role to its database from the hosts' network (every host's tasks),
        Airflow's role to its database and the superuser from control's own address (Airflow's components
        and the operator run there), nothing else; a rule of an earlier `up` is replaced."""
        rules = self.directory / "data" / "pg_hba.conf"
        own = f"{team.address(self.settings, 'postgres')}/32"
        ours = [
            HBA_MARK,
            f"host lakehouse lakehouse {network} scram-sha-256",
            f"host airflow airflow {own} scram-sha-256",
            f"host all {POSTGRES_USER} {own} scram-sha-256",
        ]
        kept = [
            line
            for line in rules.read_text().splitlines()
            if line not in ours and not (line.startswith("host all ") and line.endswith(f"{network} scram-sha-256"))
        ]
        rules.write_text("\n".join([*kept, *ours]) + "\n")

    def _initdb(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")
            shutil.chown(self.directory.parent, "postgres", "postgres")
        self.directory.chmod(0o700)
        password_file = self.directory / ".password"
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.record["postgres"]["password"])
        if self.as_postgres:
            shutil.chown(password_file, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        command = [str(self.bin_dir() / "initdb"), "-D", str(self.directory / "data"), "-U", POSTGRES_USER]
        command += ["-A", "scram-sha-256", f"--pwfile={password_file}", "-E", "UTF8", "--locale=C"]
        try:
            created = subprocess.run([*prefix, *command], capture_output=True, text=True)
        finally:
            password_file.unlink(missing_ok=True)
        if created.returncode != 0:
            raise ServiceError(f"initdb failed: {created.stderr.strip()[-2000:]}")

    def ready(self) -> bool:
        self.client.connect().close()
        return True

    def after(self) -> None:
        """Each database and the role of its name that owns it (and every object in it: a deployment made
        before the roles had its superuser own them), where this host holds the superuser's credential
        (PostgreSQL's own host); then the URL file of Airflow's database, where this host holds its role's."""
        if self.given or "password" in self.record["postgres"]:
            self._databases_and_roles()
        if self.given or "airflow" in (self.record["postgres"].get("roles") or {}):
            write_private_text(self.client.airflow_url_file, self.client.url("airflow"))
        else:  # a host of Celery workers: Airflow's database is not this host's to reach
            self.client.airflow_url_file.unlink(missing_ok=True)
        team.Postgres(self.settings).celery_results_url_file.unlink(missing_ok=True)  # an earlier layout's

    def _databases_and_roles(self) -> None:
        from psycopg2 import sql

        db = self.client.connect()
        db.autocommit = True
        with db.cursor() as cursor:
            cursor.execute("SET log_min_error_statement = panic")  # a failed statement's password: not in a log
            for name in DATABASES:
                if not self.given:
                    password = self.record["postgres"]["roles"][name]
                    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
                    verb = "ALTER" if cursor.fetchone() else "CREATE"
                    cursor.execute(
                        sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
                            sql.Identifier(name), sql.Literal(password)
                        )
                    )
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    owner = sql.SQL("") if self.given else sql.SQL(" OWNER {}").format(sql.Identifier(name))
                    cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)) + owner)
        db.close()
        if not self.given:
            for name in DATABASES:
                self._owned_by(name)

    def _owned_by(self, name: str) -> None:
        """Database ``name``, its public schema and everything in it owned by the role of its name."""
        from psycopg2 import sql

        db = self._superuser(name)
        db.autocommit = True
        role = sql.Identifier(name)
        with db.cursor() as cursor:
            cursor.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(role, role))
            cursor.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(role))
            cursor.execute(
                """SELECT c.relkind, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
                   AND pg_get_userbyid(c.relowner) <> %s""",
                (name,),
            )
            kinds = {
                "r": "TABLE",
                "p": "TABLE",
                "v": "VIEW",
                "m": "MATERIALIZED VIEW",
                "S": "SEQUENCE",
                "f": "FOREIGN TABLE",
            }
            for kind, relation in cursor.fetchall():
                cursor.execute(
                    sql.SQL(f"ALTER {kinds[kind]} {{}} OWNER TO {{}}").format(sql.Identifier("public", relation), role)
                )
            cursor.execute(
                """SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
                   WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd') AND pg_get_userbyid(t.typowner) <> %s""",
                (name,),
            )
            for (type_name,) in cursor.fetchall():
                cursor.execute(sql.SQL("ALTER TYPE {} OWNER TO {}").format(sql.Identifier("public", type_name), role))
        db.close()

    def _superuser(self, database: str):
        """A connection to ``database`` as the superuser (its objects' owner may be any role)."""
        import psycopg2

        c = self.client.connection()
        return psycopg2.connect(
            host=c["host"], port=c["port"], user=c["user"], password=c["password"], dbname=database, connect_timeout=5
        )

    def given_up(self) -> None:
        try:
            self.after()
        except Exception as error:
            raise ServiceError(
                f"PostgreSQL ({self.given_by}) does not answer: {str(error).strip().splitlines()[0]}"
            ) from None

    def address(self) -> str:
        return f"{team.address(self.settings, 'postgres')}:{self.record['postgres']['port']} (data {self.directory / 'data'})"

    def orphaned_data(self) -> bool:
        """PostgreSQL's data outlived the record of its password (the state directory was removed)."""
        return not self.given and (self.directory / "data" / "PG_VERSION").is_file()
