/* A signal at the exact instructions of a patched site's path where the frame's return
 * address is an exit of the stub, placed with hardware breakpoints by a tracing parent. On
 * the silicon a signal never finds the thread anywhere but at an instruction of its own: the
 * handler's interrupted RIP must be the site, or the instruction after it.
 *
 *   <mode> then, per entry (xsave, ymm), the library's `amx_trap_fast_*_tail`, `_marked`
 *   and `_pops` offsets (from `nm`); the child patches a TILELOADD site, then in mode
 *   returns:
 *             - fault: runs it on an unmapped address; SIGUSR1 comes where the entry has
 *               restored the program's registers and returns to the fault exit (the slow path
 *               then raises SIGSEGV at the site, whose handler leaves by siglongjmp);
 *             - held: runs it on a valid address; SIGUSR2 comes while the instruction is under
 *               way (held back: the frame then returns to the held-back exit), and SIGUSR1
 *               where the entry has restored the registers.
 *   slotless: with every engine state in use (a thread keeps the one that patched the site)
 *             and no memory left (`AMX_TRAP_RESERVE=0`), the main thread runs the site: the
 *             entry finds no state and leaves for the fault exit, and SIGUSR1 comes as it
 *             pops the registers; then the instruction's #UD (SIGILL: the thread's tiles are
 *             in the INIT state, it never configured any).
 * Every handler prints whether the RIP it interrupted was the site or past it (or the other
 * handler's first instruction, where both came at one boundary).
 */
#include "hostile.h"
#include <pthread.h>
#include <setjmp.h>
#include <sys/resource.h>
#include <stddef.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>

static uint8_t rows[16 * 64] __attribute__((aligned(64)));

__attribute__((noinline)) void stepped_site(const void *p) {
    tileload0(p, 64);
    __asm__ volatile("" ::: "memory");
}

static volatile unsigned long site_lo, site_hi;
static sigjmp_buf out;

static void where(int sig, siginfo_t *si, void *ctx) {
    (void)si;
    unsigned long rip = ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
    char b[96];
    /* Two signals due at one boundary: the second's handler interrupts the first's at its
     * first instruction, as the kernel stacks them. */
    snprintf(b, sizeof b, "signal %d at the site or past it: %d\n", sig,
             (rip >= site_lo && rip < site_hi) || rip == (unsigned long)where);
    write(1, b, strlen(b));
    if (sig == SIGSEGV || sig == SIGILL)
        siglongjmp(out, 1);
}

static pthread_barrier_t patched, finish;

static void *patcher(void *arg) {
    (void)arg;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    for (int i = 0; i < 1000; i++)
        stepped_site(rows);
    pthread_barrier_wait(&patched);
    pthread_barrier_wait(&finish);
    return NULL;
}

/* The permission, `where` for SIGUSR1, SIGUSR2, SIGSEGV and SIGILL, and the site's range. */
static int prepare(void) {
    if (request_amx() != 0)
        return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = where;
    sa.sa_flags = SA_SIGINFO;
    int sigs[] = {SIGUSR1, SIGUSR2, SIGSEGV, SIGILL};
    for (int i = 0; i < 4; i++)
        sigaction(sigs[i], &sa, NULL);
    site_lo = (unsigned long)stepped_site;
    site_hi = site_lo + 32;
    return 0;
}

static int slotless(void) {
    if (prepare() != 0)
        return 2;
    pthread_t t;
    pthread_barrier_init(&patched, NULL, 2);
    pthread_barrier_init(&finish, NULL, 2);
    pthread_create(&t, NULL, patcher, NULL);
    pthread_barrier_wait(&patched);
    struct rlimit rl = {vm_size(), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &rl);
    raise(SIGSTOP);
    printf("slotless:\n");
    if (!sigsetjmp(out, 1))
        stepped_site(rows);
    pthread_barrier_wait(&finish);
    pthread_join(t, NULL);
    printf("done\n");
    return 0;
}

static int child(void) {
    if (prepare() != 0)
        return 2;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    for (int i = 0; i < 1000; i++)
        stepped_site(rows);
    /* The tracer arms its breakpoints now. */
    raise(SIGSTOP);
    printf("fault:\n");
    if (!sigsetjmp(out, 1))
        stepped_site((const void *)0x10);
    ldtilecfg(&c);
    raise(SIGSTOP);
    printf("held:\n");
    stepped_site(rows);
    printf("done\n");
    return 0;
}

static unsigned long library_base(pid_t pid) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    FILE *f = fopen(path, "r");
    unsigned long base = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "amx_trap_preload") && sscanf(line, "%lx-", &base) == 1)
            break;
    if (f)
        fclose(f);
    return base;
}

/* Arms breakpoint `n` at `addr` (0: disarms every one). */
static void arm(pid_t pid, int n, unsigned long addr) {
    static unsigned long dr7;
    if (!addr) {
        dr7 = 0;
    } else {
        ptrace(PTRACE_POKEUSER, pid, offsetof(struct user, u_debugreg[n]), addr);
        dr7 |= 1ul << (2 * n);
    }
    ptrace(PTRACE_POKEUSER, pid, offsetof(struct user, u_debugreg[7]), dr7);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 8)
        return 2;
    int without = !strcmp(argv[1], "slotless");
    unsigned long tails[2], marks[2], pops[2];
    for (int e = 0; e < 2; e++) {
        tails[e] = strtoul(argv[2 + 3 * e], NULL, 0);
        marks[e] = strtoul(argv[3 + 3 * e], NULL, 0);
        pops[e] = strtoul(argv[4 + 3 * e], NULL, 0);
    }
    pid_t pid = fork();
    if (pid == 0) {
        ptrace(PTRACE_TRACEME, 0, 0, 0);
        raise(SIGSTOP);
        _exit(without ? slotless() : child());
    }
    int status, stops = 0, injected = 0;
    unsigned long base = 0;
    waitpid(pid, &status, 0); /* the first SIGSTOP */
    ptrace(PTRACE_CONT, pid, 0, 0);
    while (waitpid(pid, &status, 0) == pid && WIFSTOPPED(status)) {
        int sig = WSTOPSIG(status), pass = sig;
        if (sig == SIGSTOP) {
            /* 1: arm the tails (fault); 2: the marks, then the tails (held). */
            if (!base)
                base = library_base(pid);
            arm(pid, 0, 0);
            stops++;
            for (int e = 0; e < 2; e++)
                arm(pid, e, base + (without ? pops[e] : stops == 1 ? tails[e] : marks[e]));
            pass = 0;
        } else if (sig == SIGTRAP) {
            unsigned long dr6 = ptrace(PTRACE_PEEKUSER, pid, offsetof(struct user, u_debugreg[6]), 0);
            if (dr6 & 0xF) {
                ptrace(PTRACE_POKEUSER, pid, offsetof(struct user, u_debugreg[6]), 0);
                arm(pid, 0, 0);
                injected++;
                if (!without && stops == 2 && injected == 2) {
                    /* Under way: SIGUSR2, held back; then the tails. */
                    for (int e = 0; e < 2; e++)
                        arm(pid, e, base + tails[e]);
                    pass = SIGUSR2;
                } else {
                    pass = SIGUSR1;
                }
            }
        }
        ptrace(PTRACE_CONT, pid, 0, pass);
    }
    fprintf(stderr, "breakpoints hit: %d\n", injected);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
