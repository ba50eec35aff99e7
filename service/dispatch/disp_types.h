/*
 * disp_types.h - the dispatcher's handle and options: the types that
 * dispatcher.h's calls take and that the dispatcher's own files
 * (dispatcher_int.h) build on. Apart from dispatcher.h so that the thread
 * files stand under the public calls rather than include them; callers
 * include dispatcher.h, which includes this.
 */
#ifndef RMQS_DISP_TYPES_H
#define RMQS_DISP_TYPES_H

#include <stdint.h>

typedef struct disp disp_t;

/* The broker connection as GET /status names it. */
typedef enum disp_broker_state {
    DISP_BROKER_DOWN,
    DISP_BROKER_UP,
    DISP_BROKER_BLOCKED /* connected, but connection.blocked */
} disp_broker_state;

#define DISP_BROKER_ERROR_MAX 256

/* On a store shared with other instances (store_has_peers), the feeder
 * looks at the store's next due job at least this often, even when nothing
 * woke it: a job stored by another instance without a
 * wake-up (store_options.wake_horizon_ms) is still claimed in time when it
 * is due later than this plus the lookahead. */
#define DISP_REPLAN_MS 1000

typedef struct disp_options {
    int batch_size;          /* most jobs claimed ahead at a time */
    int window;              /* most unconfirmed publishes; 0: twice
                                  batch_size */
    int64_t lookahead_ms;    /* claim jobs due within this much time */
    int64_t backoff_base_ms; /* first retry delay after a failed attempt */
    int64_t backoff_cap_ms;  /* retry delay never exceeds this */
    int confirm_timeout_ms;  /* a publish not confirmed by then:
                                  connection presumed dead */
    int heartbeat_s;         /* to bound idle sleeps (service heartbeats) */
    int rt_priority;         /* SCHED_FIFO priority of the publisher
                                  thread, best effort; 0: normal */
    /* Called on the dispatcher's thread each time the broker connection
     * is (re)made (service.c logs "ready" the first time); NULL: none. */
    void (*on_connected)(void *cls);
    void *connected_cls;
} disp_options;

#endif
