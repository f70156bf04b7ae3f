"""The hosts layout on one machine (``deployment/hosts.toml``, ``deployment/hosts.py``): network
namespaces joined by the deployment's own bridge and nothing else, a mount namespace per host that
shows only its own state directory, and `down` that leaves nothing behind. Fast: namespaces are made
and removed in milliseconds; they take root, as the team profile's PostgreSQL does."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from nyc_taxi.core.processes import ServiceError, alive
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.deployment.hosts import TEST_RANGE, Network, layout

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None,
    reason="network and mount namespaces take root and iproute2 / util-linux",
)


def test_every_process_of_supervisord_runs_on_one_host_and_control_and_workers_hold_what_the_layout_needs():
    """Each process of supervisord.conf on exactly one host, but a program named on several hosts (runs
    once on each); a Celery worker, a Spark worker, a volume server, Metaflow's home mounted and a lineage
    shipper on each worker host, the lineage receiver and the mount on control."""
    from nyc_taxi_proving.deployment.across_hosts import processes
    from nyc_taxi_proving.deployment.supervisor import program_sections

    declared = layout()
    placed = [name for h in declared.hosts for name in processes(h)]
    assert set(placed) == set(program_sections())
    once = [
        name
        for name in placed
        if name not in ("spark-worker", "seaweedfs-volume", "metaflow-metadata", "lineage-shipper")
    ]
    assert len(once) == len(set(once)), placed
    control = declared.host("control")
    assert {
        "postgres", "redis", "spark-master", "seaweedfs-master", "airflow-scheduler", "lineage-receiver",
        "metaflow-metadata",
    } <= set(control.programs)  # fmt: skip
    workers = [h for h in declared.hosts if h.name != "control"]
    assert len(workers) >= 2
    for worker in workers:
        sections = {program_sections()[name] for name in processes(worker)}
        assert {
            "airflow-worker",
            "spark-worker",
            "seaweedfs-volume",
            "metaflow-metadata",
            "lineage-shipper",
        } <= sections
    assert all(ipaddress.ip_address(h.address) in TEST_RANGE for h in declared.hosts)


def _network_namespaces() -> set[int]:
    """Every network namespace of the machine: those its processes are in, and those held by a name."""
    found = set()
    for link in [*Path("/proc").glob("[0-9]*/ns/net"), *Path("/run/netns").glob("*")]:
        with contextlib.suppress(OSError):  # a process gone meanwhile
            found.add(os.stat(link).st_ino)
    return found


def _links_and_addresses_of_the_machine() -> str:
    return (
        subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
        + subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    )


@pytest.fixture
def network(tmp_path):
    network = Network(Settings(state_dir=tmp_path / "state"))
    before, links = _network_namespaces(), _links_and_addresses_of_the_machine()
    network.up()
    made = _network_namespaces() - before
    assert len(made) == len(network.layout.hosts) + 1  # a namespace per host and the switch's
    yield network
    made |= _held(network)  # and those a test made again
    network.down()
    # nothing of the deployment's is left: none of its namespaces, by name or held by a process (with
    # them go their links and addresses), and the machine's own links and addresses as they were
    assert network.namespaces() == [] and not made & _network_namespaces()
    assert _links_and_addresses_of_the_machine() == links


def _held(network: Network) -> set[int]:
    """The network namespaces the deployment's names hold now."""
    return {os.stat(f"/run/netns/{name}").st_ino for name in network.namespaces()}


