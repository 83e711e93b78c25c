/* Promise 3 (amx-trap/README.md): program handlers get the kernel's semantics under the preload.
 *
 *   semantics  SA_NODEFER, sa_mask, SA_RESETHAND, SA_SIGINFO, SA_ONSTACK and SS_AUTODISARM,
 *              for ordinary signals and for the engine's own (SIGILL, SIGSEGV, SIGBUS,
 *              SIGTRAP); nested handlers; its output must be the same with and without the
 *              preload
 *   overflow <bytes>  a stack overflow caught by a SIGSEGV handler on an alternate stack of
 *              that size; "+n" is n bytes more than AT_MINSIGSTKSZ
 *   amx <int8|bf16>  a loop of products, interrupted by a timer whose handler runs its own
 *              products on the loop's operand tiles; the loop's result must be the one it has
 *              without the timer (the kernel gives a handler the INIT tile state and the
 *              interrupted state back)
 *   boundary   a loop of one product, interrupted by a timer every 100 us: each handler must
 *              see the loop's code in its context (an instruction boundary), never the
 *              engine's; the loop's result must be its products' (the silicon delivers
 *              signals between instructions)
 */
#include "hostile.h"
#include <sys/mman.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/time.h>

#ifndef SS_AUTODISARM
#define SS_AUTODISARM (1U << 31)
#endif

static char altstack[64 * 1024];
static volatile int depth, seen_nested;
static volatile unsigned long long mask_in[65];
static volatile int on_alt[65], code_in[65], value_in[65], count[65];

static int on_altstack(const void *p) {
    return (const char *)p >= altstack && (const char *)p < altstack + sizeof altstack;
}

static void handler(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    int local;
    count[sig]++;
    mask_in[sig] = mask_now();
    on_alt[sig] = on_altstack(&local);
    code_in[sig] = info->si_code;
    value_in[sig] = info->si_value.sival_int;
    if (sig == SIGUSR1 && depth++ < 2) {
        /* Nested: the same signal again (blocked unless SA_NODEFER), then another one. */
        raise(SIGUSR1);
        raise(SIGUSR2);
        seen_nested = count[SIGUSR2];
    }
}

static void plain_handler(int sig) {
    int local;
    count[sig]++;
    mask_in[sig] = mask_now();
    on_alt[sig] = on_altstack(&local);
}

static volatile int disarmed_inside = -1;

static void peek_handler(int sig) {
    (void)sig;
    stack_t in;
    sigaltstack(NULL, &in);
    disarmed_inside = (in.ss_flags & SS_DISABLE) != 0;
}

static void set(int sig, int flags, unsigned long long mask, int siginfo) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (siginfo) {
        sa.sa_sigaction = handler;
        flags |= SA_SIGINFO;
    } else {
        sa.sa_handler = plain_handler;
    }
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    for (int i = 1; i <= 64; i++)
        if (mask & BIT(i))
            sigaddset(&sa.sa_mask, i);
    if (sigaction(sig, &sa, NULL) != 0)
        printf("sigaction %d failed: %d\n", sig, errno);
}

static void report(const char *what, int sig) {
    struct sigaction now;
    sigaction(sig, NULL, &now);
    printf("%s: count %d mask %#llx altstack %d code %d value %d then %s\n", what, count[sig],
           mask_in[sig], on_alt[sig], code_in[sig], value_in[sig],
           now.sa_handler == SIG_DFL ? "dfl" : "handler");
    count[sig] = 0;
    mask_in[sig] = 0;
    on_alt[sig] = code_in[sig] = value_in[sig] = 0;
}

