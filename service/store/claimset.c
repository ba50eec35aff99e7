/*
 * claimset.c - held jobs and the cancel/reschedule race rules (contract and
 * why in claimset.h).
 *
 * How: one mutex over three things.
 *   - held: an open-addressing hash set of 16-byte job ids (linear probing,
 *     deletion by backward shift, so no tombstones; grown at half full). It
 *     holds what the dispatcher has claimed ahead and not yet settled: a
 *     few thousand ids at most (lookahead + publish window + outcomes
 *     waiting to be recorded).
 *   - busy: the ids whose cancel/reschedule is in its transaction, a small
 *     array (one entry per call in flight: bounded by the HTTP threads).
 *   - ring: the last RING ids that ended a change or were released, entry g
 *     (1-based generation) at ring[(g - 1) % RING]; gen is the newest.
 * Job ids are UUIDv7: the first 6 bytes are a timestamp, so the hash mixes
 * all 16 bytes (FNV-1a) rather than trusting any part to be random.
 */
#include "claimset.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define RING 4096 /* changes/releases a feeder's read may overlap */

typedef unsigned char jid[JOB_ID_BYTES];

typedef struct idset {
    jid *slot;
    bool *used;
    size_t cap; /* a power of two, or 0 */
    size_t n;
} idset;

struct claimset {
    pthread_mutex_t mu;
    idset held;
    jid *busy;
    size_t busy_n, busy_cap;
    jid ring[RING];
    uint64_t gen;
};

static size_t id_hash(const unsigned char *id)
{
    uint64_t h = 1469598103934665603ULL;

    for (int i = 0; i < JOB_ID_BYTES; i++) {
        h ^= id[i];
        h *= 1099511628211ULL;
    }
    return (size_t)(h ^ (h >> 29));
}

/* The slot of id, or of the empty slot where it would go. cap > 0. */
static size_t idset_pos(const idset *s, const unsigned char *id)
{
    size_t mask = s->cap - 1, i = id_hash(id) & mask;

    while (s->used[i] && memcmp(s->slot[i], id, JOB_ID_BYTES) != 0)
        i = (i + 1) & mask;
    return i;
}

static bool idset_has(const idset *s, const unsigned char *id)
{
    return s->cap > 0 && s->used[idset_pos(s, id)];
}

static bool idset_grow(idset *s)
{
    idset b = {.cap = s->cap ? s->cap * 2 : 64};

    b.slot = malloc(b.cap * sizeof(*b.slot));
    b.used = calloc(b.cap, sizeof(*b.used));
    if (b.slot == NULL || b.used == NULL) {
        free(b.slot);
        free(b.used);
        return false;
    }
    for (size_t i = 0; i < s->cap; i++) {
        if (s->used[i]) {
            size_t p = idset_pos(&b, s->slot[i]);
            memcpy(b.slot[p], s->slot[i], JOB_ID_BYTES);
            b.used[p] = true;
            b.n++;
        }
    }
    free(s->slot);
    free(s->used);
    *s = b;
    return true;
}

static bool idset_add(idset *s, const unsigned char *id)
{
    size_t p;

    if ((s->n + 1) * 2 > s->cap && !idset_grow(s))
        return false;
    p = idset_pos(s, id);
    if (!s->used[p]) {
        memcpy(s->slot[p], id, JOB_ID_BYTES);
        s->used[p] = true;
        s->n++;
    }
    return true;
}

static void idset_del(idset *s, const unsigned char *id)
{
    size_t mask, i, j;

    if (s->cap == 0)
        return;
    mask = s->cap - 1;
    i = idset_pos(s, id);
    if (!s->used[i])
        return;
    s->used[i] = false;
    s->n--;
    /* backward shift: move later members of the run into the hole when
     * their home slot is not between the hole and them */
    for (j = (i + 1) & mask; s->used[j]; j = (j + 1) & mask) {
        size_t home = id_hash(s->slot[j]) & mask;
        bool movable =
            i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            memcpy(s->slot[i], s->slot[j], JOB_ID_BYTES);
            s->used[i] = true;
            s->used[j] = false;
            i = j;
        }
    }
}

static void idset_clear(idset *s)
{
    free(s->slot);
    free(s->used);
    memset(s, 0, sizeof(*s));
}

claimset_t *claimset_new(void)
{
    claimset_t *cs = calloc(1, sizeof(*cs));

    if (cs == NULL)
        return NULL;
    if (pthread_mutex_init(&cs->mu, NULL) != 0) {
        free(cs);
        return NULL;
    }
    return cs;
}

