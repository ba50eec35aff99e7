/*
 * test_taskpool.c - the task pool (service/util/taskpool.c): tasks run on its
 * threads, a full queue refuses at once, and free runs what was queued.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "taskpool.h"

static atomic_int ran;
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static atomic_int waiting;

static void count(void *arg)
{
    (void)arg;
    atomic_fetch_add(&ran, 1);
}

/* Blocks its thread until the gate opens. */
static void blocked(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&gate_mu);
    atomic_fetch_add(&waiting, 1);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    atomic_fetch_add(&ran, 1);
}

static void open_gate(void)
{
    pthread_mutex_lock(&gate_mu);
    gate_open = true;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

Test(taskpool, refuses_bad_settings)
{
    rmqs_error e = {0};

    cr_expect_null(taskpool_new("t", 0, 4, &e));
    cr_expect_null(taskpool_new("t", 17, 4, &e));
    cr_expect_null(taskpool_new("t", 1, 0, &e));
}

Test(taskpool, runs_every_task_and_free_runs_what_is_queued)
{
    rmqs_error e = {0};
    taskpool_t *p = taskpool_new("t", 2, 1000, &e);

    cr_assert_not_null(p, "%s", e.message);
    atomic_store(&ran, 0);
    for (int i = 0; i < 500; i++)
        cr_assert(taskpool_submit(p, count, NULL));
    taskpool_free(p); /* runs what is still queued, then joins */
    cr_expect_eq(atomic_load(&ran), 500);
}

Test(taskpool, a_full_queue_refuses_at_once)
{
    rmqs_error e = {0};
    taskpool_t *p = taskpool_new("t", 2, 3, &e);

    cr_assert_not_null(p, "%s", e.message);
    atomic_store(&ran, 0);
    gate_open = false;
    cr_assert(taskpool_submit(p, blocked, NULL));
    cr_assert(taskpool_submit(p, blocked, NULL));
    while (atomic_load(&waiting) < 2) /* both threads busy */
        usleep(1000);
    for (int i = 0; i < 3; i++)
        cr_assert(taskpool_submit(p, count, NULL), "queued %d", i);
    cr_expect_not(taskpool_submit(p, count, NULL), "a fourth waiting task");
    cr_expect_eq(taskpool_busy(p), 5);
    open_gate();
    taskpool_free(p);
    cr_expect_eq(atomic_load(&ran), 5);
}
