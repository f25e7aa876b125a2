"""`capstan serve` for the benchmarks: started on a free loopback port,
healthy before use, stopped after (its log named if it exits early)."""

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HOME = os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan"))
BIN = os.environ.get("CAPSTAN_BIN", os.path.join(HOME, "target/release/capstan"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(index, extra=()):
    """Yields the port of a `capstan serve --index INDEX EXTRA...` that answers /health."""
    port = free_port()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([BIN, "serve", "--index", index, "--addr", f"127.0.0.1:{port}", *extra],
                                stdout=subprocess.DEVNULL, stderr=log)
        try:
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    sys.exit(f"capstan serve exited: {log.read()[-2000:]}")
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                    break
                except Exception:
                    time.sleep(0.2)
            yield port
        finally:
            proc.terminate()
            proc.wait()
