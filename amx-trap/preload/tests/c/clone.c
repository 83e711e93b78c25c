/* Threads made with the clone system call itself, not pthread_create: a runtime's own threads.
 * On the silicon each thread has its own tile registers whatever its thread pointer; both
 * threads here run the same hot loop (its sites get patched) at the same time, each with its
 * own data, and check every result.
 *
 *   shared <n>    CLONE_VM | CLONE_THREAD without CLONE_SETTLS: the new thread keeps its
 *                 creator's thread pointer, so the two share every thread-local word
 *   settls <n>    CLONE_SETTLS with a thread pointer the program prepared itself (the word at
 *                 it points to itself), in a zeroed block
 *   garbage <n>   the same, the block around the thread pointer filled with 0xAA
 *   vfork <n>     n rounds of: tmm0 loaded, then vfork, whose child loads another
 *                 configuration and tmm0 and exits; the parent's tmm0 must be its own (the
 *                 child has its own registers, on the silicon and in the kernel's view)
 *   vforkwindow <n>  n rounds of vfork with SIGSEGV blocked: the child unblocks SIGSEGV, runs
 *                 AMX instructions (every other round), sends its parent SIGUSR1 and exits; the
 *                 parent, which handles SIGUSR1, gets it on its way out of vfork. The parent's
 *                 mask and tiles must be its own after every round, and the address space must
 *                 not grow with the rounds
 *   vforkplain <n>   the same without any AMX instruction (a program the library must leave as
 *                 it is): every SIGUSR1 handled, the address space not grown
 *
 * The new thread calls no C library function (its thread-local words are not its own).
 */
#include "hostile.h"
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>

/* hostile_clone(flags, stack_top, ptid, ctid, tls, fn, arg): clone(2) itself; the child runs
 * fn(arg) on the new stack and ends with exit(2) (the thread only). */
long hostile_clone(unsigned long flags, void *stack_top, int *ptid, int *ctid, unsigned long tls,
                   long (*fn)(void *), void *arg);
__asm__(".text\n"
        ".globl hostile_clone\n"
        ".type hostile_clone, @function\n"
        "hostile_clone:\n"
        "    movq 8(%rsp), %rax\n"
        "    subq $16, %rsi\n"
        "    movq %r9, 0(%rsi)\n"
        "    movq %rax, 8(%rsi)\n"
        "    movq %rcx, %r10\n"
        "    movl $56, %eax\n"
        "    syscall\n"
        "    testq %rax, %rax\n"
        "    jnz 1f\n"
        "    xorl %ebp, %ebp\n"
        "    popq %rax\n"
        "    popq %rdi\n"
        "    call *%rax\n"
        "    movq %rax, %rdi\n"
        "    movl $60, %eax\n"
        "    syscall\n"
        "    hlt\n"
        "1:  ret\n"
        ".size hostile_clone, . - hostile_clone\n");

struct worker {
    long n;
    int seed;
    uint8_t in[1024] __attribute__((aligned(64)));
    uint8_t out[1024] __attribute__((aligned(64)));
    volatile long wrong;
    volatile long done;
};

static volatile int go;