static int semantics(void) {
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    int sigs[] = {SIGUSR1, SIGILL, SIGSEGV, SIGBUS, SIGTRAP};
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        int sig = sigs[i];
        char what[64];
        set(SIGUSR2, 0, 0, 1);
        depth = 0;
        set(sig, 0, BIT(SIGHUP), 1);
        raise(sig);
        snprintf(what, sizeof what, "%d plain", sig);
        report(what, sig);
        depth = 0;
        set(sig, SA_NODEFER, 0, 1);
        raise(sig);
        snprintf(what, sizeof what, "%d nodefer", sig);
        report(what, sig);
        depth = 3;
        set(sig, SA_RESETHAND, 0, 0);
        raise(sig);
        snprintf(what, sizeof what, "%d resethand", sig);
        report(what, sig);
        depth = 3;
        set(sig, SA_ONSTACK, 0, 1);
        union sigval v = {.sival_int = 7 + sig};
        sigqueue(getpid(), sig, v);
        snprintf(what, sizeof what, "%d onstack queued", sig);
        report(what, sig);
    }
    printf("usr2 seen inside usr1: %d\n", seen_nested);
    /* SS_AUTODISARM: the handler runs on the alternate stack, which is disarmed meanwhile. */
    ss.ss_flags = SS_AUTODISARM;
    if (sigaltstack(&ss, NULL) == 0) {
        set(SIGUSR1, SA_ONSTACK, 0, 1);
        depth = 3;
        raise(SIGUSR1);
        stack_t now;
        sigaltstack(NULL, &now);
        printf("autodisarm: altstack %d, armed after %d\n", on_alt[SIGUSR1],
               now.ss_sp == altstack && !(now.ss_flags & SS_DISABLE));
        /* A handler not on the alternate stack: Linux disarms it at every delivery all the
         * same (signal_delivered). */
        signal(SIGUSR2, peek_handler);
        raise(SIGUSR2);
        sigaltstack(NULL, &now);
        printf("autodisarm, handler not on it: disarmed inside %d, armed after %d\n",
               disarmed_inside, now.ss_sp == altstack && !(now.ss_flags & SS_DISABLE));
    }
    return 0;
}

static char *small_stack;
static size_t small_size;

static void on_overflow(int sig, siginfo_t *info, void *ctx) {
    (void)info;
    (void)ctx;
    int local;
    static const char msg[] = "overflow caught on the alternate stack\n";
    static const char off[] = "overflow caught elsewhere\n";
    if ((char *)&local >= small_stack && (char *)&local < small_stack + small_size)
        write(1, msg, sizeof msg - 1);
    else
        write(1, off, sizeof off - 1);
    _exit(sig == SIGSEGV ? 0 : 1);
}

static int recurse(int n);
static int (*volatile next)(int) = recurse;

static int recurse(int n) {
    volatile char pad[512];
    pad[0] = (char)n;
    return next(n + 1) + pad[0];
}

static int overflow(size_t bytes) {
    static char stack[64 * 1024];
    small_stack = stack;
    small_size = bytes < sizeof stack ? bytes : sizeof stack;
    stack_t ss = {.ss_sp = small_stack, .ss_size = small_size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        printf("sigaltstack: %d\n", errno);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_overflow;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    /* A bounded stack, so that the overflow comes soon. */
    struct rlimit rl = {1 << 20, 1 << 20};
    setrlimit(RLIMIT_STACK, &rl);
    return recurse(0);
}

/* Operands of the loop (moderate bf16 values whichever way they are read) and the handler's. */
static uint8_t loop_a[8][1024], loop_b[8][1024], handler_data[1024];
static volatile int handler_runs;

static void on_amx_alarm(int sig) {
    (void)sig;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tileload0(handler_data, 64);
    tileload1(handler_data, 64);
    /* One product of each kind on tiles 0 and 1, the loop's operand tiles: an emulator keeps
     * forms derived from its operands, and the loop's product must see its own. */
    tdpbssd201();
    tdpbf16ps201();
    /* No TILERELEASE: the return puts the interrupted state back whatever the handler left. */
    handler_runs++;
}

/* `n` products into tmm2 from zero; C stored into `out`. */
static void amx_loop(uint8_t *out, long n, int bf16) {
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    for (long i = 0; i < n; i++) {
        tileload0(loop_a[i % 8], 64);
        tileload1(loop_b[i % 8], 64);
        if (bf16)
            tdpbf16ps201();
        else
            tdpbssd201();
    }
    tilestore2(out, 64);
    tilerelease();
}

static int amx(int bf16) {
    if (request_amx() != 0) {
        printf("no permission\n");
        return 0;
    }
    for (int p = 0; p < 8; p++)
        for (int i = 0; i < 1024; i++) {
            /* Odd bytes 0x3C..0x3E: bf16 values near 2^-7, far from overflow over the loop. */
            loop_a[p][i] = i % 2 ? (uint8_t)(0x3C + (i / 2 + p) % 3) : (uint8_t)(i * 31 + p * 17);
            loop_b[p][i] = i % 2 ? (uint8_t)(0x3C + (i / 2 + 2 * p) % 3) : (uint8_t)(i * 13 + p * 29);
        }
    memset(handler_data, 0x7B, sizeof handler_data);
    enum { N = 20000 };
    static uint8_t quiet[1024], loud[1024];
    amx_loop(quiet, N, bf16);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_amx_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every = {{0, 200}, {0, 200}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, NULL);
    amx_loop(loud, N, bf16);
    setitimer(ITIMER_REAL, &off, NULL);
    printf("handler runs: %s\n", handler_runs > 0 ? "some" : "none");
    printf("amx %s: %s\n", bf16 ? "bf16" : "int8",
           memcmp(quiet, loud, sizeof quiet) ? "differs" : "same as without the timer");
    return 0;
}

/* boundary: the loop's code, from its first instruction (the product) to past its branch and
 * the store that disarms the check. */
extern const char boundary_start[], boundary_end[];
static volatile long boundary_ticks, boundary_outside, boundary_stop, boundary_dots;
static volatile unsigned long long boundary_last;
/* Set by the loop's code itself as it starts and ends: ticks that come before it (in
 * setitimer's return) or after it (before the timer is off) are not the loop's. */
static volatile int boundary_armed;

static void boundary_tick(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)info;
    if (!boundary_armed)
        return;
    unsigned long long rip = (unsigned long long)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
    if (rip < (unsigned long long)boundary_start || rip >= (unsigned long long)boundary_end) {
        boundary_outside++;
        boundary_last = rip;
    }
    /* Counted up to 2000, checked all the same after: a tick may come between the handler that
     * stops the loop and the loop's disarming store. */
    if (boundary_ticks < 2000 && ++boundary_ticks >= 2000)
        boundary_stop = 1;
}

