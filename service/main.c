/*
 * main.c - the process: settings, signals, and the service between them.
 *
 * Signals are blocked before any thread starts (every thread inherits the
 * mask) and taken synchronously here with sigwait(), so the shutdown work
 * runs in ordinary code, not in a handler (service.c does it, in order).
 * Exit status: 0 after a graceful stop, --help or --version; 2 for a bad
 * setting; 1 when the service cannot start; --healthcheck's own answer.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#include "config.h"
#include "service.h"

extern char **environ;

int main(int argc, char **argv)
{
    config cfg;
    config_action action;
    rmqs_error err = {0};
    service_t *svc = NULL;
    sigset_t sigs;
    int sig = 0, status = 0;
    rmqs_rc rc;

    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    rc = config_load(&cfg, argc, argv, environ, stdout, &action, &err);
    if (rc != RMQS_OK) {
        fprintf(stderr, "rmq-scheduler: %s\n", err.message);
        status = 2;
    } else if (action == CONFIG_HEALTHCHECK) {
        status = service_healthcheck(&cfg);
    } else if (action == CONFIG_RUN) {
        rc = service_start(&cfg, &svc);
        if (rc != RMQS_OK) {
            status = rc == RMQS_EINVAL ? 2 : 1;
        } else {
            while (sigwait(&sigs, &sig) != 0 ||
                   (sig != SIGTERM && sig != SIGINT))
                ;
            service_stop(svc, sig);
        }
    }
    config_clear(&cfg);
    return status;
}
