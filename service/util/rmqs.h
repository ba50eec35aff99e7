/*
 * rmqs.h - the one error convention of rmq-scheduler.
 *
 * Every fallible function in the service returns an rmqs_rc: RMQS_OK (0) on
 * success, a positive code otherwise. Where the caller needs to tell a user
 * what went wrong (validation, start-up), the function also fills an optional
 * caller-owned rmqs_error with the offending field and a human-readable
 * message. Nothing in rmqs_error is heap-allocated, so it never needs freeing.
 */
#ifndef RMQS_H
#define RMQS_H

#include <stdarg.h>

/* RMQS_VERSION, the version string, is defined by the build from
 * project(VERSION) in CMakeLists.txt, its one source. */

typedef enum rmqs_rc {
    RMQS_OK = 0,
    RMQS_EINVAL,    /* bad input from a client or a configuration */
    RMQS_ENOTFOUND, /* no such job */
    RMQS_ECONFLICT, /* the job is not in a state that allows the change */
    RMQS_ENOMEM,    /* allocation failed */
    RMQS_EDB,       /* the database failed (I/O, corruption, busy) */
    RMQS_EFULL,     /* the database or its disk is full */
    RMQS_EBROKER,   /* the AMQP connection failed or was lost */
    RMQS_ESYS,      /* an operating-system call failed */
    RMQS_ETIMEDOUT  /* a bounded operation (a search) ran past its budget */
} rmqs_rc;

typedef struct rmqs_error {
    char field[64];    /* the request field at fault, "" if none */
    char message[256]; /* what went wrong, for a human; never a credential */
} rmqs_error;

/* Fill err (if not NULL) and return rc. field may be NULL. */
rmqs_rc rmqs_fail(rmqs_error *err, rmqs_rc rc, const char *field,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Short stable name of a code ("invalid_argument", "not_found", ...). */
const char *rmqs_rc_name(rmqs_rc rc);

#endif
