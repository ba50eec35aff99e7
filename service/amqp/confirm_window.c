/*
 * confirm_window.c - delivery tags to jobs, and each job's outcome reported
 * exactly once (the contract is in confirm_window.h).
 *
 * Why this exists: see the header. This file holds the rules only; the
 * frames they come from are read by amqp_publisher.c.
 *
 * DESIGN
 * - One array of cap slots, allocated once: tag t lives in
 *   win[(t - 1) % cap]. low_tag is the oldest tag not yet reported and
 *   next_tag the one the next publish gets, so at most cap tags lie between
 *   them (cwin_full). Slots below low_tag are free; slots between may be
 *   free too (a single ack out of order), and low_tag moves past them when
 *   the oldest is settled, so a run of multiple acks costs O(window) in
 *   total. Nothing grows with the number of publishes.
 * - A slot is free, in flight, or returned (basic.return seen, its ack
 *   still due). Reporting frees the slot before the report function runs,
 *   so a job can be reported only once.
 * - Returns carry no delivery tag: they are matched by job id, searching on
 *   from just after the previous match, since returns come in publish
 *   order (the same id twice in flight, a republish, takes them in turn).
 * - Acks below low_tag are for tags already reported (or given up on) and
 *   are ignored; tags only grow on a channel, so a late ack cannot be
 *   credited to a later job. A new channel starts again at 1, which only
 *   happens once the window is empty.
 */
#include "confirm_window.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum slot_state {
    SLOT_FREE = 0, /* unused (reported) */
    SLOT_INFLIGHT, /* published, not settled */
    SLOT_RETURNED  /* published, returned, its ack still due */
};

typedef struct slot {
    const char *job_id;   /* borrowed until reported */
    const char *exchange; /* borrowed until reported */
    void *ctx;            /* the caller's, given back in the report */
    int64_t sent_ms;
    unsigned char state;
    char reason[256]; /* SLOT_RETURNED: "312 NO_ROUTE" */
} slot;

struct cwin {
    slot *win; /* owned, cap slots */
    size_t cap;
    uint64_t next_tag;      /* the tag of the next publish */
    uint64_t low_tag;       /* every tag below has been reported */
    uint64_t return_cursor; /* where the next return match starts */
    size_t unconfirmed;     /* slots not SLOT_FREE */
    /* After a close that named no job: the ids of the jobs that were in
     * flight (copies), each until it is answered, and how many answers
     * the window still takes one publish at a time for them (a bound, in
     * case one never comes back: cancelled, expired...). */
    char **suspects; /* cap entries, NULL when unused */
    size_t n_suspects;
    size_t probe_budget;
    cwin_report_fn on_report;
    void *report_cls;
};

#define NACK_REASON "nacked by the broker"

