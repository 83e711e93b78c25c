/* Promise 9 (amx-trap/README.md): the engine's state of a thread is reused once the thread has
 * ended; a state that cannot be allocated gives the thread's first AMX instruction SIGSEGV, never
 * #UD, and leaves its other signals as they are without the library.
 *
 *   many <n>   n short-lived threads, one after the other, each running AMX instructions,
 *              under an address-space limit of what the process uses plus 256 MiB
 *   oom        a thread's first AMX instruction when no memory can be mapped any more
 *   oomhandler the same, the program having a SIGSEGV handler: Linux answers a thread whose AMX
 *              state it cannot allocate with force_sig(SIGSEGV), which that handler gets
 *              (SI_KERNEL, no address)
 *   oomsignal  no AMX at all: a thread's first handled signal when no memory can be mapped
 *   oomfaults  no AMX at all, no memory left, on a thread that never ran AMX: a NULL load its
 *              SIGSEGV handler steps over, SA_RESETHAND | SA_NODEFER with an sa_mask, a
 *              handler left by siglongjmp, a ud2 whose SIGILL handler steps over it, and the
 *              wait mask of sigsuspend, the fault handlers walking the stack (backtrace()),
 *              a SIGSEGV and a SIGBUS raised in a handler that blocks them (taken after it),
 *              and a ud2 with no stack left for its handler's frame (SIGSEGV instead, on the
 *              alternate stack); every line printed must be the same with and without the
 *              library
 *   oomsite    a TILEZERO site the main thread ran until it was patched, then run by a thread
 *              that never configured tiles and can map no state: #UD (SIGILL, ILL_ILLOPN) at
 *              the site, as for any unconfigured thread (the main thread releases its tiles
 *              before it starts the thread, which would inherit its configuration)
 */
#include "hostile.h"
#include <execinfo.h>
#include <pthread.h>
#include <setjmp.h>
#include <ucontext.h>
#include <sys/mman.h>
#include <sys/resource.h>

static void *amx_thread(void *arg) {
    uint8_t *out = arg;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tilezero0();
    tilestore0(out, 64);
    tilerelease();
    return NULL;
}

static int many(long n) {
    static uint8_t out[1024];
    /* A first thread, so that the C library's thread stack and arena exist before the limit. */
    pthread_t t;
    pthread_create(&t, NULL, amx_thread, out);
    pthread_join(t, NULL);
    struct rlimit rl = {vm_size() + (256ul << 20), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &rl);
    long done = 0;
    for (long i = 0; i < n; i++) {
        memset(out, 0xAA, sizeof out);
        if (pthread_create(&t, NULL, amx_thread, out) != 0) {
            printf("pthread_create failed at %ld\n", i);
            break;
        }
        pthread_join(t, NULL);
        done += out[0] == 0 && out[1023] == 0;
    }
    printf("threads done: %ld of %ld\n", done, n);
    return 0;
}

static pthread_barrier_t started, limited;

static void *late_thread(void *arg) {
    /* Running: whatever the thread's start mapped (the C library's arena for it reserves and
     * then trims 128 MiB) is in place before the limit is read. */
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&limited);
    return amx_thread(arg);
}

static int oom(void) {
    static uint8_t out[1024];
    pthread_t t;
    pthread_barrier_init(&started, NULL, 2);
    pthread_barrier_init(&limited, NULL, 2);
    pthread_create(&t, NULL, late_thread, out);
    pthread_barrier_wait(&started);
    /* No more address space: the thread's first AMX instruction finds none for its state. */
    struct rlimit rl = {vm_size(), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &rl);
    pthread_barrier_wait(&limited);
    pthread_join(t, NULL);
    printf("the thread ran\n");
    return 0;
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    char b[96];
    int n = snprintf(b, sizeof b, "handler: signal %d code %d addr %p\n", sig, si->si_code,
                     si->si_addr);
    write(1, b, n);
    _exit(0);
}

static int oomhandler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    return oom();
}

static volatile int usr1;
static void on_usr1(int sig) { (void)sig; usr1++; }
static pthread_barrier_t signalled;

static void *quiet_thread(void *arg) {
    (void)arg;
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&limited);
    pthread_barrier_wait(&signalled);
    return NULL;
}

