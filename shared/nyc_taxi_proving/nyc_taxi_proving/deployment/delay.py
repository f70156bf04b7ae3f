"""Latency on a link, where the kernel has no ``tc netem``: iptables hands the link's packets to a
netfilter queue (``-j NFQUEUE``), and this process, in the host's network namespace, lets each one go
``ms`` milliseconds after it came. The packets wait in the kernel, in order; nothing is copied or sent
again. A packet that finds the queue full, or no one listening, passes at once, undelayed (the queue's
fail-open flag, iptables' ``--queue-bypass``); packets held by a delayer that is killed are dropped by
the kernel, as a cable's are when it is cut.

    ip netns exec NAMESPACE python -m nyc_taxi_proving.deployment.delay --queue N --ms D

It prints ``ready`` once it listens on the queue, and on SIGTERM (the rules taken off first: nothing new
comes) reads what is still queued, lets every waiting packet go, then prints how many packets it held
for the whole delay. It speaks nfnetlink_queue (``linux/netfilter/nfnetlink_queue.h``) with the
standard library alone: the protocol's few messages, packed by hand, as no library for it is installed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import os
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQNL_COPY_META = 1  # the packet's header fields only, not its bytes
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 1, 4  # a full queue passes packets; a GSO packet queued whole
SO_RCVBUFFORCE = 33  # beyond the machine's rmem_max (root)
NLA_TYPE_MASK = 0x3FFF
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
QUEUE_LENGTH = 65536
_SEQUENCE = itertools.count(1)


def _attribute(kind: int, payload: bytes) -> bytes:
    head = struct.pack("=HH", 4 + len(payload), kind)
    return head + payload + b"\0" * (-len(payload) % 4)


def _message(kind: int, queue: int, attributes: bytes, flags: int = NLM_F_REQUEST, sequence: int = 0) -> bytes:
    family = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", queue)  # nfgenmsg, version 0
    body = family + attributes
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, sequence, 0) + body


def _ask(sock: socket.socket, kind: int, queue: int, attributes: bytes) -> None:
    """Send a configuration message and read the kernel's answer (its acknowledgement, past any queued
    packet read meanwhile): an error is raised, not ignored."""
    sequence = next(_SEQUENCE)  # its answer echoes it: a verdict's error (sequence 0) is not this answer
    sock.send(_message(kind, queue, attributes, NLM_F_REQUEST | NLM_F_ACK, sequence))
    for _ in range(100):
        answer, offset = sock.recv(1 << 20), 0
        while offset + 16 <= len(answer):
            length, message_type, _, echoed = struct.unpack_from("=IHHI", answer, offset)
            if message_type == NLMSG_ERROR and echoed == sequence:
                (error,) = struct.unpack_from("=i", answer, offset + 16)
                if error:
                    raise OSError(-error, f"nfnetlink_queue: {os.strerror(-error)}")
                return
            offset += max(16, (length + 3) & ~3)
    raise OSError("nfnetlink_queue: no acknowledgement")


def _packet_ids(data: bytes) -> list[int]:
    """The ids of the queued packets in one read (a read may hold several netlink messages)."""
    ids, offset = [], 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16:
            break
        if kind & 0xFF == NFQNL_MSG_PACKET and kind >> 8 == NFNL_SUBSYS_QUEUE:
            at = offset + 20  # past nlmsghdr and nfgenmsg
            while at + 4 <= offset + length:
                size, attribute = struct.unpack_from("=HH", data, at)
                if size < 4:
                    break
                if attribute & NLA_TYPE_MASK == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, at + 4)[0])
                at += (size + 3) & ~3
        offset += (length + 3) & ~3
    return ids


def delay(queue: int, ms: float, out=sys.stdout) -> int:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((0, 0))
    bind = _attribute(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET))
    _ask(sock, NFQNL_MSG_CONFIG, queue, bind)
    params = _attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
    params += _attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_LENGTH))
    flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO
    params += _attribute(NFQA_CFG_MASK, struct.pack("!I", flags))
    params += _attribute(NFQA_CFG_FLAGS, struct.pack("!I", flags))
    _ask(sock, NFQNL_MSG_CONFIG, queue, params)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    print("ready", file=out, flush=True)

    waiting: collections.deque[tuple[float, int]] = collections.deque()  # (when it may go, id), in order
    delayed, seconds = 0, ms / 1000

    def let_go(up_to: int) -> None:  # every queued packet with an id up to this one, in one verdict
        verdict = _attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, up_to))
        sock.send(_message(NFQNL_MSG_VERDICT_BATCH, queue, verdict))

    while not stop:
        timeout = max(0.0, waiting[0][0] - time.monotonic()) if waiting else 0.5
        with_data, _, _ = select.select([sock], [], [], timeout)
        if with_data:
            try:
                data = sock.recv(1 << 20)
            except OSError:  # ENOBUFS: the kernel dropped queue messages it could not hand over; go on
                data = b""
            now = time.monotonic()
            for packet in _packet_ids(data):
                waiting.append((now + seconds, packet))
        now, due = time.monotonic(), None
        while waiting and waiting[0][0] <= now:
            due = waiting.popleft()[1]
            delayed += 1
        if due is not None:
            let_go(due)
    while select.select([sock], [], [], 0.1)[0]:  # what was queued before the rules went: let go too
        with contextlib.suppress(OSError):
            waiting.extend((0.0, packet) for packet in _packet_ids(sock.recv(1 << 20)))
    if waiting:
        let_go(max(packet for _, packet in waiting))
    print(f"delayed {delayed}", file=out, flush=True)
    with contextlib.suppress(OSError):  # closing the socket unbinds it too
        _ask(sock, NFQNL_MSG_CONFIG, queue, _attribute(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_UNBIND, 0)))
    sock.close()
    return delayed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--ms", type=float, required=True)
    args = parser.parse_args()
    delay(args.queue, args.ms)


if __name__ == "__main__":
    main()
