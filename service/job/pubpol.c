/*
 * pubpol.c - the publish policy (see pubpol.h): the exchange allow-list and
 * the user_id the broker accepts.
 *
 * RabbitMQ's rule (its "Validated User-ID" feature): a message whose
 * user_id property is set must carry the user the connection
 * authenticated as, or the broker closes the channel with 406
 * PRECONDITION_FAILED. Only the "impersonator" tag lifts that, and a
 * scheduler's login should not have it.
 */
#include "pubpol.h"

#include <stdlib.h>
#include <string.h>

struct pubpol {
    char **allow; /* NULL-terminated names and "prefix*" patterns, or NULL */
    char *login;  /* or NULL */
};

/* Split "a,b, c*" into a NULL-terminated list of trimmed names. */
static char **split_list(const char *text)
{
    size_t n = 1, k = 0;
    char **list;
    const char *p = text;

    for (const char *q = text; *q; q++)
        n += *q == ',';
    list = calloc(n + 1, sizeof(*list));
    if (list == NULL)
        return NULL;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && *p == ' ') {
            p++;
            len--;
        }
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if (len > 0) {
            list[k] = strndup(p, len);
            if (list[k] == NULL) {
                for (size_t i = 0; i < k; i++)
                    free(list[i]);
                free(list);
                return NULL;
            }
            k++;
        }
        p += end ? (size_t)(end - p) + 1 : strlen(p);
    }
    return list;
}

pubpol_t *pubpol_new(const char *allow, const char *login, rmqs_error *err)
{
    pubpol_t *p = calloc(1, sizeof(*p));

    if (p != NULL && allow != NULL && allow[0] != '\0' &&
        (p->allow = split_list(allow)) == NULL) {
        free(p);
        p = NULL;
    }
    if (p != NULL && login != NULL && (p->login = strdup(login)) == NULL) {
        pubpol_free(p);
        p = NULL;
    }
    if (p == NULL)
        rmqs_fail(err, RMQS_ENOMEM, NULL, "out of memory");
    return p;
}

void pubpol_free(pubpol_t *p)
{
    if (p == NULL)
        return;
    for (char **a = p->allow; a != NULL && *a != NULL; a++)
        free(*a);
    free(p->allow);
    free(p->login);
    free(p);
}

bool pubpol_has_list(const pubpol_t *p)
{
    return p != NULL && p->allow != NULL;
}

bool pubpol_exchange_allowed(const pubpol_t *p, const char *exchange)
{
    if (p == NULL || p->allow == NULL)
        return true;
    for (char **a = p->allow; *a != NULL; a++) {
        size_t n = strlen(*a);
        if (n > 0 && (*a)[n - 1] == '*') {
            if (strncmp(exchange, *a, n - 1) == 0)
                return true;
        } else if (strcmp(exchange, *a) == 0) {
            return true;
        }
    }
    return false;
}

rmqs_rc pubpol_check_user_id(const pubpol_t *p, const json_t *properties,
                             const char *login, rmqs_error *err)
{
    const json_t *v =
        properties ? json_object_get(properties, "user_id") : NULL;
    const char *user;

    if (login == NULL)
        login = p != NULL ? p->login : NULL;
    if (v == NULL || !json_is_string(v) || login == NULL)
        return RMQS_OK;
    user = json_string_value(v);
    if (strcmp(user, login) == 0)
        return RMQS_OK;
    return rmqs_fail(err, RMQS_EINVAL, "properties.user_id",
                     "properties.user_id: must be the broker login ('%.100s') "
                     "or absent: RabbitMQ refuses any other user_id (406 "
                     "PRECONDITION_FAILED) and closes the publish channel",
                     login);
}