static int oomsignal(void) {
    signal(SIGUSR1, on_usr1);
    pthread_t t;
    pthread_barrier_init(&started, NULL, 2);
    pthread_barrier_init(&limited, NULL, 2);
    pthread_barrier_init(&signalled, NULL, 2);
    pthread_create(&t, NULL, quiet_thread, NULL);
    pthread_barrier_wait(&started);
    struct rlimit rl = {vm_size(), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &rl);
    pthread_barrier_wait(&limited);
    /* The thread waits in the barrier: the signal interrupts it there. */
    pthread_kill(t, SIGUSR1);
    usleep(100000);
    pthread_barrier_wait(&signalled);
    pthread_join(t, NULL);
    printf("signals handled: %d\n", usr1);
    return 0;
}

static void say(const char *text) { write(1, text, strlen(text)); }

static int blocked(int sig) {
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    return sigismember(&now, sig);
}

/* Whether a stack walk from the handler (the C library's, through the signal frame's unwind
 * information) reaches the interrupted instruction, and goes on to the thread's start (at
 * least two frames more: the thread's function is the interrupted one, under it the C
 * library's start and clone; the library adds its own start between them). */
static void walk(const ucontext_t *uc, char *b, size_t n) {
    void *frames[64];
    int depth = backtrace(frames, 64), at = -1;
    for (int i = 0; i < depth && at < 0; i++)
        if (frames[i] == (void *)uc->uc_mcontext.gregs[REG_RIP])
            at = i;
    snprintf(b, n, "walk: reaches the fault %d, goes on past it %d\n", at >= 0,
             at >= 0 && depth - at - 1 >= 2);
}

/* A NULL load (`mov eax, [rax]`, 2 bytes) and a ud2 (2 bytes), each stepped over by its
 * handler through the context. */
static void on_fault(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    char b[160];
    snprintf(b, sizeof b, "fault: signal %d code %d addr %p, %s blocked %d, USR2 blocked %d\n",
             sig, si->si_code, sig == SIGSEGV ? si->si_addr : NULL,
             sig == SIGSEGV ? "SEGV" : "ILL", blocked(sig), blocked(SIGUSR2));
    say(b);
    walk(uc, b, sizeof b);
    say(b);
    uc->uc_mcontext.gregs[REG_RIP] += 2;
}

static volatile int resets;
static void on_reset(int sig) {
    char b[96];
    snprintf(b, sizeof b, "reset: USR1 blocked %d (nodefer), USR2 blocked %d (sa_mask)\n",
             blocked(SIGUSR1), blocked(sig == SIGUSR1 ? SIGUSR2 : 0));
    say(b);
    resets++;
}

static sigjmp_buf out;
static void on_leave(int sig) { siglongjmp(out, sig); }

static volatile int woke;
static void on_wake(int sig) {
    char b[64];
    snprintf(b, sizeof b, "wake: USR2 blocked %d (the wait's mask)\n", blocked(SIGUSR2));
    say(b);
    woke = sig;
}

/* A SIGSEGV or SIGBUS raised in a handler whose sa_mask blocks it: pending until the handler
 * returns, then taken with the interrupted context's mask. */
static int released_sig;
static void on_released(int sig) {
    char b[96];
    snprintf(b, sizeof b, "released %d: USR1 blocked %d, itself %d\n", sig, blocked(SIGUSR1),
             blocked(sig));
    say(b);
}
static void on_release(int sig) {
    (void)sig;
    raise(released_sig);
    say("raised in the handler: pending\n");
}

/* A ud2 with 512 bytes of stack left, its SIGILL handler on the thread's stack: the kernel
 * cannot write the frame and sends SIGSEGV (SI_KERNEL), whose handler asks for the alternate
 * stack, and leaves by siglongjmp. */
static char *guarded;
static char alternate[64 * 1024];
static sigjmp_buf no_room_out;
static void on_no_room_ill(int sig) {
    (void)sig;
    say("no room: the SIGILL handler ran\n");
    _exit(5);
}
static void on_no_room(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    char b[96];
    snprintf(b, sizeof b, "no room: signal %d code %d addr %p\n", sig, si->si_code, si->si_addr);
    say(b);
    siglongjmp(no_room_out, 1);
}

