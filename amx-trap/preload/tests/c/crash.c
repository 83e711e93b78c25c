/* A signal that ends the process ends it where the program was: a debugger, a core dump or a
 * crash reporter sees the program's registers at the faulting instruction, as on the silicon,
 * not the engine's. A tracer (this program's parent, through ptrace) records the registers
 * at every signal the kernel delivers to the child and prints the last one's signal and RIP,
 * relative to the faulting instruction's address.
 *
 *   plain     a store to an unmapped address, SIGSEGV with the default action
 *   blocked   the same with SIGSEGV blocked (the kernel's forced delivery)
 *   ignored   the same with SIGSEGV ignored
 *   ud        UD2, SIGILL with the default action
 *   amx       TILELOADD from an unmapped address (the first execution of its site)
 *   patched   the same site after it ran 20 times from readable memory (patched by then)
 *   sandboxed-plain, sandboxed-amx   the store, or the TILELOADD, under a seccomp filter that
 *             refuses rt_sigaction (EPERM): the process still dies of the fault
 *
 * Prints "skip: ..." where ptrace is refused. */
#include "hostile.h"
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/user.h>
#include <sys/wait.h>

extern char plain_site[], ud_site[], amx_site[];

__attribute__((noinline)) static void store_to(void *p) {
    __asm__ volatile(".globl plain_site\nplain_site: movl $1, (%0)" : : "r"(p) : "memory");
}

__attribute__((noinline)) static void undefined(void) {
    __asm__ volatile(".globl ud_site\nud_site: ud2");
}

/* TILELOADD tmm0, [rdi + rsi] with its address exported. */
__attribute__((noinline)) static void load_tile(const void *p, long stride) {
    __asm__ volatile(".globl amx_site\namx_site: .byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37"
                     :
                     : "D"(p), "S"(stride)
                     : "memory");
}

static uint8_t readable[16 * 64];

/* A seccomp filter refusing rt_sigaction with EPERM, everything else allowed. */
static void refuse_sigaction(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_sigaction, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        _exit(101);
}

static int run(const char *mode) {
    if (!strcmp(mode, "sandboxed-plain")) {
        refuse_sigaction();
        store_to((void *)0x40);
    } else if (!strcmp(mode, "sandboxed-amx")) {
        if (request_amx())
            return 1;
        tilecfg c;
        config(&c, 16);
        ldtilecfg(&c);
        refuse_sigaction();
        load_tile((void *)0x40, 64);
    } else if (!strcmp(mode, "plain") || !strcmp(mode, "blocked") || !strcmp(mode, "ignored")) {
        if (!strcmp(mode, "blocked")) {
            sigset_t s;
            sigemptyset(&s);
            sigaddset(&s, SIGSEGV);
            sigprocmask(SIG_BLOCK, &s, NULL);
        }
        if (!strcmp(mode, "ignored"))
            signal(SIGSEGV, SIG_IGN);
        store_to((void *)0x40);
    } else if (!strcmp(mode, "ud")) {
        undefined();
    } else if (!strcmp(mode, "amx") || !strcmp(mode, "patched")) {
        if (request_amx())
            return 1;
        tilecfg c;
        config(&c, 16);
        ldtilecfg(&c);
        if (!strcmp(mode, "patched"))
            for (int i = 0; i < 20; i++)
                load_tile(readable, 64);
        load_tile((void *)0x40, 64);
    }
    return 0;
}

static const char *site_of(const char *mode, uintptr_t *site) {
    if (!strcmp(mode, "ud")) {
        *site = (uintptr_t)ud_site;
        return "SIGILL";
    }
    *site = (uintptr_t)(strstr(mode, "amx") || !strcmp(mode, "patched") ? amx_site : plain_site);
    return "SIGSEGV";
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "plain";
    /* No core file: only the registers at the signal matter. */
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    pid_t child = fork();
    if (child == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0)
            _exit(100);
        raise(SIGSTOP);
        _exit(run(mode));
    }
    int status, last_sig = 0;
    uintptr_t last_rip = 0;
    for (;;) {
        if (waitpid(child, &status, 0) != child)
            return 1;
        if (WIFEXITED(status)) {
            if (WEXITSTATUS(status) == 100) {
                printf("skip: ptrace refused\n");
                return 0;
            }
            if (WEXITSTATUS(status) == 101) {
                printf("skip: seccomp refused\n");
                return 0;
            }
            printf("exited %d\n", WEXITSTATUS(status));
            return 1;
        }
        if (WIFSIGNALED(status))
            break;
        int sig = WSTOPSIG(status);
        if (sig == SIGSTOP && last_sig == 0) {
            last_sig = -1;
            ptrace(PTRACE_CONT, child, NULL, NULL);
            continue;
        }
        struct user_regs_struct regs;
        ptrace(PTRACE_GETREGS, child, NULL, &regs);
        last_sig = sig;
        last_rip = regs.rip;
        ptrace(PTRACE_CONT, child, NULL, (void *)(long)sig);
    }
    uintptr_t site;
    const char *want = site_of(mode, &site);
    printf("killed by %s\n", WTERMSIG(status) == SIGSEGV ? "SIGSEGV"
                             : WTERMSIG(status) == SIGILL ? "SIGILL"
                                                          : "another signal");
    printf("last signal %s at site%+ld (expected %s)\n",
           last_sig == SIGSEGV ? "SIGSEGV" : last_sig == SIGILL ? "SIGILL" : "another",
           (long)(last_rip - site), want);
    return 0;
}