cwin_t *cwin_new(size_t cap, cwin_report_fn fn, void *cls, rmqs_error *err)
{
    cwin_t *w;

    if (cap == 0 || !fn) {
        rmqs_fail(err, RMQS_EINVAL, NULL,
                  "a confirm window needs room and a report function");
        return NULL;
    }
    w = calloc(1, sizeof *w);
    if (w) {
        w->win = calloc(cap, sizeof *w->win);
    }
    if (!w || !w->win) {
        free(w);
        rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    w->cap = cap;
    w->next_tag = 1;
    w->low_tag = 1;
    w->return_cursor = 1;
    w->on_report = fn;
    w->report_cls = cls;
    return w;
}

static void clear_suspects(cwin_t *w)
{
    for (size_t i = 0; i < w->n_suspects; i++)
        free(w->suspects[i]);
    w->n_suspects = 0;
    w->probe_budget = 0;
}

void cwin_free(cwin_t *w)
{
    if (w) {
        clear_suspects(w);
        free(w->suspects);
        free(w->win);
        free(w);
    }
}

size_t cwin_unconfirmed(const cwin_t *w)
{
    return w->unconfirmed;
}

bool cwin_full(const cwin_t *w)
{
    return w->next_tag - w->low_tag >= w->cap ||
           (w->n_suspects > 0 && w->unconfirmed > 0);
}

size_t cwin_probing(const cwin_t *w)
{
    return w->n_suspects;
}

/* An answer came for job_id while probing: it is no longer a suspect. */
static void answered(cwin_t *w, const char *job_id)
{
    for (size_t i = 0; i < w->n_suspects; i++) {
        if (strcmp(w->suspects[i], job_id) == 0) {
            free(w->suspects[i]);
            w->suspects[i] = w->suspects[--w->n_suspects];
            break;
        }
    }
    if (w->n_suspects > 0 && --w->probe_budget == 0)
        clear_suspects(w); /* the others did not come back: give up */
}

uint64_t cwin_next_tag(const cwin_t *w)
{
    return w->next_tag;
}

static slot *slot_of(const cwin_t *w, uint64_t tag)
{
    return &w->win[(tag - 1) % w->cap];
}

/* Free s, then tell the owner what became of its job. */
static void report(cwin_t *w, slot *s, cwin_outcome kind, const char *reason)
{
    cwin_result r;
    void *ctx = s->ctx;

    r.kind = kind;
    snprintf(r.reason, sizeof r.reason, "%s", reason);
    if (w->n_suspects > 0 && kind != CWIN_UNSENT)
        answered(w, s->job_id);
    s->state = SLOT_FREE;
    s->job_id = NULL;
    s->exchange = NULL;
    s->ctx = NULL;
    w->unconfirmed--;
    w->on_report(w->report_cls, ctx, &r);
}

uint64_t cwin_publish(cwin_t *w, const char *job_id, const char *exchange,
                      void *ctx, int64_t now_ms)
{
    slot *s;

    if (cwin_full(w)) {
        return 0;
    }
    s = slot_of(w, w->next_tag);
    s->job_id = job_id;
    s->exchange = exchange ? exchange : "";
    s->ctx = ctx;
    s->sent_ms = now_ms;
    s->state = SLOT_INFLIGHT;
    s->reason[0] = '\0';
    w->unconfirmed++;
    return w->next_tag++;
}

/* Move low_tag past the slots already reported. */
static void advance_low(cwin_t *w)
{
    while (w->low_tag < w->next_tag &&
           slot_of(w, w->low_tag)->state == SLOT_FREE) {
        w->low_tag++;
    }
}

static size_t settle_one(cwin_t *w, slot *s, bool ack)
{
    switch (s->state) {
    case SLOT_INFLIGHT:
        report(w, s, ack ? CWIN_ACKED : CWIN_NACKED, ack ? "" : NACK_REASON);
        return 1;
    case SLOT_RETURNED:
        /* The return is the answer; a nack still wins. */
        report(w, s, ack ? CWIN_RETURNED : CWIN_NACKED,
               ack ? s->reason : NACK_REASON);
        return 1;
    default: return 0;
    }
}

static size_t settle(cwin_t *w, uint64_t tag, bool multiple, bool ack)
{
    uint64_t lo, hi, t;
    size_t n = 0;

    if (w->low_tag >= w->next_tag) {
        return 0; /* nothing in flight */
    }
    if (multiple && tag == 0) { /* AMQP: "all outstanding" */
        hi = w->next_tag - 1;
    } else if (tag < w->low_tag) {
        return 0; /* settled already (or given up on) */
    } else if (tag >= w->next_tag) {
        if (!multiple) {
            return 0; /* never handed out */
        }
        hi = w->next_tag - 1;
    } else {
        hi = tag;
    }
    lo = multiple ? w->low_tag : hi;
    for (t = lo; t <= hi; t++) {
        n += settle_one(w, slot_of(w, t), ack);
    }
    advance_low(w);
    return n;
}

size_t cwin_ack(cwin_t *w, uint64_t tag, bool multiple)
{
    return settle(w, tag, multiple, true);
}

size_t cwin_nack(cwin_t *w, uint64_t tag, bool multiple)
{
    return settle(w, tag, multiple, false);
}

bool cwin_return(cwin_t *w, const void *id, size_t id_len, const char *reason)
{
    uint64_t span = w->next_tag - w->low_tag, c, t;

    if (w->return_cursor < w->low_tag || w->return_cursor >= w->next_tag) {
        w->return_cursor = w->low_tag;
    }
    for (c = 0; id_len && c < span; c++) {
        slot *s;
        t = w->low_tag + (w->return_cursor - w->low_tag + c) % span;
        s = slot_of(w, t);
        if (s->state == SLOT_INFLIGHT && strlen(s->job_id) == id_len &&
            memcmp(s->job_id, id, id_len) == 0) {
            s->state = SLOT_RETURNED;
            snprintf(s->reason, sizeof s->reason, "%s", reason);
            w->return_cursor = t + 1;
            return true;
        }
    }
    return false;
}

/* Whether 'name' appears, single-quoted, in text (RabbitMQ's reply texts
 * quote names: "NOT_FOUND - no exchange 'x' in vhost '/'"). */
static bool quoted_in(const char *text, const char *name)
{
    size_t len = strlen(name);
    const char *q;

    for (q = strchr(text, '\''); q; q = strchr(q + 1, '\'')) {
        if (strncmp(q + 1, name, len) == 0 && q[1 + len] == '\'') {
            return true;
        }
    }
    return false;
}

/* The window is empty: the next publish is the first on a new channel. */
static void restart(cwin_t *w)
{
    w->next_tag = 1;
    w->low_tag = 1;
    w->return_cursor = 1;
}

/* Remember the jobs in flight as suspects (as many as fit: cap), and
 * allow their answers, and as many others again, one at a time. Without
 * memory for the list, nothing is remembered: the window goes on
 * pipelining, and a culprit may close a channel under others again (they
 * are published again, never charged). */
static void suspect_inflight(cwin_t *w)
{
    if (w->suspects == NULL)
        w->suspects = calloc(w->cap, sizeof *w->suspects);
    if (w->suspects == NULL)
        return;
    for (uint64_t t = w->low_tag; t < w->next_tag; t++) {
        slot *s = slot_of(w, t);
        if (s->state != SLOT_INFLIGHT || w->n_suspects == w->cap)
            continue;
        w->suspects[w->n_suspects] = strdup(s->job_id);
        if (w->suspects[w->n_suspects] != NULL)
            w->n_suspects++;
    }
    w->probe_budget = 2 * w->n_suspects + w->cap;
}

void cwin_channel_closed(cwin_t *w, const char *reason)
{
    char unsent[sizeof(((cwin_result *)0)->reason)];
    size_t matched = 0, inflight = 0;
    uint64_t t;

    for (t = w->low_tag; t < w->next_tag; t++) {
        slot *s = slot_of(w, t);
        if (s->state == SLOT_INFLIGHT && quoted_in(reason, s->exchange)) {
            report(w, s, CWIN_CLOSED, reason);
            matched++;
        } else if (s->state == SLOT_INFLIGHT) {
            inflight++;
        }
    }
    if (!matched && inflight == 1) {
        matched = 1; /* the only publish in flight: it is the one */
        for (t = w->low_tag; t < w->next_tag; t++) {
            slot *s = slot_of(w, t);
            if (s->state == SLOT_INFLIGHT)
                report(w, s, CWIN_CLOSED, reason);
        }
        inflight = 0;
    }
    if (matched) {
        snprintf(unsent, sizeof unsent,
                 "channel closed by the broker before the confirm: %.200s",
                 reason);
    } else {
        /* Nobody named: charge nobody. Each is published again, and one
         * publish at a time is in flight until each of them has been
         * answered: the one the broker refuses then closes a channel
         * alone. */
        snprintf(unsent, sizeof unsent,
                 "channel closed by the broker naming no job, with %zu "
                 "publishes in flight (published again one at a time): %.120s",
                 inflight, reason);
        suspect_inflight(w);
    }
    for (t = w->low_tag; t < w->next_tag; t++) {
        slot *s = slot_of(w, t);
        if (s->state == SLOT_INFLIGHT) {
            report(w, s, CWIN_UNSENT, unsent);
        } else if (s->state == SLOT_RETURNED) {
            report(w, s, CWIN_RETURNED, s->reason);
        }
    }
    restart(w);
}

void cwin_give_up(cwin_t *w, const char *reason)
{
    uint64_t t;

    for (t = w->low_tag; t < w->next_tag; t++) {
        slot *s = slot_of(w, t);
        if (s->state == SLOT_INFLIGHT) {
            report(w, s, CWIN_LOST, reason);
        } else if (s->state == SLOT_RETURNED) {
            report(w, s, CWIN_RETURNED, s->reason);
        }
    }
    w->low_tag = w->next_tag;
}

void cwin_connection_lost(cwin_t *w, const char *reason)
{
    cwin_give_up(w, reason);
    restart(w);
}

bool cwin_oldest(const cwin_t *w, int64_t *sent_ms)
{
    uint64_t t;

    for (t = w->low_tag; t < w->next_tag; t++) {
        const slot *s = slot_of(w, t);
        if (s->state != SLOT_FREE) {
            *sent_ms = s->sent_ms;
            return true;
        }
    }
    return false;
}
