/*
 * fair.c - a new job's rank among its key's jobs due at the same ms
 * (fair.h says why).
 */
#include "fair.h"

#include <glib.h>
#include <stdlib.h>
#include <string.h>

typedef struct seen {
    int64_t due;   /* the last due time given to this key */
    int64_t count; /* jobs of the key given that due time so far */
} seen;

struct fair {
    flow_key key;
    size_t max_keys;
    GHashTable *keys; /* key value -> seen* */
};

fair_t *fair_new(const flow_key *key, size_t max_keys)
{
    fair_t *f = calloc(1, sizeof *f);

    if (f == NULL)
        return NULL;
    f->key.kind = key->kind;
    f->key.header = key->header != NULL ? strdup(key->header) : NULL;
    f->max_keys = max_keys > 0 ? max_keys : 1;
    f->keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    if (key->header != NULL && f->key.header == NULL) {
        fair_free(f);
        return NULL;
    }
    return f;
}

void fair_free(fair_t *f)
{
    if (f == NULL)
        return;
    flow_key_clear(&f->key);
    g_hash_table_destroy(f->keys);
    free(f);
}

void fair_rank(fair_t *f, job_t *j)
{
    char value[LIMIT_KEY_VALUE_MAX + 1];
    seen *s;
    int64_t rank = 0;

    (void)flow_key_value(&f->key, j, value, sizeof value);
    s = g_hash_table_lookup(f->keys, value);
    if (s == NULL) {
        if (g_hash_table_size(f->keys) >= f->max_keys)
            g_hash_table_remove_all(f->keys);
        s = g_new0(seen, 1);
        s->due = j->due_at;
        g_hash_table_insert(f->keys, g_strdup(value), s);
    } else if (s->due != j->due_at) {
        s->due = j->due_at;
        s->count = 0;
    } else {
        rank = s->count;
    }
    s->count = rank + 1;
    j->claim_rank = -((int64_t)j->priority << 32) + rank;
}
