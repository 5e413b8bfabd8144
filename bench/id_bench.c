/*
 * id_bench.c — what an id costs: ns per vsr_uuid4() call (the ids vsr
 * makes: request, Response, replay and fast_response ids), one thread, in a
 * tight loop, three rounds.  docs/security.md ("Isolation between clients")
 * quotes it.
 *
 *   build/id_bench [ids per round]   (default 2000000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/base.h"

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    if (n <= 0)
        n = 2000000;
    char id[37];
    unsigned sink = 0;
    for (int i = 0; i < 10000; i++) /* warm: the thread's first block */
        vsr_uuid4(id);
    for (int r = 0; r < 3; r++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            vsr_uuid4(id);
            sink += (unsigned char)id[0];
        }
        printf("vsr_uuid4: %.1f ns per id (%ld ids)\n", (now_ns() - t0) / (double)n, n);
    }
    return (int)(sink & 0); /* the loop's result is used */
}
