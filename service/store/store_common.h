/*
 * store_common.h - what every store backend shares (internal to the store:
 * store.c and the store_<backend>*.c files include it, nothing above
 * store.h does).
 *
 * Why: the rules that make a store correct do not depend on the database
 * that keeps the rows: the job counts bookkeeping (every change of a job's
 * status moves one count, in the transaction of the change), the listing
 * cursor ("<deliver_at>.<seq>"), the text form of headers and properties,
 * and the due order of claimed jobs. Written once here, a second backend
 * (PostgreSQL, issue 12) follows the same rules instead of copying them.
 */
#ifndef RMQS_STORE_COMMON_H
#define RMQS_STORE_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "job.h"
#include "rmqs.h"
#include "store_types.h"

#define STORE_N_STATUS 5    /* job_status values 0..4, the rows of job_counts */
#define STORE_CURSOR_MAX 48 /* "<int64>.<int64>" + NUL */

/*
 * Job counts bookkeeping. A backend keeps one delta per open transaction:
 * every statement that inserts, deletes or changes the status of jobs adds
 * what it did (insert +1 for the new row's status; a claim moves pending ->
 * publishing per claimed row; a settle, release, cancel or recover moves
 * per changed row; a purge -1 per deleted row's status). Just before
 * COMMIT, in the same transaction, the backend adds the nonzero sums to its
 * counts table, so the counts commit or vanish with the rows; every way a
 * transaction ends zeroes the delta, and a part of a transaction undone on
 * its own (a savepoint) counts into a scratch delta merged only when it is
 * kept. A status outside 0..4 is ignored (the schema refuses it anyway).
 */
typedef struct store_delta {
    int64_t n[STORE_N_STATUS];
} store_delta;

void store_delta_clear(store_delta *d);
/* n jobs more (or fewer, n < 0) with this status. */
void store_delta_add(store_delta *d, int status, int64_t n);
/* n jobs went from status from to status to. */
void store_delta_move(store_delta *d, int from, int to, int64_t n);
/* Add src into d (a kept savepoint's scratch). */
void store_delta_merge(store_delta *d, const store_delta *src);

/* The listing cursor: opaque to clients, URL-safe, in base 10, seq being
 * the backend's insertion order; tied to the order of the page it ends
 * (store_order): "<deliver_at>.<seq>" (due: the form before issue 25),
 * "D<deliver_at>.<seq>" (-due), "c<seq>" (created), "C<seq>"
 * (-created). */
typedef struct store_cursor {
    int64_t deliver_at; /* 0 in a created order's cursor */
    int64_t seq;
    store_order order;
} store_cursor;

/* Parse text into *out: false if malformed (then RMQS_EINVAL to callers).
 * out->order is the order the text was made in. */
bool store_cursor_parse(const char *text, store_cursor *out);
/* A malloc'd cursor text, or NULL when out of memory. */
char *store_cursor_format(const store_cursor *c);

/* Headers and properties are kept as compact JSON text, NULL for none.
 * *out: a malloc'd text (caller frees) or NULL when v is NULL. */
rmqs_rc store_json_text(const json_t *v, char **out);
/* Back from that text (len bytes): a new reference in *out, or RMQS_EDB
 * (logged with the job id) for text that is not JSON. */
rmqs_rc store_json_load(const char *text, size_t len, const char *job_id,
                        json_t **out);
/* The end of a row read into a job, the same on both backends: the
 * headers and properties columns (JSON text the store wrote; NULL when the
 * column is NULL) parsed, the body copied (out->body is never NULL, even
 * for an empty body: callers may memcpy from it). RMQS_EDB when a JSON
 * column does not parse (logged with the job's id), RMQS_ENOMEM; the
 * caller clears out on failure. */
rmqs_rc store_job_row_tail(job_t *out, const char *headers, size_t headers_len,
                           const char *properties, size_t properties_len,
                           const void *body, size_t body_len);
/* The message_id property (a string) that GET /jobs filters on, or NULL;
 * borrowed from job->properties. */
const char *store_job_message_id(const job_t *job);

/* Whether f uses a filter of the search (issue 14: exchange, routing_key,
 * deliver range, id_prefix, header, q), which the backends answer with a
 * query built for the filter (store_<backend>_search.c). */
bool store_filter_is_search(const store_filter *f);

/* The binary ids that start with f->id_prefix's hex digits (non-empty):
 * [lo, hi); false when there is no upper bound (all f's: lo to the end). */
bool store_id_prefix_range(const char *prefix, unsigned char lo[JOB_ID_BYTES],
                           unsigned char hi[JOB_ID_BYTES]);

