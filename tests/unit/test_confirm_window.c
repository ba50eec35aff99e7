/*
 * test_confirm_window.c - the publisher's confirm window, event by event,
 * without a broker: delivery tags to jobs, acks (single and multiple),
 * nacks, returns matched by job id, a full window, channel close,
 * connection lost, and tags restarting at 1 on a new channel. The events
 * are the frames RabbitMQ 3.10 sends in that order (LIBRARY-NOTES.md §1:
 * an unroutable mandatory message is basic.return'ed, then basic.ack'ed).
 *
 * The last test drives the window with a long seeded stream of random
 * events and checks every report against a small model of the rules: no
 * job reported twice, none forgotten, each with the outcome it is owed.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "confirm_window.h"

#define MAX_JOBS 4096
#define NO_REPORT -1

/* A job as the tests know it, and what the window said about it. */
typedef struct tjob {
    char id[32];
    const char *exchange;
    int reports; /* how many times it was reported */
    int kind;    /* its outcome, NO_REPORT until reported */
    char reason[256];
} tjob;

/* Everything reported, in order. */
typedef struct recorder {
    tjob jobs[MAX_JOBS];
    int njobs;
    int order[MAX_JOBS * 2]; /* job numbers in report order */
    int norder;
} recorder;

static void on_report(void *cls, void *ctx, const cwin_result *r)
{
    recorder *to = cls;
    tjob *j = ctx;

    j->reports++;
    j->kind = (int)r->kind;
    snprintf(j->reason, sizeof j->reason, "%s", r->reason);
    if (to->norder < (int)(sizeof to->order / sizeof to->order[0])) {
        to->order[to->norder++] = (int)(j - to->jobs);
    }
}

/* Each test runs in a process of its own (Criterion): the window under
 * test and what it reported are the test's, set up fresh by the fixture. */
static recorder *rec;
static cwin_t *w;

/* A fresh recorder and a window of cap in place of the current ones. */
static void use_window(size_t cap)
{
    rmqs_error e = {{0}, {0}};

    cwin_free(w);
    free(rec);
    rec = calloc(1, sizeof *rec);
    cr_assert_not_null(rec);
    w = cwin_new(cap, on_report, rec, &e);
    cr_assert_not_null(w, "%s", e.message);
}

static void setup(void)
{
    use_window(8);
}

static void teardown(void)
{
}

TestSuite(confirm_window, .init = setup, .fini = teardown);

/* A new job (number rec->njobs) to exchange. */
static tjob *job(const char *exchange)
{
    tjob *j;

    cr_assert_lt(rec->njobs, MAX_JOBS);
    j = &rec->jobs[rec->njobs];
    snprintf(j->id, sizeof j->id, "job-%04d", rec->njobs);
    j->exchange = exchange;
    j->kind = NO_REPORT;
    rec->njobs++;
    return j;
}

/* Publish a new job to exchange at now_ms and return its number; its tag
 * must be want_tag. */
static int publish(const char *exchange, int64_t now_ms, uint64_t want_tag)
{
    tjob *j = job(exchange);
    uint64_t tag = cwin_publish(w, j->id, j->exchange, j, now_ms);

    cr_assert_eq(tag, want_tag, "%s: tag %llu, expected %llu", j->id,
                 (unsigned long long)tag, (unsigned long long)want_tag);
    return (int)(j - rec->jobs);
}

static bool returned(int n, const char *reason)
{
    return cwin_return(w, rec->jobs[n].id, strlen(rec->jobs[n].id), reason);
}

static void expect_report(int n, cwin_outcome kind, const char *reason)
{
    const tjob *j = &rec->jobs[n];

    cr_expect_eq(j->reports, 1, "%s reported %d times", j->id, j->reports);
    cr_expect_eq(j->kind, (int)kind, "%s: outcome %d, expected %d", j->id,
                 j->kind, (int)kind);
    cr_expect_str_eq(j->reason, reason, "%s", j->id);
}

static void expect_unreported(int n)
{
    cr_expect_eq(rec->jobs[n].reports, 0, "%s reported too early",
                 rec->jobs[n].id);
}

