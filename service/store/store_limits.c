/*
 * store_limits.c - the front of the flow limits' store calls (store.h,
 * "Flow limits"; issue 23): checks the arguments, then calls the backend's
 * limit table (store_backend.h's store_limit_ops: store_sqlite_limits.c,
 * store_pg_limits.c).
 *
 * Why beside store.c rather than in it: limits are a kind of row of their
 * own, with nothing to share with the jobs' front (no claimset, no
 * cursor): a limit is a name, its canonical spec (limit.h) and a
 * generation. As store_schedules.c is for schedules.
 */
#include "store.h"

#include <string.h>

#include "store_backend.h"

static bool text_ok(const char *s)
{
    return s != NULL && s[0] != '\0';
}

static void zero_out(store_limit *out)
{
    if (out != NULL)
        memset(out, 0, sizeof(*out));
}

rmqs_rc store_limit_put(store_t *st, const char *name, const char *spec,
                        int64_t now_ms, int64_t max_limits, bool *created,
                        bool *unchanged, store_limit *out)
{
    bool c = false, u = false;
    rmqs_rc rc;

    zero_out(out);
    if (created)
        *created = false;
    if (unchanged)
        *unchanged = false;
    if (!text_ok(name) || !text_ok(spec))
        return RMQS_EINVAL;
    rc = st->ops->lim->put(st->b, name, spec, now_ms, max_limits, &c, &u, out);
    if (rc == RMQS_OK) {
        if (created)
            *created = c;
        if (unchanged)
            *unchanged = u;
    }
    return rc;
}

rmqs_rc store_limit_update(store_t *st, const char *name, const char *spec,
                           int64_t expect_generation, int64_t now_ms,
                           store_limit *out)
{
    zero_out(out);
    if (!text_ok(name) || !text_ok(spec))
        return RMQS_EINVAL;
    return st->ops->lim->update(st->b, name, spec, expect_generation, now_ms,
                                out);
}

rmqs_rc store_limit_get(store_t *st, const char *name, store_limit *out)
{
    zero_out(out);
    if (!text_ok(name))
        return RMQS_ENOTFOUND;
    return st->ops->lim->get(st->b, name, out);
}

rmqs_rc store_limit_list(store_t *st, store_limit **rows, size_t *n)
{
    *rows = NULL;
    *n = 0;
    return st->ops->lim->list(st->b, rows, n);
}

rmqs_rc store_limit_delete(store_t *st, const char *name)
{
    if (!text_ok(name))
        return RMQS_ENOTFOUND;
    return st->ops->lim->del(st->b, name);
}
