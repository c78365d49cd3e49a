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


def free_cluster_port():
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(100):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisCluster:
    """A Redis Cluster of the caller's own: `masters` masters with `replicas` replicas each, every
    node a RedisServer (loopback, free ports, temporary directories, no persistence) joined by
    `redis-cli --cluster create`, with a short node timeout so a killed master's replica takes
    over within seconds. Always stopped (use as a context manager); waits are bounded."""

    def __init__(self, masters=3, replicas=1, node_timeout_ms=1000):
        self.nodes = []
        try:
            for _ in range(masters * (1 + replicas)):
                self.nodes.append(RedisServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                              "--cluster-node-timeout", node_timeout_ms,
                                              "--cluster-require-full-coverage", "no",
                                              "--repl-diskless-sync-delay", "0", port=free_cluster_port()))
            create = subprocess.run(["redis-cli", "--cluster", "create",
                                     *[f"127.0.0.1:{n.port}" for n in self.nodes],
                                     "--cluster-replicas", str(replicas), "--cluster-yes"],
                                    capture_output=True, text=True, timeout=60)
            if create.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {create.stdout[-2000:]}{create.stderr[-2000:]}")
            self.wait_healthy(30)
        except BaseException:
            self.close()
            raise

    @property
    def url(self):
        return "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])

    def info(self, node, section):
        """A node's INFO or CLUSTER INFO text ('' when it does not answer)."""
        args = ["CLUSTER", "INFO"] if section == "cluster" else ["INFO", section]
        out = subprocess.run(["redis-cli", "-p", str(node.port), *args], capture_output=True, text=True, timeout=10)
        return out.stdout if out.returncode == 0 else ""

    def healthy(self):
        for n in self.nodes:
            if n.proc is None or n.proc.poll() is not None:
                continue
            cluster = self.info(n, "cluster")
            if "cluster_state:ok" not in cluster or "cluster_slots_ok:16384" not in cluster:
                return False
            repl = self.info(n, "replication")
            if "role:slave" in repl and "master_link_status:up" not in repl:
                return False
        return True

    def wait_healthy(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return
            time.sleep(0.1)
        raise RuntimeError("the Redis cluster did not become healthy")

    def masters(self):
        """The running nodes that are masters now."""
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None
                and "role:master" in self.info(n, "replication")]

    def close(self):
        for n in self.nodes:
            n.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
