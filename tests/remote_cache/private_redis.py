"""A private redis-server on a free loopback port, with no persistence, for the remote cache's
fleet test (test_remote_cache.py) and benchmark (bench/compile_latency.py --remote-cache).
Debian's redis-server (scripts/setup.sh installs it); stopped with SIGKILL, as abruptly as a
crash."""
import signal
import socket
import subprocess
import time


class PrivateRedis:
    def __init__(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start (scripts/setup.sh installs it)")

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args):
        """redis-cli's output of one command against this server."""
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
