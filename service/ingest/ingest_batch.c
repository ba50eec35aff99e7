/*
 * ingest_batch.c - what becomes of each delivery of an ingest batch (see
 * ingest_batch.h): taken from its envelope into a job (ingest_map.c says
 * what the message means) with its idempotency key, and, after the writer
 * had it, judged by the outcome: stored, stored again without a key, or
 * settled otherwise. The wire (reading, acks, rejects) is amqp_ingest.c's.
 */
#include "ingest_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "timeutil.h"

#define MOD "ingest"

static void on_done(writer_req *req, void *cls)
{
    ingest_t *in = cls;

    (void)req;
    pthread_mutex_lock(&in->wk.mu);
    if (--in->outstanding == 0) {
        pthread_cond_broadcast(&in->done_cv);
    }
    pthread_mutex_unlock(&in->wk.mu);
}

void ingest_delivery_clear(delivery *d)
{
    job_clear(&d->job);
    job_clear(&d->existing);
    free(d->idem_key);
    memset(d, 0, sizeof *d);
}

void ingest_batch_clear(ingest_t *in)
{
    for (size_t i = 0; i < in->n; i++) {
        ingest_delivery_clear(&in->batch[i]);
    }
    in->n = 0;
}

void ingest_batch_take(ingest_t *in, const amqp_envelope_t *env)
{
    delivery *d = &in->batch[in->n++];
    const amqp_basic_properties_t *p = &env->message.properties;
    rmqs_error err = {{0}, {0}};
    int64_t received = tu_now_ms();
    const ingest_inbox *m = NULL;
    rmqs_rc rc;

    memset(d, 0, sizeof *d);
    d->tag = env->delivery_tag;
    d->redelivered = env->redelivered != 0;
    ingest_map_printable(d->routing_key, sizeof d->routing_key,
                         env->routing_key.bytes, env->routing_key.len);
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) {
        ingest_map_printable(d->message_id, sizeof d->message_id,
                             p->message_id.bytes, p->message_id.len);
    }
    for (size_t i = 0; i < in->n_maps && !m; i++) {
        if (ingest_inbox_has_tag(&in->maps[i], env->consumer_tag)) {
            m = &in->maps[i];
            d->map = i;
        }
    }
    if (!m) { /* cannot happen: we only consume with our own tags */
        d->act = ACT_REQUEUE;
        snprintf(d->reason, sizeof d->reason, "unknown consumer tag");
        return;
    }

    rc = ingest_map_job(env, m->target_exchange, received, &in->limits, &d->job,
                        &err);
    d->act = ACT_STORE;
    if (rc == RMQS_EINVAL) {
        d->invalid = true;
        snprintf(d->reason, sizeof d->reason, "%s", err.message);
        if (!d->job.exchange || in->rule == INGEST_INVALID_DEAD_LETTER) {
            d->act = ACT_REJECT; /* cannot be carried, or the rule says so */
            job_clear(&d->job);
            return;
        }
    } else if (rc != RMQS_OK) {
        d->act = ACT_REQUEUE;
        snprintf(d->reason, sizeof d->reason, "%s", err.message);
        return;
    }
    if (job_id_generate(received, d->job.id) != RMQS_OK) {
        d->act = ACT_REQUEUE;
        snprintf(d->reason, sizeof d->reason, "no randomness for a job id");
        return;
    }
    if (ingest_map_idempotency(env, &d->job, m->ingest_exchange, &d->idem_key,
                               d->idem_request) != RMQS_OK) {
        d->act = ACT_REQUEUE;
        snprintf(d->reason, sizeof d->reason, "out of memory");
        return;
    }
    d->req.ins.jobs = &d->job;
    d->req.ins.n = 1;
    d->ins_key = d->idem_key;
    d->ins_request = d->idem_request;
    d->req.ins.idem_keys = d->idem_key ? &d->ins_key : NULL;
    d->req.ins.idem_requests = &d->ins_request;
    d->req.ins.existed = &d->existed;
    d->req.ins.existing = &d->existing;
    d->req.done = on_done;
    d->req.cls = in;
}

size_t ingest_batch_judge(ingest_t *in, bool retry, bool *db_trouble)
{
    size_t conflicts = 0;

    for (size_t i = 0; i < in->n; i++) {
        delivery *d = &in->batch[i];
        if (d->act != ACT_STORE || (retry && !d->retry)) {
            continue;
        }
        if (d->req.ins.rc == RMQS_ECONFLICT && d->req.ins.idem_keys) {
            log_warn(MOD,
                     "message_id reused by a different message; "
                     "stored without duplicate protection",
                     "exchange=\"%s\" routing_key=\"%s\" message_id=\"%s\"",
                     in->maps[d->map].ingest_exchange, d->routing_key,
                     d->message_id);
            d->req.ins.idem_keys = NULL;
            d->req.ins.rc = RMQS_OK;
            d->retry = true;
            conflicts++;
            continue;
        }
        switch (d->req.ins.rc) {
        case RMQS_OK: break;
        case RMQS_ECONFLICT: /* without a key: not expected */
        case RMQS_EINVAL:
        case RMQS_ENOTFOUND:
            d->act = ACT_REJECT;
            d->invalid = true;
            snprintf(d->reason, sizeof d->reason, "the store refused it (%s)",
                     rmqs_rc_name(d->req.ins.rc));
            break;
        default: /* EDB, EFULL, ENOMEM...: the message waits in the broker */
            d->act = ACT_REQUEUE;
            snprintf(d->reason, sizeof d->reason, "database: %s",
                     rmqs_rc_name(d->req.ins.rc));
            *db_trouble = true;
            break;
        }
    }
    return conflicts;
}

void ingest_batch_log_invalid(ingest_t *in, const delivery *d, const char *what)
{
    in->invalid_total++;
    log_warn(MOD, "invalid message",
             "exchange=\"%s\" routing_key=\"%s\" message_id=\"%s\" "
             "reason=\"%s\" action=%s job_id=%s invalid_total=%llu",
             in->maps[d->map].ingest_exchange, d->routing_key, d->message_id,
             d->reason, what, d->job.id[0] ? d->job.id : "none",
             (unsigned long long)in->invalid_total);
}