Test(confirm_window, refuses_no_room_or_no_report_function)
{
    rmqs_error e = {{0}, {0}};

    cr_expect_null(cwin_new(0, on_report, rec, &e));
    cr_expect_str_neq(e.message, "");
    cr_expect_null(cwin_new(4, NULL, rec, NULL));
}

Test(confirm_window, tags_start_at_one_and_reports_follow_the_acks)
{
    int a, b, c;

    cr_expect_eq(cwin_next_tag(w), 1);
    a = publish("ex", 10, 1);
    b = publish("ex", 11, 2);
    c = publish("ex", 12, 3);
    cr_expect_eq(cwin_unconfirmed(w), 3);

    cr_expect_eq(cwin_ack(w, 2, false), 1);
    expect_report(b, CWIN_ACKED, "");
    expect_unreported(a);
    expect_unreported(c);

    cr_expect_eq(cwin_ack(w, 3, true), 2); /* 1 and 3; 2 is done */
    expect_report(a, CWIN_ACKED, "");
    expect_report(c, CWIN_ACKED, "");
    cr_assert_eq(rec->norder, 3);
    cr_expect_eq(rec->order[0], b);
    cr_expect_eq(rec->order[1], a); /* a multiple ack reports in tag order */
    cr_expect_eq(rec->order[2], c);
    cr_expect_eq(cwin_unconfirmed(w), 0);
    cr_expect_eq(cwin_next_tag(w), 4, "tags go on on the same channel");
}

Test(confirm_window, multiple_ack_settles_every_tag_up_to_it)
{
    int n[6], i;

    for (i = 0; i < 6; i++) {
        n[i] = publish("ex", i, (uint64_t)i + 1);
    }
    cr_expect_eq(cwin_ack(w, 4, true), 4);
    for (i = 0; i < 4; i++) {
        expect_report(n[i], CWIN_ACKED, "");
    }
    expect_unreported(n[4]);
    expect_unreported(n[5]);
    cr_expect_eq(cwin_ack(w, 4, true), 0, "the same multiple ack again");
    cr_expect_eq(cwin_ack(w, 2, false), 0, "an ack below the window");
    cr_expect_eq(cwin_ack(w, 0, true), 2, "multiple with tag 0: all");
    expect_report(n[4], CWIN_ACKED, "");
    expect_report(n[5], CWIN_ACKED, "");
    for (i = 0; i < rec->norder; i++) {
        cr_expect_eq(rec->order[i], n[i], "report %d out of order", i);
    }
}

Test(confirm_window, an_ack_for_a_tag_never_handed_out_settles_nothing)
{
    int a = publish("ex", 0, 1);

    cr_expect_eq(cwin_ack(w, 7, false), 0);
    expect_unreported(a);
    cr_expect_eq(cwin_ack(w, 7, true), 1, "multiple: up to the last one");
    expect_report(a, CWIN_ACKED, "");
    cr_expect_eq(cwin_ack(w, 1, false), 0, "nothing in flight");
}

Test(confirm_window, nack_fails_the_attempt)
{
    int a = publish("ex", 0, 1);
    int b = publish("ex", 0, 2);
    int c = publish("ex", 0, 3);

    cr_expect_eq(cwin_nack(w, 1, false), 1);
    expect_report(a, CWIN_NACKED, "nacked by the broker");
    cr_expect_eq(cwin_nack(w, 3, true), 2);
    expect_report(b, CWIN_NACKED, "nacked by the broker");
    expect_report(c, CWIN_NACKED, "nacked by the broker");
    cr_expect_eq(cwin_ack(w, 3, true), 0, "an ack after the nack");
    cr_expect_eq(rec->norder, 3);
}

/* The verified frame order for an unroutable mandatory publish between
 * routable ones: return (no tag), then ack tag 1, then ack tag 3 multiple. */