/* No C library: plain loops (the C library's functions may read thread-local words). */
static int same(const uint8_t *a, const uint8_t *b) {
    for (int i = 0; i < 1024; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* Each round: its own data into tmm0 and back out, then tmm1 from tmm0's row 0 pattern shifted
 * by the seed; a thread whose tiles another thread overwrites meanwhile stores the other's. */
static long work(void *arg) {
    struct worker *w = arg;
    while (!go)
        __asm__ volatile("pause");
    tilecfg c;
    config(&c, 16);
    for (long i = 0; i < w->n; i++) {
        ldtilecfg(&c);
        tileload0(w->in, 64);
        for (int k = 0; k < 8; k++)
            __asm__ volatile("pause");
        tilestore0(w->out, 64);
        if (!same(w->in, w->out))
            w->wrong++;
    }
    tilerelease();
    w->done = 1;
    return 0;
}

static void futex_wait_zero(int *word) {
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != 0)
        syscall(SYS_futex, word, FUTEX_WAIT, *word, NULL, NULL, 0);
}

static int run(const char *mode, long n) {
    static struct worker a, b;
    a.n = b.n = n;
    pattern(a.in, 1);
    pattern(b.in, 2);
    size_t stack_size = 1 << 20;
    uint8_t *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned long flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                          CLONE_SYSVSEM | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
    unsigned long tls = 0;
    if (strcmp(mode, "shared") != 0) {
        /* A block of 64 KiB, the thread pointer in its middle, the word there pointing to
         * itself (what x86-64 code reads at fs:0). */
        size_t size = 64 << 10;
        uint8_t *block = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (!strcmp(mode, "garbage"))
            memset(block, 0xAA, size);
        uint8_t *tp = block + size / 2;
        *(void **)tp = tp;
        /* The stack protector's canary at fs:0x28, as the creator's. */
        unsigned long canary;
        __asm__ volatile("movq %%fs:0x28, %0" : "=r"(canary));
        *(unsigned long *)(tp + 0x28) = canary;
        flags |= CLONE_SETTLS;
        tls = (unsigned long)tp;
    }
    static int ptid, ctid = 1;
    long tid = hostile_clone(flags, stack + stack_size, &ptid, &ctid, tls, work, &b);
    if (tid < 0) {
        printf("clone failed: %ld\n", tid);
        return 1;
    }
    go = 1;
    work(&a);
    futex_wait_zero(&ctid);
    printf("%s: creator %ld of %ld right, clone %ld of %ld right\n", mode, n - a.wrong, n,
           b.done ? n - b.wrong : -1, n);
    return 0;
}

static int vfork_rounds(long n) {
    static uint8_t mine[1024] __attribute__((aligned(64))), other[1024] __attribute__((aligned(64))),
        out[1024] __attribute__((aligned(64)));
    pattern(mine, 1);
    pattern(other, 2);
    tilecfg c;
    config(&c, 16);
    long right = 0;
    for (long i = 0; i < n; i++) {
        ldtilecfg(&c);
        tileload0(mine, 64);
        pid_t pid = vfork();
        if (pid == 0) {
            tilecfg c8;
            config(&c8, 8);
            ldtilecfg(&c8);
            tileload0(other, 64);
            _exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
        memset(out, 0, sizeof out);
        tilestore0(out, 64);
        right += memcmp(out, mine, sizeof out) == 0;
    }
    tilerelease();
    printf("vfork: parent's tiles right in %ld of %ld\n", right, n);
    return 0;
}

static volatile long usr1;
static void on_usr1(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)si, (void)uc;
    usr1++;
}

static long vm_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static int vfork_window(long n) {
    static uint8_t mine[1024] __attribute__((aligned(64))), other[1024] __attribute__((aligned(64))),
        out[1024] __attribute__((aligned(64)));
    pattern(mine, 1);
    pattern(other, 2);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t segv;
    sigemptyset(&segv);
    sigaddset(&segv, SIGSEGV);
    sigprocmask(SIG_BLOCK, &segv, NULL);
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tileload0(mine, 64);
    long before = vm_kb(), masks = 0, right = 0;
    for (long i = 0; i < n; i++) {
        pid_t pid = vfork();
        if (pid == 0) {
            sigprocmask(SIG_UNBLOCK, &segv, NULL);
            if (i % 2) {
                tilecfg c8;
                config(&c8, 8);
                ldtilecfg(&c8);
                tileload0(other, 64);
            }
            kill(getppid(), SIGUSR1);
            _exit(0);
        }
        int status;
        while (waitpid(pid, &status, 0) < 0)
            ;
        sigset_t now;
        sigprocmask(SIG_BLOCK, NULL, &now);
        masks += sigismember(&now, SIGSEGV);
        memset(out, 0, sizeof out);
        tilestore0(out, 64);
        right += memcmp(out, mine, sizeof out) == 0;
    }
    tilerelease();
    long grown = (vm_kb() - before) / 1024;
    printf("vforkwindow: mask right in %ld of %ld, tiles right in %ld of %ld, SIGUSR1 %ld of "
           "%ld, grown %s\n",
           masks, n, right, n, usr1, n, grown < 8 ? "< 8 MiB" : "more");
    return 0;
}

static int vfork_plain(long n) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    long before = vm_kb();
    for (long i = 0; i < n; i++) {
        pid_t pid = vfork();
        if (pid == 0) {
            kill(getppid(), SIGUSR1);
            _exit(0);
        }
        int status;
        while (waitpid(pid, &status, 0) < 0)
            ;
    }
    long grown = (vm_kb() - before) / 1024;
    printf("vforkplain: SIGUSR1 %ld of %ld, grown %s\n", usr1, n, grown < 8 ? "< 8 MiB" : "more");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    /* Without AMX instructions: runs without the permission, on any CPU. */
    if (argc > 2 && !strcmp(argv[1], "vforkplain"))
        return vfork_plain(atol(argv[2]));
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    if (argc < 3)
        return 2;
    if (!strcmp(argv[1], "vfork"))
        return vfork_rounds(atol(argv[2]));
    if (!strcmp(argv[1], "vforkwindow"))
        return vfork_window(atol(argv[2]));
    return run(argv[1], atol(argv[2]));
}
