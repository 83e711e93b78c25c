/* AMX under a seccomp sandbox that denies one system call the engine uses (the silicon needs
 * none of them): the program must run as it would on the silicon. Patching may stop; results,
 * signals and faults must not change.
 *
 *   <deny> <when> [<how>]
 *                   deny `none`, `mem` (open or openat of a file for reading and writing, as
 *                   /proc/self/mem is opened to patch), `membarrier`, `sigqueueinfo`
 *                   (rt_sigqueueinfo and rt_tgsigqueueinfo), `mmap` or `mincore`, from the start
 *                   (`early`: before any AMX instruction) or once a site is patched (`late`),
 *                   `how`: `errno` (the default: the filter returns EPERM), `kill`
 *                   (SECCOMP_RET_KILL_PROCESS, as systemd's SystemCallFilter= kills a service
 *                   making a call outside its list: `@system-service` lacks mincore, which no
 *                   AMX instruction needs) or, as browsers' sandboxes
 *                   do, `trap` (SECCOMP_RET_TRAP: SIGSYS, whose handler here makes the call
 *                   fail with EPERM, counting the calls it sees, and those made from the
 *                   library's code apart: on the silicon there is no library, and the program
 *                   must see no SIGSYS it did not cause). With `trap`, after the checks below,
 *                   the program makes the denied call itself: its handler must get it. Then
 *                   `trap-default` (no SIGSYS handler) and `trap-blocked` (SIGSYS blocked from
 *                   the start): the products only, then the program's own denied call, which
 *                   ends the process with SIGSYS, as the kernel forces it. Then:
 *
 *   products   a hot product function, 200 calls: the result of each is the first's
 *   timer      a 200 us timer over a loop of products: the handler runs, the loop's result is
 *              its products'
 *   queued     SIGRTMIN queued 64 times to a thread in a loop of products: all, in order
 *   loads      a 200 us timer over a loop of TILELOADDs (some ticks come during a load's
 *              copy): the handler runs, the tile holds the loaded bytes
 *   pending    SIGSEGV sent to the thread and to the process while the program blocks it,
 *              then unblocked: delivered, twice
 *   mprotect   the hot function's page made writable and executable again, then called: its
 *              result unchanged
 *   fault      a TILELOADD from an unmapped page: SIGSEGV with the page's address, caught
 *   thread     a new thread runs the product function: its result the same
 */
#include "hostile.h"
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <fcntl.h>

static int deny_nr[2] = {-1, -1};
static int deny_rdwr_open;
/* SECCOMP_RET_TRAP instead of SECCOMP_RET_ERRNO | EPERM. */
static int deny_by_trap;
/* SECCOMP_RET_KILL_PROCESS instead. */
static int deny_by_kill;

/* The library's code, where the program has it mapped (read before the sandbox). */
static uintptr_t lib_lo[16], lib_hi[16];
static int lib_ranges;

static void find_library(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f) && lib_ranges < 16) {
        unsigned long lo, hi;
        if (strstr(line, "amx_trap") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
            lib_lo[lib_ranges] = lo;
            lib_hi[lib_ranges++] = hi;
        }
    }
    if (f)
        fclose(f);
}

static volatile int sys_seen, sys_from_library;

/* A sandbox's SIGSYS handler: the call fails with EPERM, as the errno filter makes it. */
static void on_sys(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    uintptr_t at = (uintptr_t)info->si_call_addr;
    for (int i = 0; i < lib_ranges; i++)
        if (at >= lib_lo[i] && at < lib_hi[i])
            sys_from_library++;
    sys_seen++;
    ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RAX] = -EPERM;
}