static void no_room(void) {
    stack_t st = {.ss_sp = alternate, .ss_size = sizeof alternate};
    sigaltstack(&st, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_no_room_ill;
    sigaction(SIGILL, &sa, NULL);
    sa.sa_sigaction = on_no_room;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    if (!sigsetjmp(no_room_out, 1))
        __asm__ volatile("mov %0, %%rsp\n\tud2" ::"r"(guarded + 4096 + 512) : "memory");
    say("no room: back\n");
}

static void *faulting_thread(void *arg) {
    (void)arg;
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&limited);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaddset(&sa.sa_mask, SIGUSR2);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGILL, &sa, NULL);
    volatile int *null = NULL;
    int v = 7;
    __asm__ volatile("mov (%1), %0" : "+a"(v) : "r"(null) : "memory");
    say(v == 7 ? "after the NULL load: resumed\n" : "after the NULL load: wrong\n");
    __asm__ volatile("ud2" ::: "memory");
    say("after the ud2: resumed\n");

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_reset;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigaddset(&sa.sa_mask, SIGUSR2);
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    struct sigaction now;
    sigaction(SIGUSR1, NULL, &now);
    char b[96];
    snprintf(b, sizeof b, "after the reset: handled %d, now %s\n", resets,
             now.sa_handler == SIG_DFL ? "SIG_DFL" : "still the handler");
    say(b);

    signal(SIGUSR2, on_leave);
    int got = sigsetjmp(out, 1);
    if (got == 0) {
        raise(SIGUSR2);
        say("siglongjmp: not taken\n");
    } else {
        snprintf(b, sizeof b, "siglongjmp: left with %d, USR2 blocked %d\n", got,
                 blocked(SIGUSR2));
        say(b);
    }

    signal(SIGALRM, on_wake);
    sigset_t hold, wait;
    sigemptyset(&hold);
    sigaddset(&hold, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &hold, NULL);
    sigemptyset(&wait);
    sigaddset(&wait, SIGUSR2);
    pthread_kill(pthread_self(), SIGALRM);
    sigsuspend(&wait);
    snprintf(b, sizeof b, "after sigsuspend: woke by %d, ALRM blocked %d, USR2 blocked %d\n",
             woke, blocked(SIGALRM), blocked(SIGUSR2));
    say(b);

    int released[] = {SIGSEGV, SIGBUS};
    for (int i = 0; i < 2; i++) {
        released_sig = released[i];
        signal(released_sig, on_released);
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_release;
        sigaddset(&sa.sa_mask, released_sig);
        sigaction(SIGUSR1, &sa, NULL);
        raise(SIGUSR1);
    }
    no_room();
    return NULL;
}

__attribute__((noinline)) static void zero_site(void) { tilezero0(); }

static void on_site_ill(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    unsigned long rip = uc->uc_mcontext.gregs[REG_RIP], at = (unsigned long)zero_site;
    char b[128];
    snprintf(b, sizeof b, "site: signal %d code %d trapno %lld, at the site %d\n", sig,
             si->si_code, (long long)uc->uc_mcontext.gregs[REG_TRAPNO],
             rip >= at && rip < at + 16 && (unsigned long)si->si_addr == rip);
    say(b);
    uc->uc_mcontext.gregs[REG_RIP] += 5;
}

static void *site_thread(void *arg) {
    (void)arg;
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&limited);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_site_ill;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGILL, &sa, NULL);
    zero_site();
    say("after the site: resumed\n");
    return NULL;
}

static int oomsite(void) {
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    for (int i = 0; i < 1000; i++)
        zero_site();
    tilerelease();
    pthread_t t;
    pthread_barrier_init(&started, NULL, 2);
    pthread_barrier_init(&limited, NULL, 2);
    pthread_create(&t, NULL, site_thread, NULL);
    pthread_barrier_wait(&started);
    struct rlimit rl = {vm_size(), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &rl);
    pthread_barrier_wait(&limited);
    pthread_join(t, NULL);
    say("done\n");
    return 0;
}

static int oomfaults(void) {
    /* A page of stack over a guard page, for `no_room`. */
    guarded = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (guarded == MAP_FAILED || mprotect(guarded, 4096, PROT_NONE) != 0)
        return 2;
    /* The C library loads its unwinder at the first walk: before memory runs out. */
    void *warm[4];
    backtrace(warm, 4);
    pthread_t t;
    pthread_barrier_init(&started, NULL, 2);
    pthread_barrier_init(&limited, NULL, 2);
    pthread_create(&t, NULL, faulting_thread, NULL);
    pthread_barrier_wait(&started);
    struct rlimit rl = {vm_size(), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &rl);
    pthread_barrier_wait(&limited);
    pthread_join(t, NULL);
    say("done\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    /* Without AMX instructions: runs without the permission, on any CPU. */
    if (argc > 1 && !strcmp(argv[1], "oomsignal"))
        return oomsignal();
    if (argc > 1 && !strcmp(argv[1], "oomfaults"))
        return oomfaults();
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "many") && argc > 2)
        return many(atol(argv[2]));
    if (!strcmp(mode, "oom"))
        return oom();
    if (!strcmp(mode, "oomhandler"))
        return oomhandler();
    if (!strcmp(mode, "oomsite"))
        return oomsite();
    return 2;
}