Test(confirm_window, a_return_then_its_ack_reports_returned_once)
{
    int a = publish("ex", 0, 1);
    int b = publish("ex", 0, 2);
    int c = publish("ex", 0, 3);

    cr_expect(returned(a, "312 NO_ROUTE"));
    expect_unreported(a); /* the ack is still due */
    cr_expect_eq(cwin_unconfirmed(w), 3);
    cr_expect_eq(cwin_ack(w, 1, false), 1);
    expect_report(a, CWIN_RETURNED, "312 NO_ROUTE");
    cr_expect_eq(cwin_ack(w, 3, true), 2);
    expect_report(b, CWIN_ACKED, "");
    expect_report(c, CWIN_ACKED, "");
    cr_expect_not(returned(a, "312 NO_ROUTE"),
                  "a return for a job already reported matches nothing");
    cr_expect_eq(rec->jobs[a].reports, 1);
}

Test(confirm_window, a_nack_wins_over_a_return)
{
    int a = publish("ex", 0, 1);

    cr_expect(returned(a, "312 NO_ROUTE"));
    cr_expect_eq(cwin_nack(w, 1, false), 1);
    expect_report(a, CWIN_NACKED, "nacked by the broker");
}

Test(confirm_window, a_return_for_an_unknown_id_matches_nothing)
{
    int a = publish("ex", 0, 1);

    cr_expect_not(cwin_return(w, "job-9999", 8, "312 NO_ROUTE"));
    cr_expect_not(cwin_return(w, rec->jobs[a].id, 3, "312 NO_ROUTE"),
                  "a prefix of an id is not the id");
    cr_expect_not(cwin_return(w, "", 0, "312 NO_ROUTE"), "no id at all");
    cr_expect_eq(rec->norder, 0);
    cr_expect_eq(cwin_ack(w, 1, false), 1);
    expect_report(a, CWIN_ACKED, ""); /* not marked returned */
    cr_expect_not(cwin_return(w, rec->jobs[a].id, strlen(rec->jobs[a].id),
                              "312 NO_ROUTE"),
                  "nothing in flight");
}

/* A job published again while its first publish is still in flight (a
 * republish after a channel close can do that) has the same id twice:
 * returns come in publish order, so they take the two in turn. */
Test(confirm_window, returns_for_the_same_id_take_its_publishes_in_turn)
{
    tjob *j = job("ex"), *k = job("ex");

    strcpy(k->id, j->id);
    cr_assert_eq(cwin_publish(w, j->id, j->exchange, j, 0), 1);
    cr_assert_eq(cwin_publish(w, k->id, k->exchange, k, 0), 2);
    cr_expect(cwin_return(w, j->id, strlen(j->id), "312 NO_ROUTE"));
    cr_expect(cwin_return(w, j->id, strlen(j->id), "313 NO_CONSUMERS"));
    cr_expect_not(cwin_return(w, j->id, strlen(j->id), "312 NO_ROUTE"));
    cr_expect_eq(cwin_ack(w, 2, true), 2);
    expect_report(0, CWIN_RETURNED, "312 NO_ROUTE");
    expect_report(1, CWIN_RETURNED, "313 NO_CONSUMERS");
}

/* Tags 1 and 3 carry the same id, tag 2 another. Once tag 2 is returned, a
 * return for the shared id is tag 3's: tag 1's would have come first. */
Test(confirm_window, a_return_is_matched_after_the_previous_one)
{
    int x1 = publish("ex", 0, 1);
    int y = publish("ex", 0, 2);
    tjob *x2 = job("ex");

    strcpy(x2->id, rec->jobs[x1].id);
    cr_assert_eq(cwin_publish(w, x2->id, x2->exchange, x2, 0), 3);
    cr_expect(returned(y, "312 NO_ROUTE"));
    cr_expect(returned(x1, "312 NO_ROUTE"));
    cr_expect_eq(cwin_ack(w, 3, true), 3);
    expect_report(x1, CWIN_ACKED, "");
    expect_report(y, CWIN_RETURNED, "312 NO_ROUTE");
    expect_report((int)(x2 - rec->jobs), CWIN_RETURNED, "312 NO_ROUTE");
}

