/*
 * ingest_batch.h - the deliveries of one ingest batch and the ingest's
 * state they live in, shared by amqp_ingest.c (the thread, the wire: read,
 * store, settle) and ingest_batch.c (each delivery: from its envelope to a
 * job, and the writer's verdict on it).
 *
 * Internal to the ingest: nothing outside service/ingest includes it.
 */
#ifndef RMQS_INGEST_BATCH_H
#define RMQS_INGEST_BATCH_H

#include <amqp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amqp_conn.h"
#include "config.h"
#include "ingest_inbox.h"
#include "ingest_map.h"
#include "job.h"
#include "worker.h"
#include "writer.h"

/* What settling does with a delivery. */
typedef enum action {
    ACT_STORE,  /* handed to the writer: its rc decides */
    ACT_REJECT, /* basic.reject requeue=false: dead-lettered or dropped */
    ACT_REQUEUE /* basic.nack requeue=true: local trouble, try later */
} action;

typedef struct delivery {
    writer_req req; /* ins.jobs points at job */
    job_t job;
    uint64_t tag;
    size_t map; /* index into in->maps */
    action act;
    bool invalid; /* counted as invalid (routed or rejected) */
    bool redelivered;
    bool retry;     /* store again without the key (conflict) */
    char *idem_key; /* malloc'd, or NULL */
    char idem_request[INGEST_MAP_REQUEST_LEN + 1];
    /* the store's request of one job (store_types.h): its key and
     * request as arrays of one, and the answers */
    const char *ins_key;
    const char *ins_request;
    bool existed;   /* the message was stored before (acknowledged again) */
    job_t existing; /* that earlier job */
    char routing_key[INGEST_MAP_LOG_TEXT + 4]; /* printable copies, for logs */
    char message_id[INGEST_MAP_LOG_TEXT + 4];
    char reason[256];
} delivery;

typedef struct ingest ingest_t; /* as amqp_ingest.h names it */

struct ingest {
    /* configuration, fixed after ingest_new */
    amqpc_t *link; /* URL, TLS, login (amqp_conn.h); its
                                 connection belongs to the thread */
    int heartbeat_s;
    ingest_inbox *maps; /* one per --ingest mapping */
    size_t n_maps;
    unsigned prefetch;
    ingest_invalid_rule rule;
    char *dlx;
    job_limits limits;
    writer_t *writer; /* borrowed; it wakes the dispatcher after
                                 commits */

    worker_t wk;            /* the thread; wk.mu guards wk.stop and
                                 outstanding */
    pthread_cond_t done_cv; /* outstanding reached 0 (CLOCK_MONOTONIC) */
    size_t outstanding;     /* writer requests of the batch not done */
    atomic_bool connected;

    /* owned by the thread */
    amqp_connection_state_t conn; /* link's connection; NULL while
                                     disconnected */
    delivery *batch;
    size_t cap, n;
    int64_t db_pause_ms;
    int64_t t_first, t_read, t_stored; /* mono ms: the batch's timeline */
    uint64_t invalid_total;
    char last_error[300]; /* last connect failure, to log changes only */
};

/* Release what delivery d owns and zero it. */
void ingest_delivery_clear(delivery *d);

/* Clear every delivery of in's batch; the batch is then empty. */
void ingest_batch_clear(ingest_t *in);

/* Turn one envelope into the next delivery of the batch. */
void ingest_batch_take(ingest_t *in, const amqp_envelope_t *env);

/* Decide the action of every delivery the writer had (retry: those of the
 * second round) from its outcome. Returns how many conflicts (a message_id
 * reused by another message) there were: those are marked to be stored
 * again without a key. */
size_t ingest_batch_judge(ingest_t *in, bool retry, bool *db_trouble);

/* Log delivery d as invalid (what: routed, rejected, dead-lettered) and
 * count it. */
void ingest_batch_log_invalid(ingest_t *in, const delivery *d,
                              const char *what);

#endif
