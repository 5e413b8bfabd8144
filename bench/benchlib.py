"""What every benchmark script needs: free loopback ports, waiting for a
server to answer, and the CPU time a process has used."""
import os
import socket
import time
import urllib.error
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")
_handed_out = set()


def free_port():
    """A free loopback port, never one handed out before by this process: the
    kernel may offer a just-released port again, and vsr binds with
    SO_REUSEPORT, so two listeners given the same port would share it."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def wait_http(url, timeout=15, what=""):
    """Returns once url answers at all (an HTTP error status counts)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except Exception:
            time.sleep(0.05)
    raise SystemExit(f"bench: {what or url} did not come up ({url})")


def cpu_seconds(pids):
    """utime + stime of the processes (all their threads), in seconds."""
    total = 0
    for p in pids:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)
    return total / CLK_TCK


def rss_kb(pid):
    """The process's resident set size in kB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
