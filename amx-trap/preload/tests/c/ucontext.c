/* Contexts (getcontext, setcontext, swapcontext, makecontext), which the C library switches
 * masks in with its own system call. Every mode but "amx" runs no AMX instruction: its lines
 * are the same as without the library (promises 1 and 2).
 *
 *   fault    a SIGSEGV handler leaves with setcontext to a context saved before the fault (as
 *            green-thread libraries recover), four times: each round starts with SIGSEGV
 *            unblocked, as the context saved it
 *   saved    a context saved with SIGSEGV blocked, entered after the program unblocked it:
 *            blocked again
 *   link     a coroutine whose mask blocks everything returns through uc_link to the context
 *            swapcontext saved: that context's mask comes back, and a fault after it is
 *            handled
 *   args     a coroutine given eight arguments (two on its stack) returns through uc_link;
 *            the values kept in callee-saved registers across it are intact
 *   amx      a coroutine whose mask blocks everything runs AMX instructions, swapping with
 *            the main context three times (on the silicon AMX needs no signal)
 */
#include "hostile.h"
#include <setjmp.h>
#include <ucontext.h>

static ucontext_t main_uc, co_uc;
static char co_stack[256 * 1024] __attribute__((aligned(64)));

static int segv_blocked(void) { return !!(mask_now() & BIT(SIGSEGV)); }

/* fault */
static ucontext_t retry;
static volatile int faults;

static void leave_by_setcontext(int sig) {
    (void)sig;
    faults++;
    setcontext(&retry);
}

static int fault_mode(void) {
    struct sigaction sa = {0};
    sa.sa_handler = leave_by_setcontext;
    sigaction(SIGSEGV, &sa, NULL);
    volatile int round = 0;
    getcontext(&retry);
    round++;
    if (round > 4) {
        printf("faults %d, SIGSEGV blocked %d\n", faults, segv_blocked());
        return 0;
    }
    printf("round %d: SIGSEGV blocked %d\n", round, segv_blocked());
    *(volatile int *)0x40 = 1;
    printf("not reached\n");
    return 1;
}

/* saved */
static int saved_mode(void) {
    sigset_t segv;
    sigemptyset(&segv);
    sigaddset(&segv, SIGSEGV);
    sigprocmask(SIG_BLOCK, &segv, NULL);
    volatile int entered = 0;
    ucontext_t uc;
    getcontext(&uc);
    if (entered) {
        printf("entered again: SIGSEGV blocked %d\n", segv_blocked());
        return 0;
    }
    entered = 1;
    sigprocmask(SIG_UNBLOCK, &segv, NULL);
    printf("unblocked: SIGSEGV blocked %d\n", segv_blocked());
    setcontext(&uc);
    printf("not reached\n");
    return 1;
}

/* link */
static sigjmp_buf recover;

static void leave_by_longjmp(int sig) {
    (void)sig;
    siglongjmp(recover, 1);
}

static void full_mask_body(void) {
    printf("coroutine: SIGSEGV blocked %d\n", segv_blocked());
}

static void make_coroutine(void (*body)(void), ucontext_t *link) {
    getcontext(&co_uc);
    co_uc.uc_stack.ss_sp = co_stack;
    co_uc.uc_stack.ss_size = sizeof co_stack;
    co_uc.uc_link = link;
    sigfillset(&co_uc.uc_sigmask);
    makecontext(&co_uc, body, 0);
}

static int link_mode(void) {
    struct sigaction sa = {0};
    sa.sa_handler = leave_by_longjmp;
    sigaction(SIGSEGV, &sa, NULL);
    make_coroutine(full_mask_body, &main_uc);
    swapcontext(&main_uc, &co_uc);
    printf("back through uc_link: SIGSEGV blocked %d\n", segv_blocked());
    if (sigsetjmp(recover, 1) == 0) {
        *(volatile int *)0x40 = 1;
        printf("not reached\n");
        return 1;
    }
    printf("fault handled: SIGSEGV blocked %d\n", segv_blocked());
    return 0;
}

/* args */
static void eight(int a, int b, int c, int d, int e, int f, int g, int h) {
    printf("coroutine: %d %d %d %d %d %d %d %d, SIGSEGV blocked %d\n", a, b, c, d, e, f, g, h,
           segv_blocked());
}

static int args_mode(int seed) {
    /* Values the compiler keeps in callee-saved registers across the calls. */
    long kept[4] = {seed * 3L, seed * 5L, seed * 7L, seed * 11L};
    for (int round = 1; round <= 2; round++) {
        getcontext(&co_uc);
        co_uc.uc_stack.ss_sp = co_stack;
        co_uc.uc_stack.ss_size = sizeof co_stack;
        co_uc.uc_link = &main_uc;
        sigfillset(&co_uc.uc_sigmask);
        makecontext(&co_uc, (void (*)(void))eight, 8, round, 2, 3, 4, 5, 6, 7, 8 * round);
        swapcontext(&main_uc, &co_uc);
        printf("round %d back: SIGSEGV blocked %d, kept %ld %ld %ld %ld\n", round, segv_blocked(),
               kept[0], kept[1], kept[2], kept[3]);
    }
    return 0;
}

/* amx */
static uint8_t tile_in[16 * 64], tile_out[16 * 64];

static void amx_body(void) {
    for (int round = 1; round <= 3; round++) {
        pattern(tile_in, round);
        memset(tile_out, 0, sizeof tile_out);
        tileload0(tile_in, 64);
        tilestore0(tile_out, 64);
        int same = !memcmp(tile_in, tile_out, sizeof tile_in);
        printf("coroutine round %d: SIGSEGV blocked %d, tile %s\n", round, segv_blocked(),
               same ? "ok" : "WRONG");
        swapcontext(&co_uc, &main_uc);
    }
}

static int amx_mode(void) {
    if (request_amx())
        return 1;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    make_coroutine(amx_body, NULL);
    for (int round = 1; round <= 3; round++) {
        swapcontext(&main_uc, &co_uc);
        printf("main round %d: SIGSEGV blocked %d\n", round, segv_blocked());
    }
    tilerelease();
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "fault"))
        return fault_mode();
    if (!strcmp(mode, "saved"))
        return saved_mode();
    if (!strcmp(mode, "link"))
        return link_mode();
    if (!strcmp(mode, "args"))
        return args_mode(argc);
    if (!strcmp(mode, "amx"))
        return amx_mode();
    fprintf(stderr, "usage: ucontext fault|saved|link|args|amx\n");
    return 2;
}
