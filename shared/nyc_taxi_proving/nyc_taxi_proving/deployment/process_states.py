"""supervisord's event listener for this deployment: every state change of every program (starting,
running, exited — expected or not —, back-off, fatal) as a JSON line with its time, appended to the
file named on the command line. `team status` counts a program's restarts from it; the chaos run reads
how long a killed component took to run again. It speaks supervisord's event listener protocol
(``supervisor.childutils.listener``) on stdin and stdout, so it prints nothing else there."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from supervisor import childutils


def main(path: str) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:
        headers, payload = childutils.listener.wait(sys.stdin, sys.stdout)
        body = childutils.get_headers(payload.split("\n", 1)[0])
        line = {
            "time": time.time(),
            "process": body.get("processname"),
            "group": body.get("groupname"),
            "from": body.get("from_state"),
            "to": headers["eventname"].removeprefix("PROCESS_STATE_"),
            **{k: int(body[k]) for k in ("pid", "expected", "tries") if k in body},
        }
        with out.open("a") as log:
            log.write(json.dumps(line) + "\n")
        childutils.listener.ok(sys.stdout)


def read(path: Path) -> list[dict]:
    """The state changes recorded so far, oldest first."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def unexpected_exits(changes: list[dict]) -> dict[str, int]:
    """How many times each program exited while it was running without being asked to (restarts)."""
    counted: dict[str, int] = {}
    for change in changes:
        if change["to"] == "EXITED" and change.get("expected") == 0:
            counted[change["process"]] = counted.get(change["process"], 0) + 1
    return counted


if __name__ == "__main__":
    main(sys.argv[1])
