"""Processes the harnesses start or watch: resident memory from /proc, ending
a child by its PID, and Go client programs built once per run."""

import atexit
import os
import shutil
import signal
import subprocess
import tempfile

_GO_BUILT = {}


def go_build(source):
    """The path of the Go program `source` (standard library only), built
    once per test process with `go build`, as `go run` would but without
    compiling it for every run. No network and no module downloads. The
    caller checks first that `go` is on PATH (shutil.which)."""
    if source not in _GO_BUILT:
        folder = tempfile.mkdtemp(prefix="rmqs-go-")
        atexit.register(shutil.rmtree, folder, True)
        out = os.path.join(folder, os.path.splitext(os.path.basename(source))[0])
        env = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=mod",
                   GO111MODULE="on", GOTOOLCHAIN="local", CGO_ENABLED="0")
        if not env.get("HOME"):  # else the build cache is Go's default
            env["GOCACHE"] = os.path.join(folder, "gocache")
        r = subprocess.run([shutil.which("go"), "build", "-o", out, source],
                           capture_output=True, text=True, timeout=600, env=env,
                           cwd=folder, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, \
            f"go build {os.path.basename(source)} failed:\n{r.stdout}{r.stderr}"
        _GO_BUILT[source] = out
    return _GO_BUILT[source]


def _status_bytes(pid, field):
    """A memory field of /proc/<pid>/status (kB there), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for pid {pid}")


def rss_bytes(pid):
    """Resident memory of a process now (VmRSS), in bytes."""
    return _status_bytes(pid, "VmRSS")


def peak_rss_bytes(pid):
    """The most resident memory of a process since it started or since
    reset_peak_rss (VmHWM), in bytes."""
    return _status_bytes(pid, "VmHWM")


def reset_peak_rss(pid):
    """Start VmHWM again from the current RSS (Linux: clear_refs 5)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def rss_kib(pid):
    """{"rss_kib": VmRSS, "hwm_kib": VmHWM} of a process, in KiB (None for
    what cannot be read)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return {"rss_kib": out.get("VmRSS"), "hwm_kib": out.get("VmHWM")}


def pid_alive(pid):
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_proc(proc, timeout=20, sig=signal.SIGTERM):
    """End a process this harness started (a Popen, by its PID): sig, then
    SIGKILL after timeout. Returns the exit code (None if proc is None)."""
    if proc is None or proc.poll() is not None:
        return None if proc is None else proc.returncode
    try:
        proc.send_signal(sig)
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10)
