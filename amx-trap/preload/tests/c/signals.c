/* Promises 1 and 2 (amx-trap/README.md): a program sees its own signal actions and masks, whatever
 * the engine does behind them.
 *
 *   plain          no AMX at all: actions, masks, handlers, pending signals, restarts, fork,
 *                  every query; its output must be the same with and without the preload
 *   cpuid-blocked  every signal blocked, then cpuid (CPUID faulting must not kill it)
 *   amx-blocked    SIGILL, SIGSEGV, SIGBUS and SIGTRAP blocked by each API, then AMX
 *   install <api>  a SIGILL handler installed by <api>; AMX still works, a ud2 reaches it
 *   pending        SIGSEGV sent while blocked stays pending until unblocked
 *   inherit        the mask a posix_spawn child, a fork child, a clone child and a thread
 *                  start with
 *   print-mask     prints the mask (the child of `inherit`)
 */
#include "hostile.h"
#include <fcntl.h>
#include <sched.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/time.h>
#include <sys/wait.h>

extern char **environ;

static volatile sig_atomic_t got[65];
static volatile unsigned long long mask_in[65];
static volatile int code_in[65], value_in[65];

static void on_signal(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    got[sig]++;
    mask_in[sig] = mask_now();
    code_in[sig] = info ? info->si_code : 0;
    value_in[sig] = info ? info->si_value.sival_int : 0;
}

static void on_plain(int sig) {
    got[sig]++;
    mask_in[sig] = mask_now();
}

/* What a query says about an action, without addresses. */
static void show_action(int sig) {
    struct sigaction sa;
    if (sigaction(sig, NULL, &sa) != 0) {
        printf("action %d error %d\n", sig, errno);
        return;
    }
    const char *h = sa.sa_handler == SIG_DFL ? "dfl"
                    : sa.sa_handler == SIG_IGN ? "ign"
                    : (void *)sa.sa_sigaction == (void *)on_signal ? "on_signal"
                    : (void *)sa.sa_handler == (void *)on_plain ? "on_plain"
                                                                : "other";
    unsigned long long m = 0;
    for (int i = 1; i <= 64; i++)
        if (sigismember(&sa.sa_mask, i) == 1)
            m |= BIT(i);
    printf("action %d %s flags %#x mask %#llx\n", sig, h, sa.sa_flags, m);
}

static void install(int sig, int flags, unsigned long long mask) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | flags;
    sigemptyset(&sa.sa_mask);
    for (int i = 1; i <= 64; i++)
        if (mask & BIT(i))
            sigaddset(&sa.sa_mask, i);
    sigaction(sig, &sa, NULL);
}

static void on_alarm(int sig) { (void)sig; }

/* A read() interrupted by a signal, with or without SA_RESTART. */
static void restart(int flags) {
    int fds[2];
    if (pipe(fds) != 0)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = flags;
    sigaction(SIGALRM, &sa, NULL);
    /* The child sends SIGALRM every 20 ms for half a second, then writes: whenever the parent
     * reaches its read, signals arrive during it (no race with a single timer). */
    pid_t parent = getpid();
    if (fork() == 0) {
        for (int i = 0; i < 25; i++) {
            usleep(20000);
            kill(parent, SIGALRM);
        }
        write(fds[1], "x", 1);
        _exit(0);
    }
    char c;
    errno = 0;
    long n = read(fds[0], &c, 1);
    printf("read with flags %#x: %ld errno %d\n", flags, n, n < 0 ? errno : 0);
    while (wait(NULL) < 0 && errno == EINTR)
        ;
    close(fds[0]);
    close(fds[1]);
}

static void *thread_mask(void *arg) {
    (void)arg;
    printf("thread mask %#llx\n", mask_now());
    return NULL;
}

/* sigsetjmp saves the mask and siglongjmp restores it, the engine's four signals included;
 * setjmp (no mask saved) leaves the mask as it is at the jump. */