/* Denies the chosen calls with EPERM, or traps them (opens only for reading and writing). */
static int sandbox(void) {
    unsigned deny = deny_by_trap   ? SECCOMP_RET_TRAP
                    : deny_by_kill ? SECCOMP_RET_KILL_PROCESS
                                   : SECCOMP_RET_ERRNO | EPERM;
    struct sock_filter f[32];
    int n = 0;
#define ADD(s) (f[n++] = (struct sock_filter)s)
    ADD(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
    ADD(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
    ADD(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    ADD(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
    for (int i = 0; i < 2; i++)
        if (deny_nr[i] >= 0) {
            ADD(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)deny_nr[i], 0, 1));
            ADD(BPF_STMT(BPF_RET | BPF_K, deny));
        }
    if (deny_rdwr_open) {
        /* open(path, flags) and openat(dir, path, flags) with O_RDWR. */
        ADD(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_open, 0, 4));
        ADD(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])));
        ADD(BPF_STMT(BPF_ALU | BPF_AND | BPF_K, O_ACCMODE));
        ADD(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, O_RDWR, 5, 6));
        ADD(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
        ADD(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 0, 4));
        ADD(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])));
        ADD(BPF_STMT(BPF_ALU | BPF_AND | BPF_K, O_ACCMODE));
        ADD(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, O_RDWR, 0, 1));
        ADD(BPF_STMT(BPF_RET | BPF_K, deny));
    }
    ADD(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
#undef ADD
    struct sock_fprog prog = {.len = (unsigned short)n, .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        printf("no seccomp: %d\n", errno);
        return -1;
    }
    return 0;
}

static uint8_t a[1024], b[1024];

/* C = A x B from zero, stored into `out`: one site each, hot after two calls. */
__attribute__((noinline, aligned(4096))) static void product(uint8_t *out) {
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tileload0(a, 64);
    tileload1(b, 64);
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x49, 0xd0" ::: "memory"); /* tilezero tmm2 */
    tdpbssd201();
    tilestore2(out, 64);
    tilerelease();
}

static uint8_t expected[1024];

static int products(void) {
    int same = 0;
    for (int i = 0; i < 200; i++) {
        static uint8_t out[1024];
        product(out);
        same += memcmp(out, expected, 1024) == 0;
    }
    printf("products: %d of 200 right\n", same);
    return same == 200;
}

/* The loop of products: TDPBSSD tmm2, tmm0, tmm1 until `loop_stop`, counted. */
static volatile long loop_dots, loop_stop, ticks;

__attribute__((noinline)) static void loop(void) {
    __asm__ volatile("1:\n"
                     ".byte 0xc4, 0xe2, 0x73, 0x5e, 0xd0\n"
                     "lock incq %0\n"
                     "cmpq $0, %1\n"
                     "je 1b\n"
                     : "+m"(loop_dots)
                     : "m"(loop_stop)
                     : "memory", "cc");
}

/* The loop's tiles; its result checked against the count of products. */
static void loop_start(void) {
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tileload0(a, 64);
    tileload1(b, 64);
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x49, 0xd0" ::: "memory");
    loop_dots = 0;
    loop_stop = 0;
}

static int loop_right(void) {
    static uint8_t c[1024];
    tilestore2(c, 64);
    tilerelease();
    for (int i = 0; i < 256; i++) {
        uint32_t one, got;
        memcpy(&one, expected + 4 * i, 4);
        memcpy(&got, c + 4 * i, 4);
        if (got != (uint32_t)(one * (uint32_t)loop_dots))
            return 0;
    }
    return 1;
}

static void tick(int sig) {
    (void)sig;
    if (++ticks >= 200)
        loop_stop = 1;
}

static int timer(void) {
    signal(SIGALRM, tick);
    loop_start();
    struct itimerval every = {{0, 200}, {0, 200}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, NULL);
    loop();
    setitimer(ITIMER_REAL, &off, NULL);
    int right = loop_right();
    printf("timer: %ld ticks, loop %s\n", ticks, right ? "right" : "wrong");
    return right && ticks >= 200;
}

/* A thread on a stack of the program's: the C library maps none (the sandbox may deny mmap). */
static int spawn(pthread_t *t, void *(*fn)(void *), void *arg) {
    static char stacks[2][512 * 1024] __attribute__((aligned(4096)));
    static int used;
    if (used == 2)
        return EAGAIN;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stacks[used++], sizeof stacks[0]);
    return pthread_create(t, &attr, fn, arg);
}

static pthread_t looper;
static volatile int rt_got, rt_disorder;

static void on_rt(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    if (info->si_value.sival_int != rt_got)
        rt_disorder++;
    rt_got++;
}

static volatile int rt_refused;

