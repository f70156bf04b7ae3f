"""The hosts of ``hosts.toml`` on one
machine, each a Linux network namespace, joined by a bridge that belongs to the deployment alone.

- The bridge lives in a namespace of its own (the deployment's "switch"): the machine's own namespace
  has no link, address or route into the hosts, and the hosts have no default route, so nothing leaves
  them and nothing reaches them but each other.
- A host's command runs in its network namespace and a mount namespace of its own, in which the state
  directory is replaced by a directory holding only that host's (``<state>/hosts/<host>``), and /tmp by
  the host's ``tmp``: a path of another host's there, or of the machine's state, is missing, so a path
  shared there by accident fails loudly instead of working by luck. The checkout stays visible, and so
  does the rest of the machine's file system (no other path is replaced).
- Names derive from the state directory, so two deployments on one machine (the suite's) do not meet;
  ``down`` finds everything it made by those names, even without a record, and removes it: the hosts'
  processes (SIGKILL), their namespaces and with them every link and address.

Creating namespaces takes root (``CAP_SYS_ADMIN`` and ``CAP_NET_ADMIN``).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import xmlrpc.client
from dataclasses import dataclass
from pathlib import Path

from nyc_taxi.core.processes import ServiceError
from nyc_taxi.core.settings import Settings

LAYOUT = Path(__file__).with_name("hosts.toml")
CHECKOUT = Path(__file__).resolve().parents[4]  # the repository: every host runs its code
TEST_RANGE = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544: reserved for network tests


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    programs: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    hosts: tuple[Host, ...]
    prefix: int

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise ServiceError(f"no host {name!r} in {LAYOUT.name}: {', '.join(h.name for h in self.hosts)}")

    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_interface(f"{self.hosts[0].address}/{self.prefix}").network


def layout(path: Path = LAYOUT) -> Layout:
    """The hosts as the file declares them, checked: addresses unique, in one subnet of the test range."""
    data = tomllib.loads(path.read_text())
    prefix = int(data["network"]["prefix"])
    hosts = tuple(
        Host(name, str(ipaddress.ip_address(h["address"])), tuple(h["programs"])) for name, h in data["hosts"].items()
    )
    declared = Layout(hosts, prefix)
    network = declared.network()
    for host in hosts:
        if ipaddress.ip_address(host.address) not in network or not network.subnet_of(TEST_RANGE):
            raise ServiceError(
                f"{path.name}: {host.name}'s address {host.address} is not in {network} within {TEST_RANGE}"
            )
    if len({h.address for h in hosts}) != len(hosts):
        raise ServiceError(f"{path.name}: two hosts share an address")
    return declared


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise ServiceError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


class Network:
    """The hosts of ``layout`` for the deployment of ``settings.state_dir``, as namespaces of this machine."""

    def __init__(self, settings: Settings, declared: Layout | None = None):
        self.settings = settings
        self.layout = declared or layout()
        self.tag = hashlib.sha256(str(settings.state_dir.resolve()).encode()).hexdigest()[:6]
        self._delayers: dict[str, subprocess.Popen] = {}  # a host's link's latency, held by this process

    # ---- names: all derived from the state directory -----------------------------------------------
    @property
    def prefix(self) -> str:
        return f"nyc-taxi-{self.tag}-"

    @property
    def switch(self) -> str:
        return f"{self.prefix}switch"

    def namespace(self, host: str) -> str:
        return f"{self.prefix}{host}"

    def port(self, host: str) -> str:
        """The switch's end of a host's link, named after the host (an interface name: at most 15
        characters), so reordering hosts.toml never points a fault at another host."""
        return f"h{self.tag}{hashlib.sha256(self.layout.host(host).name.encode()).hexdigest()[:6]}"

    def directory(self, host: str) -> Path:
        """The host's own state directory: on a machine of its own, its whole state."""
        return self.settings.state_dir / "hosts" / host

    # ---- what exists now --------------------------------------------------------------------------
    def namespaces(self) -> list[str]:
        if shutil.which("ip") is None:  # no iproute2: no namespace was made here
            return []
        listed = _ip("netns", "list").stdout.split("\n")
        return sorted(line.split()[0] for line in listed if line.startswith(self.prefix))

    def pids(self) -> list[int]:
        """Every process in one of the deployment's namespaces."""
        found = []
        for namespace in self.namespaces():
            found += [int(p) for p in _ip("netns", "pids", namespace).stdout.split()]
        return sorted(found)

    def _linked(self, host: Host) -> bool:
        """The host's link is there, up, with its address, and its switch end on the bridge."""
        mine = _ip("-n", self.namespace(host.name), "-o", "addr", "show", "dev", "eth0", check=False).stdout
        switch = _ip("-n", self.switch, "-o", "link", "show", self.port(host.name), check=False).stdout
        return f"inet {host.address}/{self.layout.prefix}" in mine and "master bridge" in switch

    # ---- up / down --------------------------------------------------------------------------------
    def up(self) -> list[str]:
        """Create what is missing: the switch with its bridge, each host's namespace, link and address,
        and its state directory. Safe to repeat; a host left half made (an `up` stopped midway, the switch
        removed) is made again."""
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise ServiceError("the hosts layout takes root and iproute2's `ip` (network namespaces)")
        made = set(self.namespaces())
        if self.switch not in made:
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "bridge", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "bridge", "up")
        said = []
        for host in self.layout.hosts:
            namespace, port = self.namespace(host.name), self.port(host.name)
            if namespace in made and not self._linked(host):
                self._remove(namespace)
                _ip("-n", self.switch, "link", "del", port, check=False)  # its switch end, if that was left
                made.discard(namespace)
            if namespace not in made:
                _ip("netns", "add", namespace)
                _ip(
                    "link",
                    "add",
                    "eth0",
                    "netns",
                    namespace,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    port,
                    "netns",
                    self.switch,
                )
                _ip("-n", self.switch, "link", "set", port, "master", "bridge", "up")
                _ip("-n", namespace, "addr", "add", f"{host.address}/{self.layout.prefix}", "dev", "eth0")
                _ip("-n", namespace, "link", "set", "eth0", "up")
                _ip("-n", namespace, "link", "set", "lo", "up")
            self.directory(host.name).mkdir(parents=True, exist_ok=True)
            self.directory(host.name).chmod(0o700)
            (self.directory(host.name) / "tmp").mkdir(exist_ok=True)
            (self.directory(host.name) / "tmp").chmod(0o1777)  # a /tmp: every user's, each their own files
            said.append(f"{host.name}: {host.address} (namespace {namespace}, state {self.directory(host.name)})")
        return said

    def _remove(self, namespace: str) -> list[int]:
        """Kill what runs in ``namespace`` and delete it; the pids killed. A namespace with a process left
        would outlive its name, links and all."""
        killed = self._kill_all(namespace)
        _ip("netns", "del", namespace)
        return killed

    def _kill_all(self, namespace: str) -> list[int]:
        """SIGKILL what runs in ``namespace`` until nothing does (a process may fork while it is killed)."""
        killed: list[int] = []
        deadline = time.monotonic() + 10
        while pids := [int(p) for p in _ip("netns", "pids", namespace).stdout.split()]:
            if time.monotonic() > deadline:
                raise ServiceError(f"processes {pids} in {namespace} outlived SIGKILL for 10 s")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # gone meanwhile
                    os.kill(pid, signal.SIGKILL)
            killed += [p for p in pids if p not in killed]
            time.sleep(0.05)
        return killed

    def down(self) -> list[str]:
        """Kill every process in the deployment's namespaces and remove the namespaces (their links and
        addresses go with them). The hosts' state directories stay."""
        namespaces = self.namespaces()
        if namespaces and os.geteuid() != 0:
            raise ServiceError(
                f"the hosts layout's namespaces ({', '.join(namespaces)}) are root's: remove them as root"
            )
        killed = [pid for namespace in namespaces for pid in self._remove(namespace)]
        if left := self.namespaces():
            raise ServiceError(f"namespaces still there after down: {', '.join(left)}")
        groups = self.cgroups()
        if groups:  # a fault's, left by a run stopped in it (the processes it held were killed above)
            with _cgroup_tree() as tree:
                for name in groups:
                    _empty(tree, tree / name)
                    (tree / name).rmdir()
        said = [f"removed {n}" for n in namespaces] + [f"removed cgroup {g}" for g in groups]
        return said + ([f"killed {len(killed)} processes"] if killed else [])

    # ---- a fault's cgroup: what iptables' ``cgroup`` match tells apart -------------------------------
    def cgroups(self) -> list[str]:
        """The deployment's cgroups (v2) that exist now (``confine``'s, by name)."""
        if os.geteuid() != 0 or shutil.which("mount") is None:
            return []
        with _cgroup_tree() as tree:
            return sorted(p.name for p in tree.iterdir() if p.is_dir() and p.name.startswith(self.prefix))

    @contextlib.contextmanager
    def confine(self, name: str, pids: list[int]):
        """``pids`` in a cgroup (v2) of the deployment's own while inside (what they fork is in it too), so
        a rule (iptables ``-m cgroup --path``) can tell their new connections apart; then each back where
        it was. Yields the path the rule names."""
        group = f"{self.prefix}{name}"
        with _cgroup_tree() as tree:
            (tree / group).mkdir(exist_ok=True)
            before = {}
            for pid in pids:
                with contextlib.suppress(OSError, StopIteration):  # exited meanwhile
                    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                    before[pid] = next(line.split("::", 1)[1] for line in lines if line.startswith("0::"))
                    (tree / group / "cgroup.procs").write_text(str(pid))
            try:
                yield group
            finally:
                with contextlib.suppress(FileNotFoundError):  # `team down` may have removed it meanwhile
                    _empty(tree, tree / group, before)
                    (tree / group).rmdir()

    def status(self) -> list[str]:
        made = set(self.namespaces())

        def state(host: Host) -> str:
            if self.namespace(host.name) not in made:
                return "down"
            if os.geteuid() != 0:  # a namespace's links are root's to look into
                return "up (its link is root's to check)"
            return "up" if self._linked(host) else "half made (run `team hosts up` again)"

        return [f"{h.name}: {h.address} {state(h)}; programs {', '.join(h.programs)}" for h in self.layout.hosts]

    # ---- faults of the network: a host cut off, a link that loses packets or is slow ------------------
    def cut(self, host: str) -> None:
        """Cut the host's link at the switch: the host runs on, and reaches nothing, as a pulled cable."""
        _ip("-n", self.switch, "link", "set", self.port(host), "down")

    def mend(self, host: str) -> None:
        """Put the cable back, and return once the host's link has carrier again (the kernel tells of a
        carrier within about a second; until then the host's own sends fail as unreachable)."""
        _ip("-n", self.switch, "link", "set", self.port(host), "up")
        deadline = time.monotonic() + 10
        while "NO-CARRIER" in _ip("-n", self.namespace(host), "link", "show", "eth0").stdout:
            if time.monotonic() > deadline:
                raise ServiceError(f"{host}'s link has no carrier 10 s after it was mended")
            time.sleep(0.05)

    @staticmethod
    def loss_rules(host: str) -> tuple[str, str]:
        """The tag and the iptables table of ``lose``'s rules for the host's link."""
        return f"loss-{host}", "filter"

    @staticmethod
    def delay_rules(host: str) -> tuple[str, str]:
        """The tag and the iptables table of ``delay``'s rules for the host's link."""
        return f"delay-{host}", "mangle"

    def lose(self, host: str, share: float) -> None:
        """Drop ``share`` of the packets on the host's link, each way, at random, as a bad cable does:
        silently, where they arrive (iptables' ``statistic`` match on eth0's INPUT: the host's own for
        what reaches it, every other host's for what it sends; a drop where a packet leaves would tell
        its sender). 0 takes it off. This machine's kernel has no ``tc netem``."""
        source, tag = self.layout.host(host).address, self.loss_rules(host)[0]
        for other in self.layout.hosts:
            self.unblock(other.name, tag)  # this link's loss set before, whatever its share
            if share > 0:
                match = ["-i", "eth0", *(() if other.name == host else ("-s", source))]
                match += ["-m", "statistic", "--mode", "random", "--probability", str(share)]
                self.block(other.name, "INPUT", match, tag)

    def delay(self, host: str, seconds: float) -> int | None:
        """Latency on the host's link: each packet it sends or receives there held ``seconds`` before it
        goes on (a netfilter queue that ``nyc_taxi_proving.deployment.delay``, in the host's network namespace,
        lets go: this machine's kernel has no ``tc netem``). The rules are in the ``mangle`` table, whose
        hooks come before ``filter``'s: a partition or a loss on the same link still applies. 0 takes it
        off: the rules first, then every packet still held is let go. Returns how many packets the delay
        taken off held for its whole time (None: there was none); one whose delayer had died is an error."""
        tag, table = self.delay_rules(host)
        self.unblock(host, tag, table=table)
        held = None
        if (delayer := self._delayers.pop(host, None)) is not None:
            died = delayer.poll()
            delayer.terminate()
            try:
                said = delayer.communicate(timeout=30)[0]
            except subprocess.TimeoutExpired:
                delayer.kill()
                delayer.communicate()
                raise ServiceError(f"{tag}: the delayer hung when taken off (killed: what it held, dropped)") from None
            if died is not None:
                raise ServiceError(f"{tag}: the delayer had exited ({died}) before the delay was taken off")
            held = int(said.split()[-1]) if said.split() and said.split()[-1].isdigit() else 0
        if seconds <= 0:
            return held
        argv = [
            sys.executable,
            "-m",
            "nyc_taxi_proving.deployment.delay",
            "--queue",
            "1",
            "--ms",
            f"{seconds * 1000:g}",
        ]
        delayer = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace(host), *argv], stdout=subprocess.PIPE, text=True
        )
        ready = select.select([delayer.stdout], [], [], 30)[0] and delayer.stdout.readline().strip() == "ready"
        if not ready:
            delayer.kill()
            raise ServiceError(f"{tag}: the delayer did not start (exit {delayer.wait()})")
        self._delayers[host] = delayer
        queue = ["NFQUEUE", "--queue-num", "1", "--queue-bypass"]  # no delayer listening: packets pass at once
        for chain, way in (("INPUT", "-i"), ("OUTPUT", "-o")):
            self.block(host, chain, [way, "eth0"], tag, queue, table=table)
        return held

    def block(
        self, host: str, chain: str, match: list[str], tag: str, target: list[str] | None = None, table: str = "filter"
    ) -> None:
        """Drop (or send to ``target``), on ``host``, what ``match`` matches in ``chain`` of ``table``
        (iptables), marked ``tag`` so that ``unblock`` and ``counted`` find it: a partition made of what the
        host lets through."""
        rule = [chain, *match, "-m", "comment", "--comment", f"nyc-taxi-{tag}", "-j", *(target or ["DROP"])]
        done = self._iptables(host, "-t", table, "-A", *rule)
        if done.returncode != 0:
            raise ServiceError(f"{tag} on {host}: iptables -A {' '.join(rule)}: {done.stderr.strip()}")

    def unblock(self, host: str, tag: str, table: str = "filter") -> None:
        """Every rule ``block`` made on ``host`` with ``tag`` in ``table``, removed."""
        listed = self._iptables(host, "-t", table, "-S")
        if listed.returncode != 0:  # nothing read is not nothing there
            raise ServiceError(f"{tag} on {host}: iptables -S: {listed.stderr.strip()}")
        for line in listed.stdout.splitlines():
            if line.startswith("-A ") and f"nyc-taxi-{tag}" in line.split():
                done = self._iptables(host, "-t", table, "-D", *shlex.split(line)[1:])
                if done.returncode != 0:  # a rule left would go on dropping, unseen
                    raise ServiceError(f"{tag} on {host}: iptables -D {line[3:]}: {done.stderr.strip()}")

    def counted(self, tag: str, table: str = "filter") -> int:
        """Packets the rules marked ``tag`` matched so far, on every host (their counters): what a partition
        or a loss dropped, what a delay's queue was handed; one that matched nothing did nothing."""
        return sum(int(line.split()[0]) for line in self._tagged(tag, table))

    def placed(self, tag: str, table: str = "filter") -> int:
        """How many rules marked ``tag`` are in ``table`` on every host: none once a fault is taken off."""
        return len(self._tagged(tag, table))

    def _tagged(self, tag: str, table: str) -> list[str]:
        """The lines of every host's listing of ``table`` (with counters) that are rules marked ``tag``."""
        lines = []
        for host in self.layout.hosts:
            listed = self._iptables(host.name, "-t", table, "-L", "-n", "-v", "-x")
            if listed.returncode != 0:  # nothing read is not nothing matched
                raise ServiceError(f"{tag} on {host.name}: iptables -L: {listed.stderr.strip()}")
            lines += [line for line in listed.stdout.splitlines() if f"/* nyc-taxi-{tag} */" in line]
        return lines

    def _iptables(self, host: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ip", "netns", "exec", self.namespace(host), "iptables", "-w", *args], capture_output=True, text=True
        )

    def host_of(self, pid: int) -> str | None:
        """The host a process runs on: the one whose network namespace is the process's (None: none)."""
        try:
            inode = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            return None
        for host in self.layout.hosts:
            with contextlib.suppress(OSError):
                if os.stat(f"/run/netns/{self.namespace(host.name)}").st_ino == inode:
                    return host.name
        return None

    def lose_host(self, host: str) -> list[int]:
        """Every process of the host SIGKILLed at once, as a machine that loses its power: its
        namespaces and its disk (its state directory) stay. The pids killed."""
        return self._kill_all(self.namespace(host))

    # ---- running on a host ------------------------------------------------------------------------
    def _supervisord(self, host: str, own: Path) -> int | None:
        """The pid of the host's supervisord, as supervisord itself says it, when it runs in the host's
        network namespace (a pid the kernel gave another process since is not taken for it)."""
        from nyc_taxi_proving.deployment.supervisor import Supervisor

        supervisor = Supervisor(self.settings.model_copy(update={"state_dir": own}))
        if not supervisor.running():
            return None
        with contextlib.suppress(OSError, xmlrpc.client.Fault):
            pid = supervisor.rpc().getPID()
            if os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{self.namespace(host)}").st_ino:
                return pid
        return None

    def _not_its_own(self, host: str) -> list[Path]:
        """The machine's directories of another host's programs outside the state directory, which this
        host's mount namespace hides (an empty read-only tmpfs over each): PostgreSQL's home, where its data
        and sockets are when it runs as root, on every host that does not run PostgreSQL. On real machines,
        one host each, they are not there."""
        import pwd

        if "postgres" in self.layout.host(host).programs:
            return []
        try:
            home = Path(pwd.getpwnam("postgres").pw_dir)
        except KeyError:
            return []
        return [home] if home.is_dir() else []

    def command(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` as it runs on ``host``: in its network namespace and a private mount namespace that
        shows only the host's own state directory (at ``<state>/hosts/<host>``, its STATE_DIR), its own
        /tmp and its own /dev/shm. While the host's supervisord runs, in its namespaces (``nsenter``): a command sees the host's
        mounts as its programs do (Metaflow's home, mounted from the filer), as on a machine."""
        self.layout.host(host)
        state, own = self.settings.state_dir.resolve(), self.directory(host).resolve()
        if self.namespace(host) not in self.namespaces():
            raise ServiceError(f"host {host} is not up: run `bash run team hosts up`")
        if (pid := self._supervisord(host, own)) is not None:
            here = Path.cwd().resolve()  # the checkout is there, but the state directory in it is the host's
            where = here if here.is_relative_to(CHECKOUT) and not here.is_relative_to(state) else CHECKOUT
            return ["nsenter", f"--net=/run/netns/{self.namespace(host)}", f"--mount=/proc/{pid}/ns/mnt",
                    f"--wd={where}", "--", "env", f"STATE_DIR={own}", *argv]  # fmt: skip
        # The host's directory and the checkout (with its environment) are held at a private tmpfs (on a
        # fresh directory of /dev/shm, removed after); the host's tmp replaces /tmp; whatever of the checkout
        # that hid (a checkout under /tmp: not the same directory at its path any more) is put back; then a
        # tmpfs replaces the state directory (which may lie in the checkout or under /tmp), the host's own
        # directory is moved into it, and it is made read-only: a write to another path of the state fails
        # instead of vanishing with the namespace. Every mount is private to the namespace.
        kept = sorted({str(CHECKOUT), str(Path(sys.prefix).resolve()), str(Path(sys.base_prefix).resolve())})
        paths = " ".join(shlex.quote(k) for k in kept)
        hidden = " ".join(shlex.quote(str(p)) for p in self._not_its_own(host))
        # its own shared memory (PostgreSQL's segments), unless what it runs lies there
        under = any(Path(p).is_relative_to("/dev/shm") for p in (*kept, state, own))
        own_shm = "" if under else "mount -t tmpfs -o size=512m,mode=1777 host-shm /dev/shm; "
        script = (
            'set -e; state="$1"; own="$2"; shift 2; hold=$(mktemp -d /dev/shm/nyc-taxi-host.XXXXXX); '
            'trap \'umount -R "$hold" 2>/dev/null; rmdir "$hold"\' EXIT; '
            'mount -t tmpfs -o size=1m,mode=0700 host-hold "$hold"; mkdir "$hold/own"; '
            'mount --bind "$own" "$hold/own"; i=0; '
            f"for path in {paths}; do "
            '  i=$((i+1)); mkdir "$hold/$i"; mount --bind "$path" "$hold/$i"; done; '
            'mount --bind "$own/tmp" /tmp; i=0; '
            f"for path in {paths}; do "
            '  i=$((i+1)); if [ "$(stat -c %d:%i "$path" 2>/dev/null)" = "$(stat -c %d:%i "$hold/$i")" ]; '
            '  then umount "$hold/$i"; else mkdir -p "$path"; mount --move "$hold/$i" "$path"; fi; done; '
            'mkdir -p "$state"; mount -t tmpfs -o size=1m,mode=0755 host-state "$state"; '
            'mkdir -p "$state/hosts/${own##*/}"; mount --move "$hold/own" "$state/hosts/${own##*/}"; '
            'mount -o remount,ro "$state"; umount "$hold"; rmdir "$hold"; trap - EXIT; '
            f"for path in {hidden}; do "
            '  mount -t tmpfs -o size=4k,mode=0755 not-this-host "$path"; mount -o remount,ro "$path"; done; '
            + own_shm
            + 'export STATE_DIR="$state/hosts/${own##*/}"; exec "$@"'
        )
        return ["ip", "netns", "exec", self.namespace(host), "unshare", "--mount", "--propagation", "private",
                "--", "sh", "-c", script, "host", str(state), str(own), *argv]  # fmt: skip


@contextlib.contextmanager
def _cgroup_tree():
    """The machine's cgroup v2 tree, mounted afresh at a directory of its own (a command in a network
    namespace, `ip netns exec`'s, has a /sys of its own without it)."""
    import tempfile

    mount = Path(tempfile.mkdtemp(prefix="nyc-taxi-cgroup-"))
    try:
        done = subprocess.run(["mount", "-t", "cgroup2", "cgroup2", str(mount)], capture_output=True, text=True)
        if done.returncode != 0:
            raise ServiceError(f"mount -t cgroup2: {done.stderr.strip()}")
        try:
            yield mount
        finally:
            subprocess.run(["umount", str(mount)], capture_output=True)
    finally:
        mount.rmdir()


def _empty(tree: Path, group: Path, home: dict[int, str] | None = None) -> None:
    """Every process of ``group`` moved out, each to where ``home`` says it was (one forked inside: where
    the others were; without ``home``, the root), again until none is left: a process may fork while it
    is moved."""
    home = home or {}
    default = next(iter(home.values()), "/")
    deadline = time.monotonic() + 10
    while pids := (group / "cgroup.procs").read_text().split():
        if time.monotonic() > deadline:
            raise ServiceError(f"processes {pids} still in cgroup {group.name} after 10 s")
        for pid in pids:
            with contextlib.suppress(OSError):  # exited meanwhile
                (tree / home.get(int(pid), default).lstrip("/") / "cgroup.procs").write_text(pid)
        time.sleep(0.05)
