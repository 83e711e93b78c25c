/* Two real-time timer signals that expire together while the thread runs a patched AMX
 * product, the first one's handler blocking the second (sa_mask), with the user's queue of
 * pending signals full (RLIMIT_SIGPENDING 0; a timer's signal has its own queue entry, which
 * the limit never refuses): on the silicon the second stays pending while the first one's
 * handler runs and comes after it, every time.
 *
 *   timers <work> <trials>   <work>: `amx` (the patched TDPBSSD loop) or `plain` (the same
 *                            loop without AMX, what the kernel does)
 *
 * Prints "trials T, first N, second M" (every handler counted once per trial). */
#include "hostile.h"
#include <sys/resource.h>
#include <time.h>

static volatile int first, second;

static void on_first(int sig) {
    (void)sig;
    first++;
}

static void on_second(int sig) {
    (void)sig;
    second++;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static timer_t timer_for(int sig) {
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    ev.sigev_signo = sig;
    timer_t t;
    if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0) {
        perror("timer_create");
        exit(3);
    }
    return t;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int amx = argc > 1 && !strcmp(argv[1], "amx");
    int trials = argc > 2 ? atoi(argv[2]) : 200;
    static int8_t a[16 * 64], b[16 * 64];
    if (amx) {
        if (request_amx())
            return 2;
        tilecfg c;
        config(&c, 16);
        ldtilecfg(&c);
        pattern((uint8_t *)a, 1);
        pattern((uint8_t *)b, 2);
        tileload0(a, 64);
        tileload1(b, 64);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_first;
    sigaddset(&sa.sa_mask, SIGRTMIN + 3);
    sigaction(SIGRTMIN + 2, &sa, NULL);
    sa.sa_handler = on_second;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGRTMIN + 3, &sa, NULL);
    timer_t ta = timer_for(SIGRTMIN + 2), tb = timer_for(SIGRTMIN + 3);
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_SIGPENDING, &none);
    volatile int spins = 0;
    for (int t = 0; t < trials; t++) {
        int f = first, s = second;
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_nsec += 1000000;
        if (at.tv_nsec >= 1000000000) {
            at.tv_nsec -= 1000000000;
            at.tv_sec++;
        }
        struct itimerspec its = {{0, 0}, at};
        timer_settime(ta, TIMER_ABSTIME, &its, NULL);
        timer_settime(tb, TIMER_ABSTIME, &its, NULL);
        double end = now() + 0.05;
        while (now() < end && (first == f || second == s))
            for (int i = 0; i < 4; i++) {
                if (amx)
                    tdpbssd201();
                else
                    spins++;
            }
    }
    printf("trials %d, first %d, second %d\n", trials, first, second);
    return 0;
}