static void jumps(void) {
    static sigjmp_buf env;
    static jmp_buf plain_env;
    sigset_t four;
    sigemptyset(&four);
    sigaddset(&four, SIGSEGV);
    sigaddset(&four, SIGILL);
    sigaddset(&four, SIGUSR2);
    sigprocmask(SIG_BLOCK, &four, NULL);
    if (sigsetjmp(env, 1) == 0) {
        sigprocmask(SIG_UNBLOCK, &four, NULL);
        siglongjmp(env, 1);
    }
    printf("siglongjmp back: mask %#llx\n", mask_now());
    sigprocmask(SIG_UNBLOCK, &four, NULL);
    if (sigsetjmp(env, 1) == 0) {
        sigprocmask(SIG_BLOCK, &four, NULL);
        siglongjmp(env, 1);
    }
    printf("siglongjmp back unblocked: mask %#llx\n", mask_now());
    if (setjmp(plain_env) == 0) {
        sigprocmask(SIG_BLOCK, &four, NULL);
        longjmp(plain_env, 1);
    }
    printf("longjmp without a saved mask: mask %#llx\n", mask_now());
    sigprocmask(SIG_UNBLOCK, &four, NULL);
}

static int plain(void) {
    /* Every disposition as the program starts. */
    for (int sig = 1; sig <= 64; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP)
            continue;
        struct sigaction sa;
        sigaction(sig, NULL, &sa);
        if (sa.sa_handler != SIG_DFL)
            printf("initial %d %s\n", sig, sa.sa_handler == SIG_IGN ? "ign" : "handler");
    }
    printf("initial mask %#llx\n", mask_now());
    install(SIGUSR1, 0, BIT(SIGUSR2));
    signal(SIGUSR2, on_plain);
    sigset(SIGHUP, on_plain);
    install(SIGSEGV, SA_NODEFER | SA_RESETHAND, 0);
    install(SIGILL, SA_RESTART, BIT(SIGTERM));
    install(SIGTRAP, 0, 0);
    install(SIGBUS, SA_ONSTACK, 0);
    signal(SIGPIPE, SIG_IGN);
    for (int sig = 1; sig <= 31; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            show_action(sig);
    raise(SIGUSR1);
    printf("usr1 %d mask %#llx code %d\n", got[SIGUSR1], mask_in[SIGUSR1], code_in[SIGUSR1]);
    union sigval v = {.sival_int = 42};
    sigqueue(getpid(), SIGUSR1, v);
    printf("usr1 %d value %d code %d\n", got[SIGUSR1], value_in[SIGUSR1], code_in[SIGUSR1]);
    raise(SIGUSR2);
    printf("usr2 %d mask %#llx\n", got[SIGUSR2], mask_in[SIGUSR2]);
    raise(SIGSEGV);
    printf("segv %d mask %#llx\n", got[SIGSEGV], mask_in[SIGSEGV]);
    show_action(SIGSEGV);
    raise(SIGILL);
    printf("ill %d mask %#llx\n", got[SIGILL], mask_in[SIGILL]);
    raise(SIGTRAP);
    raise(SIGBUS);
    printf("trap %d bus %d\n", got[SIGTRAP], got[SIGBUS]);

    /* Masks: every signal blocked, then sent, pending, then delivered on unblocking. */
    sigset_t all, old, pend;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    printf("blocked all: %#llx\n", mask_now());
    raise(SIGUSR1);
    raise(SIGILL);
    raise(SIGTRAP);
    sigpending(&pend);
    printf("pending usr1 %d ill %d trap %d\n", sigismember(&pend, SIGUSR1),
           sigismember(&pend, SIGILL), sigismember(&pend, SIGTRAP));
    int usr1 = got[SIGUSR1], ill = got[SIGILL], trap = got[SIGTRAP];
    printf("not yet: %d %d %d\n", got[SIGUSR1] - usr1, got[SIGILL] - ill, got[SIGTRAP] - trap);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    printf("after unblock: %d %d %d mask %#llx\n", got[SIGUSR1] - usr1, got[SIGILL] - ill,
           got[SIGTRAP] - trap, mask_now());
    unsigned long long kmask = 0;
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &kmask, 8);
    printf("raw mask %#llx\n", kmask);
    unsigned long long segv = BIT(SIGSEGV);
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &segv, NULL, 8);
    printf("raw blocked segv: %#llx\n", mask_now());
    syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &segv, NULL, 8);

    /* sigsuspend: USR2 comes in while waiting with everything else blocked. */
    sigset_t wait_mask;
    sigfillset(&wait_mask);
    sigdelset(&wait_mask, SIGUSR2);
    sigprocmask(SIG_BLOCK, &all, &old);
    raise(SIGUSR2);
    int before = got[SIGUSR2];
    int rc = sigsuspend(&wait_mask);
    printf("sigsuspend %d errno %d usr2 +%d mask inside %#llx\n", rc, errno, got[SIGUSR2] - before,
           mask_in[SIGUSR2]);
    sigprocmask(SIG_SETMASK, &old, NULL);

    restart(SA_RESTART);
    restart(0);

    pid_t pid = fork();
    if (pid == 0) {
        printf("fork child mask %#llx\n", mask_now());
        fflush(stdout);
        _exit(7);
    }
    int status;
    waitpid(pid, &status, 0);
    printf("fork child status %d\n", WEXITSTATUS(status));
    jumps();
    pthread_t t;
    pthread_create(&t, NULL, thread_mask, NULL);
    pthread_join(t, NULL);
    return 3;
}

