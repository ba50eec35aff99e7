/*
 * http_handlers.h - the endpoints that the router (http_api.c) calls, one
 * file each: http_jobs.c, http_schedules.c, http_limits.c, http_bulk.c,
 * http_stats.c, http_ui.c. They answer through the reply layer (http_reply.h) and call
 * nothing of the router.
 */
#ifndef RMQS_HTTP_HANDLERS_H
#define RMQS_HTTP_HANDLERS_H

#include <microhttpd.h>
#include <stdbool.h>

#include "http_reply.h"

/* ---- the job endpoints (http_jobs.c) ----------------------------------- */

/* POST /schedule (batch false) or /schedule/batch: checks the content
 * type, waits for admission by the writer, validates, hands the jobs to
 * the writer (the connection is suspended until the commit). */
enum MHD_Result http_jobs_schedule(http_api_t *api, struct MHD_Connection *c,
                                   http_req *rq, bool batch);
/* The answer once the writer has committed (rq->state == RQ_WRITTEN). */
enum MHD_Result http_jobs_written(http_api_t *api, struct MHD_Connection *c,
                                  http_req *rq);
/* GET /jobs. */
enum MHD_Result http_jobs_list(http_api_t *api, struct MHD_Connection *c,
                               http_req *rq);
/* GET /jobs/count: the jobs GET /jobs's filter selects, counted up to max. */
enum MHD_Result http_jobs_count(http_api_t *api, struct MHD_Connection *c,
                                http_req *rq);
/* The answer once a search has run (rq->state == RQ_SEARCHED). */
enum MHD_Result http_jobs_searched(http_api_t *api, struct MHD_Connection *c,
                                   http_req *rq);
/* GET, PATCH, DELETE /jobs/{id}. */
enum MHD_Result http_jobs_one(http_api_t *api, struct MHD_Connection *c,
                              const char *method, const char *id, http_req *rq);
/* POST /jobs/{id}/run (action "run") or /jobs/{id}/retry ("retry"). */
enum MHD_Result http_jobs_action(http_api_t *api, struct MHD_Connection *c,
                                 const char *method, const char *id,
                                 const char *action, http_req *rq);
/* For an endpoint that stores a job through the writer as POST /schedule
 * does (POST /schedules/{name}/run): whether rq may go on now (else the
 * connection is suspended until the writer has room, and the router calls
 * the endpoint again; so call it before anything else); the
 * Idempotency-Key header checked and kept in rq->idem_key (true when
 * refused, answered in *ret); rq->jobs (rq->njobs, rq->canonical with a
 * key) handed to the writer, answered by http_jobs_written. */
bool http_jobs_admit(http_api_t *api, struct MHD_Connection *c, http_req *rq);
bool http_jobs_idem_key(struct MHD_Connection *c, http_req *rq,
                        enum MHD_Result *ret);
enum MHD_Result http_jobs_submit(http_api_t *api, struct MHD_Connection *c,
                                 http_req *rq);

/* ---- the schedule endpoints (http_schedules.c) ------------------------- */

/* GET /schedules. */
enum MHD_Result http_schedules_list(http_api_t *api, struct MHD_Connection *c);
/* PUT, GET, PATCH, DELETE /schedules/{name}. */
enum MHD_Result http_schedules_one(http_api_t *api, struct MHD_Connection *c,
                                   const char *method, const char *name,
                                   http_req *rq);
/* POST /schedules/{name}/run: one extra run of the schedule, due now. */
enum MHD_Result http_schedules_run(http_api_t *api, struct MHD_Connection *c,
                                   const char *method, const char *name,
                                   http_req *rq);

/* ---- the flow limit endpoints (http_limits.c) -------------------------- */

/* GET /limits. */
enum MHD_Result http_limits_list(http_api_t *api, struct MHD_Connection *c);
/* How many pending jobs limit `name` holds now (GET /limits' stats and
 * rmqs_limit_held_jobs), counted up to HELD_COUNT_CAP (*capped then);
 * -1 if the store cannot say. */
#define HELD_COUNT_CAP 1000000
int64_t http_limit_held_now(http_api_t *api, const char *name, bool *capped);
/* PUT, GET, PATCH, DELETE /limits/{name}. */
enum MHD_Result http_limits_one(http_api_t *api, struct MHD_Connection *c,
                                const char *method, const char *name,
                                http_req *rq);

/* POST /jobs/bulk (id NULL) and GET /jobs/bulk/{id} (http_bulk.c). */
enum MHD_Result http_bulk(http_api_t *api, struct MHD_Connection *c,
                          const char *method, const char *id, http_req *rq);

/* GET /stats (http_stats.c). */
enum MHD_Result http_stats_get(http_api_t *api, struct MHD_Connection *c);
/* GET /stats/failures (http_stats.c). */
enum MHD_Result http_stats_failures(http_api_t *api, struct MHD_Connection *c);

/* ---- GET /status (http_status.c) ---------------------------------------- */

/* Overdue: pending, deliver_at more than OVERDUE_MARGIN_MS before now. */
#define OVERDUE_MARGIN_MS 1000
#define OVERDUE_CAP 10000
enum MHD_Result http_status_get(http_api_t *api, struct MHD_Connection *c);
/* The overdue jobs at now_ms: how many (up to OVERDUE_CAP, *capped past
 * it) and the oldest one's deliver_at (-1: none); a store error as is. */
rmqs_rc http_overdue(http_api_t *api, int64_t now_ms, int64_t *count,
                     bool *capped, int64_t *oldest_ms);
/* The database's state now (store_ping, the writer's disk reserve), noted
 * for /status's since and last_error. Any thread. */
http_db_state http_db_check(http_api_t *api);
/* Note a state seen (error NULL: keep the last one). */
void http_db_note(http_api_t *api, http_db_state state, const char *error);

/* ---- the dashboard (http_ui.c) ------------------------------------------ */

/* Whether url is the dashboard's (/ui, /ui/...) and the UI is not off:
 * served without the token check (config.json checks it itself). */
bool http_ui_public(const http_api_t *api, const char *url);
/* Whether http_ui_serve answers url: the dashboard's paths, and "/" for a
 * browser (Accept: text/html; API clients keep their 404). */
bool http_ui_handles(const http_api_t *api, struct MHD_Connection *c,
                     const char *url);
/* GET/HEAD of a file, /ui/config.json, or a redirect to /ui/. */
enum MHD_Result http_ui_serve(http_api_t *api, struct MHD_Connection *c,
                              const char *url, const char *method);
/* A change (not GET, HEAD, OPTIONS) refused: from a page of another
 * origin (403 cross_origin), or from a browser while the dashboard is
 * read-only (403 ui_read_only). True when answered (*ret). */
bool http_ui_refused(http_api_t *api, struct MHD_Connection *c,
                     const char *method, enum MHD_Result *ret);

/* Free what the job endpoints keep in rq (jobs, fingerprint, key). */
void http_jobs_release(http_req *rq);

#endif
