#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Serve one directory read-only over HTTP, with Range requests (so a fetch can resume).

`python3 -m http.server` has no Range support: a download killed at 90% would start over. This is
the same handler with single-range GET/HEAD added; it never writes and refuses other methods.
It never serves a `<file>.partial` (404): that is a file still being fetched, unverified; a
fetched file gets its own name only once its hash matched (gx10.cluster.model_fetch), so a node
relaying the checkpoint serves verified files only.
Standard library only: it runs on the head node (the peer source over the rail) and in the lab's
NAS stand-in.

    gx10_serve_dir.py --bind 192.168.100.10 --directory /srv/models/x 8090
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
# What gx10.cluster.model_fetch writes before a file is verified (model_files.PARTIAL_SUFFIX).
PARTIAL_SUFFIX = ".partial"


class RangeHandler(SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler with `Range: bytes=a-b` (one range) on files."""

    protocol_version = "HTTP/1.1"
    _range: tuple[int, int] | None = None

    def send_head(self) -> Any:
        self._range = None
        path = self.translate_path(self.path)
        if path.endswith(PARTIAL_SUFFIX):
            self.send_error(HTTPStatus.NOT_FOUND, "Not served: a file still being fetched")
            return None
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
            shutil.copyfileobj(source, outputfile, 1024 * 1024)
            return
        remaining = self._range[1] - self._range[0] + 1
        while remaining > 0:
            chunk = source.read(min(1024 * 1024, remaining))
            if not chunk:
                break
            outputfile.write(chunk)
            remaining -= len(chunk)

    def end_headers(self) -> None:
        if self._range is None:
            self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def list_directory(self, path: Any) -> Any:
        self.send_error(HTTPStatus.FORBIDDEN, "No directory listings")
        return None


def serve(bind: str, port: int, directory: str) -> ThreadingHTTPServer:
    """A server for `directory` on bind:port (not started; call serve_forever)."""
    handler = partial(RangeHandler, directory=directory)
    return ThreadingHTTPServer((bind, port), handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", required=True)
    parser.add_argument("--directory", required=True)
    parser.add_argument("port", type=int)
    args = parser.parse_args()
    server = serve(args.bind, args.port, args.directory)
    with server:
        server.serve_forever()


if __name__ == "__main__":
    main()
