"""Starting the real binary on settings it must refuse: run it once (its
settings only from the arguments given, on a free loopback port, against the
run's broker) and check the refusal (an exit status, quickly, no sanitizer
report, exactly one level=error line saying why). test_startup_errors.py is
built on this; any test that checks a refused setting uses it too.
"""

import os
import signal
import subprocess
import time

from pylib.runenv import env
from pylib.service import SANITIZER_MARKERS
from pylib.wait import free_port

FAIL_WITHIN_S = 5  # "at once", with ASan start-up on a busy machine


def run_binary(args, extra_env=None, timeout=FAIL_WITHIN_S + 10):
    """Run the real binary (settings only from args and extra_env) on a free
    loopback port against the test broker. Returns (exit status, stderr,
    seconds). A process that is still running at the timeout is killed by
    its PID and the test fails."""
    e = {k: v for k, v in os.environ.items()
         if not (k.startswith("RMQS_") and not k.startswith("RMQS_TEST"))}
    e.update(extra_env or {})
    cmd = [env("RMQS_BIN"), "--listen", f"127.0.0.1:{free_port()}",
           "--amqp-url", env("RMQS_TEST_AMQP_URL"), *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=e, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"{' '.join(args)}: still running after {timeout} s "
                             f"instead of refusing to start; stderr:\n{err[-3000:]}")
    return proc.returncode, out + err, time.monotonic() - t0


def assert_refused(result, codes, *alternatives, must=()):
    """The process refused to start: exit status in codes, quickly, no
    sanitizer report, exactly one level=error line, which contains every
    string of `must` and at least one of `alternatives` (case-insensitive).
    Returns that line."""
    code, text, secs = result
    assert code in codes, f"exit status {code}, expected one of {codes}:\n{text[-3000:]}"
    assert secs <= FAIL_WITHIN_S, f"took {secs:.1f} s to refuse"
    for marker in SANITIZER_MARKERS:
        assert marker not in text, f"sanitizer report:\n{text[-6000:]}"
    errors = [line for line in text.splitlines() if "level=error" in line]
    assert len(errors) == 1, f"expected exactly one level=error line:\n{text[-3000:]}"
    line = errors[0]
    for s in must:
        assert s.lower() in line.lower(), f"{s!r} not in the error line: {line}"
    if alternatives:
        assert any(a.lower() in line.lower() for a in alternatives), \
            f"none of {alternatives} in the error line: {line}"
    return line
