/*
 * rmqs.c - the service-wide error convention (see rmqs.h).
 *
 * Two small helpers shared by every module: rmqs_fail() fills the optional
 * caller-owned rmqs_error and hands the code back, so a failing path is one
 * statement (`return rmqs_fail(err, RMQS_EINVAL, "exchange", "...")`), and
 * rmqs_rc_name() gives each code the stable short name the API and the logs
 * print. Nothing here allocates.
 */
#include "rmqs.h"

#include <stdio.h>

rmqs_rc rmqs_fail(rmqs_error *err, rmqs_rc rc, const char *field,
                  const char *fmt, ...)
{
    if (err == NULL)
        return rc;

    /* Copy by hand rather than snprintf: truncation is expected and fine. */
    const char *f = field != NULL ? field : "";
    size_t i = 0;
    for (; i < sizeof err->field - 1 && f[i] != '\0'; i++)
        err->field[i] = f[i];
    err->field[i] = '\0';

    err->message[0] = '\0';
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return rc;
}

const char *rmqs_rc_name(rmqs_rc rc)
{
    switch (rc) {
    case RMQS_OK: return "ok";
    case RMQS_EINVAL: return "invalid_argument";
    case RMQS_ENOTFOUND: return "not_found";
    case RMQS_ECONFLICT: return "conflict";
    case RMQS_ENOMEM: return "out_of_memory";
    case RMQS_EDB: return "database_error";
    case RMQS_EFULL: return "storage_full";
    case RMQS_EBROKER: return "broker_error";
    case RMQS_ESYS: return "system_error";
    case RMQS_ETIMEDOUT: return "timed_out";
    }
    return "unknown_error";
}