static int cpuid_blocked(void) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    unsigned a = 0, b, c, d, n = 0;
    for (unsigned leaf = 0; leaf < 8; leaf++) {
        __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(leaf), "c"(0));
        n++;
    }
    printf("cpuid with everything blocked: %u leaves\n", n);
    return 0;
}

/* AMX with the engine's signals blocked: results correct, the mask as the program set it. */
static int amx_blocked(void) {
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    static uint8_t a[1024], b[1024], out[1024];
    pattern(a, 1);
    pattern(b, 2);
    unsigned long long engine = BIT(SIGILL) | BIT(SIGSEGV) | BIT(SIGBUS) | BIT(SIGTRAP);
    for (int api = 0; api < 4; api++) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGILL);
        sigaddset(&set, SIGSEGV);
        sigaddset(&set, SIGBUS);
        sigaddset(&set, SIGTRAP);
        if (api == 0)
            sigprocmask(SIG_BLOCK, &set, NULL);
        else if (api == 1)
            pthread_sigmask(SIG_BLOCK, &set, NULL);
        else if (api == 2)
            syscall(SYS_rt_sigprocmask, SIG_BLOCK, &engine, NULL, 8);
        else {
            sigfillset(&set);
            sigprocmask(SIG_BLOCK, &set, NULL);
        }
        tilecfg c;
        config(&c, 16);
        for (int round = 0; round < 4; round++) {
            ldtilecfg(&c);
            tileload0(a, 64);
            tileload1(b, 64);
            tilezero0();
            tileload0(a, 64);
            tilestore0(out, 64);
            tilerelease();
        }
        printf("api %d: %s, mask has them %d\n", api, memcmp(out, a, 1024) == 0 ? "ok" : "wrong",
               (mask_now() & engine) == engine);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        sigemptyset(&set);
        sigprocmask(SIG_SETMASK, &set, NULL);
    }
    return 0;
}

static sigjmp_buf resume;
static volatile int caught;

static void on_ill(int sig) {
    (void)sig;
    caught++;
    siglongjmp(resume, 1);
}


