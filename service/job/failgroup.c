/*
 * failgroup.c - failed jobs grouped by exchange and normalised error (see
 * failgroup.h). The rows are at most a window of recent failures (GET
 * /stats/failures reads 10,000): each error is normalised once, an index
 * sorted by (exchange, error) makes each group a run, and the runs are
 * sorted by size; O(n log n), no table that an error's text could blow
 * up.
 */
#include "failgroup.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Words of this many characters or more with a digit become "#". */
#define WORD_MIN 4

static bool word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

char *failgroup_normalise(const char *error)
{
    size_t n = error != NULL ? strlen(error) : 0, j = 0;
    char *out = malloc(n + 1);

    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t w = i;
        bool digit = false;

        while (w < n && word_char(error[w])) {
            digit = digit || (error[w] >= '0' && error[w] <= '9');
            w++;
        }
        if (w == i) { /* not a word character: as it is */
            out[j++] = error[i++];
            continue;
        }
        if (digit && w - i >= WORD_MIN) {
            out[j++] = '#';
        } else {
            memcpy(out + j, error + i, w - i);
            j += w - i;
        }
        i = w;
    }
    out[j] = '\0';
    return out;
}

/* One input with its normalised error, for the sort. */
typedef struct keyed {
    const failgroup_in *in;
    char *error;
} keyed;

static int by_key(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    int c = strcmp(x->in->exchange, y->in->exchange);

    return c != 0 ? c : strcmp(x->error, y->error);
}

static int by_size(const void *a, const void *b)
{
    const failgroup *x = a, *y = b;
    int c;

    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    if (x->last_failed_at != y->last_failed_at)
        return x->last_failed_at > y->last_failed_at ? -1 : 1;
    c = strcmp(x->exchange, y->exchange);
    return c != 0 ? c : strcmp(x->error, y->error);
}

rmqs_rc failgroup_build(const failgroup_in *in, size_t n, size_t max,
                        failgroup **out, size_t *n_out)
{
    keyed *k = NULL;
    failgroup *g = NULL;
    size_t m = 0;
    rmqs_rc rc = RMQS_ENOMEM;

    *out = NULL;
    *n_out = 0;
    if (n == 0 || max == 0)
        return RMQS_OK;
    k = calloc(n, sizeof(*k));
    g = calloc(n, sizeof(*g));
    if (k == NULL || g == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        k[i].in = &in[i];
        if ((k[i].error = failgroup_normalise(in[i].error)) == NULL)
            goto out;
    }
    qsort(k, n, sizeof(*k), by_key);
    for (size_t i = 0; i < n; i++) {
        failgroup *cur = m > 0 ? &g[m - 1] : NULL;
        if (cur == NULL || strcmp(cur->exchange, k[i].in->exchange) != 0 ||
            strcmp(cur->error, k[i].error) != 0) {
            cur = &g[m++];
            cur->exchange = strdup(k[i].in->exchange);
            cur->error = k[i].error; /* taken */
            k[i].error = NULL;
            if (cur->exchange == NULL)
                goto out;
            cur->last_failed_at = INT64_MIN;
        }
        cur->count++;
        if (k[i].in->failed_at > cur->last_failed_at) {
            cur->last_failed_at = k[i].in->failed_at;
            snprintf(cur->example_job_id, sizeof cur->example_job_id, "%s",
                     k[i].in->id != NULL ? k[i].in->id : "");
        }
    }
    qsort(g, m, sizeof(*g), by_size);
    rc = RMQS_OK;
out:
    for (size_t i = 0; k != NULL && i < n; i++)
        free(k[i].error);
    free(k);
    if (rc != RMQS_OK) {
        failgroup_free(g, m);
        return rc;
    }
    for (size_t i = max; i < m; i++) {
        free(g[i].exchange);
        free(g[i].error);
    }
    *out = g;
    *n_out = m < max ? m : max;
    return RMQS_OK;
}

void failgroup_free(failgroup *g, size_t n)
{
    for (size_t i = 0; g != NULL && i < n; i++) {
        free(g[i].exchange);
        free(g[i].error);
    }
    free(g);
}
