/*
 * test_pubpol.c - the publish policy (service/job/pubpol.c): the exchange
 * allow-list's names and prefix patterns, and the user_id rule.
 */
#include <criterion/criterion.h>

#include <string.h>

#include "pubpol.h"

static pubpol_t *make(const char *allow, const char *login)
{
    rmqs_error e = {0};
    pubpol_t *p = pubpol_new(allow, login, &e);

    cr_assert_not_null(p, "%s", e.message);
    return p;
}

Test(pubpol, no_list_allows_every_exchange)
{
    pubpol_t *p = make(NULL, NULL), *empty = make("", NULL);

    cr_expect_not(pubpol_has_list(p));
    cr_expect(pubpol_exchange_allowed(p, "anything"));
    cr_expect(pubpol_exchange_allowed(p, ""));
    cr_expect(pubpol_exchange_allowed(NULL, "x"));
    cr_expect_not(pubpol_has_list(empty));
    cr_expect(pubpol_exchange_allowed(empty, "anything"));
    pubpol_free(p);
    pubpol_free(empty);
}

Test(pubpol, names_and_prefixes_trimmed)
{
    pubpol_t *p = make(" billing , amq.* ,, orders", NULL);

    cr_expect(pubpol_has_list(p));
    cr_expect(pubpol_exchange_allowed(p, "billing"));
    cr_expect(pubpol_exchange_allowed(p, "orders"));
    cr_expect(pubpol_exchange_allowed(p, "amq.topic"));
    cr_expect(pubpol_exchange_allowed(p, "amq."));
    cr_expect_not(pubpol_exchange_allowed(p, "billing2"));
    cr_expect_not(pubpol_exchange_allowed(p, "bill"));
    cr_expect_not(pubpol_exchange_allowed(p, "amq"));
    cr_expect_not(pubpol_exchange_allowed(p, ""), "the default exchange");
    cr_expect_not(pubpol_exchange_allowed(p, " billing"));
    pubpol_free(p);
}

Test(pubpol, a_star_alone_allows_every_exchange_and_the_default)
{
    pubpol_t *p = make("*", NULL);

    cr_expect(pubpol_exchange_allowed(p, ""));
    cr_expect(pubpol_exchange_allowed(p, "x"));
    pubpol_free(p);
}

Test(pubpol, user_id_must_be_the_login)
{
    pubpol_t *p = make(NULL, "guest");
    json_t *mallory = json_pack("{s:s}", "user_id", "mallory");
    json_t *guest = json_pack("{s:s}", "user_id", "guest");
    json_t *none = json_pack("{s:s}", "app_id", "x");
    rmqs_error e = {0};

    cr_expect_eq(pubpol_check_user_id(p, NULL, NULL, &e), RMQS_OK);
    cr_expect_eq(pubpol_check_user_id(p, none, NULL, &e), RMQS_OK);
    cr_expect_eq(pubpol_check_user_id(p, guest, NULL, &e), RMQS_OK);
    cr_expect_eq(pubpol_check_user_id(p, mallory, NULL, &e), RMQS_EINVAL);
    cr_expect_str_eq(e.field, "properties.user_id");
    cr_expect(strstr(e.message, "'guest'") != NULL, "%s", e.message);
    /* the connection's own login, when given, is the one that counts */
    cr_expect_eq(pubpol_check_user_id(p, mallory, "mallory", &e), RMQS_OK);
    cr_expect_eq(pubpol_check_user_id(p, guest, "mallory", &e), RMQS_EINVAL);
    pubpol_free(p);
    json_decref(mallory);
    json_decref(guest);
    json_decref(none);
}

Test(pubpol, an_unknown_login_accepts_any_user_id)
{
    pubpol_t *p = make(NULL, NULL);
    json_t *mallory = json_pack("{s:s}", "user_id", "mallory");
    rmqs_error e = {0};

    cr_expect_eq(pubpol_check_user_id(p, mallory, NULL, &e), RMQS_OK);
    cr_expect_eq(pubpol_check_user_id(NULL, mallory, NULL, &e), RMQS_OK);
    pubpol_free(p);
    json_decref(mallory);
}