Test(confirm_window, a_full_window_refuses_and_reuses_its_slots)
{
    use_window(3);
    int n[6];
    tjob *extra;

    n[0] = publish("ex", 0, 1);
    n[1] = publish("ex", 0, 2);
    n[2] = publish("ex", 0, 3);
    cr_expect(cwin_full(w));
    extra = job("ex");
    cr_expect_eq(cwin_publish(w, extra->id, extra->exchange, extra, 0), 0);
    cr_expect_eq(cwin_unconfirmed(w), 3, "the refused one is not recorded");
    cr_expect_eq(cwin_next_tag(w), 4);

    /* An ack out of order frees a slot but not the oldest tag: the window
     * spans tags 1..3 still. */
    cr_expect_eq(cwin_ack(w, 2, false), 1);
    cr_expect(cwin_full(w));
    cr_expect_eq(cwin_unconfirmed(w), 2);
    cr_expect_eq(cwin_ack(w, 1, false), 1);
    cr_expect_not(cwin_full(w));

    /* Tags 4 and 5 reuse the slots of 1 and 2. */
    n[3] = publish("ex", 0, 4);
    n[4] = publish("ex", 0, 5);
    cr_expect(cwin_full(w));
    cr_expect(returned(n[4], "312 NO_ROUTE"));
    cr_expect_eq(cwin_ack(w, 5, true), 3);
    expect_report(n[2], CWIN_ACKED, "");
    expect_report(n[3], CWIN_ACKED, "");
    expect_report(n[4], CWIN_RETURNED, "312 NO_ROUTE");
    expect_unreported((int)(extra - rec->jobs));
    n[5] = publish("ex", 0, 6);
    cr_expect_eq(cwin_ack(w, 6, false), 1);
    expect_report(n[5], CWIN_ACKED, "");
}

Test(confirm_window, connection_lost_reports_every_unconfirmed_one_once)
{
    int n[5], i;

    for (i = 0; i < 5; i++) {
        n[i] = publish("ex", i, (uint64_t)i + 1);
    }
    cr_expect_eq(cwin_ack(w, 1, false), 1);
    cr_expect(returned(n[1], "312 NO_ROUTE"));
    cr_expect_eq(cwin_ack(w, 4, false), 1);
    cwin_connection_lost(w, "connection lost: socket error");
    expect_report(n[0], CWIN_ACKED, "");
    expect_report(n[1], CWIN_RETURNED, "312 NO_ROUTE");
    expect_report(n[2], CWIN_LOST, "connection lost: socket error");
    expect_report(n[3], CWIN_ACKED, "");
    expect_report(n[4], CWIN_LOST, "connection lost: socket error");
    cr_expect_eq(rec->norder, 5);
    cr_expect_eq(cwin_unconfirmed(w), 0);
    cr_expect_eq(cwin_next_tag(w), 1, "a new connection, a new channel");
    cwin_connection_lost(w, "again");
    cr_expect_eq(rec->norder, 5, "nothing is reported twice");
}

Test(confirm_window, a_channel_close_blames_the_quoted_exchange)
{
    const char *why = "404 NOT_FOUND - no exchange 'missing' in vhost '/'";
    int ok1 = publish("billing", 0, 1);
    int ret = publish("billing", 0, 2);
    int bad = publish("missing", 0, 3);
    int ok2 = publish("", 0, 4);
    char unsent[300];

    cr_expect(returned(ret, "312 NO_ROUTE"));
    cwin_channel_closed(w, why);
    snprintf(unsent, sizeof unsent,
             "channel closed by the broker before the confirm: %s", why);
    expect_report(bad, CWIN_CLOSED, why);
    expect_report(ok1, CWIN_UNSENT, unsent);
    expect_report(ok2, CWIN_UNSENT, unsent);
    expect_report(ret, CWIN_RETURNED, "312 NO_ROUTE");
    cr_expect_eq(rec->order[0], bad, "the culprit first");
    cr_expect_eq(cwin_unconfirmed(w), 0);
}

/* A reply that names no job (a message over the broker's max size, a
 * user_id it refuses): nobody is charged; the suspects are published again
 * (by id, as the dispatcher does) one at a time while any is unanswered,
 * and the next close, with one publish in flight, is that one's. */
