/* Promise 4 (amx-trap/README.md): leaving a handler any way, at any depth, on any stack, with tile
 * state following the kernel's signal frame: a handler starts with the INIT state, returning brings
 * back the interrupted state, a handler left by siglongjmp leaves the state it made.
 *
 *   nested    three handlers deep, each with a state of its own, each returning
 *   abandon   handlers left by siglongjmp, again and again, then one returning
 *   altstack  an alternate stack above the interrupted frame, handlers on it nested, returning
 *             and left by siglongjmp
 *   changed   handlers that change their frame's FP state before returning: fpregs NULL, MAGIC1
 *             overwritten, fpregs pointing to no memory (rt_sigreturn then raises SIGSEGV);
 *             Linux restores what it can of the FP state and resets the rest, the tiles
 *             among it: the interrupted code continues with the INIT state
 *   stacked N three interval timers for N seconds (and until each ran) over a loop of tile
 *             loads, their handlers each checking the INIT state on entry and loading a
 *             configuration of their own:
 *             signals delivered together at one boundary are entered one on top of the other,
 *             and each handler still starts from INIT; the contexts they interrupt have RF
 *             clear and no trap number, as between two instructions of the silicon
 */
#include "hostile.h"
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>

/* A configuration with `rows` rows in every tile, and tile 0 loaded with pattern `seed`. */
static void make_state(int rows, int seed) {
    static uint8_t data[1024];
    tilecfg c;
    config(&c, rows);
    pattern(data, seed);
    ldtilecfg(&c);
    tileload0(data, 64);
}

/* Whether the thread holds exactly that state. */
static int has_state(int rows, int seed) {
    tilecfg now, want;
    config(&want, rows);
    sttilecfg(&now);
    if (memcmp(&now, &want, sizeof now) != 0)
        return 0;
    uint8_t out[1024], data[1024];
    memset(out, 0xAA, sizeof out);
    pattern(data, seed);
    tilestore0(out, 64);
    return memcmp(out, data, (size_t)rows * 64) == 0;
}

static int is_init(void) {
    tilecfg now;
    static const uint8_t zero[64];
    memset(&now, 0xAA, sizeof now);
    sttilecfg(&now);
    return memcmp(&now, zero, 64) == 0;
}

static volatile int init_seen[4], kept_seen[4];

/* Handler at depth d: INIT on entry, a state of its own, the next depth, its state kept. */
static void nested_handler(int sig) {
    int d = sig == SIGUSR1 ? 1 : sig == SIGUSR2 ? 2 : 3;
    init_seen[d] = is_init();
    make_state(16 - 4 * d, 10 + d);
    if (d == 1)
        raise(SIGUSR2);
    else if (d == 2)
        raise(SIGHUP);
    kept_seen[d] = has_state(16 - 4 * d, 10 + d);
}

static int nested(void) {
    signal(SIGUSR1, nested_handler);
    signal(SIGUSR2, nested_handler);
    signal(SIGHUP, nested_handler);
    make_state(16, 1);
    raise(SIGUSR1);
    for (int d = 1; d <= 3; d++)
        printf("depth %d: init %d kept %d\n", d, init_seen[d], kept_seen[d]);
    printf("interrupted state back: %d\n", has_state(16, 1));
    return 0;
}

static sigjmp_buf out;
static volatile int round_;

static void leave_handler(int sig) {
    (void)sig;
    make_state(2 + round_, 20 + round_);
    siglongjmp(out, 1);
}

static void deep_leave(int sig) {
    (void)sig;
    raise(SIGUSR2);
}

static void return_handler(int sig) {
    (void)sig;
    init_seen[0] = is_init();
    make_state(3, 99);
}

static int abandon(void) {
    signal(SIGUSR1, leave_handler);
    signal(SIGHUP, deep_leave);
    signal(SIGUSR2, leave_handler);
    for (round_ = 0; round_ < 5; round_++) {
        make_state(16, round_);
        /* Depth 1, then depth 2 (SIGHUP's handler raises SIGUSR2, which leaves both). */
        if (sigsetjmp(out, 1) == 0)
            raise(round_ % 2 ? SIGHUP : SIGUSR1);
        printf("abandoned %d: the handler's state %d\n", round_, has_state(2 + round_, 20 + round_));
    }
    /* After all that, a handler that returns still brings the state back. */
    signal(SIGUSR1, return_handler);
    make_state(12, 7);
    raise(SIGUSR1);
    printf("then a return: init %d, state back %d\n", init_seen[0], has_state(12, 7));
    return 0;
}

/* The alternate stack lies in main's frame, above the deep frame interrupted. */
static char *alt_lo, *alt_hi;
static volatile int alt_on[4];

static void alt_handler(int sig) {
    char local;
    int d = sig == SIGUSR1 ? 1 : 2;
    alt_on[d] = &local >= alt_lo && &local < alt_hi;
    init_seen[d] = is_init();
    make_state(6 + d, 30 + d);
    if (d == 1) {
        raise(SIGUSR2);
        kept_seen[1] = has_state(7, 31);
    }
    if (d == 2 && round_ == 1)
        siglongjmp(out, 1);
}

