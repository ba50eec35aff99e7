/*
 * bulk.h - bulk actions over a job filter (POST /jobs/bulk): cancel the
 * matching jobs that are pending, or retry the matching ones that failed,
 * server-side, on a thread of its own.
 *
 * Why a module: a bulk action may match 10,000,000 jobs. It walks the
 * filter with store_list pages (the cursor) and applies each page in one
 * bounded transaction (store_update_batch, at most STORE_BATCH_MAX jobs),
 * so it never holds one long transaction and the dispatcher keeps
 * publishing between pages (--bulk-pause-ms leaves it more room). One
 * operation runs at a time (bulk_submit answers RMQS_ECONFLICT for a
 * second). The last BULK_KEEP operations are kept in memory for GET
 * /jobs/bulk/{id}: they do not survive a restart, their effect does (each
 * page is committed durably before the next is read). An operation cut by
 * a shutdown ends failed, with what it did so far committed.
 *
 * A cancel walks every job the filter matches and cancels the pending ones
 * (the others count as skipped); a retry makes the failed ones pending
 * with attempts 0, due now, keeping each job's deliver_at (so the walk's
 * order does not move under it). Jobs that come to match while it runs
 * may be included.
 */
#ifndef RMQS_BULK_H
#define RMQS_BULK_H

#include <jansson.h>
#include <stdint.h>

#include "dispatcher.h"
#include "rmqs.h"
#include "store.h"

#define BULK_KEEP 100 /* operations kept for GET /jobs/bulk/{id} */
/* Largest filter of an operation, as compact JSON (POST /jobs/bulk answers
 * 400 above): each operation keeps it and GET /jobs/bulk/{id} echoes it, so
 * this bounds that answer (about 400 bytes more) and what the BULK_KEEP
 * operations hold. */
#define BULK_FILTER_MAX_BYTES 8192

typedef struct bulk bulk_t;

typedef enum bulk_action { BULK_CANCEL, BULK_RETRY } bulk_action;

/* st and d borrowed, outliving it; pause_ms between pages (>= 0). NULL on
 * ENOMEM. */
bulk_t *bulk_new(store_t *st, disp_t *d, int64_t pause_ms);
rmqs_rc bulk_start(bulk_t *b);
/* Stop the thread (an operation running ends failed) and free; NULL ok. */
void bulk_free(bulk_t *b);

/*
 * Start an operation over filter f, whose strings point into filter_json
 * (stolen, even on failure: kept with the operation, shown in its JSON).
 * id_out gets its id. RMQS_ECONFLICT if one is running (id_out: that
 * one's), RMQS_ESYS if stopping, RMQS_ENOMEM.
 */
rmqs_rc bulk_submit(bulk_t *b, bulk_action a, json_t *filter_json,
                    const store_filter *f, char id_out[JOB_ID_LEN + 1]);

/* The operation id as JSON {id, action, filter, state, matched_so_far,
 * done, skipped, errors, started_at, finished_at} (new reference), or
 * NULL if it is not kept (or on ENOMEM). */
json_t *bulk_get_json(bulk_t *b, const char *id);

#endif
