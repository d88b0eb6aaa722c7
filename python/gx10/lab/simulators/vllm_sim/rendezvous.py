"""The head <-> worker channel: a TCPStore-like rendezvous, then JSON lines with heartbeats."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .env import SimEnv
from .errors import SimFatal
from .log import Log, torch_stamp


class PeerLostError(Exception):
    """The other side closed the connection or stopped answering."""


class Channel:
    """One TCP connection between the head and a worker rank."""

    def __init__(self, sock: socket.socket, reader: Any, heartbeat: float) -> None:
        self.sock = sock
        self.reader = reader
        self.heartbeat = heartbeat
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lost = threading.Event()
        self.last_seen = time.monotonic()
        self._write_lock = threading.Lock()
        self._on_lost: list[Callable[[], None]] = []

    def on_lost(self, callback: Callable[[], None]) -> None:
        self._on_lost.append(callback)

    def _mark_lost(self) -> None:
        if not self.lost.is_set():
            self.lost.set()
            for callback in self._on_lost:
                callback()

    def send(self, message: Mapping[str, Any]) -> bool:
        data = (json.dumps(message) + "\n").encode()
        try:
            with self._write_lock:
                self.sock.sendall(data)
        except OSError:
            self._mark_lost()
            return False
        return True

    def start(self) -> None:
        self.sock.settimeout(None)
        threading.Thread(target=self._read_loop, daemon=True, name="channel-read").start()
        threading.Thread(target=self._ping_loop, daemon=True, name="channel-ping").start()

    def _read_loop(self) -> None:
        while not self.lost.is_set():
            try:
                line = self.reader.readline()
            except (OSError, ValueError):
                line = b""
            if not line:
                self._mark_lost()
                return
            self.last_seen = time.monotonic()
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("op") != "ping":
                self.inbox.put(message)

    def _ping_loop(self) -> None:
        silence = max(5 * self.heartbeat, 3.0)
        while not self.lost.wait(self.heartbeat):
            if not self.send({"op": "ping"}):
                return
            if time.monotonic() - self.last_seen > silence:
                self._mark_lost()
                return

    def recv(self, timeout: float, stop: threading.Event | None = None) -> dict[str, Any]:
        """The next message; PeerLostError if the peer is gone, TimeoutError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.inbox.get(timeout=0.05)
            except queue.Empty:
                pass
            if self.lost.is_set():
                raise PeerLostError
            if stop is not None and stop.is_set():
                raise InterruptedError
            if time.monotonic() >= deadline:
                raise TimeoutError

    def close(self) -> None:
        self.lost.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def _listen_error(port: int, error: OSError) -> SimFatal:
    name = errno.errorcode.get(error.errno or 0, "EUNKNOWN")
    return SimFatal(
        "torch.distributed.DistNetworkError",
        "The server socket has failed to listen on any local network address. "
        f"port: {port}, useIpv6: false, code: -{error.errno}, name: {name}, "
        f"message: {os.strerror(error.errno or 0).lower()}",
    )


