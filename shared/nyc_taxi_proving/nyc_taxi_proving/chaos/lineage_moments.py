"""The chaos run's moments of the lineage server (``moments`` has the others):

- ``lineage shipper after the server accepted``: the server holds its answer to a record it stored, the
  process that sent it is killed before it can write its ledger;
- ``lineage server down beyond every retry budget``: the server killed and kept down while tasks end and
  give up shipping, then started again.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

import psutil

from nyc_taxi_proving.chaos import check, components
from nyc_taxi_proving.chaos.moments import Context, Kill

SENDER_TRIES = 5  # records held in turn until one's sender is still there to kill
DOWN_BEYOND_RETRIES = 90  # seconds: every task ending meanwhile tries for LINEAGE_SHIP_SECONDS and gives up


def shipper_after_accept(ctx: Context, tries: int = SENDER_TRIES) -> Kill:
    """The lineage server stores the next record and holds its answer; the process that sent it (the
    owner of the connection the server names) is killed before it hears back (and so before it writes
    its ledger); then the server answers. A sender that gave up waiting first (its request timeout, on a
    busy machine) is no longer there to kill: the record is let go and the next one held, ``tries``
    times at most. Each record held went unanswered to its sender, who may send it again: ``unanswered``
    names them (check.record_key)."""
    log, gone, unanswered = ctx.server.log, [], []
    for name in ("release", "held", "hold"):  # left by a run stopped midway: a hold that is no longer there
        Path(f"{log}.{name}").unlink(missing_ok=True)
    for _ in range(tries):
        killed = None
        try:
            Path(f"{log}.hold").touch()
            ctx.wait(lambda: Path(f"{log}.held").exists(), 3600, 0.1)
            held = json.loads(Path(f"{log}.held").read_text())
            address = held["from"]
            unanswered.append(check.record_key(held["path"], held["body"]))
            if (sender := _owner_of(address, ctx.server.port)) is not None:
                name = process_name(sender)
                with contextlib.suppress(psutil.Error):  # one that exited meanwhile was not killed
                    sender.kill()
                    killed = Kill("lineage shipper", [sender.pid], "", time.time(), unanswered=unanswered)
            if killed is not None:  # what ran is asked after the kill: the API may take seconds to answer
                said = f"{name}, on {address} [{ctx.now()}]"
                killed.moment = f"lineage shipper after the server stored a record: {said}"
        finally:  # the held record is let go whatever happened
            _release(ctx.server)
        if killed is not None:
            return killed
        gone.append(address)
    said = f"lineage shipper after the server stored a record: each sender had gone ({', '.join(gone)})"
    return Kill("lineage shipper", [], said, time.time(), unanswered=unanswered)


def _release(server) -> None:
    """The held record answered: no other held after it (the hold taken off first), and back once the
    server has seen the release (it takes the file away), so a next hold never meets this one's."""
    held = Path(f"{server.log}.held").exists()
    for name in ("hold", "held"):
        Path(f"{server.log}.{name}").unlink(missing_ok=True)
    if not held:  # stopped while it waited: nothing to let go, and no release left for a later hold
        Path(f"{server.log}.release").unlink(missing_ok=True)
        return
    server.release()
    if components.wait_for(lambda: not Path(f"{server.log}.release").exists(), 30, 0.05) is None:
        raise RuntimeError("the lineage server never took the release of its held record")


def _owner_of(address: str, port: int) -> psutil.Process | None:
    """The process (not this one) whose open connection to the server's ``port`` on 127.0.0.1 is from
    ``address`` (host:port, as the server saw it)."""
    host, local = address.rsplit(":", 1)
    for c in psutil.net_connections("tcp"):
        if (
            c.pid
            and c.pid != os.getpid()
            and c.laddr
            and (c.laddr.ip, c.laddr.port) == (host, int(local))
            and c.raddr
            and (c.raddr.ip, c.raddr.port) == ("127.0.0.1", port)
            and c.status == psutil.CONN_ESTABLISHED
        ):
            with contextlib.suppress(psutil.Error):
                return psutil.Process(c.pid)
    return None


def server_down(ctx: Context, seconds: float = DOWN_BEYOND_RETRIES) -> Kill:
    """The lineage server killed and kept down ``seconds``, then started again on its port."""
    pid = ctx.server.process.pid
    said = f"lineage server down for {seconds:.0f} s [{ctx.now()}]"
    ctx.server.process.kill()
    ctx.server.process.wait()
    killed = Kill("lineage-server", [pid], said, time.time())

    def again():
        time.sleep(seconds)
        ctx.server.start("ok")

    threading.Thread(target=again, daemon=True).start()
    return killed


def process_name(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        # a process that set its title (Airflow's task runners) has it all in its first word, the rest empty
        words = [w for w in process.cmdline() if w]
        said = " ".join(words[1:4] if len(words) > 1 else words)[:80]
        return said or f"{process.name()} [{process.pid}]"
    return str(process.pid)