Test(confirm_window,
     a_close_naming_no_job_charges_nobody_and_probes_one_at_a_time)
{
    const char *why = "406 PRECONDITION_FAILED - message size 70000 is larger "
                      "than configured max size 65536";
    int a = publish("billing", 0, 1);
    int b = publish("", 0, 2);
    int c = publish("billing", 0, 3);
    int other, a2, b2, after;

    cr_expect(returned(c, "312 NO_ROUTE"));
    cwin_channel_closed(w, why);
    cr_expect_eq(rec->jobs[a].kind, CWIN_UNSENT);
    cr_expect_eq(rec->jobs[b].kind, CWIN_UNSENT);
    cr_expect(strstr(rec->jobs[a].reason, "naming no job") != NULL, "%s",
              rec->jobs[a].reason);
    expect_report(c, CWIN_RETURNED, "312 NO_ROUTE"); /* its answer came */
    cr_expect_eq(cwin_probing(w), 2, "a and b are suspects");
    cr_expect_not(cwin_full(w));

    /* another job first: alone in flight too, and no suspect answered */
    other = publish("billing", 0, 1);
    cr_expect(cwin_full(w), "one at a time while probing");
    cr_expect_eq(cwin_publish(w, "x", "", NULL, 0), 0);
    cr_expect_eq(cwin_ack(w, 1, false), 1);
    expect_report(other, CWIN_ACKED, "");
    cr_expect_eq(cwin_probing(w), 2);
    /* a again (same id): acked, no longer a suspect */
    a2 = (int)(job("billing") - rec->jobs);
    strcpy(rec->jobs[a2].id, rec->jobs[a].id);
    cr_expect_eq(
        cwin_publish(w, rec->jobs[a2].id, "billing", &rec->jobs[a2], 0), 2);
    cr_expect_eq(cwin_ack(w, 2, false), 1);
    cr_expect_eq(cwin_probing(w), 1);
    /* b again, alone: the broker closes the channel: it is b's */
    b2 = (int)(job("") - rec->jobs);
    strcpy(rec->jobs[b2].id, rec->jobs[b].id);
    cr_expect_eq(cwin_publish(w, rec->jobs[b2].id, "", &rec->jobs[b2], 0), 3);
    cwin_channel_closed(w, why);
    expect_report(b2, CWIN_CLOSED, why);
    cr_expect_eq(cwin_probing(w), 0);
    /* pipelined again */
    after = publish("", 0, 1);
    cr_expect_not(cwin_full(w));
    (void)publish("", 0, 2);
    cr_expect_eq(cwin_ack(w, 2, true), 2);
    expect_report(after, CWIN_ACKED, "");
}

/* A suspect that never comes back (cancelled, expired) does not keep the
 * window at one publish at a time for ever. */
Test(confirm_window, a_probe_ends_when_its_suspects_never_come_back)
{
    int i;

    use_window(4);
    (void)publish("a", 0, 1);
    (void)publish("a", 0, 2);
    cwin_channel_closed(w, "406 PRECONDITION_FAILED - boom");
    cr_expect_eq(cwin_probing(w), 2);
    for (i = 0; i < 2 * 2 + 4; i++) { /* the bound: 2 x suspects + cap */
        cr_expect(cwin_probing(w) > 0, "answer %d", i);
        (void)publish("a", 0, (uint64_t)i + 1);
        cr_expect_eq(cwin_ack(w, (uint64_t)i + 1, false), 1);
    }
    cr_expect_eq(cwin_probing(w), 0);
    cr_expect_not(cwin_full(w));
}

Test(confirm_window, a_close_naming_no_job_with_one_in_flight_is_its)
{
    const char *why = "406 PRECONDITION_FAILED - user_id property set to "
                      "'mallory' but authenticated user was 'guest'";
    int a = publish("billing", 0, 1);

    cwin_channel_closed(w, why);
    expect_report(a, CWIN_CLOSED, why);
    cr_expect_eq(cwin_probing(w), 0);
}

