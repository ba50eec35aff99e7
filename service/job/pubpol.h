/*
 * pubpol.h - the publish policy: which exchanges jobs may publish to
 * (--allow-exchanges) and which user_id property the broker will take (the
 * AMQP login), checked wherever a job can start on its way to the broker.
 *
 * Why a module of its own: the allow-list was checked only by the HTTP
 * handlers that create jobs, so a retry, a run-now, a recurring schedule's
 * run, an ingested message or a job stored before the list changed went
 * out through an exchange the operator had closed. And a user_id other than
 * the login makes RabbitMQ close the publish channel (406), which names no
 * job, so one client's property cost other clients' jobs their attempt.
 * One pure policy, built once by service.c, is read by the HTTP layer (a
 * clear 403/400 at the door), the ingest (its targets, at start-up) and the
 * publisher (the last word: a refused job fails, never published).
 */
#ifndef RMQS_PUBPOL_H
#define RMQS_PUBPOL_H

#include <stdbool.h>

#include <jansson.h>

#include "rmqs.h"

typedef struct pubpol pubpol_t;

/* allow: "a,b, prefix*" (NULL or "": any exchange); login: the user every
 * broker URL logs in as (NULL: unknown or not one user, then only the
 * publisher, which knows its connection's user, checks user_id). Returns
 * the policy, or NULL with err (RMQS_ENOMEM). */
pubpol_t *pubpol_new(const char *allow, const char *login, rmqs_error *err);
void pubpol_free(pubpol_t *p);

/* Whether an allow-list was given. */
bool pubpol_has_list(const pubpol_t *p);

/* Whether a job may publish to exchange: no list, or a listed name, or a
 * listed "prefix*" it starts with (so the default exchange "" passes a
 * list only through "*"). NULL policy: any. */
bool pubpol_exchange_allowed(const pubpol_t *p, const char *exchange);

/* properties.user_id (properties may be NULL) is absent or equal to login
 * (login NULL: the policy's login; unknown: accepted). RMQS_OK, or
 * RMQS_EINVAL with err's field "properties.user_id" and why. */
rmqs_rc pubpol_check_user_id(const pubpol_t *p, const json_t *properties,
                             const char *login, rmqs_error *err);

#endif
