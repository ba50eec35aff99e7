"""The README's quick start, run as written against the real service: only
the service's URL (this test's port) is replaced, and the library is found
on PYTHONPATH, so the documented example cannot drift from the library."""

import os
import re
import subprocess
import sys

from service import Service

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.dirname(HERE)


def test_the_readme_quick_start_runs_as_written():
    with open(os.path.join(LIBRARY, "README.md"), encoding="utf-8") as f:
        md = f.read()
    m = re.search(r"## Quick start.*?```python\n(.*?)```", md, re.S)
    assert m, 'README.md has a python block under "## Quick start"'
    code = m.group(1)
    assert '"http://127.0.0.1:8080"' in code
    s = Service().start()
    try:
        code = code.replace('"http://127.0.0.1:8080"', repr(s.url))
        path = os.path.join(s.dir, "quickstart.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        env = {k: v for k, v in os.environ.items() if k != "RMQS_API_TOKEN"}
        env["PYTHONPATH"] = LIBRARY
        r = subprocess.run([sys.executable, path], env=env, timeout=120,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        # What its comments say it prints.
        assert "'status': 'pending'" in r.stdout
        assert re.search(r"^delay_ms delay_ms: must not be negative",
                         r.stdout, re.M), r.stdout[:2000]
    finally:
        s.destroy()
