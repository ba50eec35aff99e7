#!/usr/bin/python3
"""Differential test of cron.c against python3-croniter with zoneinfo.

    test_cron_differential.py CRON_DUMP      (ctest: cron.differential)

Draws random cron expressions within the features both implementations
support (numbers, names, *, ranges, steps, lists, L in day-of-month, x#n,
7 = Sunday; 5 fields or 6 with seconds: ours has seconds first, croniter
last), random zones (the issue's list plus random zoneinfo names) and start
times within now +- 5 years, then compares the next 20 fire times of our
cron_next (through the C tool cron_dump) with croniter's.

Every disagreement is classified, or the test fails:
  (b) croniter's DST bugs (LIBRARY-NOTES.md section 7), when our 20 fire
      times equal an independent model of our rule (matching wall times
      mapped to instants with zoneinfo's fold and gap handling, following
      cron_default_dst: fixed hour: skipped -> the transition instant,
      repeated -> first; '*' or a step in the hour: skipped -> nothing,
      repeated -> both), counted apart: "b" when a fire time of either side
      at the first difference is within a day of an offset change, "b2"
      when the offset changed between the previous fire (or the start) and
      it (croniter computes the wall time of a later month with the offset
      of the earlier one: an hour early or late all day);
  (c) deliberate differences, each expressed here rather than tolerated:
      the day-of-month/day-of-week rule (ours: a field starting with '*'
      is unrestricted, so "*/2 ... 1" is AND; croniter ORs it) is given
      to croniter as day_or, so it never shows as a disagreement; and
      croniter stops searching after 50 years where ours searches 400
      ("c-croniter-raised": croniter raised, ours found the same fires and more).
Anything else is (a), a bug of ours: the test prints it and fails.

RMQS_CRON_SEED fixes the seed (printed either way), RMQS_CRON_CASES the
number of cases (default 10000).
"""
import datetime as dt
import heapq
import math
import os
import random
import subprocess
import sys
import time
from zoneinfo import ZoneInfo, available_timezones

from croniter import croniter

