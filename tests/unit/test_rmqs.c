/*
 * test_rmqs.c - the error convention: rmqs_fail and rmqs_rc_name.
 */
#include <criterion/criterion.h>

#include <string.h>

#include "rmqs.h"

struct name_case {
    rmqs_rc rc;
    const char *name;
};

Test(rmqs, rc_names)
{
    static const struct name_case cases[] = {
        {RMQS_OK, "ok"},
        {RMQS_EINVAL, "invalid_argument"},
        {RMQS_ENOTFOUND, "not_found"},
        {RMQS_ECONFLICT, "conflict"},
        {RMQS_ENOMEM, "out_of_memory"},
        {RMQS_EDB, "database_error"},
        {RMQS_EFULL, "storage_full"},
        {RMQS_EBROKER, "broker_error"},
        {RMQS_ESYS, "system_error"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_str_eq(rmqs_rc_name(cases[i].rc), cases[i].name, "rc %d",
                         cases[i].rc);
    cr_expect_str_eq(rmqs_rc_name((rmqs_rc)99), "unknown_error");
}

Test(rmqs, fail_fills_error)
{
    rmqs_error e;
    memset(&e, 'x', sizeof e);
    cr_expect_eq(
        rmqs_fail(&e, RMQS_EINVAL, "delay_ms", "%s: must be %d", "delay_ms", 7),
        RMQS_EINVAL);
    cr_expect_str_eq(e.field, "delay_ms");
    cr_expect_str_eq(e.message, "delay_ms: must be 7");
}

Test(rmqs, fail_null_field_and_null_err)
{
    rmqs_error e;
    memset(&e, 'x', sizeof e);
    cr_expect_eq(rmqs_fail(&e, RMQS_EDB, NULL, "disk %s", "gone"), RMQS_EDB);
    cr_expect_str_eq(e.field, "");
    cr_expect_str_eq(e.message, "disk gone");
    cr_expect_eq(rmqs_fail(NULL, RMQS_ESYS, "f", "m"), RMQS_ESYS);
}

Test(rmqs, fail_truncates)
{
    char field[200], msg[600];
    memset(field, 'f', sizeof field - 1);
    field[sizeof field - 1] = '\0';
    memset(msg, 'm', sizeof msg - 1);
    msg[sizeof msg - 1] = '\0';
    rmqs_error e;
    rmqs_fail(&e, RMQS_EINVAL, field, "%s", msg);
    cr_expect_eq(strlen(e.field), sizeof e.field - 1);
    cr_expect_eq(strlen(e.message), sizeof e.message - 1);
    cr_expect_eq(strncmp(e.field, field, sizeof e.field - 1), 0);
}