/* A SIGILL handler installed by `api`: AMX keeps working, a ud2 reaches the handler. */
static int install_api(const char *api) {
    if (!strcmp(api, "sigaction")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_ill;
        sigaction(SIGILL, &sa, NULL);
    } else if (!strcmp(api, "signal")) {
        signal(SIGILL, on_ill);
    } else if (!strcmp(api, "bsd_signal")) {
        extern __sighandler_t bsd_signal(int, __sighandler_t);
        bsd_signal(SIGILL, on_ill);
    } else if (!strcmp(api, "sigset")) {
        sigset(SIGILL, on_ill);
    } else if (!strcmp(api, "sysv")) {
        extern __sighandler_t __sysv_signal(int, __sighandler_t);
        __sysv_signal(SIGILL, on_ill);
    } else if (!strcmp(api, "syscall")) {
        /* The kernel's sigaction; its restorer the C library's, read back from an action the
         * C library installed. */
        struct {
            void *handler;
            unsigned long flags;
            void *restorer;
            unsigned long mask;
        } k, probe;
        struct sigaction tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.sa_handler = on_ill;
        sigaction(SIGUSR1, &tmp, NULL);
        syscall(SYS_rt_sigaction, SIGUSR1, NULL, &probe, 8);
        k = probe;
        k.handler = (void *)on_ill;
        k.flags = probe.flags | SA_NODEFER;
        k.mask = 0;
        syscall(SYS_rt_sigaction, SIGILL, &k, NULL, 8);
    } else {
        return 2;
    }
    if (request_amx() != 0)
        return 1;
    static uint8_t a[1024], out[1024];
    pattern(a, 3);
    tilecfg c;
    config(&c, 16);
    for (int round = 0; round < 3; round++) {
        ldtilecfg(&c);
        tileload0(a, 64);
        tilestore0(out, 64);
    }
    int amx_ok = memcmp(out, a, 1024) == 0;
    if (sigsetjmp(resume, 1) == 0)
        __asm__ volatile("ud2");
    /* sysv's handler is reset on delivery: the second ud2 would kill; one is enough. */
    printf("install %s: amx %s, ud2 caught %d\n", api, amx_ok ? "ok" : "wrong", caught);
    return 0;
}

static void on_segv(int sig) {
    (void)sig;
    got[SIGSEGV]++;
}

/* SIGSEGV sent while blocked: pending, delivered when unblocked. */
static int pending(void) {
    signal(SIGSEGV, on_segv);
    sigset_t set, pend;
    sigemptyset(&set);
    sigaddset(&set, SIGSEGV);
    sigprocmask(SIG_BLOCK, &set, NULL);
    kill(getpid(), SIGSEGV);
    sigpending(&pend);
    printf("blocked: delivered %d pending %d\n", got[SIGSEGV], sigismember(&pend, SIGSEGV));
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    sigpending(&pend);
    printf("unblocked: delivered %d pending %d\n", got[SIGSEGV], sigismember(&pend, SIGSEGV));
    return 0;
}

/* The masks new processes and threads start with. */
/* A child process made by the C library's clone(): it prints its mask, then execs print-mask. */
static char **clone_argv;
static int clone_child(void *arg) {
    (void)arg;
    printf("clone child mask %#llx\n", mask_now());
    fflush(stdout);
    execv(clone_argv[0], clone_argv);
    _exit(1);
}

static int inherit(const char *self) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGSEGV);
    sigaddset(&set, SIGILL);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    printf("parent mask %#llx\n", mask_now());
    fflush(stdout);
    char *argv[] = {(char *)self, "print-mask", NULL};
    pid_t pid;
    if (posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0)
        waitpid(pid, NULL, 0);
    pid = fork();
    if (pid == 0) {
        printf("fork child mask %#llx\n", mask_now());
        fflush(stdout);
        execv(self, argv);
        _exit(1);
    }
    waitpid(pid, NULL, 0);
    static char clone_stack[64 * 1024] __attribute__((aligned(16)));
    clone_argv = argv;
    pid = clone(clone_child, clone_stack + sizeof clone_stack, SIGCHLD, NULL);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    pthread_t t;
    pthread_create(&t, NULL, thread_mask, NULL);
    pthread_join(t, NULL);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    sigset_t tmask;
    sigemptyset(&tmask);
    sigaddset(&tmask, SIGTRAP);
    pthread_attr_setsigmask_np(&attr, &tmask);
    pthread_create(&t, &attr, thread_mask, NULL);
    pthread_join(t, NULL);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "plain";
    if (!strcmp(mode, "plain"))
        return plain();
    if (!strcmp(mode, "cpuid-blocked"))
        return cpuid_blocked();
    if (!strcmp(mode, "amx-blocked"))
        return amx_blocked();
    if (!strcmp(mode, "install") && argc > 2)
        return install_api(argv[2]);
    if (!strcmp(mode, "pending"))
        return pending();
    if (!strcmp(mode, "inherit"))
        return inherit(argv[0]);
    if (!strcmp(mode, "print-mask")) {
        printf("spawned mask %#llx\n", mask_now());
        return 0;
    }
    return 2;
}