Test(confirm_window, tags_restart_at_one_on_a_new_channel)
{
    use_window(4);
    int old1 = publish("ex", 0, 1);
    int old2 = publish("ex", 0, 2);
    int new1, new2, after;

    cwin_channel_closed(w, "404 NOT_FOUND - no exchange 'ex' in vhost '/'");
    expect_report(old1, CWIN_CLOSED,
                  "404 NOT_FOUND - no exchange 'ex' in vhost '/'");
    expect_report(old2, CWIN_CLOSED,
                  "404 NOT_FOUND - no exchange 'ex' in vhost '/'");
    new1 = publish("ex", 0, 1);
    new2 = publish("ex", 0, 2);
    cr_expect_eq(cwin_ack(w, 1, false), 1);
    expect_report(new1, CWIN_ACKED, ""); /* tag 1 is the new job's */
    cr_expect_eq(rec->jobs[old1].reports, 1);

    cwin_connection_lost(w, "connection lost: heartbeat timeout");
    expect_report(new2, CWIN_LOST, "connection lost: heartbeat timeout");
    after = publish("ex", 0, 1);
    cr_expect_eq(cwin_ack(w, 2, true), 1);
    expect_report(after, CWIN_ACKED, "");
}

/* Confirms withheld (a blocked broker) on a channel that stays: the given-up
 * jobs are lost, and their late acks are not credited to later jobs. */
Test(confirm_window, give_up_keeps_the_tags_counting)
{
    use_window(4);
    int a = publish("ex", 0, 1);
    int b = publish("ex", 0, 2);
    int c;

    cr_expect(returned(b, "312 NO_ROUTE"));
    cwin_give_up(w, "no confirm within 30000 ms");
    expect_report(a, CWIN_LOST, "no confirm within 30000 ms");
    expect_report(b, CWIN_RETURNED, "312 NO_ROUTE");
    cr_expect_eq(cwin_next_tag(w), 3);
    cr_expect_not(cwin_full(w));
    c = publish("ex", 0, 3);
    cr_expect_eq(cwin_ack(w, 1, false), 0, "a late ack of a given-up job");
    cr_expect_eq(cwin_ack(w, 2, true), 0);
    expect_unreported(c);
    cr_expect_eq(cwin_ack(w, 3, false), 1);
    expect_report(c, CWIN_ACKED, "");
    cr_expect_eq(rec->jobs[a].reports, 1);
}

Test(confirm_window, oldest_is_the_first_publish_in_flight)
{
    use_window(4);
    int64_t t = -1;

    cr_expect_not(cwin_oldest(w, &t));
    publish("ex", 100, 1);
    publish("ex", 250, 2);
    cr_expect(cwin_oldest(w, &t));
    cr_expect_eq(t, 100);
    cr_expect_eq(cwin_ack(w, 2, false), 1);
    cr_expect(cwin_oldest(w, &t));
    cr_expect_eq(t, 100, "an ack of a later one changes nothing");
    cr_expect_eq(cwin_ack(w, 1, false), 1);
    cr_expect_not(cwin_oldest(w, &t));
}

/* ------------------------------------------------------------------ */
/* A seeded stream of random events against a model of the rules.      */

enum { M_NONE, M_INFLIGHT, M_RETURNED, M_REPORTED };

typedef struct model {
    int state[MAX_JOBS];
    int owed[MAX_JOBS];    /* outcome owed by the current event */
    int tag_job[MAX_JOBS]; /* this channel's tag -> job number */
    uint64_t next_tag;
    size_t cap;
    size_t suspects;  /* jobs of a close that named none, unanswered
                          (each publish here is a new job: never answered) */
    size_t budget;    /* answers the probe still takes */
    size_t probe_add; /* suspects the current event adds */
    bool probe_set;   /* the current event (re)starts the probe's budget */
    uint64_t rng;
} model;

static uint64_t next_rand(model *m) /* xorshift64: the same run every time */
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    return m->rng;
}

static uint64_t model_low(const model *m)
{
    uint64_t t;

    for (t = 1; t < m->next_tag; t++) {
        if (m->state[m->tag_job[t]] != M_REPORTED) {
            return t;
        }
    }
    return m->next_tag;
}

static size_t model_unconfirmed(const model *m, int njobs)
{
    size_t n = 0;
    int i;

    for (i = 0; i < njobs; i++) {
        n += m->state[i] == M_INFLIGHT || m->state[i] == M_RETURNED;
    }
    return n;
}