/* A growing malloc'd text (plans for store_explain): append fmt; false once
 * out of memory (b->text is then NULL and stays so). */
typedef struct store_text {
    char *text;
    size_t len, cap;
    bool failed;
} store_text;
bool store_text_add(store_text *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A job read or claimed with its insertion order, for the due order. */
typedef struct store_claimed {
    int64_t seq;
    job_t job;
} store_claimed;

/* Sort c[0..n) in due order: (due_at, claim_rank, seq). */
void store_claimed_sort(store_claimed *c, size_t n);

/* Stable sort of jobs[0..n) by (due_at, claim_rank) (rounds of claims,
 * each in order). */
void store_jobs_sort_due(job_t *jobs, size_t n);

/* A finished run of a schedule (store_schedule_recent's streak rows on
 * SQLite), and the streak of up to STORE_STREAK_CAP + 1 of them in any
 * order: sorted newest first by (deliver_at, seq), the failed ones before
 * the first sent one are counted into out->failure_streak / streak_capped.
 * The rows come from a UNION ALL, whose order no database promises: sorted
 * here rather than by the query, which would sort them in a temporary
 * table. */
typedef struct store_finished_run {
    int64_t deliver_at, seq;
    int status; /* JOB_SENT or JOB_FAILED */
} store_finished_run;
void store_streak_of(store_finished_run *runs, size_t n,
                     store_run_outcome *out);

/* Room for more elements in arr (*cap of elem bytes, all in use): the
 * array reallocated to twice the size (16 at first) and *cap updated, or
 * NULL when out of memory (arr and *cap untouched). */
void *store_grow(void *arr, size_t *cap, size_t elem);

/* Group commit outcomes (store_insert_batch): every request reset to
 * RMQS_OK with nothing existing, before a batch; every request failed with
 * rc (its existing job cleared), when the database failed the batch. */
void store_insert_reqs_reset(store_insert_req *reqs, size_t n);
void store_insert_reqs_fail(store_insert_req *reqs, size_t n, rmqs_rc rc);
/* Whether r is well formed (store_types.h): jobs, and with keys their
 * requests and the output arrays. */
bool store_insert_req_valid(const store_insert_req *r);
/* r stored nothing after all: its existing jobs cleared, flags reset. */
void store_insert_req_undo(store_insert_req *r);

/* A migration list fit to apply: versions >= 1, strictly ascending, each
 * with a name and SQL; RMQS_EINVAL with the reason in err otherwise. */
rmqs_rc store_migrations_check(const store_migration *m, size_t n,
                               rmqs_error *err);

/*
 * Page budgets (issue 21): a page of a list (store_list,
 * store_schedule_list) stops at limit items or at max_bytes, whichever
 * comes first, so one answer, and the memory that collects it, is bounded
 * however large the items are. An item's bytes are what it holds as stored
 * (store_item_bytes); the page takes an item only if it keeps the page
 * within max_bytes, except the first, which always comes out (one item
 * larger than the budget makes a page alone). A backend asks before it
 * converts a row, so a row that does not fit is never copied; an item left
 * out sets more, as a next row beyond limit does, and the cursor is the last
 * item taken: the client continues from exactly there.
 */
#define STORE_PAGE_MAX_BYTES_DEFAULT ((size_t)4 << 20) /* 4 MiB */
/* What a job's JSON holds besides its texts and body (member names, times,
 * numbers: about 350 bytes), so a page of small jobs counts too. */
#define STORE_ITEM_OVERHEAD 512

typedef struct store_page {
    size_t limit;     /* most items (>= 1) */
    size_t max_bytes; /* most bytes, but for a first item */
    size_t n, bytes;  /* taken so far */
    bool more;        /* an item was left for the next page */
} store_page;

/* A page of limit items and max_bytes (0: STORE_PAGE_MAX_BYTES_DEFAULT). */
void store_page_init(store_page *p, size_t limit, size_t max_bytes);
/* Whether the next item (one exists), of item_bytes, joins the page; false
 * (and p->more set) once limit items are in, or when it would take a page
 * that holds one already over max_bytes. */
bool store_page_take(store_page *p, size_t item_bytes);
/* The bytes of one item: STORE_ITEM_OVERHEAD + its texts (texts_len: ids,
 * names, headers, properties, last_error, a schedule's spec...) + its body
 * as an answer carries it (a binary body, JOB_BODY_BINARY, in base64). */
size_t store_item_bytes(int body_kind, size_t body_len, size_t texts_len);

/* Clear n jobs and free the array (NULL is fine). */
void store_jobs_free(job_t *jobs, size_t n);

#endif
