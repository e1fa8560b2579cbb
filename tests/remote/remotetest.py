"""What the two remote test scripts share (test_remote.py against a real
redis-server, test_hostile_server.py against a fake one): the kcache they
run, the kernels they compile, and a cache with a remote set.
"""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyhelp"))
import kctest  # noqa: E402

# kcache-fill from the environment: the arguments after KCACHE name tests to run.
kctest.setup(sys.argv[1] if len(sys.argv) > 1 else "kcache", os.environ.get("KCACHE_FILL"))
TOOLKIT = os.environ.get("CUDA_HOME", "/usr/local/cuda")
TINY = 'extern "C" __global__ void k%d(float *x) { x[threadIdx.x] *= %d.0f; }\n'


def have_toolkit():
    return os.path.exists(os.path.join(TOOLKIT, "include", "cuda.h"))


class Cache(kctest.Cache):
    """A cache of its own whose remote is url: timeout_ms for an operation, 500 ms to connect."""

    def __init__(self, root, name, url, extra_env=None, timeout_ms=500):
        env = {"KCACHE_REMOTE": url, "KCACHE_REMOTE_TIMEOUT": str(timeout_ms),
               "KCACHE_REMOTE_CONNECT_TIMEOUT": "500"}
        env.update(extra_env or {})
        super().__init__(root, name, env)


def kernel(root, n, text=None):
    """A kernel file of its own (k<n>.cu), TINY unless text is given."""
    path = os.path.join(root, "k%d.cu" % n)
    with open(path, "w") as f:
        f.write(text if text is not None else TINY % (n, n))
    return path


class FakeServer:
    """A server of our own on 127.0.0.1 for the hostile tests: a thread per
    connection runs self.handle(conn); it never outlives lifetime seconds."""

    def __init__(self, mode, lifetime=90):
        self.mode = mode
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop_at = time.monotonic() + lifetime
        self.stopped = False
        self.sent = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def alive(self):
        return not self.stopped and time.monotonic() < self.stop_at

    def serve(self):
        while self.alive():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def drip(self, conn, head, n):
        """Sends head, then n bytes, one every 0.25 s; False when stopped before the end."""
        conn.sendall(head)
        for _ in range(n):
            if not self.alive():
                return False
            conn.sendall(b"x")
            self.sent += 1
            time.sleep(0.25)
        return True

    def flood(self, conn, head):
        """Sends head, then bytes as fast as the socket takes them (up to 256 MiB), then
        nothing: a client still reading waits for its deadline. Raises once it has closed."""
        conn.sendall(head)
        chunk = b"\0" * (1 << 20)
        conn.settimeout(5.0)
        while self.alive() and self.sent < (256 << 20):
            conn.sendall(chunk)
            self.sent += len(chunk)
        while self.alive():
            time.sleep(0.1)

    def stop(self):
        self.stopped = True
        self.sock.close()
