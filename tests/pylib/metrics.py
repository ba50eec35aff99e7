"""GET /metrics read as the tests read it: {series text: value}, the series
text exactly as the service writes it (name and labels, e.g.
'rmqs_jobs_published_total{result="sent"}'). test_metrics.py checks the
exposition format itself (promtool, labels, types) with a parser of its own;
everything else that only needs a figure reads it here.
"""

from pylib.http import http_request_text


def metrics(svc):
    """{series text: value} of GET /metrics."""
    r = http_request_text(svc.port, "/metrics")
    assert r.status == 200, r
    out = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[series] = float(value)
    return out


_MISSING = object()


def metric(svc, series, default=_MISSING):
    """The value of one series of GET /metrics; default when it is not
    there (a counter the service writes only once non-zero), or fail when
    no default is given."""
    value = metrics(svc).get(series, default)
    assert value is not _MISSING, f"{series} not in /metrics"
    return value