static void *rt_sender(void *arg) {
    (void)arg;
    for (int round = 0; round < 4; round++) {
        long from = loop_dots;
        while (loop_dots - from < 20)
            sched_yield();
        for (int i = 0; i < 16; i++) {
            union sigval v = {.sival_int = round * 16 + i};
            if (pthread_sigqueue(looper, SIGRTMIN, v) != 0) {
                /* The sandbox denies the program's own rt_tgsigqueueinfo too. */
                rt_refused = 1;
                loop_stop = 1;
                return NULL;
            }
        }
        for (int t = 0; t < 5000 && rt_got < (round + 1) * 16; t++)
            usleep(1000);
    }
    loop_stop = 1;
    return NULL;
}

static int queued(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_rt;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGRTMIN, &sa, NULL);
    looper = pthread_self();
    loop_start();
    pthread_t t;
    if (spawn(&t, rt_sender, NULL) != 0) {
        printf("queued: no thread\n");
        return 0;
    }
    loop();
    pthread_join(t, NULL);
    int right = loop_right();
    if (rt_refused) {
        printf("queued: refused by the sandbox, loop %s\n", right ? "right" : "wrong");
        return right;
    }
    printf("queued: %d of 64, %d out of order, loop %s\n", rt_got, rt_disorder,
           right ? "right" : "wrong");
    return right && rt_got == 64 && rt_disorder == 0;
}

static volatile int segv_got;
static void on_segv_sent(int sig) {
    (void)sig;
    segv_got++;
}

static int pending(void) {
    signal(SIGSEGV, on_segv_sent);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGSEGV);
    sigprocmask(SIG_BLOCK, &s, NULL);
    syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), SIGSEGV);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    sigprocmask(SIG_BLOCK, &s, NULL);
    kill(getpid(), SIGSEGV);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    signal(SIGSEGV, SIG_DFL);
    printf("pending: %d of 2 delivered\n", segv_got);
    return segv_got == 2;
}

static int reprotect(void) {
    static uint8_t out[1024];
    uintptr_t page = (uintptr_t)product & ~(uintptr_t)4095;
    int rc = mprotect((void *)page, 4096, PROT_READ | PROT_WRITE | PROT_EXEC);
    rc |= mprotect((void *)page, 4096, PROT_READ | PROT_EXEC);
    int same = 0;
    for (int i = 0; i < 4; i++) {
        product(out);
        same += memcmp(out, expected, 1024) == 0;
    }
    printf("mprotect: %s, %d of 4 right\n", rc ? "refused" : "done", same);
    return same == 4;
}

static sigjmp_buf back;
static volatile uintptr_t fault_addr;
static void on_fault(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    fault_addr = (uintptr_t)info->si_addr;
    siglongjmp(back, 1);
}

static int fault(void) {
    uint8_t *page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        /* mmap denied: a page below the program's own mappings that is never mapped. */
        page = (uint8_t *)(uintptr_t)0x10000;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    tilecfg c;
    config(&c, 16);
    int caught = 0;
    for (int i = 0; i < 4; i++) {
        ldtilecfg(&c);
        if (sigsetjmp(back, 1) == 0)
            tileload0(page, 64);
        else
            caught += fault_addr == (uintptr_t)page;
        tilerelease();
    }
    signal(SIGSEGV, SIG_DFL);
    printf("fault: %d of 4 caught at the page\n", caught);
    return caught == 4;
}

static void *thread_products(void *arg) {
    static uint8_t out[1024];
    int same = 0;
    for (int i = 0; i < 8; i++) {
        product(out);
        same += memcmp(out, expected, 1024) == 0;
    }
    *(int *)arg = same;
    return NULL;
}

static int thread(void) {
    int same = -1;
    pthread_t t;
    if (spawn(&t, thread_products, &same) != 0) {
        printf("thread: not created\n");
        return 0;
    }
    pthread_join(t, NULL);
    printf("thread: %d of 8 right\n", same);
    return same == 8;
}
static volatile long load_ticks;

static void load_tick(int sig) {
    (void)sig;
    load_ticks++;
}

/* Loads of one site until the timer ticked 200 times. */
__attribute__((noinline)) static long load_loop(void) {
    long n = 0;
    while (load_ticks < 200) {
        tileload0(a, 64);
        n++;
    }
    return n;
}