void claimset_free(claimset_t *cs)
{
    if (cs == NULL)
        return;
    idset_clear(&cs->held);
    free(cs->busy);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}

uint64_t claimset_begin(claimset_t *cs)
{
    uint64_t g;

    pthread_mutex_lock(&cs->mu);
    g = cs->gen;
    pthread_mutex_unlock(&cs->mu);
    return g;
}

bool claimset_held(claimset_t *cs, const unsigned char id[JOB_ID_BYTES])
{
    bool h;

    pthread_mutex_lock(&cs->mu);
    h = idset_has(&cs->held, id);
    pthread_mutex_unlock(&cs->mu);
    return h;
}

/* A generation ends: id changed or was released. cs->mu held. */
static void ring_push_locked(claimset_t *cs, const unsigned char *id)
{
    cs->gen++;
    memcpy(cs->ring[(cs->gen - 1) % RING], id, JOB_ID_BYTES);
}

static bool busy_has_locked(const claimset_t *cs, const unsigned char *id)
{
    for (size_t i = 0; i < cs->busy_n; i++)
        if (memcmp(cs->busy[i], id, JOB_ID_BYTES) == 0)
            return true;
    return false;
}

long claimset_take(claimset_t *cs, uint64_t gen,
                   const unsigned char (*ids)[JOB_ID_BYTES], size_t n,
                   bool *keep)
{
    idset stale = {0};
    long kept = 0;
    uint64_t since;

    for (size_t i = 0; i < n; i++)
        keep[i] = false;
    pthread_mutex_lock(&cs->mu);
    since = cs->gen - gen;
    if (since >= RING) /* the ring no longer tells what happened: none */
        goto out;
    for (uint64_t g = gen + 1; g <= cs->gen; g++) {
        if (!idset_add(&stale, cs->ring[(g - 1) % RING])) {
            kept = -1;
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        keep[i] = !idset_has(&cs->held, ids[i]) && !idset_has(&stale, ids[i]) &&
                  !busy_has_locked(cs, ids[i]);
        if (keep[i] && !idset_add(&cs->held, ids[i])) {
            for (size_t k = 0; k < i; k++) /* undo: nothing held */
                if (keep[k])
                    idset_del(&cs->held, ids[k]);
            for (size_t k = 0; k < n; k++)
                keep[k] = false;
            kept = -1;
            goto out;
        }
        kept += keep[i];
    }
out:
    pthread_mutex_unlock(&cs->mu);
    idset_clear(&stale);
    return kept;
}

rmqs_rc claimset_change_begin(claimset_t *cs,
                              const unsigned char id[JOB_ID_BYTES])
{
    rmqs_rc rc = RMQS_OK;

    pthread_mutex_lock(&cs->mu);
    if (idset_has(&cs->held, id)) {
        rc = RMQS_ECONFLICT;
    } else {
        if (cs->busy_n == cs->busy_cap) {
            size_t ncap = cs->busy_cap ? cs->busy_cap * 2 : 8;
            jid *nb = realloc(cs->busy, ncap * sizeof(*nb));
            if (nb == NULL) {
                rc = RMQS_ENOMEM;
                goto out;
            }
            cs->busy = nb;
            cs->busy_cap = ncap;
        }
        memcpy(cs->busy[cs->busy_n++], id, JOB_ID_BYTES);
    }
out:
    pthread_mutex_unlock(&cs->mu);
    return rc;
}

void claimset_change_end(claimset_t *cs, const unsigned char id[JOB_ID_BYTES])
{
    pthread_mutex_lock(&cs->mu);
    for (size_t i = 0; i < cs->busy_n; i++) {
        if (memcmp(cs->busy[i], id, JOB_ID_BYTES) == 0) {
            memcpy(cs->busy[i], cs->busy[cs->busy_n - 1], JOB_ID_BYTES);
            cs->busy_n--;
            break;
        }
    }
    ring_push_locked(cs, id);
    pthread_mutex_unlock(&cs->mu);
}

void claimset_release(claimset_t *cs, const unsigned char id[JOB_ID_BYTES])
{
    pthread_mutex_lock(&cs->mu);
    if (idset_has(&cs->held, id)) {
        idset_del(&cs->held, id);
        ring_push_locked(cs, id);
    }
    pthread_mutex_unlock(&cs->mu);
}

size_t claimset_count(claimset_t *cs)
{
    size_t n;

    pthread_mutex_lock(&cs->mu);
    n = cs->held.n;
    pthread_mutex_unlock(&cs->mu);
    return n;
}
