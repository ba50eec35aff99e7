"""A tiny filesystem to fill: a 2 MiB tmpfs mounted under a test's folder
(the tests run as root) with a 1 MiB filler file written first, so a
database on it runs out of space soon; deleting the filler is how space
comes back. Used by the full-disk tests (test_disk_full.py, and the AMQP
ingest's inbox on a full disk). A machine that does not allow the mount
skips the test.
"""

import os
import subprocess

FS_SIZE = "2m"
FILLER_BYTES = 1024 * 1024


def mount(path):
    """Mount a FS_SIZE tmpfs on the (existing, empty) folder path; skip the
    test when mounting is not permitted."""
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE}", "tmpfs",
                        str(path)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    if r.returncode != 0:
        import pytest  # pylint: disable=import-outside-toplevel
        pytest.skip(f"mounting a tmpfs is not permitted here (needs root with "
                    f"CAP_SYS_ADMIN): {r.stderr.strip()}")


def umount(path):
    r = subprocess.run(["umount", str(path)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    if r.returncode != 0:  # still busy: detach it, it goes when released
        r2 = subprocess.run(["umount", "-l", str(path)], capture_output=True,
                            text=True, stdin=subprocess.DEVNULL, timeout=30)
        assert r2.returncode == 0, f"cannot unmount {path}: {r.stderr} {r2.stderr}"


def write_filler(path):
    with open(path, "wb") as f:
        f.write(os.urandom(FILLER_BYTES))
        f.flush()
        os.fsync(f.fileno())


def mount_filled(path):
    """Make the folder path, mount the tmpfs on it and write the filler
    (path/"filler"); unmounted again if the filler cannot be written.
    Returns the filler's path: delete it to give the space back. The caller
    unmounts when done (release, or umount)."""
    path.mkdir()
    mount(path)
    filler = path / "filler"
    try:
        write_filler(filler)
    except BaseException:
        umount(path)
        raise
    return filler


def release(path, svc):
    """The end of a full-disk test: stop the service running on the tmpfs
    (if it was started: svc may be None), then unmount. Returns the stop's
    problem (None: it exited 0 on SIGTERM), for the test to assert on after
    the unmount."""
    try:
        return svc.stop() if svc is not None else None
    finally:
        umount(path)
