/* Unit tests for the dispatcher's pure parts: the retry policy
 * (disp_backoff_ms, service/dispatch/disp_publisher.c). */
#include <criterion/criterion.h>

#include "dispatcher_int.h"

Test(dispatcher, backoff_doubles_from_base_and_stops_at_cap)
{
    cr_expect_eq(disp_backoff_ms(1, 1000, 300000), 1000);
    cr_expect_eq(disp_backoff_ms(2, 1000, 300000), 2000);
    cr_expect_eq(disp_backoff_ms(5, 1000, 300000), 16000);
    cr_expect_eq(disp_backoff_ms(9, 1000, 300000), 256000);
    cr_expect_eq(disp_backoff_ms(10, 1000, 300000), 300000);
    cr_expect_eq(disp_backoff_ms(1000, 1000, 300000), 300000);
}

Test(dispatcher, backoff_treats_attempt_below_one_as_first)
{
    cr_expect_eq(disp_backoff_ms(0, 50, 200), 50);
    cr_expect_eq(disp_backoff_ms(-3, 50, 200), 50);
}

Test(dispatcher, backoff_never_exceeds_cap_even_when_base_is_above)
{
    cr_expect_eq(disp_backoff_ms(1, 500, 200), 200);
}