COUNT = 20
YEAR_MS = 365 * 86400 * 1000
DAY_S = 86400
FIXED_ZONES = ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe",
               "Asia/Kathmandu", "Pacific/Apia", "UTC"]
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep",
          "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def gen_atom(rng, lo, hi, names=None):
    """One list item: a value, a range, a step or a range with a step."""
    def val(v):
        if names is not None and rng.random() < 0.3:
            return names[(v - lo) % len(names)] if v <= lo + len(names) - 1 else str(v)
        return str(v)
    kind = rng.random()
    if kind < 0.45:
        return val(rng.randint(lo, hi))
    a = rng.randint(lo, hi)
    b = rng.randint(a, hi)
    if kind < 0.75:
        return f"{val(a)}-{val(b)}"
    step = rng.randint(1, max(1, (hi - lo) // 2))
    if kind < 0.9:
        return f"{a}-{b}/{step}"
    return f"{a}/{step}"


def gen_field(rng, lo, hi, star=0.4, names=None):
    r = rng.random()
    if r < star:
        return "*"
    if r < star + 0.12:
        return f"*/{rng.randint(1, max(1, (hi - lo) // 2))}"
    return ",".join(gen_atom(rng, lo, hi, names) for _ in range(rng.choice([1, 1, 1, 2, 3])))


def gen_expr(rng):
    """(ours, croniter's, day_or): the same expression in both dialects."""
    sec = gen_field(rng, 0, 59, star=0.3) if rng.random() < 0.25 else None
    minute = gen_field(rng, 0, 59, star=0.25)
    hour = gen_field(rng, 0, 23, star=0.4)
    r = rng.random()
    if r < 0.08:
        dom = rng.choice(["L", "L", f"{rng.randint(1, 28)},L"])
    else:
        dom = gen_field(rng, 1, 31, star=0.6)
    month = gen_field(rng, 1, 12, star=0.6, names=MONTHS)
    r = rng.random()
    if r < 0.06:
        dow = f"{rng.choice([rng.randint(0, 7), DAYS[rng.randint(0, 6)]])}#{rng.randint(1, 5)}"
    else:
        dow = gen_field(rng, 0, 7, star=0.6, names=DAYS)
    ours = " ".join(([sec] if sec is not None else []) + [minute, hour, dom, month, dow])
    return ours, (sec, minute, hour, dom, month, dow)


def croniter_variants(fields):
    """The croniter expressions (seconds last) whose union is our expression.

    Ours: day-of-month and day-of-week both restricted (neither starts with
    '*') is OR. croniter's own OR (day_or=True) is not usable for it: it ANDs
    x#n with a restricted day-of-month, and it reads a field that lists every
    value ("1-7") as '*'. So the OR is given as the union of two expressions,
    each with one day field; every other case is croniter's AND.
    """
    sec, minute, hour, dom, month, dow = fields
    def join(d, w):
        return " ".join([minute, hour, d, month, w] + ([sec] if sec is not None else []))
    if dom.startswith("*") or dow.startswith("*"):
        return [join(dom, dow)]
    return [join(dom, "*"), join("*", dow)]


def croniter_fires(variants, zone, start_ms):
    """Up to COUNT fire ms from croniter (the union of the variants); (fires, raised)."""
    z = ZoneInfo(zone)
    start = dt.datetime.fromtimestamp(start_ms / 1000, tz=z)
    found, raised = set(), False
    for expr in variants:
        try:
            it = croniter(expr, start, day_or=False)
            for _ in range(COUNT):
                d = it.get_next(dt.datetime)
                found.add(int(round(d.timestamp())) * 1000)
        except Exception:  # CroniterBadDateError and friends: it gave up
            raised = True
    return sorted(found)[:COUNT], raised


def expand(field, lo, hi, names):
    """The values of a generated field and its L / x#n specials (the model's own parser)."""
    def val(t):
        t = t.lower()
        return names.index(t) + lo if names is not None and t in names else int(t)
    vals, last, nth = set(), False, set()
    for item in field.split(","):
        if item == "L":
            last = True
            continue
        if "#" in item:
            d, n = item.split("#")
            nth.add((val(d) % 7, int(n)))
            continue
        step, stepped = 1, "/" in item
        if stepped:
            item, st = item.split("/")
            step = int(st)
        if item == "*":
            a, b = lo, (6 if names is DAYS else hi)
        elif "-" in item:
            a, b = (val(x) for x in item.split("-"))
        else:
            a = val(item)
            b = hi if stepped else a
        vals.update(range(a, b + 1, step))
    if names is DAYS:
        vals = {v % 7 for v in vals}
    return vals, last, nth


def model_walls(fields, start):
    """Matching naive wall times from start's day on, in order: a plain
    brute-force reading of the fields, independent of cron.c and croniter."""
    sec, minute, hour, dom, month, dow = fields
    S = sorted(expand(sec, 0, 59, None)[0]) if sec is not None else [0]
    M = sorted(expand(minute, 0, 59, None)[0])
    H = sorted(expand(hour, 0, 23, None)[0])
    D, dlast, _ = expand(dom, 1, 31, None)
    MON = expand(month, 1, 12, MONTHS)[0]
    W, _, wnth = expand(dow, 0, 7, DAYS)
    both = not dom.startswith("*") and not dow.startswith("*")
    day = first = start.replace(hour=0, minute=0, second=0, microsecond=0)
    # cron_next searches 400 Gregorian years (146,097 days) from where it
    # starts, and each of the COUNT fires starts where the last one was: so
    # the search ends 400 years after the last match, not after the start
    # ('* 17 * feb wed#5' fires once in 28 years or so: 20 fires span ~560)
    idle = 0
    while idle < 146097:
        idle += 1
        if day.month in MON:
            nxt = day.replace(day=28) + dt.timedelta(days=4)
            dim = (nxt - dt.timedelta(days=nxt.day)).day
            wd = (day.weekday() + 1) % 7
            dm = day.day in D or (dlast and day.day == dim)
            wm = wd in W or (wd, (day.day - 1) // 7 + 1) in wnth
            if (dm or wm) if both else (dm and wm):
                for h in H:
                    if day == first and h < start.hour:
                        continue
                    for mi in M:
                        if day == first and (h, mi) < (start.hour, start.minute):
                            continue
                        for s in S:
                            w = day.replace(hour=h, minute=mi, second=s)
                            if w >= start:
                                idle = 0
                                yield w
        day += dt.timedelta(days=1)


def utc_offset(z, s):
    return dt.datetime.fromtimestamp(s, tz=z).utcoffset().total_seconds()


def near_transition(z, ms):
    """Whether the zone's offset changes within a day of instant ms."""
    s = ms // 1000
    base = utc_offset(z, s - DAY_S)
    return any(utc_offset(z, s - DAY_S + h * 3600) != base for h in range(1, 49))


def wall_instants(w, z, skipped_next, repeated_both):
    """The fire instants (s) of naive wall time w under our rule, by zoneinfo."""
    a = w.replace(tzinfo=z, fold=0)
    b = w.replace(tzinfo=z, fold=1)
    ta, tb = int(a.timestamp()), int(b.timestamp())
    valid = [t for t in sorted({ta, tb})
             if dt.datetime.fromtimestamp(t, tz=z).replace(tzinfo=None) == w]
    if valid:
        return valid if repeated_both else valid[:1]
    if not skipped_next:
        return []
    # a gap: the transition lies in (min, max]; the first instant of the new offset
    lo, hi = min(ta, tb), max(ta, tb)
    after = utc_offset(z, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if utc_offset(z, mid) == after:
            hi = mid
        else:
            lo = mid
    return [hi]


def model_fires(fields, zone, start_ms):
    """Our rule, computed independently of cron.c: model_walls + zoneinfo."""
    z = ZoneInfo(zone)
    wild = "*" in fields[2] or "/" in fields[2]
    skipped_next, repeated_both = (not wild), wild
    start_s = math.floor(start_ms / 1000)
    local = dt.datetime.fromtimestamp(start_s, tz=z).replace(tzinfo=None)
    epoch = dt.datetime(1970, 1, 1)

    def offsets_near(s):  # hourly samples 30 h either side
        return [utc_offset(z, s + h * 3600) for h in range(-30, 31)]
    # walls before the start's own wall time map after the start only if
    # the offset drops soon after it: begin that much earlier
    back = max(0, utc_offset(z, start_s) - min(offsets_near(start_s)))
    found, bound = [], None
    for w in model_walls(fields, local - dt.timedelta(seconds=back + 1)):
        new = [t * 1000 for t in wall_instants(w, z, skipped_next, repeated_both)
               if t * 1000 > start_ms]
        if new:
            before = found[-1] if len(found) == COUNT else None
            found = sorted(set(found + new))[:COUNT]
            if len(found) == COUNT and found[-1] != before:
                # no wall after found[-1] + the largest offset near it maps before it
                bound = found[-1] // 1000 + max(offsets_near(found[-1] // 1000))
        if bound is not None and (w - epoch).total_seconds() > bound:
            break
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tool = sys.argv[1]
    seed = int(os.environ.get("RMQS_CRON_SEED") or time.time_ns() % 2**32)
    cases = int(os.environ.get("RMQS_CRON_CASES") or 10000)
    rng = random.Random(seed)
    print(f"cron.differential: seed {seed} (RMQS_CRON_SEED={seed} repeats it), {cases} cases")
    zones = sorted(z for z in available_timezones()
                   if os.path.isfile(os.path.join("/usr/share/zoneinfo", z)))
    now_ms = int(time.time() * 1000)
    plan = []
    for _ in range(cases):
        ours, fields = gen_expr(rng)
        zone = rng.choice(FIXED_ZONES) if rng.random() < 0.5 else rng.choice(zones)
        start = now_ms + rng.randint(-5 * YEAR_MS, 5 * YEAR_MS)
        plan.append((ours, croniter_variants(fields), fields, zone, start))

    t0 = time.monotonic()
    lines = "".join(f"{p[0]}\t{p[3]}\t{p[4]}\t{COUNT}\n" for p in plan)
    res = subprocess.run([tool], input=lines, capture_output=True, text=True, check=False)
    if res.returncode != 0 or res.stderr:
        sys.stderr.write(res.stderr)
        sys.exit(f"cron_dump failed (exit {res.returncode})")
    answers = res.stdout.splitlines()
    t_ours = time.monotonic() - t0
    if len(answers) != len(plan):
        sys.exit(f"cron_dump answered {len(answers)} lines for {len(plan)} cases: {res.stderr}")

    counts = {"agreed": 0, "b-croniter-dst": 0, "b-croniter-offset": 0, "c-croniter-raised": 0,
              "d-croniter-wrong": 0,
              "a-ours-wrong": 0}
    examples = {k: [] for k in counts}
    for (ours_e, variants, fields, zone, start), answer in zip(plan, answers):
        if not answer.startswith("OK"):
            counts["a-ours-wrong"] += 1
            examples["a-ours-wrong"].append(f"{ours_e!r} {zone}: we rejected it: {answer}")
            continue
        ours = [int(x) for x in answer.split()[1:]]
        theirs_fires, raised = croniter_fires(variants, zone, start)
        if ours == theirs_fires:
            counts["agreed"] += 1
            continue
        i = next((k for k in range(min(len(ours), len(theirs_fires)))
                  if ours[k] != theirs_fires[k]), min(len(ours), len(theirs_fires)))
        desc = (f"{ours_e!r} in {zone} after {start}: first difference at #{i}: "
                f"ours {ours[i] if i < len(ours) else None}, "
                f"croniter {theirs_fires[i] if i < len(theirs_fires) else None}")
        if raised and ours[:len(theirs_fires)] == theirs_fires and \
                model_fires(fields, zone, start) == ours:
            cls = "c-croniter-raised"
        else:
            z = ZoneInfo(zone)
            near = any(near_transition(z, side[i]) for side in (ours, theirs_fires)
                       if i < len(side))
            model = model_fires(fields, zone, start)
            prev = (ours[i - 1] if i > 0 else start) // 1000
            crossed = any(utc_offset(z, prev) != utc_offset(z, side[i] // 1000)
                          for side in (ours, theirs_fires) if i < len(side))
            if model == ours and near:
                cls = "b-croniter-dst"
            elif model == ours and crossed:
                cls = "b-croniter-offset"
            elif model == ours:
                cls = "d-croniter-wrong"
            else:
                cls = "a-ours-wrong"
                desc += f"; near a transition: {near}; model agrees with ours: {model == ours}"
        counts[cls] += 1
        examples[cls].append(desc)

    elapsed = time.monotonic() - t0
    summary = (f"cron.differential: seed {seed}, {cases} cases, {counts['agreed']} agreed, "
               f"{counts['b-croniter-dst']} croniter DST bug within a day of a transition (b), "
               f"{counts['b-croniter-offset']} croniter carried an offset across a transition (b2), "
               f"{counts['c-croniter-raised']} croniter raised, ours = model (c), "
               f"{counts['d-croniter-wrong']} croniter wrong away from transitions (d), "
               f"{counts['a-ours-wrong']} unclassified (a); "
               f"cron_dump {t_ours:.1f} s, total {elapsed:.1f} s")
    print(summary)
    # tests/run.sh prints this file at the end, so CI's output has the counts.
    if os.environ.get("RMQS_TEST_REPORT"):
        with open(os.environ["RMQS_TEST_REPORT"], "a") as f:
            f.write(summary + "\n")
    for cls, ex in examples.items():
        for line in ex[:5 if cls != "a-ours-wrong" else 40]:
            print(f"  [{cls}] {line}")
    sys.exit(1 if counts["a-ours-wrong"] else 0)


if __name__ == "__main__":
    main()
