/*
 * stall_fsync.c - an LD_PRELOAD shim for the benchmark: every Nth fsync or
 * fdatasync of the process sleeps first, like a disk that a noisy
 * neighbour stalls now and then (issue 10: "a stalled fsync of up to 1 s").
 *
 * Why a shim: a real neighbour stalls the disk when it likes; this makes the
 * stall exact and repeatable, so two builds can be compared on it alone.
 * RMQS_STALL_MS (1000) is the sleep, RMQS_STALL_EVERY (100) the period in
 * calls (counted over both functions and all threads). Built by
 * tests/bench/run.sh; used by bench.py --stall-fsync-ms.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_long calls;

static void maybe_stall(void)
{
    const char *e = getenv("RMQS_STALL_EVERY");
    const char *m = getenv("RMQS_STALL_MS");
    long every = e ? atol(e) : 100;
    long ms = m ? atol(m) : 1000;

    if (every > 0 && ms > 0 && (atomic_fetch_add(&calls, 1) + 1) % every == 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int fdatasync(int fd)
{
    static int (*real)(int);

    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    maybe_stall();
    return real(fd);
}

int fsync(int fd)
{
    static int (*real)(int);

    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    maybe_stall();
    return real(fd);
}
