"""HTTPS: the service with a certificate of a private CA (a self-signed one
made here with openssl), the client trusting it through an SSLContext."""

import os
import shutil
import ssl
import subprocess

import pytest

from rmq_scheduler import Client, ConnectionError, Retry
from service import Service


@pytest.mark.skipif(not shutil.which("openssl"), reason="no openssl")
def test_https_with_a_context_that_trusts_the_certificate():
    s = Service()
    cert = os.path.join(s.dir, "cert.pem")
    key = os.path.join(s.dir, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
         "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", key, "-out", cert],
        check=True, capture_output=True)
    s.args = ["--tls-cert-file", cert, "--tls-key-file", key]
    s.scheme = "https"
    s.start(wait=False)  # Service.api() would not trust the CA
    ctx = ssl.create_default_context(cafile=cert)
    try:
        with Client(s.url, ssl_context=ctx,
                    retry=Retry(attempts=60, base=0.05, cap=0.2)) as c:
            assert c.status()["database"]["state"] == "up"
            futures = [c.schedule_async({"exchange": "e", "routing_key": "tls",
                                         "body": {"i": i}, "delay_ms": 60000})
                       for i in (1, 2, 3)]
            jobs = [f.result(10) for f in futures]
            assert c.get(jobs[2]["id"])["body"]["i"] == 3
        with Client(s.url, retry=Retry(attempts=1)) as untrusting:
            with pytest.raises(ConnectionError, match="(?i)certificate"):
                untrusting.status()
    finally:
        s.destroy()