static int deep(int n) {
    volatile char pad[2048];
    pad[0] = (char)n;
    if (n > 0) {
        int back = deep(n - 1);
        return back + (pad[0] != (char)n);
    }
    make_state(16, 5);
    raise(SIGUSR1);
    return has_state(16, 5);
}

static int altstack(void) {
    char stack[64 * 1024];
    alt_lo = stack;
    alt_hi = stack + sizeof stack;
    stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = alt_handler;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_flags = 0;
    sigaction(SIGUSR2, &sa, NULL);
    round_ = 0;
    int back = deep(40);
    printf("altstack: on it %d %d, init %d %d, kept %d, interrupted state back %d\n", alt_on[1],
           alt_on[2], init_seen[1], init_seen[2], kept_seen[1], back);
    round_ = 1;
    if (sigsetjmp(out, 1) == 0)
        deep(40);
    printf("altstack left by siglongjmp at depth 2: the handler's state %d\n", has_state(8, 32));
    return 0;
}

static volatile int change;
static sigjmp_buf after_bad_frame;

/* Makes a state of its own, then changes its frame as `change` says. */
static void changing_handler(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    ucontext_t *uc = context;
    make_state(4, 9);
    char *fp = (char *)uc->uc_mcontext.fpregs;
    if (change == 0) {
        uc->uc_mcontext.fpregs = NULL;
    } else if (change == 1) {
        memset(fp + 464, 0, 4);
    } else {
        static void *nowhere;
        if (!nowhere)
            nowhere = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uc->uc_mcontext.fpregs = nowhere;
    }
}

static void bad_frame_segv(int sig) {
    (void)sig;
    siglongjmp(after_bad_frame, 1);
}

static int changed(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = changing_handler;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGSEGV, bad_frame_segv);
    const char *what[] = {"fpregs NULL", "MAGIC1 overwritten", "fpregs unreadable"};
    for (change = 0; change < 3; change++) {
        make_state(16, 1);
        int segv = 0;
        if (sigsetjmp(after_bad_frame, 1) == 0)
            raise(SIGUSR1);
        else
            segv = 1;
        printf("%s: SIGSEGV %d, INIT after %d\n", what[change], segv, is_init());
    }
    return 0;
}

static volatile long entered[65], not_init[65], trap_marks;

static void timer_handler(int sig, siginfo_t *info, void *context) {
    (void)info;
    ucontext_t *uc = context;
    entered[sig]++;
    if (!is_init())
        not_init[sig]++;
    /* Interrupted between two instructions of a program that never faulted: RF clear, no
     * trap number, as the silicon's interrupts leave them. */
    if ((uc->uc_mcontext.gregs[REG_EFL] & 0x10000) || uc->uc_mcontext.gregs[REG_TRAPNO] != 0)
        trap_marks++;
    tilecfg c;
    config(&c, sig == SIGALRM ? 2 : sig == SIGVTALRM ? 3 : 4);
    ldtilecfg(&c);
}

static int stacked(int seconds) {
    int sigs[] = {SIGALRM, SIGVTALRM, SIGPROF};
    int timers[] = {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = timer_handler;
    sa.sa_flags = SA_SIGINFO;
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &sa, NULL);
    static uint8_t data[1024], out[1024];
    pattern(data, 4);
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    struct itimerval every = {{0, 150}, {0, 150}}, off = {{0, 0}, {0, 0}};
    for (int i = 0; i < 3; i++)
        setitimer(timers[i], &every, NULL);
    long wrong = 0;
    /* For `seconds` of wall time and until each timer ran once (a loaded machine may give the
     * process too little CPU time in a short stretch for the CPU-time timers), at most ten
     * times as long. */
    time_t start = time(NULL), end = start + seconds, limit = start + 10 * seconds + 1;
    for (;;) {
        time_t now = time(NULL);
        int all = entered[SIGALRM] && entered[SIGVTALRM] && entered[SIGPROF];
        if (now >= limit || (now >= end && all))
            break;
        tileload0(data, 64);
        tilestore0(out, 64);
        wrong += memcmp(data, out, sizeof out) != 0;
    }
    for (int i = 0; i < 3; i++)
        setitimer(timers[i], &off, NULL);
    long handled = 0, bad = 0;
    for (int i = 0; i < 3; i++) {
        handled += entered[sigs[i]] > 0;
        bad += not_init[sigs[i]];
    }
    printf("timers that ran: %ld, handlers entered without INIT: %ld, loop results wrong: %ld\n",
           handled, bad, wrong);
    printf("interrupted contexts with RF or a trap number: %ld\n", trap_marks);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    const char *mode = argc > 1 ? argv[1] : "nested";
    if (!strcmp(mode, "nested"))
        return nested();
    if (!strcmp(mode, "abandon"))
        return abandon();
    if (!strcmp(mode, "altstack"))
        return altstack();
    if (!strcmp(mode, "changed"))
        return changed();
    if (!strcmp(mode, "stacked") && argc > 2)
        return stacked(atoi(argv[2]));
    return 2;
}
