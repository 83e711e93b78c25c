/* The permission and the tile state across the calls that make tasks, as Linux on an AMX CPU
 * has them.
 *
 *   calls     the arch_prctl permission calls: ARCH_GET_XCOMP_SUPP (the tile components
 *             always), ARCH_GET_XCOMP_PERM before and after the request, a request for the
 *             tile configuration (EOPNOTSUPP: only tile data takes one) and for a feature past
 *             the last (EINVAL), an option with bits above 32 (the kernel reads an int), and
 *             both GETs into a read-only page and NULL (EFAULT)
 *   inherit   with the permission, a configuration (8 rows) and a pattern in tmm0, what a new
 *             thread and a fork child see without loading a configuration: the creator's
 *             configuration, tile data zeros (Linux copies the default XSAVE features, the
 *             configuration among them, and not the tile data); the creator's are unchanged
 *   vfork     a vfork child asking for the permission before _exit: the parent, another
 *             process, still has none
 *   xfd       tile data before the permission, after a page fault the program handled: the
 *             SIGILL (ILL_ILLOPC) shows the thread's last trap, the page fault's (Linux raises
 *             XFD's signal without recording a trap of its own)
 */
#include "hostile.h"
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define ARCH_GET_XCOMP_SUPP 0x1021

static void say(const char *what, long rc) {
    if (rc == 0)
        printf("%s: 0\n", what);
    else
        printf("%s: -1 %s\n", what, strerror(errno));
}

/* Bits 17 and 18 of a GET. */
static void tiles(const char *what, long code) {
    unsigned long mask = 0;
    long rc = syscall(SYS_arch_prctl, code, &mask);
    if (rc != 0)
        printf("%s: -1 %s\n", what, strerror(errno));
    else
        printf("%s: %lu\n", what, (mask >> 17) & 3);
}

static int calls(void) {
    tiles("supp before", ARCH_GET_XCOMP_SUPP);
    tiles("perm before", ARCH_GET_XCOMP_PERM);
    say("request 17", syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, 17));
    say("request 64", syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, 64));
    tiles("perm after refusals", ARCH_GET_XCOMP_PERM);
    void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    say("perm into read-only", syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, ro));
    say("supp into read-only", syscall(SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, ro));
    say("perm into NULL", syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, NULL));
    say("request with high option bits",
        syscall(SYS_arch_prctl, (1L << 32) | ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA));
    tiles("perm after", ARCH_GET_XCOMP_PERM);
    say("request 17 after", syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, 17));
    tiles("supp after", ARCH_GET_XCOMP_SUPP);
    return 0;
}

static uint8_t pat[1024] __attribute__((aligned(64)));
static sigjmp_buf jump;
static volatile int ill_code;

static void on_ill(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    ill_code = info->si_code;
    siglongjmp(jump, 1);
}

/* What this task sees without loading a configuration. */
static void look(const char *who) {
    tilecfg c;
    memset(&c, 0xee, sizeof c);
    sttilecfg(&c);
    printf("%s config: palette %d rows %d colsb %d\n", who, c.palette_id, c.rows[0], c.colsb[0]);
    static __thread uint8_t out[1024] __attribute__((aligned(64)));
    memset(out, 0x55, sizeof out);
    if (sigsetjmp(jump, 1) == 0) {
        tilestore0(out, 64);
        int zeros = 1, same = 1;
        for (int i = 0; i < 8 * 64; i++) {
            zeros &= out[i] == 0;
            same &= out[i] == pat[i];
        }
        printf("%s tmm0: %s\n", who, same ? "the creator's" : zeros ? "zeros" : "other");
    } else {
        printf("%s tmm0: SIGILL %d\n", who, ill_code);
    }
}

static void *thread(void *arg) {
    (void)arg;
    look("thread");
    return NULL;
}

static int inherit(void) {
    struct sigaction sa = {.sa_sigaction = on_ill, .sa_flags = SA_SIGINFO};
    sigaction(SIGILL, &sa, NULL);
    if (request_amx() != 0) {
        printf("no permission: %s\n", strerror(errno));
        return 1;
    }
    pattern(pat, 3);
    tilecfg c;
    config(&c, 8);
    ldtilecfg(&c);
    tileload0(pat, 64);
    pthread_t t;
    pthread_create(&t, NULL, thread, NULL);
    pthread_join(t, NULL);
    pid_t child = fork();
    if (child == 0) {
        look("fork child");
        _exit(0);
    }
    waitpid(child, NULL, 0);
    look("creator");
    return 0;
}

static int vfork_permission(void) {
    pid_t child = vfork();
    if (child == 0) {
        request_amx();
        _exit(0);
    }
    waitpid(child, NULL, 0);
    tiles("parent perm after the child's request", ARCH_GET_XCOMP_PERM);
    return 0;
}

static volatile long seen_trapno, seen_err;
static volatile int seen_code;

static void note_fault(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    ucontext_t *uc = ctx;
    seen_code = info->si_code;
    seen_trapno = uc->uc_mcontext.gregs[REG_TRAPNO];
    seen_err = uc->uc_mcontext.gregs[REG_ERR];
    siglongjmp(jump, 1);
}

static int xfd(void) {
    struct sigaction sa = {.sa_sigaction = note_fault, .sa_flags = SA_SIGINFO | SA_NODEFER};
    sigaction(SIGILL, &sa, NULL);
    sigaction(SIGSEGV, &sa, NULL);
    if (sigsetjmp(jump, 1) == 0)
        *(volatile int *)16 = 1;
    printf("page fault: trapno %ld err %ld\n", seen_trapno, seen_err);
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    if (sigsetjmp(jump, 1) == 0)
        tilezero0();
    printf("xfd after it: code %d trapno %ld err %ld\n", seen_code, seen_trapno, seen_err);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "calls";
    if (!strcmp(mode, "calls"))
        return calls();
    if (!strcmp(mode, "inherit"))
        return inherit();
    if (!strcmp(mode, "vfork"))
        return vfork_permission();
    if (!strcmp(mode, "xfd"))
        return xfd();
    return 2;
}