class HeadRendezvous:
    """Rank 0's side of the TCPStore rendezvous: listen, admit every node rank, then keep them."""

    def __init__(self, args: argparse.Namespace, env: SimEnv, log: Log) -> None:
        self.addr, self.port = args.master_addr, args.master_port
        self.nnodes, self.env, self.log = args.nnodes, env, log
        self.fingerprint = {
            "nnodes": args.nnodes,
            "world_size": args.tensor_parallel_size * args.pipeline_parallel_size,
        }
        self.peers: dict[int, Channel] = {}
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.server.bind((self.addr, self.port))
            self.server.listen(16)
        except OSError as error:
            self.server.close()
            raise _listen_error(self.port, error) from error
        self.server.settimeout(0.2)

    def wait_for_workers(self, stop: threading.Event) -> None:
        timeout = self.env.rendezvous_timeout
        deadline = time.monotonic() + timeout
        while len(self.peers) < self.nnodes - 1:
            if stop.is_set():
                raise InterruptedError
            if time.monotonic() >= deadline:
                raise self._timeout_error(timeout)
            try:
                conn, peer = self.server.accept()
            except TimeoutError:
                continue
            self._admit(conn, peer)

    def _timeout_error(self, timeout: float) -> SimFatal:
        missing = [r for r in range(1, self.nnodes) if r not in self.peers]
        return SimFatal(
            "torch.distributed.DistStoreError",
            f"Timed out after {int(timeout) + 1} seconds waiting for clients. "
            f"{len(self.peers) + 1}/{self.nnodes} clients joined. Missing node rank(s): "
            f"{', '.join(map(str, missing))} never connected to the master at "
            f"{self.addr}:{self.port} (start the headless workers first)",
        )

    def _admit(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        conn.settimeout(5.0)
        reader = conn.makefile("rb")
        try:
            hello = json.loads(reader.readline() or b"{}")
        except (OSError, ValueError):
            conn.close()
            return
        rank = hello.get("node_rank") if isinstance(hello, dict) else None
        reason = None
        if not isinstance(rank, int) or not 1 <= rank < self.nnodes:
            reason = f"node rank {rank} is outside 1..{self.nnodes - 1}"
        elif rank in self.peers:
            reason = f"node rank {rank} already joined"
        elif any(hello.get(key) != value for key, value in self.fingerprint.items()):
            reason = (
                f"world layout mismatch: head has {self.fingerprint}, worker has "
                f"{ {k: hello.get(k) for k in self.fingerprint} }"
            )
        if reason is not None:
            conn.sendall((json.dumps({"op": "reject", "reason": reason}) + "\n").encode())
            conn.close()
            self.log.warning_at(
                "parallel_state.py:1087", f"Rejected a worker from {peer[0]}: {reason}"
            )
            return
        assert isinstance(rank, int)
        channel = Channel(conn, reader, self.env.heartbeat_seconds)
        channel.send({"op": "welcome", "world_size": self.fingerprint["world_size"]})
        channel.start()
        self.peers[rank] = channel
        self.log.info_at(
            "parallel_state.py:1165",
            f"node rank {rank} joined from {peer[0]}:"
            f"{peer[1]} ({len(self.peers) + 1}/{self.nnodes})",
        )

    def broadcast(self, message: Mapping[str, Any]) -> None:
        for channel in self.peers.values():
            channel.send(message)

    def gather(self, op: str, timeout: float, stop: threading.Event) -> dict[int, dict[str, Any]]:
        """The next `op` message of every rank; PeerLostError names nothing, callers do."""
        replies: dict[int, dict[str, Any]] = {}
        for rank, channel in sorted(self.peers.items()):
            while True:
                message = channel.recv(timeout, stop)
                if message.get("op") == op:
                    replies[rank] = message
                    break
        return replies

    def close(self) -> None:
        self.server.close()
        for channel in self.peers.values():
            channel.close()


def connect_to_head(
    args: argparse.Namespace, env: SimEnv, log: Log, stop: threading.Event
) -> Channel:
    """A headless rank's side: connect with retries until the rendezvous timeout."""
    timeout = env.rendezvous_timeout
    deadline = time.monotonic() + timeout
    next_warning = 0.0
    while True:
        if stop.is_set():
            raise InterruptedError
        try:
            sock = socket.create_connection((args.master_addr, args.master_port), timeout=1.0)
            break
        except OSError as error:
            now = time.monotonic()
            if now >= deadline:
                raise SimFatal(
                    "torch.distributed.DistNetworkError",
                    f"The client socket has timed out after {int(timeout * 1000)}ms while trying "
                    f"to connect to ({args.master_addr}, {args.master_port}).",
                ) from error
            if now >= next_warning:
                code = error.errno or errno.ECONNREFUSED
                log.raw(
                    f"[W{torch_stamp()} socket.cpp:755] [c10d] The client socket has failed "
                    f"to connect to [{args.master_addr}]:{args.master_port} (errno: {code} - "
                    f"{os.strerror(code)})."
                )
                next_warning = now + 10.0
            stop.wait(min(0.25, max(deadline - now, 0.0)))
    sock.settimeout(max(min(deadline - time.monotonic(), 10.0), 1.0))
    reader = sock.makefile("rb")
    hello = {
        "op": "hello",
        "node_rank": args.node_rank,
        "nnodes": args.nnodes,
        "world_size": args.tensor_parallel_size * args.pipeline_parallel_size,
    }
    try:
        sock.sendall((json.dumps(hello) + "\n").encode())
        reply = json.loads(reader.readline() or b"{}")
    except (OSError, ValueError) as error:
        sock.close()
        raise SimFatal(
            "torch.distributed.DistNetworkError",
            f"Connection reset by peer while joining {args.master_addr}:{args.master_port}",
        ) from error
    if not isinstance(reply, dict) or reply.get("op") != "welcome":
        sock.close()
        reason = reply.get("reason") if isinstance(reply, dict) else "no answer"
        raise SimFatal(
            "torch.distributed.DistStoreError",
            f"The master at {args.master_addr}:"
            f"{args.master_port} refused node rank {args.node_rank}: {reason}",
        )
    channel = Channel(sock, reader, env.heartbeat_seconds)
    channel.start()
    return channel