static int loads(void) {
    signal(SIGALRM, load_tick);
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    struct itimerval every = {{0, 200}, {0, 200}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, NULL);
    long n = load_loop();
    setitimer(ITIMER_REAL, &off, NULL);
    static uint8_t out[1024];
    tilestore0(out, 64);
    tilerelease();
    int right = memcmp(out, a, 1024) == 0;
    printf("loads: %ld ticks over %s loads, tile %s\n", load_ticks, n > 200 ? "many" : "few",
           right ? "right" : "wrong");
    return right && load_ticks >= 200;
}

/* The program's own call of what the sandbox denies: -1 with the call's errno. */
static long own_denied_call(void) {
    if (deny_rdwr_open)
        return open("/dev/null", O_RDWR);
    if (deny_nr[0] == SYS_mmap)
        return (long)mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == -1 ? -1 : 0;
    if (deny_nr[0] == SYS_membarrier)
        return syscall(SYS_membarrier, 0 /* MEMBARRIER_CMD_QUERY */, 0);
    if (deny_nr[0] == SYS_rt_sigqueueinfo) {
        union sigval v = {.sival_int = 0};
        int e = sigqueue(getpid(), 0, v); /* signal 0: only the permission checks */
        return e;
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 3)
        return 2;
    const char *deny = argv[1];
    int late = !strcmp(argv[2], "late");
    const char *how = argc > 3 ? argv[3] : "errno";
    int trap_default = !strcmp(how, "trap-default"), trap_blocked = !strcmp(how, "trap-blocked");
    deny_by_trap = !strncmp(how, "trap", 4);
    deny_by_kill = !strcmp(how, "kill");
    if (deny_by_trap) {
        find_library();
        if (!trap_default) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_sigaction = on_sys;
            sa.sa_flags = SA_SIGINFO;
            sigaction(SIGSYS, &sa, NULL);
        }
        if (trap_blocked) {
            /* From the start: the engine's trapped calls come while the program blocks SIGSYS. */
            sigset_t sys;
            sigemptyset(&sys);
            sigaddset(&sys, SIGSYS);
            sigprocmask(SIG_BLOCK, &sys, NULL);
        }
    } else if (strcmp(how, "errno") != 0 && !deny_by_kill)
        return 2;
    if (!strcmp(deny, "mem"))
        deny_rdwr_open = 1;
    else if (!strcmp(deny, "membarrier"))
        deny_nr[0] = SYS_membarrier;
    else if (!strcmp(deny, "sigqueueinfo")) {
        deny_nr[0] = SYS_rt_sigqueueinfo;
        deny_nr[1] = SYS_rt_tgsigqueueinfo;
    } else if (!strcmp(deny, "mmap"))
        deny_nr[0] = SYS_mmap;
    else if (!strcmp(deny, "mincore"))
        deny_nr[0] = SYS_mincore;
    else if (strcmp(deny, "none") != 0)
        return 2;
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    pattern(a, 11);
    pattern(b, 12);
    if (!late && sandbox() != 0)
        return 0;
    product(expected);
    if (late) {
        /* Hot and patched first (where the engine patches), then the sandbox. */
        static uint8_t out[1024];
        for (int i = 0; i < 8; i++)
            product(out);
        loop_start();
        loop_stop = 1;
        for (int i = 0; i < 4; i++)
            loop();
        tilerelease();
        if (sandbox() != 0)
            return 0;
    }
    int ok = products();
    if (trap_default || trap_blocked) {
        printf("sigsys before the program's own call: %d\n", sys_seen);
        own_denied_call();
        printf("survived the program's own denied call\n");
        return 0;
    }
    ok &= timer();
    ok &= queued();
    ok &= loads();
    ok &= pending();
    ok &= reprotect();
    ok &= fault();
    ok &= thread();
    if (deny_by_trap) {
        int before = sys_seen;
        errno = 0;
        long r = own_denied_call();
        int e = errno;
        printf("sigsys from the library: %d\n", sys_from_library);
        printf("own call: %s\n", sys_seen == before + 1 && r == -1 && e == EPERM
                                      ? "refused through the handler"
                                      : "different");
        ok &= sys_from_library == 0;
    }
    printf("all: %s\n", ok ? "as on the silicon" : "different");
    return 0;
}
