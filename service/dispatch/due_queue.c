/*
 * due_queue.c - the claimed jobs between the feeder, the publisher and the
 * recorder (see due_queue.h for why it is a module).
 *
 * `ahead` is an array used as a window a[head .. head + n): the publisher
 * takes from the front in O(1), and a merge first slides the live items to
 * the front, then merges from the back in place (the array has room for
 * cap items, and a merge never takes more than the room). Claims are a
 * batch at a time and the array is small (twice the batch size), so the
 * slide costs less than a heap's log n per take would on the publisher's
 * path. `done` is a singly linked list with a tail, in arrival order.
 */
#include "due_queue.h"

#include <stdlib.h>
#include <string.h>

struct due_queue {
    dueq_item **ahead; /* by due time: ahead[head .. head + n) */
    size_t head, n, cap;
    dueq_item *done_head, *done_tail; /* answered, arrival order */
    size_t done_n;
    int64_t done_since; /* wall ms the oldest of them arrived */
};

due_queue_t *dueq_new(size_t cap)
{
    due_queue_t *q = calloc(1, sizeof(*q));

    if (q == NULL)
        return NULL;
    q->cap = cap > 0 ? cap : 1;
    q->ahead = calloc(q->cap, sizeof(*q->ahead));
    if (q->ahead == NULL) {
        free(q);
        return NULL;
    }
    return q;
}

void dueq_items_free(dueq_item *it)
{
    while (it) {
        dueq_item *next = it->next;
        job_clear(&it->job);
        free(it);
        it = next;
    }
}

void dueq_free(due_queue_t *q)
{
    if (q == NULL)
        return;
    for (size_t i = 0; i < q->n; i++) {
        dueq_item *it = q->ahead[q->head + i];
        it->next = NULL;
        dueq_items_free(it);
    }
    dueq_items_free(q->done_head);
    free(q->ahead);
    free(q);
}

dueq_item *dueq_item_new(job_t *job)
{
    dueq_item *it = calloc(1, sizeof(*it));

    if (it == NULL)
        return NULL;
    it->job = *job; /* moves the job's allocations */
    memset(job, 0, sizeof(*job));
    it->sent_ms = -1;
    return it;
}

size_t dueq_cap(const due_queue_t *q)
{
    return q->cap;
}

size_t dueq_ahead(const due_queue_t *q)
{
    return q->n;
}

size_t dueq_room(const due_queue_t *q)
{
    return q->cap - q->n;
}

rmqs_rc dueq_merge(due_queue_t *q, dueq_item **in, size_t n)
{
    dueq_item **a = q->ahead;
    size_t na, nb = n;

    if (n > q->cap - q->n)
        return RMQS_EINVAL;
    if (q->head > 0) { /* live items to the front */
        memmove(a, a + q->head, q->n * sizeof(*a));
        q->head = 0;
    }
    na = q->n;
    while (nb > 0) { /* from the back, in place */
        if (na > 0 && a[na - 1]->job.due_at > in[nb - 1]->job.due_at) {
            a[na + nb - 1] = a[na - 1];
            na--;
        } else {
            a[na + nb - 1] = in[nb - 1];
            nb--;
        }
    }
    q->n += n;
    return RMQS_OK;
}

dueq_item *dueq_take_due(due_queue_t *q, int64_t now_ms, int64_t *next_due)
{
    dueq_item *first;

    *next_due = INT64_MAX;
    if (q->n == 0)
        return NULL;
    first = q->ahead[q->head];
    if (first->job.due_at > now_ms) {
        *next_due = first->job.due_at;
        return NULL;
    }
    q->head++;
    q->n--;
    if (q->n == 0)
        q->head = 0;
    return first;
}

size_t dueq_done_push(due_queue_t *q, dueq_item *it, int64_t now_ms)
{
    it->next = NULL;
    if (q->done_tail) {
        q->done_tail->next = it;
    } else {
        q->done_head = it;
        q->done_since = now_ms;
    }
    q->done_tail = it;
    return ++q->done_n;
}

size_t dueq_release(due_queue_t *q, dueq_item *it, int64_t now_ms)
{
    it->out = (store_outcome){.id = it->job.id, .kind = STORE_OUT_RELEASE};
    return dueq_done_push(q, it, now_ms);
}

size_t dueq_release_ahead(due_queue_t *q, int64_t now_ms)
{
    size_t n = q->n;

    for (size_t i = 0; i < n; i++)
        (void)dueq_release(q, q->ahead[q->head + i], now_ms);
    q->head = q->n = 0;
    return n;
}

size_t dueq_done_count(const due_queue_t *q)
{
    return q->done_n;
}

int64_t dueq_done_since(const due_queue_t *q)
{
    return q->done_since;
}

dueq_item *dueq_done_take(due_queue_t *q, size_t *n)
{
    dueq_item *list = q->done_head;

    *n = q->done_n;
    q->done_head = q->done_tail = NULL;
    q->done_n = 0;
    return list;
}
