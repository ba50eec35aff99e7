/*
 * service.h - the running service: every subsystem wired together from one
 * config, started in order and stopped in the reverse order that loses
 * nothing.
 *
 * main() only loads the config, blocks the signals and waits for one;
 * everything between "starting" and "stopped" lives here.
 */
#ifndef RMQS_SERVICE_H
#define RMQS_SERVICE_H

#include "config.h"
#include "rmqs.h"

typedef struct service service_t;

/*
 * Start everything cfg asks for: the database (folder, lock, open, recover),
 * the janitor, the dispatcher with its AMQP publisher, the writer, the
 * ingest consumers if any, then the HTTP server. Call with SIGTERM/SIGINT
 * blocked (the threads inherit the mask). cfg is borrowed and must outlive
 * the service. Failures are logged here; on failure whatever had started is
 * stopped again and *out is NULL. Returns RMQS_OK, RMQS_EINVAL when the
 * AMQP or ingest settings are refused (like a bad flag: exit status 2), or
 * another code when a resource could not be set up (exit status 1).
 */
rmqs_rc service_start(const config *cfg, service_t **out);

/*
 * Graceful stop after signal sig: no new connections, the ingest batch in
 * hand committed and acknowledged, requests in progress committed and
 * answered, the dispatcher's batch in flight recorded, the database closed.
 * A watchdog ends the process with status 1 if that takes longer than
 * --shutdown-grace-s. Frees svc.
 */
void service_stop(service_t *svc, int sig);

/*
 * --healthcheck: GET /healthz from the service listening at cfg->listen (a
 * wildcard address is reached through loopback). With HTTPS configured only
 * the TCP connection is checked. Returns the process exit status.
 */
int service_healthcheck(const config *cfg);

#endif
