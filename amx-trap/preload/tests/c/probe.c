/* Measures the CPU it runs on: `sigill-cost` prints the time of a bare SIGILL round trip (a ud2
 * whose handler steps over it), in microseconds, the best of several batches. */
#include "hostile.h"
#include <time.h>

static void skip_ud2(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)info;
    ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP] += 2;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "sigill-cost") != 0)
        return 2;
    struct sigaction sa = {0};
    sa.sa_sigaction = skip_ud2;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGILL, &sa, NULL);
    double best = 1e9;
    for (int batch = 0; batch < 5; batch++) {
        double t0 = now();
        for (int i = 0; i < 200; i++)
            __asm__ volatile("ud2");
        double us = (now() - t0) / 200 * 1e6;
        if (us < best)
            best = us;
    }
    printf("sigill-us %.3f\n", best);
    return 0;
}
