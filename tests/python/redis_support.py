"""A redis-server of the test's own for the remote KV tier: 127.0.0.1, a free port, a temporary
directory, no persistence, bounded waits; always stopped (use as a context manager). Never a
system instance."""

import shutil
import socket
import subprocess
import tempfile
import time

from serve_support import free_port


def redis_available():
    return shutil.which("redis-server") is not None


class RedisServer:
    def __init__(self, *extra, port=None):
        self.dir = tempfile.mkdtemp(prefix="pagedkv-redis-")
        self.extra = [str(a) for a in extra]
        self.proc = None
        for _ in range(5):
            self.port = port or free_port()
            if self.start():
                return
            if port:
                break
        self.close()
        raise RuntimeError("redis-server did not start")

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout=10.0):
        """(Re)starts on the same port; True once it answers PING."""
        self.stop()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning", *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self.command("PING") == "+PONG":
                return True
            time.sleep(0.02)
        self.stop()
        return False

    def command(self, *args):
        """One RESP command over a raw socket; the first reply line, or None when unreachable."""
        payload = f"*{len(args)}\r\n" + "".join(f"${len(str(a).encode())}\r\n{a}\r\n" for a in args)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                s.sendall(payload.encode())
                return s.recv(65536).split(b"\r\n", 1)[0].decode()
        except OSError:
            return None

    def dbsize(self):
        reply = self.command("DBSIZE")
        return int(reply[1:]) if reply and reply.startswith(":") else -1

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
