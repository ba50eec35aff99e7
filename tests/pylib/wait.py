"""Free loopback ports and waiting on a condition with a deadline: what every
harness needs before it can start anything (no sleep-and-hope)."""

import socket
import time


def free_port(host="127.0.0.1"):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n, host="127.0.0.1"):
    """n distinct free ports (all bound at once, then released)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(family)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(predicate, timeout, what, interval=0.05):
    """Call predicate until it returns something truthy, and return that.
    Fail with `what` if it has not by the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def port_open(port, host="127.0.0.1"):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False
