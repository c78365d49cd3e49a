"""Starting and stopping `pagedkv serve` (and other servers) for the tests, always on 127.0.0.1.

Every server gets a free port (`--port 0`; the address it prints is read back), its own
temporary directory where it needs one, bounded waits, and is always stopped: SIGTERM, then
SIGKILL if it does not exit in time.
"""

import os
import pathlib
import select
import signal
import socket
import struct
import subprocess
import time

import requests

REPO = pathlib.Path(__file__).resolve().parents[2]


def pagedkv_bin() -> pathlib.Path:
    return pathlib.Path(os.environ.get("PAGEDKV_BIN", REPO / "build" / "pagedkv"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running `pagedkv serve`; use as a context manager (or call stop())."""

    def __init__(self, *args, start_timeout=60.0, env=None, wrap=(), binary=None, command="serve", port=0):
        """`wrap`: a command prefix that execs the server (same pid), e.g. to run it in its own
        mount namespace; `binary`: another build of pagedkv (an ASan one); `command`: "router"
        starts `pagedkv router` instead; `port`: a fixed port (a restart on the same address);
        `env`: variables to add, a value of None removes one."""
        cmd = [*wrap, str(binary or pagedkv_bin()), command, "--host", "127.0.0.1", "--port", str(port), *map(str, args)]
        environment = {**os.environ, "OMP_WAIT_POLICY": "passive", **(env or {})}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env={k: v for k, v in environment.items() if v is not None})
        self.output = []
        self.base_url = None
        self._pending = b""
        deadline = time.monotonic() + start_timeout
        try:
            while self.base_url is None:
                line = self._readline(deadline)
                if line is None:
                    raise RuntimeError(f"pagedkv {command} did not start:\n" + "".join(self.output))
                marker = "listening on "
                if marker in line:
                    self.base_url = line.split(marker, 1)[1].strip()
        except BaseException:
            self.kill()
            raise

    def _readline(self, deadline):
        """The next line of the server's output (raw reads: select() sees no Python buffers)."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            if time.monotonic() >= deadline:
                return None
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    return None  # exited
                self._pending += data
        line, self._pending = self._pending.split(b"\n", 1)
        text = line.decode(errors="replace") + "\n"
        self.output.append(text)
        return text

    def read_output(self):
        """Everything the server printed so far (after it exited: all of it)."""
        rest = self._pending + (self.proc.stdout.read() if self.proc.poll() is not None else b"")
        self._pending = b""
        self.output.append(rest.decode(errors="replace"))
        return "".join(self.output)

    def url(self, path):
        return self.base_url + path

    def post(self, path, body, **kw):
        kw.setdefault("timeout", 120)
        return requests.post(self.url(path), json=body, **kw)

    def get(self, path, **kw):
        kw.setdefault("timeout", 30)
        return requests.get(self.url(path), **kw)

    def metrics(self, **kw):
        """The /metrics samples as {(name, frozenset(labels without model_name)): value}."""
        from prometheus_client.parser import text_string_to_metric_families
        out = {}
        for family in text_string_to_metric_families(self.get("/metrics", **kw).text):
            for s in family.samples:
                labels = frozenset((k, v) for k, v in s.labels.items() if k != "model_name")
                out[(s.name, labels)] = s.value
        return out

    def stop(self, sig=signal.SIGTERM, timeout=60.0):
        """Sends `sig`, waits; returns the exit code (SIGKILL after `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                rest, _ = self.proc.communicate(timeout=timeout)
                self.output.append((rest or b"").decode(errors="replace"))
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        self.kill()


def wait_until(predicate, timeout=30.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def sse_events(response):
    """The `data:` payloads of a server-sent-event response, as they arrive. The stream is UTF-8
    (as the SSE standard says) though its content type names no charset: a charset parameter
    would make cpp-httplib gzip the stream, which then arrives only at its end."""
    response.encoding = "utf-8"
    for line in response.iter_lines(decode_unicode=True):
        if line and line.startswith("data: "):
            yield line[len("data: "):]


def gguf_with_metadata_u32(src, dst, key, value):
    """Copies a GGUF file with one more UINT32 key/value. The new key goes right after the header,
    followed by a padding string key that makes the insertion 128 bytes long: everything after it
    moves by a multiple of the file's alignment (32 unless general.alignment says 64 or 128), so
    the tensor data needs no other change (its offsets count from the aligned data start)."""
    data = pathlib.Path(src).read_bytes()
    assert data[:4] == b"GGUF" and struct.unpack_from("<I", data, 4)[0] in (2, 3)
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    k = key.encode()
    added = struct.pack("<Q", len(k)) + k + struct.pack("<II", 4, value)  # type 4: UINT32
    pad_key = b"pagedkv.test.padding." + k  # one per added key: a file may get several
    fixed = len(added) + 8 + len(pad_key) + 4 + 8  # the padding entry without its string bytes
    pad = b"x" * (-fixed % 128)
    added += struct.pack("<Q", len(pad_key)) + pad_key + struct.pack("<IQ", 8, len(pad)) + pad  # type 8: STRING
    assert len(added) % 128 == 0
    pathlib.Path(dst).write_bytes(data[:16] + struct.pack("<Q", n_kv + 2) + added + data[24:])
