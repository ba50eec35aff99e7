"""What tests/run.sh exports for the harnesses (RMQS_BIN, RMQS_TEST_*): read
in one place, so a test started outside run.sh says what is missing instead
of failing somewhere later."""

import os


def env(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(
            f"{name} is not set: run the integration tests through tests/run.sh")
    return value
