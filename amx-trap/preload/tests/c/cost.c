/* Promise 10 (amx-trap/README.md): the cost of a trapped instruction at an unpatched site against a
 * bare SIGILL round trip, measured in the same run: batches of each, interleaved, the best batch of
 * each kept. Run with AMX_TRAP_PATCH=0.
 *
 * The bare round trip is a ud2 whose handler steps over it, the handler put in the kernel's
 * table with the `syscall` instruction itself for the bare batch only (so that no library
 * preloaded into the process stands between the kernel and the handler), and the action
 * before put back for the AMX batches.
 *
 *   cost [batches] [handled]  prints "bare <us>", then "tilezero", "tileloadd", "tdpbssd" with
 *                   their ratios to the bare round trip; with `handled`, the program has
 *                   handlers of its own for SIGINT and SIGUSR1 (which a trapped load or store
 *                   leaves deliverable while it copies, for a signal to stop its wait for a page)
 */
#include "hostile.h"
#include <time.h>

static void skip_ud2(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)info;
    ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP] += 2;
}

/* The restorer of the handler installed below: rt_sigreturn. */
__asm__(".pushsection .text\n"
        "cost_restorer:\n"
        "    mov $15, %rax\n"
        "    syscall\n"
        ".popsection\n");
extern void cost_restorer(void);

struct kaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
};

/* rt_sigaction(SIGILL, act, old) with the syscall instruction. */
static long raw_sigaction(const struct kaction *act, struct kaction *old) {
    long ret;
    register long r10 __asm__("r10") = 8;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(SYS_rt_sigaction), "D"(SIGILL), "S"(act), "d"(old), "r"(r10)
                     : "rcx", "r11", "memory");
    return ret;
}

static void on_signal(int sig) { (void)sig; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define N 50

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int batches = argc > 1 ? atoi(argv[1]) : 20;
    if (argc > 2 && !strcmp(argv[2], "handled")) {
        signal(SIGINT, on_signal);
        signal(SIGUSR1, on_signal);
    }
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    struct kaction bare = {(void *)skip_ud2, SA_SIGINFO | 0x04000000, (void *)cost_restorer, 0};
    struct kaction engine;
    static uint8_t data[1024];
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int b = 0; b < batches; b++) {
        if (raw_sigaction(&bare, &engine) != 0) {
            printf("no handler\n");
            return 1;
        }
        double t0 = now();
        for (int i = 0; i < N; i++)
            __asm__ volatile("ud2");
        double t1 = now();
        raw_sigaction(&engine, NULL);
        double t2 = now();
        for (int i = 0; i < N; i++)
            tilezero0();
        double t3 = now();
        for (int i = 0; i < N; i++)
            tileload0(data, 64);
        double t4 = now();
        for (int i = 0; i < N; i++)
            tdpbssd201();
        double t5 = now();
        double t[4] = {t1 - t0, t3 - t2, t4 - t3, t5 - t4};
        for (int k = 0; k < 4; k++)
            if (t[k] / N < best[k])
                best[k] = t[k] / N;
    }
    const char *names[4] = {"bare", "tilezero", "tileloadd", "tdpbssd"};
    for (int k = 0; k < 4; k++)
        printf("%s %.2f us ratio %.2f\n", names[k], best[k] * 1e6, best[k] / best[0]);
    return 0;
}