/* What an ack or nack of tag (multiple) owes, by the rules. */
static void model_settle(model *m, uint64_t tag, bool multiple, bool ack)
{
    uint64_t lo, hi, t;

    if (m->next_tag == 1) {
        return;
    }
    hi = tag >= m->next_tag || (multiple && tag == 0) ? m->next_tag - 1 : tag;
    if (!multiple && tag >= m->next_tag) {
        return;
    }
    lo = multiple ? 1 : hi;
    for (t = lo; t <= hi && t > 0; t++) {
        int j = m->tag_job[t];
        if (m->state[j] == M_INFLIGHT) {
            m->owed[j] = ack ? CWIN_ACKED : CWIN_NACKED;
        } else if (m->state[j] == M_RETURNED) {
            m->owed[j] = ack ? CWIN_RETURNED : CWIN_NACKED;
        }
    }
}

/* What the end of the channel or of its confirms owes. */
static void model_end(model *m, const char *culprit, cwin_outcome others)
{
    bool matched = false;
    int i, alone = -1;
    size_t inflight = 0;

    for (i = 0; i < rec->njobs; i++) {
        if (m->state[i] == M_INFLIGHT && culprit &&
            strcmp(rec->jobs[i].exchange, culprit) == 0) {
            m->owed[i] = CWIN_CLOSED;
            matched = true;
        } else if (m->state[i] == M_INFLIGHT) {
            inflight++;
            alone = i;
        }
    }
    if (others == CWIN_UNSENT && !matched && inflight == 1) {
        m->owed[alone] = CWIN_CLOSED; /* a channel close with one in flight */
        matched = true;
    } else if (others == CWIN_UNSENT && !matched) {
        m->probe_add = inflight;
        m->probe_set = true;
    }
    for (i = 0; i < rec->njobs; i++) {
        if (m->state[i] == M_RETURNED) {
            m->owed[i] = CWIN_RETURNED;
        } else if (m->state[i] == M_INFLIGHT && m->owed[i] == NO_REPORT) {
            m->owed[i] = (int)others;
        }
    }
}

static bool model_full(const model *m)
{
    return m->next_tag - model_low(m) >= m->cap ||
           (m->suspects > 0 && model_unconfirmed(m, rec->njobs) > 0);
}

/* Every job owed an outcome by the last event got exactly that one, once;
 * no other job was reported; the window agrees with the model. */
static void model_check(model *m, int reports_before, int step)
{
    int owed = 0, i;

    if (m->probe_set) {
        m->suspects += m->probe_add;
        if (m->suspects > m->cap)
            m->suspects = m->cap;
        m->budget = 2 * m->suspects + m->cap;
    }
    m->probe_add = 0;
    m->probe_set = false;
    for (i = 0; i < rec->njobs; i++) {
        if (m->owed[i] == NO_REPORT) {
            continue;
        }
        owed++;
        cr_assert_eq(rec->jobs[i].reports, 1, "step %d: %s reported %d times",
                     step, rec->jobs[i].id, rec->jobs[i].reports);
        cr_assert_eq(rec->jobs[i].kind, m->owed[i],
                     "step %d: %s outcome %d, owed %d", step, rec->jobs[i].id,
                     rec->jobs[i].kind, m->owed[i]);
        if (m->owed[i] != CWIN_UNSENT && m->suspects > 0 && --m->budget == 0)
            m->suspects = 0;
        m->state[i] = M_REPORTED;
        m->owed[i] = NO_REPORT;
    }
    cr_assert_eq(cwin_probing(w), m->suspects, "step %d", step);
    cr_assert_eq(rec->norder - reports_before, owed,
                 "step %d: %d reports, %d owed", step,
                 rec->norder - reports_before, owed);
    cr_assert_eq(cwin_unconfirmed(w), model_unconfirmed(m, rec->njobs),
                 "step %d", step);
    cr_assert_eq(cwin_next_tag(w), m->next_tag, "step %d", step);
    cr_assert_eq(cwin_full(w), model_full(m), "step %d", step);
}

/* One run of steps random events on a window of cap; adds how many jobs
 * got each outcome to kinds. */