def _python_on(network: Network, host: str, code: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        network.command(host, [sys.executable, "-c", textwrap.dedent(code)]),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _listening_on_control(network: Network, then: str) -> subprocess.Popen:
    """A Python server on control's address, port 8765, once it listens (``then``: what it does next with
    its socket ``s``)."""
    address = network.layout.host("control").address
    server = subprocess.Popen(
        network.command(
            "control",
            [sys.executable, "-c", f"import socket; s = socket.create_server(('{address}', 8765)); "
             f"print('listening', flush=True); {then}"],
        ),
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert server.stdout.readline().strip() == "listening"
    return server


def test_hosts_reach_each_other_by_address_and_nothing_else(network, tmp_path):
    control, worker = network.layout.host("control"), network.layout.host("worker-a")
    # a listener on control's address, and one on the machine's own loopback
    server = _listening_on_control(network, "c, _ = s.accept(); c.sendall(b'hello from control'); c.close()")
    import socket

    machine = socket.create_server(("127.0.0.1", 0))
    try:
        reached = _python_on(
            network,
            "worker-a",
            f"""
            import errno, socket
            print(socket.create_connection(('{control.address}', 8765), timeout=5).recv(100).decode())
            for where in [('127.0.0.1', {machine.getsockname()[1]}), ('192.0.2.1', 53), ('8.8.8.8', 53)]:
                try:
                    socket.create_connection(where, timeout=2)
                    print('reached', where)
                except OSError as error:
                    print('refused' if error.errno in (errno.ECONNREFUSED, errno.ENETUNREACH) else repr(error))
            """,
        )
    finally:
        machine.close()
    assert server.wait(timeout=10) == 0
    assert reached.returncode == 0, reached.stderr
    # control answers from its address; the machine's own loopback is not the host's; no route out
    assert reached.stdout.split("\n")[:4] == ["hello from control", "refused", "refused", "refused"]
    routes = subprocess.run(network.command("worker-a", ["ip", "route"]), capture_output=True, text=True)
    assert "default" not in routes.stdout and f"src {worker.address}" in routes.stdout
    # the machine's namespace has no address of the hosts' and no way into them
    assert "198.18." not in _links_and_addresses_of_the_machine()


def test_a_host_sees_its_own_state_directory_and_the_checkout_and_no_other_hosts(network):
    state = network.settings.state_dir.resolve()
    (network.directory("worker-b") / "secret").write_text("worker-b's")
    (state / "team").mkdir(parents=True, exist_ok=True)
    (state / "team" / "services.json").write_text("{}")
    machines_tmp = Path("/tmp") / f"nyc-taxi-hosts-test-{os.getpid()}"
    machines_tmp.write_text("the machine's")
    seen = _python_on(
        network,
        "worker-a",
        f"""
        import os, pathlib, nyc_taxi
        state = pathlib.Path({str(state)!r})
        (state / 'hosts' / 'worker-a' / 'written').write_text('on worker-a')
        print(sorted(os.listdir(state)), sorted(os.listdir(state / 'hosts')))
        print((state / 'hosts' / 'worker-b' / 'secret').exists(), (state / 'team' / 'services.json').exists())
        print(pathlib.Path(nyc_taxi.__file__).is_file(), pathlib.Path({str(machines_tmp)!r}).exists())
        try:  # a path of the state that is not the host's: refused, not kept until the namespace goes
            (state / 'lineage').mkdir()
        except OSError as error:
            print(error.strerror)
        """,
    )
    assert seen.returncode == 0, seen.stderr
    lines = seen.stdout.split("\n")
    assert lines[0] == "['hosts'] ['worker-a']"
    assert lines[1] == "False False"  # another host's file and the machine's record: missing there
    assert lines[2] == "True False"  # the checkout is there; the machine's /tmp is not the host's
    assert lines[3] == "Read-only file system"
    assert (network.directory("worker-a") / "written").read_text() == "on worker-a"  # its own is its own
    machines_tmp.unlink()


def test_down_kills_what_runs_on_the_hosts_and_two_deployments_do_not_meet(network, tmp_path):
    other = Network(Settings(state_dir=tmp_path / "other-state"))
    assert other.prefix != network.prefix
    sleeper = subprocess.Popen(network.command("worker-b", ["sleep", "300"]))
    try:
        other.up()
        assert len(other.namespaces()) == len(other.layout.hosts) + 1
        others = _held(other)
        for _ in range(100):  # the sleeper has entered its namespace
            if network.pids():
                break
            time.sleep(0.05)
        assert network.pids() and other.pids() == []
        other.down()
        assert not others & _network_namespaces()
        assert network.namespaces() and sleeper.poll() is None  # the other's down left this one alone
    finally:
        other.down()
    running = network.pids()
    said = network.down()
    sleeper.wait(timeout=10)  # ended long before its 300 s
    assert running and not any(alive(p) for p in running)
    assert any("killed" in line for line in said)
    network.up()  # for the fixture's own down and its checks


def test_clean_names_the_hosts_namespaces_and_removes_them(tmp_path):
    state = tmp_path / "state"
    network = Network(Settings(state_dir=state))
    network.up()
    try:
        env = {**os.environ, "STATE_DIR": str(state), "PROFILE": "local"}
        clean = [sys.executable, "-m", "nyc_taxi_proving.cli.clean"]
        asked = subprocess.run(clean, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        assert asked.returncode == 2 and network.switch in asked.stdout  # named, and nothing removed
        assert len(network.namespaces()) == len(network.layout.hosts) + 1
        done = subprocess.run([*clean, "--yes"], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert network.namespaces() == [] and not state.exists()
    finally:
        network.down()


@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables (bash run setup installs it)")
def test_a_cut_link_reaches_nothing_until_mended_and_a_lossy_link_drops_its_share_each_way(network):
    control = network.layout.host("control")
    server = _listening_on_control(network, "\nwhile True: s.accept()[0].close()")

    def connects(host: str) -> bool:
        done = _python_on(
            network,
            host,
            f"""
            import socket
            try:
                socket.create_connection(('{control.address}', 8765), timeout=2).close()
                print('yes')
            except OSError as error:
                print(type(error).__name__)
            """,
        )
        return done.stdout.strip() == "yes"

    def delivered(sender: str, receiver: str, count: int = 1000) -> int:
        """Datagrams of ``count`` sent that arrive (UDP: nothing resent)."""
        address = network.layout.host(receiver).address
        listener = subprocess.Popen(
            network.command(
                receiver,
                [sys.executable, "-c", "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                 "s.setsockopt(socket.SOL_SOCKET, 33, 1 << 23); "  # SO_RCVBUFFORCE: room for every datagram
                 f"s.bind(('{address}', 8766)); s.settimeout(10); print('ready', flush=True)\nn = 0\n"
                 "try:\n    while True: s.recv(10); n += 1; s.settimeout(1)\nexcept TimeoutError: print(n)"],
            ),
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert listener.stdout.readline().strip() == "ready"
        sent = _python_on(
            network,
            sender,
            f"""
            import socket, time
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for _ in range({count}):
                s.sendto(b'x', ('{address}', 8766))
                time.sleep(0.0005)
            """,
        )
        assert sent.returncode == 0, sent.stderr
        return int(listener.communicate(timeout=10)[0].strip())

    try:
        assert connects("worker-a")
        network.cut("worker-a")
        assert not connects("worker-a")  # no answer: the cable is out
        assert connects("worker-b")  # the other worker still reaches control
        network.mend("worker-a")
        # back within seconds: the host may first say "no route" for the neighbour it failed to reach
        deadline = time.monotonic() + 10
        while not connects("worker-a"):
            assert time.monotonic() < deadline, "worker-a does not reach control 10 s after its link was mended"
        assert delivered("worker-a", "control") == 1000
        network.lose("worker-a", 0.2)
        # 1,000 datagrams, 20 % lost each: 800 arrive, give or take 13 (a binomial's deviation); 5 of those
        for sender, receiver in (("worker-a", "control"), ("control", "worker-a")):
            assert 735 <= delivered(sender, receiver) <= 865
        assert delivered("worker-b", "control") == 1000  # one link only
        network.lose("worker-a", 0.2)  # set again: replaced, not added to
        assert 735 <= delivered("worker-a", "control") <= 865
        network.lose("worker-b", 0.5)  # another link's loss beside it, and taken off: worker-a's stays
        assert 400 <= delivered("worker-b", "control") <= 600
        network.lose("worker-b", 0)
        assert delivered("worker-b", "control") == 1000
        assert 735 <= delivered("worker-a", "control") <= 865
        network.lose("worker-a", 0)
        assert delivered("worker-a", "control") == 1000
    finally:
        server.kill()


def test_a_half_made_host_is_said_so_and_made_again_by_up_and_link_names_follow_the_host(network):
    ports = [network.port(h.name) for h in network.layout.hosts]
    assert len(set(ports)) == len(ports) and all(len(p) <= 15 for p in ports)
    subprocess.run(["ip", "-n", network.switch, "link", "del", network.port("worker-a")], check=True)
    assert "worker-a: 198.18.0.11 half made" in "\n".join(network.status())
    network.up()
    assert all(" up;" in line for line in network.status())
    control = network.layout.host("control").address
    reached = _python_on(
        network, "worker-a", "import socket; s = socket.create_server(('198.18.0.11', 0)); print(s.getsockname()[0])"
    )
    assert reached.stdout.strip() == "198.18.0.11"
    routes = subprocess.run(
        network.command("worker-a", ["ip", "route", "get", control]), capture_output=True, text=True
    )
    assert routes.returncode == 0 and "dev eth0" in routes.stdout


def test_a_checkout_under_tmp_stays_visible_on_a_host_every_time(network, tmp_path, monkeypatch):
    """A host's /tmp is its own, so a checkout under the machine's /tmp (a CI clone's) would vanish with
    it: it is put back, on the first command and on every later one (whose /tmp then holds the empty
    directory the first made)."""
    from nyc_taxi_proving.deployment import hosts

    checkout = tmp_path / "clone"
    checkout.mkdir()
    (checkout / "here").write_text("the checkout")
    monkeypatch.setattr(hosts, "CHECKOUT", checkout)
    for _ in range(2):
        seen = subprocess.run(
            network.command("worker-a", ["cat", str(checkout / "here")]), capture_output=True, text=True
        )
        assert (seen.returncode, seen.stdout) == (0, "the checkout"), seen.stderr


def test_team_down_removes_the_hosts_layout_too(tmp_path):
    from nyc_taxi_proving.deployment import services

    network = Network(Settings(state_dir=tmp_path / "state"))
    network.up()
    held = _held(network)
    try:
        said = services.down(Settings(state_dir=tmp_path / "state", profile="team"))
        assert any(line.startswith(f"hosts: removed {network.switch}") for line in said), said
        assert network.namespaces() == [] and not held & _network_namespaces()
    finally:
        network.down()


@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables (bash run setup installs it)")
def test_a_blocked_port_drops_what_it_matches_counts_it_and_is_opened_again_and_a_lost_host_keeps_its_namespace(
    network,
):
    """What `chaos --hosts` partitions and loses with: a port blocked on control from one worker (the
    other still reaches it), its dropped packets counted, the block taken off; a host's process found by
    its network namespace; a lost host's processes all gone, its namespace and directory kept."""
    control = network.layout.host("control")
    server = _listening_on_control(network, "\nwhile True: s.accept()[0].close()")

    def connects(host: str) -> bool:
        code = f"import socket; socket.create_connection(('{control.address}', 8765), timeout=2).close()"
        return _python_on(network, host, code).returncode == 0

    try:
        assert connects("worker-a") and network.counted("receiver") == 0
        match = ["-p", "tcp", "-s", network.layout.host("worker-a").address, "--dport", "8765"]
        network.block("control", "INPUT", match, "receiver")
        assert not connects("worker-a") and connects("worker-b")
        assert network.counted("receiver") >= 2  # the SYN and at least one retransmission, within 2 s
        network.unblock("control", "receiver")
        assert connects("worker-a") and network.counted("receiver") == 0  # the rule and its count are gone
        sleeper = subprocess.Popen(network.command("worker-b", ["sleep", "300"]))  # each step execs the next
        deadline = time.monotonic() + 10
        while network.host_of(sleeper.pid) != "worker-b" or Path(f"/proc/{sleeper.pid}/comm").read_text() != "sleep\n":
            assert time.monotonic() < deadline, "the sleeper never showed up on worker-b"
            time.sleep(0.05)
        assert network.host_of(os.getpid()) is None
        killed = network.lose_host("worker-b")
        assert sleeper.pid in killed and sleeper.wait(5) == -9
        assert [p for p in network.pids() if network.host_of(p) == "worker-b"] == []
        assert network.namespace("worker-b") in network.namespaces() and network.directory("worker-b").is_dir()
    finally:
        server.kill()


@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables (bash run setup installs it)")
def test_a_delayed_link_holds_each_packet_each_way_beside_a_block_and_is_undone_and_a_dead_delayer_is_an_error(network):
    """What `chaos --hosts` puts latency on a link with (no `tc netem` on this kernel): a TCP handshake
    from worker-a to control crosses worker-a's link twice (SYN out, SYN-ACK in), so it takes at least
    twice the delay; worker-b's does not; a block on the same link still drops (the delay's rules come
    before the filter table's); the delayer counts what it held; the delay taken off, fast again; a
    delayer that died meanwhile (its packets then pass undelayed) is an error when the delay is taken off."""
    control = network.layout.host("control")
    server = _listening_on_control(network, "\nwhile True: s.accept()[0].close()")
    handshakes = f"""
        import socket, statistics, time
        took = []
        for _ in range(5):
            start = time.monotonic()
            socket.create_connection(('{control.address}', 8765), timeout=10).close()
            took.append(time.monotonic() - start)
        print(statistics.median(took))
    """

    def handshake(host: str) -> float:
        done = _python_on(network, host, handshakes)
        assert done.returncode == 0, done.stderr
        return float(done.stdout)

    try:
        before = handshake("worker-a")
        network.delay("worker-a", 0.15)
        slow, other = handshake("worker-a"), handshake("worker-b")
        # a partition on the delayed host itself, of what arrives on the delayed link: still dropped
        network.block("worker-a", "INPUT", ["-p", "tcp", "-s", control.address, "--sport", "8765"], "beside")
        blocked, dropped = _python_on(network, "worker-a", handshakes), network.counted("beside")
        network.unblock("worker-a", "beside")
        held = network.delay("worker-a", 0)
        after = handshake("worker-a")
        assert before < 0.1 and other < 0.1 and after < 0.1, (before, other, after)
        assert 0.3 <= slow < 0.9, slow  # two crossings of 150 ms, and no SYN sent again (that waits 1 s)
        assert blocked.returncode != 0 and dropped >= 1, (blocked.stdout, dropped)  # dropped, once delayed
        assert held >= 10, held  # the delayer's own count: five handshakes' SYN, SYN-ACK, ACK and FIN each
        assert network.counted("delay-worker-a", table="mangle") == 0 and network.delay("worker-a", 0) is None
        network.delay("worker-a", 0.15)
        (delayer,) = [
            p for p in network.pids() if "nyc_taxi_proving.deployment.delay" in " ".join(psutil.Process(p).cmdline())
        ]
        os.kill(delayer, signal.SIGKILL)
        assert handshake("worker-a") < 0.1  # nobody listens on the queue: packets pass at once
        with pytest.raises(ServiceError, match="the delayer had exited"):
            network.delay("worker-a", 0)
        assert network.counted("delay-worker-a", table="mangle") == 0  # its rules taken off all the same
    finally:
        network.delay("worker-a", 0)
        server.kill()


@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables (bash run setup installs it)")
def test_a_link_is_clean_again_only_once_its_loss_and_its_latency_are_taken_off(network):
    """What `chaos --hosts` calls a lossy or slow link back: its rules gone and twenty handshakes across it,
    each at once. A 20 % loss or a 50 ms latency (the least it draws) still on worker-a's link is neither;
    taken off, it is both."""
    import socket

    from team_deployment import network_of

    from nyc_taxi_proving.chaos.host_faults import link_clean

    control = network.layout.host("control")
    server = _listening_on_control(network, "\nwhile True: s.accept()[0].close()")

    def handshake() -> float | None:
        with network_of(network.namespace("worker-a")):
            start = time.monotonic()
            try:
                socket.create_connection((control.address, 8765), timeout=2).close()
            except OSError:
                return None
            return time.monotonic() - start

    try:
        assert link_clean(handshake)
        network.delay("worker-a", 0.05)
        assert not link_clean(handshake) and network.placed(*network.delay_rules("worker-a")) > 0
        network.delay("worker-a", 0)
        assert link_clean(handshake) and network.placed(*network.delay_rules("worker-a")) == 0
        network.lose("worker-a", 0.2)
        assert not any(link_clean(handshake) for _ in range(3)) and network.placed(*network.loss_rules("worker-a")) > 0
        network.lose("worker-a", 0)
        assert link_clean(handshake) and network.placed(*network.loss_rules("worker-a")) == 0
    finally:
        network.delay("worker-a", 0)
        network.lose("worker-a", 0)
        server.kill()


def test_a_pools_thread_started_before_network_of_stays_in_the_machines_network_and_in_network_runs_all_there(
    network,
):
    """Why the hosts tests read the lake through ``in_network``: ``network_of`` moves the calling thread
    alone, so a pool's thread started before (pyiceberg's readers, Arrow's IO threads) still connects from
    the machine's own network, where an address of the hosts' range is whatever the machine's route reaches
    (here an egress proxy's empty 404: "Path does not exist"). ``in_network`` runs a process of its own
    there, every thread it starts there too."""
    from concurrent.futures import ThreadPoolExecutor

    from team_deployment import in_network, network_of

    def here() -> int:
        return os.stat("/proc/thread-self/ns/net").st_ino

    machine, control = here(), os.stat(f"/run/netns/{network.namespace('control')}").st_ino
    assert machine != control
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(here).result() == machine  # its thread started in the machine's network
        with network_of(network.namespace("control")):
            assert here() == control and pool.submit(here).result() == machine  # the pool's thread stayed
    assert in_network(network.namespace("control"), "team_deployment:thread_networks", 4) == [control] * 5


@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables (bash run setup installs it)")
def test_a_confined_process_is_told_apart_by_its_cgroup_and_down_removes_a_cgroup_left_behind(network):
    """What `chaos --hosts` cuts the scheduler from PostgreSQL with: a process on control moved into the
    deployment's cgroup, its new connections dropped by a rule on that cgroup while another process on
    control still connects; out of it again, it connects; a cgroup a stopped run left, `down` removes."""
    control = network.layout.host("control")
    server = _listening_on_control(network, "\nwhile True: s.accept()[0].close()")
    code = (
        "import socket, sys\n"
        "for _ in sys.stdin:\n"
        "    try:\n"
        f"        socket.create_connection(('{control.address}', 8765), timeout=2).close(); print('yes', flush=True)\n"
        "    except OSError as error:\n"
        "        print(type(error).__name__, flush=True)\n"
    )
    client = subprocess.Popen(
        network.command("control", [sys.executable, "-c", code]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def asks() -> str:
        client.stdin.write("\n")
        client.stdin.flush()
        return client.stdout.readline().strip()

    def another() -> bool:
        return (
            _python_on(
                network, "control", f"import socket; socket.create_connection(('{control.address}', 8765), timeout=2)"
            ).returncode
            == 0
        )

    try:
        assert asks() == "yes"
        with network.confine("client", [client.pid]) as path:
            assert network.cgroups() == [path]
            network.block("control", "OUTPUT", ["-p", "tcp", "--dport", "8765", "-m", "cgroup", "--path", path], "cg")
            assert asks() == "TimeoutError" and another()
            assert network.counted("cg") >= 2
            network.unblock("control", "cg")
        assert network.cgroups() == [] and asks() == "yes"
        left = network.confine("client", [client.pid])
        left.__enter__()  # a run stopped inside it: never left
        assert network.cgroups() == [f"{network.prefix}client"]
    finally:
        client.kill()
        server.kill()
    network.down()
    assert network.cgroups() == []
