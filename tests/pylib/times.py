"""Time as the API writes it: RFC 3339 with milliseconds, and epoch
milliseconds. Tests build every time relative to now, never the calendar."""

import datetime
import time


def now_ms():
    return time.time_ns() // 1_000_000


def parse_ts(text):
    """RFC 3339 text -> seconds since the epoch (float)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def ts_ms(text):
    return round(parse_ts(text) * 1000)


def format_ts(epoch_s, offset_minutes=0):
    """Seconds since the epoch -> RFC 3339 with milliseconds and the given
    UTC offset ("Z" for 0)."""
    tz = datetime.timezone(datetime.timedelta(minutes=offset_minutes))
    d = datetime.datetime.fromtimestamp(epoch_s, tz)
    text = d.isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def format_ts_ms(ms):
    """Epoch milliseconds (an int) -> RFC 3339 UTC with exactly those
    milliseconds (no float rounding)."""
    d = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