static void random_run(uint64_t seed, size_t cap, int steps, int *kinds)
{
    static const char *exchanges[] = {"a", "b", ""};
    model *m = calloc(1, sizeof *m);
    int step, i, published = 0, refused = 0;

    cr_assert_not_null(m);
    use_window(cap);
    m->rng = seed;
    m->cap = cap;
    m->next_tag = 1;
    for (i = 0; i < MAX_JOBS; i++) {
        m->owed[i] = NO_REPORT;
    }
    for (step = 0; step < steps && rec->njobs < MAX_JOBS - 1; step++) {
        uint64_t r = next_rand(m) % 100, low = model_low(m);
        uint64_t tag =
            (low > 2 ? low - 2 : 0) + next_rand(m) % (m->next_tag - low + 4);
        bool multiple = next_rand(m) % 2;
        int before = rec->norder;

        if (r < 45) {
            tjob *j = job(exchanges[next_rand(m) % 3]);
            int n = (int)(j - rec->jobs);
            uint64_t got = cwin_publish(w, j->id, j->exchange, j, step);
            if (model_full(m)) {
                cr_assert_eq(got, 0, "step %d: published into a full window",
                             step);
                refused++;
            } else {
                cr_assert_eq(got, m->next_tag, "step %d", step);
                m->tag_job[m->next_tag++] = n;
                m->state[n] = M_INFLIGHT;
                published++;
            }
        } else if (r < 65) {
            model_settle(m, tag, multiple, true);
            cwin_ack(w, tag, multiple);
        } else if (r < 72) {
            model_settle(m, tag, multiple, false);
            cwin_nack(w, tag, multiple);
        } else if (r < 88) {
            /* Mostly one on this channel, sometimes any job at all. */
            int n = rec->njobs ? (int)(next_rand(m) % (uint64_t)rec->njobs) : 0;
            if (low < m->next_tag && next_rand(m) % 4) {
                n = m->tag_job[low + next_rand(m) % (m->next_tag - low)];
            }
            const char *id = rec->njobs ? rec->jobs[n].id : "none";
            bool want = rec->njobs && m->state[n] == M_INFLIGHT;
            cr_assert_eq(cwin_return(w, id, strlen(id), "312 NO_ROUTE"), want,
                         "step %d: return for %s", step, id);
            if (want) {
                m->state[n] = M_RETURNED;
            }
        } else if (r < 92) {
            bool blame = next_rand(m) % 2;
            model_end(m, blame ? "b" : NULL, CWIN_UNSENT);
            cwin_channel_closed(w, blame ? "404 NOT_FOUND - no exchange 'b' in "
                                           "vhost '/'"
                                         : "406 PRECONDITION_FAILED - boom");
            m->next_tag = 1;
        } else if (r < 96) {
            model_end(m, NULL, CWIN_LOST);
            cwin_give_up(w, "no confirm within 30000 ms");
        } else {
            model_end(m, NULL, CWIN_LOST);
            cwin_connection_lost(w, "connection lost: socket error");
            m->next_tag = 1;
        }
        model_check(m, before, step);
    }
    cwin_connection_lost(w, "connection closed before the confirm");
    for (i = 0; i < rec->njobs; i++) {
        cr_assert_eq(rec->jobs[i].reports, m->state[i] == M_NONE ? 0 : 1,
                     "%s reported %d times", rec->jobs[i].id,
                     rec->jobs[i].reports);
    }
    cr_assert_eq(rec->norder, published, "every publish reported once");
    cr_assert_gt(refused, 0, "the run never filled the window");
    cr_assert_gt(published, steps / 10);
    for (i = 0; i < rec->njobs; i++) {
        if (rec->jobs[i].reports) {
            kinds[rec->jobs[i].kind]++;
        }
    }
    free(m);
}

Test(confirm_window, no_job_reported_twice_and_none_forgotten)
{
    int kinds[CWIN_UNSENT + 1] = {0}, i;

    random_run(0x9e3779b97f4a7c15ULL, 8, 2500, kinds);
    random_run(42, 3, 2500, kinds);
    random_run(7, 1, 1500, kinds);
    for (i = CWIN_ACKED; i <= CWIN_UNSENT; i++) {
        cr_assert_gt(kinds[i], 10, "the runs gave outcome %d only %d times", i,
                     kinds[i]);
    }
}
