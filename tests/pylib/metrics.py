"""GET /metrics read as the tests read it: {series text: value}, the series
text exactly as the service writes it (name and labels, e.g.
'rmqs_jobs_published_total{result="sent"}'). test_metrics.py checks the
exposition format itself (promtool, labels, types) with a parser of its own;
everything else that only needs a figure reads it here (a series may be
named with some of its labels only: Scrape).
"""

import re

from pylib.http import http_request_text


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _parts(series):
    name, _, rest = series.partition("{")
    return name, dict(_LABEL.findall(rest))


class Scrape(dict):
    """{series text: value}; get() and [] also answer a series named with
    some of its labels only: the sum of every series of that name whose
    labels include those (the whole-database gauges carry a store label a
    test need not spell out)."""

    def _sum(self, series):
        name, want = _parts(series)
        hits = [v for k, v in self.items()
                if _parts(k)[0] == name and want.items() <= _parts(k)[1].items()]
        return sum(hits) if hits else None

    def get(self, series, default=None):
        if dict.__contains__(self, series):
            return dict.__getitem__(self, series)
        v = self._sum(series)
        return default if v is None else v

    def __getitem__(self, series):
        v = self.get(series, _MISSING)
        if v is _MISSING:
            raise KeyError(series)
        return v


def metrics(svc):
    """Scrape of GET /metrics."""
    r = http_request_text(svc.port, "/metrics")
    assert r.status == 200, r
    out = Scrape()
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
