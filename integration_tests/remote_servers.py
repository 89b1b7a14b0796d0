"""Real remote endpoints on 127.0.0.1 for the streaming tests: an HTTP server with byte ranges (counting what it
serves) and an S3 API (moto's server mode), each serving a local directory."""

import http.server
import os
import socket
import threading
from collections import Counter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """GET with a Range header answers 206 with just those bytes (Python's own handler ignores Range)."""

    def log_message(self, *args):
        pass

    def _refused(self) -> bool:
        """Answer with the status ``refuse`` gives a path ending so (a server's 403 or 500), if any."""
        status = next((code for end, code in self.server.refuse.items() if self.path.endswith(end)), None)
        if status is None:
            return False
        self.send_response(status)
        self.send_header("Content-Length", "6")
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(b"denied")
        return True

    def do_HEAD(self):
        if not self._refused():
            super().do_HEAD()

    def do_GET(self):
        if self._refused():
            return
        rng = self.headers.get("Range") if self.server.ranges else None
        path = self.translate_path(self.path)
        if not rng or not os.path.isfile(path):
            return self._count(super().do_GET)
        size = os.path.getsize(path)
        start, _, end = rng.removeprefix("bytes=").partition("-")
        start = int(start)
        end = min(int(end) if end else size - 1, size - 1)
        if start >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.end_headers()
            return
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start + 1)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.wfile.write(data)
        self.server.served[self.path] += len(data)

    def _count(self, handler):
        before = self.wfile
        counter = self.server.served
        path = self.path

        class Counting:
            def write(self, b):
                counter[path] += len(b)
                return before.write(b)

            def __getattr__(self, name):
                return getattr(before, name)

        self.wfile = Counting()
        try:
            return handler()
        finally:
            self.wfile = before


class HttpServer:
    """``with HttpServer(directory) as url:``; ``served`` counts the body bytes sent per path; ``ranges=False``:
    Range headers ignored, whole files sent, as ``python -m http.server`` does; ``refuse[path_end] = status``: every
    request for a path ending so is answered with that status."""

    def __init__(self, directory: str, ranges: bool = True):
        handler = lambda *a, **k: _RangeHandler(*a, directory=str(directory), **k)  # noqa: E731
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        self.httpd.ranges = ranges
        self.httpd.refuse = {}  # path ending -> the status every request for it gets (a 403, a 500)
        self.refuse = self.httpd.refuse
        self.httpd.served = Counter()
        self.served = self.httpd.served
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class S3Server:
    """moto's S3 API on 127.0.0.1 with ``bucket`` holding ``directory`` under ``prefix``; ``storage_options`` are
    what s3fs needs to reach it."""

    def __init__(self, directory: str, bucket: str | None = None, prefix: str = "dataset"):
        import uuid

        from moto.server import ThreadedMotoServer

        bucket = bucket or f"robo-{uuid.uuid4().hex[:8]}"  # moto keeps its buckets per process, across servers
        self.port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.storage_options = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{self.port}", "region_name": "eu-west-1"},
        }
        self.url = f"s3://{bucket}/{prefix}"
        self.directory, self.bucket, self.prefix = str(directory), bucket, prefix

    def __enter__(self):
        import logging

        import s3fs

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
        self.server.start()
        fs = s3fs.S3FileSystem(**self.storage_options)
        fs.mkdir(self.bucket)
        fs.put(self.directory.rstrip("/") + "/", f"{self.bucket}/{self.prefix}/", recursive=True)
        return self

    def __exit__(self, *exc):
        self.server.stop()