/* TDPBSSD tmm2, tmm0, tmm1 until boundary_stop, counting into boundary_dots. */
__attribute__((noinline)) static void boundary_loop(void) {
    __asm__ volatile("movl $1, %1\n"
                     ".globl boundary_start\n"
                     "boundary_start:\n"
                     ".byte 0xc4, 0xe2, 0x73, 0x5e, 0xd0\n"
                     "lock incq %0\n"
                     "cmpq $0, %2\n"
                     "je boundary_start\n"
                     "movl $0, %1\n"
                     ".globl boundary_end\n"
                     "boundary_end:\n"
                     : "+m"(boundary_dots), "+m"(boundary_armed)
                     : "m"(boundary_stop)
                     : "memory", "cc");
}

static int boundary(void) {
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    static uint8_t a[1024], b[1024], c[1024], once[1024];
    pattern(a, 3);
    pattern(b, 4);
    tilecfg cfg;
    config(&cfg, 16);
    ldtilecfg(&cfg);
    /* The products of one step, for the reference: C = A x B from zero. */
    tileload0(a, 64);
    tileload1(b, 64);
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x49, 0xd0" ::: "memory"); /* tilezero tmm2 */
    tdpbssd201();
    tilestore2(once, 64);
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x49, 0xd0" ::: "memory");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = boundary_tick;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 100}, {0, 100}};
    setitimer(ITIMER_REAL, &it, NULL);
    boundary_loop();
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    tilestore2(c, 64);
    tilerelease();
    /* Every product adds the same dwords: C is boundary_dots times them (mod 2^32). */
    int same = 1;
    for (int i = 0; i < 256; i++) {
        uint32_t one, got;
        memcpy(&one, once + 4 * i, 4);
        memcpy(&got, c + 4 * i, 4);
        same &= got == (uint32_t)(one * (uint32_t)boundary_dots);
    }
    printf("boundary ticks: %ld\n", boundary_ticks);
    printf("boundary outside: %ld (last at %#llx)\n", boundary_outside, boundary_last);
    printf("boundary result: %s\n", same ? "the products'" : "wrong");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "semantics";
    if (!strcmp(mode, "semantics"))
        return semantics();
    if (!strcmp(mode, "overflow") && argc > 2) {
        /* "+n": n bytes more than the kernel's smallest signal stack on this CPU. */
        size_t bytes = (size_t)atol(argv[2]);
        if (argv[2][0] == '+')
            bytes += getauxval(AT_MINSIGSTKSZ);
        return overflow(bytes);
    }
    if (!strcmp(mode, "amx") && argc > 2)
        return amx(!strcmp(argv[2], "bf16"));
    if (!strcmp(mode, "boundary"))
        return boundary();
    return 2;
}
