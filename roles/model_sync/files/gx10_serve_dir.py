#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Serve one directory read-only over HTTP, with Range requests (so a fetch can resume).

`python3 -m http.server` has no Range support: a download killed at 90% would start over. This is
the same handler with single-range GET/HEAD added; it never writes and refuses other methods.
It never serves a `<file>.partial` (404): that is a file still being fetched, unverified; a
fetched file gets its own name only once its hash matched (gx10.cluster.model_fetch), so a node
relaying the checkpoint serves verified files only.
A 404 for a missing file says whether a fetch into the directory is running
(`X-Gx10-Fetching: 1` or `0`, from model_fetch's lock on `.gx10-fetching`) and, if the file's
`.partial` exists, `X-Gx10-Partial-Bytes: N` (its length, not its bytes): a node downstream in
the sync chain waits for the file while that number grows, and stops waiting once the fetch
ended without it.
It counts the body bytes it sent; with `--state FILE` it writes the totals there (JSON, replaced
atomically after each answer), which the model_sync role reads when it stops the server: what
each node of the chain sent to its successor.
Standard library only: it runs on every node that relays the checkpoint over the rail (the
head, and each worker with a successor) and in the lab's NAS stand-in.

    gx10_serve_dir.py --bind 192.168.100.10 --directory /srv/models/x --state /run/x.json 8090
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import threading
import time
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
# What gx10.cluster.model_fetch writes before a file is verified (model_files.PARTIAL_SUFFIX).
PARTIAL_SUFFIX = ".partial"
PARTIAL_HEADER = "X-Gx10-Partial-Bytes"
FETCHING_HEADER = "X-Gx10-Fetching"
# model_fetch holds this file under an exclusive flock while it fetches (model_files.FETCHING_NAME).
FETCHING_NAME = ".gx10-fetching"


def fetching(directory: str) -> bool:
    """Is a model_fetch fetching into `directory` now (its lock file held)?"""
    try:
        fd = os.open(os.path.join(directory, FETCHING_NAME), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # also releases a lock it took
    return False


class Served:
    """Body bytes sent, per client address and in all, shared by the server's threads."""

    def __init__(self, state_file: str | None = None) -> None:
        self.state_file = state_file
        self.bytes_sent = 0
        self.files_sent = 0
        """Answers whose body was sent in full."""
        self.by_client: dict[str, int] = {}
        self.started = time.time()
        self._lock = threading.Lock()

    def add(self, client: str, count: int, *, whole: bool) -> None:
        with self._lock:
            self.bytes_sent += count
            self.files_sent += int(whole)
            self.by_client[client] = self.by_client.get(client, 0) + count
            self._write()

    def totals(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "bytes_sent": self.bytes_sent,
            "files_sent": self.files_sent,
            "by_client": dict(self.by_client),
            "started": self.started,
            "updated": time.time(),
        }

    def _write(self) -> None:
        if not self.state_file:
            return
        temporary = f"{self.state_file}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(self.totals(), handle)
        os.replace(temporary, self.state_file)

    def write(self) -> None:
        with self._lock:
            self._write()


class RangeHandler(SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler with `Range: bytes=a-b` (one range) on files."""

    protocol_version = "HTTP/1.1"
    _range: tuple[int, int] | None = None
    _partial_bytes: int | None = None
    _fetching: bool | None = None
    served: Served | None = None

    def send_head(self) -> Any:
        self._range = None
        self._partial_bytes = None
        self._fetching = None
        path = self.translate_path(self.path)
        if path.endswith(PARTIAL_SUFFIX):
            self.send_error(HTTPStatus.NOT_FOUND, "Not served: a file still being fetched")
            return None
        if not os.path.exists(path):
            try:  # being fetched here: say how far, so a node downstream knows it is coming
                self._partial_bytes = os.stat(path + PARTIAL_SUFFIX).st_size
            except OSError:
                self._partial_bytes = None
            self._fetching = fetching(self.directory)
        header = self.headers.get("Range")
        if header is None or os.path.isdir(path):
            return super().send_head()
        match = _RANGE.match(header.strip())
        try:
            handle = open(path, "rb")  # noqa: SIM115 (closed by copyfile's caller)
        except OSError:
            self.send_error(HTTPStatus.NOT_FOUND, "File not found")
            return None
        size = os.fstat(handle.fileno()).st_size
        if match is None or (not match.group(1) and not match.group(2)):
            handle.close()
            return super().send_head()
        if match.group(1):
            start = int(match.group(1))
            end = int(match.group(2)) if match.group(2) else size - 1
        else:  # suffix range: the last N bytes
            start, end = max(0, size - int(match.group(2))), size - 1
        end = min(end, size - 1)
        if start >= size or start > end:
            handle.close()
            self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        handle.seek(start)
        self._range = (start, end)
        return handle

    def copyfile(self, source: Any, outputfile: Any) -> None:
        if self._range is None:
            remaining = os.fstat(source.fileno()).st_size - source.tell()
        else:
            remaining = self._range[1] - self._range[0] + 1
        sent = 0
        try:
            while remaining > 0:
                chunk = source.read(min(1024 * 1024, remaining))
                if not chunk:
                    break
                outputfile.write(chunk)
                sent += len(chunk)
                remaining -= len(chunk)
        finally:  # a broken connection still counts what left before it broke
            if self.served is not None:
                self.served.add(self.client_address[0], sent, whole=remaining == 0)

    def end_headers(self) -> None:
        if self._range is None:
            self.send_header("Accept-Ranges", "bytes")
        if self._partial_bytes is not None:
            self.send_header(PARTIAL_HEADER, str(self._partial_bytes))
            self._partial_bytes = None
        if self._fetching is not None:
            self.send_header(FETCHING_HEADER, "1" if self._fetching else "0")
            self._fetching = None
        super().end_headers()

    def list_directory(self, path: Any) -> Any:
        self.send_error(HTTPStatus.FORBIDDEN, "No directory listings")
        return None


class CountingServer(ThreadingHTTPServer):
    """The threading server with its tally of the bytes it sent (`served`)."""

    served: Served


def serve(bind: str, port: int, directory: str, state_file: str | None = None) -> CountingServer:
    """A server for `directory` on bind:port (not started; call serve_forever). Its `served`
    counts the body bytes sent, written to `state_file` (if set) after each answer."""
    served = Served(state_file)
    handler_class = type("CountingHandler", (RangeHandler,), {"served": served})
    server = CountingServer((bind, port), partial(handler_class, directory=directory))
    server.served = served
    served.write()  # zeros: the file exists from the start, so "absent" means "never started"
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", required=True)
    parser.add_argument("--directory", required=True)
    parser.add_argument("--state", help="write the bytes sent (JSON) to this file")
    parser.add_argument("port", type=int)
    args = parser.parse_args()
    server = serve(args.bind, args.port, args.directory, args.state)
    with server:
        server.serve_forever()


if __name__ == "__main__":
    main()
