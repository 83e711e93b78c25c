/* Promise 6 (amx-trap/README.md): every tile load and store reaches memory as the CPU's own access
 * does, with the CPU's fault.
 *
 *   writeonly  a PROT_WRITE page (readable on x86)
 *   vvar       the kernel's [vvar] page (VM_PFNMAP: no other process can read it)
 *   stack      a store below the stack's lowest page grows the stack
 *   sigbus     rows past the end of a file mapping: SIGBUS BUS_ADRERR at the first such byte,
 *              RIP at the instruction
 *   xom        an instruction on an execute-only page
 *   seccomp    a seccomp filter denies process_vm_readv and process_vm_writev
 *   pkru       a protection key that denies the access: SEGV_PKUERR with the key
 *   canonical  non-canonical operands: #SS (SIGBUS, SI_KERNEL, REG_TRAPNO 12) through the stack
 *              segment (base RBP or RSP), #GP (SIGSEGV, trap 13) otherwise, and #GP for a row
 *              that runs from the last canonical bytes into non-canonical ones, which the CPU
 *              checks as one reference before touching the unmapped page below it
 *   ac         EFLAGS.AC (alignment checking) set around aligned tile operands, at sites
 *              trapped and patched: no fault, as on the silicon
 */
#include "hostile.h"
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>

static sigjmp_buf out;
static volatile int seen_sig, seen_code, seen_pkey;
static volatile uintptr_t seen_addr, seen_rip;
static volatile long seen_trapno;

static void record(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = ctx;
    seen_sig = sig;
    seen_code = info->si_code;
    seen_addr = (uintptr_t)info->si_addr;
    seen_pkey = info->si_code == 4 ? (int)*(uint32_t *)((char *)info + 32) : -1;
    seen_rip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    seen_trapno = uc->uc_mcontext.gregs[REG_TRAPNO];
    siglongjmp(out, 1);
}

static void catch(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = record;
    sa.sa_flags = SA_SIGINFO;
    sigaction(sig, &sa, NULL);
}

static tilecfg cfg;

/* 16 rows of 64 bytes from `p` at `stride` into `out` through tile 0. */
static void through_tile(const void *p, long stride, uint8_t *dst) {
    ldtilecfg(&cfg);
    tileload0(p, stride);
    tilestore0(dst, 64);
}

static int writeonly(void) {
    uint8_t *p = mmap(NULL, 4096, PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t want[1024], got[1024];
    pattern(want, 9);
    memcpy(p, want, 1024);
    through_tile(p, 64, got);
    printf("write-only page read: %s\n", memcmp(got, want, 1024) ? "wrong" : "ok");
    ldtilecfg(&cfg);
    tileload0(want, 64);
    tilestore0(p + 1024, 64);
    printf("write-only page written: %s\n", memcmp(p + 1024, want, 1024) ? "wrong" : "ok");
    return 0;
}

/* The start of the mapping named `name` in /proc/self/maps. */
static uintptr_t mapping(const char *name, uintptr_t *end) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    uintptr_t start = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strstr(line, name)) {
            unsigned long a, b;
            sscanf(line, "%lx-%lx", &a, &b);
            start = a;
            if (end)
                *end = b;
            break;
        }
    }
    if (f)
        fclose(f);
    return start;
}

static int vvar(void) {
    uintptr_t v = mapping("[vvar]", NULL);
    if (!v) {
        printf("no [vvar]\n");
        return 0;
    }
    uint8_t got[64], want[64];
    tilecfg one;
    config(&one, 1);
    ldtilecfg(&one);
    /* The data page of the vDSO's clock, read as plain bytes and through a tile: the first 8
     * bytes hold the sequence count and the clock mode. The kernel bumps the count when it
     * updates the clock, so the tile's read is compared with plain reads before and after it
     * that agree (the kernel may update the clock between them: then again). */
    uint8_t after[64];
    int agreed = 0;
    for (int i = 0; i < 1000 && !agreed; i++) {
        memcpy(want, (void *)v, 64);
        tileload0((void *)v, 64);
        memcpy(after, (void *)v, 64);
        agreed = !memcmp(want, after, 8);
    }
    tilestore0(got, 64);
    printf("[vvar] read: %s\n", !agreed ? "never stable" : memcmp(got, want, 8) ? "wrong" : "ok");
    return 0;
}

static int stack(void) {
    uintptr_t end;
    uintptr_t start = mapping("[stack]", &end);
    uint8_t want[1024];
    pattern(want, 4);
    /* Two pages below the stack's lowest page: within the stack's reach, not mapped yet. */
    uint8_t *below = (uint8_t *)(start - 8192);
    ldtilecfg(&cfg);
    tileload0(want, 64);
    tilestore0(below, 64);
    uintptr_t now = mapping("[stack]", NULL);
    printf("stack grown: %d, stored %s\n", now <= (uintptr_t)below,
           memcmp(below, want, 1024) ? "wrong" : "ok");
    return 0;
}

static int sigbus(void) {
    char path[] = "/tmp/amx-trap-sigbus-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    if (fd < 0 || ftruncate(fd, 4096) != 0)
        return 1;
    uint8_t *p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    catch(SIGBUS);
    static volatile uintptr_t site;
    ldtilecfg(&cfg);
    if (sigsetjmp(out, 1) == 0) {
        uintptr_t at;
        /* Rows at stride 512: row 8 is the first past the end of the file. */
        __asm__ volatile("lea 2f(%%rip), %0\n"
                         "mov %0, %1\n"
                         "2: .byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37"
                         : "=&r"(at), "=m"(site)
                         : "D"(p), "S"(512l)
                         : "memory");
        printf("no fault\n");
        return 0;
    }
    printf("sigbus: sig %d code %d offset %ld trapno %ld at the instruction %d\n", seen_sig,
           seen_code, (long)(seen_addr - (uintptr_t)p), seen_trapno, seen_rip == site);
    return 0;
}

/* tileloadd tmm0, [rdi + rsi]; tilestored [rdx + rsi], tmm0; ret */
static const uint8_t copy_code[] = {0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37, 0xc4,
                                    0xe2, 0x7a, 0x4b, 0x04, 0x32, 0xc3};

static int xom(void) {
    uint8_t *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memcpy(code, copy_code, sizeof copy_code);
    mprotect(code, 4096, PROT_EXEC);
    void (*f)(const void *, long, void *) = (void (*)(const void *, long, void *))code;
    uint8_t want[1024], got[1024];
    for (int round = 0; round < 4; round++) {
        pattern(want, round);
        ldtilecfg(&cfg);
        f(want, 64, got);
        if (memcmp(got, want, 1024)) {
            printf("execute-only code: wrong in round %d\n", round);
            return 0;
        }
    }
    printf("execute-only code: ok\n");
    return 0;
}

static int seccomp(void) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        printf("no seccomp\n");
        return 0;
    }
    uint8_t want[1024], got[1024];
    pattern(want, 6);
    through_tile(want, 64, got);
    printf("under seccomp: %s\n", memcmp(got, want, 1024) ? "wrong" : "ok");
    return 0;
}

static int pkru(void) {
    int key = pkey_alloc(0, 0);
    if (key < 0) {
        printf("no protection keys\n");
        return 0;
    }
    uint8_t *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 7, 8192);
    pkey_mprotect(p + 4096, 4096, PROT_READ | PROT_WRITE, key);
    catch(SIGSEGV);
    uint8_t got[1024];
    /* Access denied: the load faults at row 8 (stride 512). */
    pkey_set(key, PKEY_DISABLE_ACCESS);
    ldtilecfg(&cfg);
    if (sigsetjmp(out, 1) == 0) {
        tileload0(p, 512);
        printf("load: no fault\n");
    } else {
        printf("load denied: code %d key %d offset %ld\n", seen_code, seen_pkey == key,
               (long)(seen_addr - (uintptr_t)p));
    }
    /* Writes denied, reads allowed. */
    pkey_set(key, PKEY_DISABLE_WRITE);
    ldtilecfg(&cfg);
    tileload0(p, 512);
    tilestore0(got, 64);
    printf("load allowed: %s\n", got[0] == 7 && got[1023] == 7 ? "ok" : "wrong");
    if (sigsetjmp(out, 1) == 0) {
        ldtilecfg(&cfg);
        tilezero0();
        tilestore0(p, 512);
        printf("store: no fault\n");
    } else {
        printf("store denied: code %d key %d offset %ld\n", seen_code, seen_pkey == key,
               (long)(seen_addr - (uintptr_t)p));
    }
    pkey_set(key, 0);
    return 0;
}

/* The fault of `run`, as "sig S code C addr A trapno T". */
static void report_fault(const char *what, void (*run)(void)) {
    catch(SIGSEGV);
    catch(SIGBUS);
    seen_sig = 0;
    /* Each time: a handler left by siglongjmp leaves its own (INIT) tile state. */
    ldtilecfg(&cfg);
    if (sigsetjmp(out, 1) == 0)
        run();
    printf("%s: sig %d code %d addr %#lx trapno %ld\n", what, seen_sig, seen_code,
           (unsigned long)seen_addr, seen_trapno);
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
}

#define NONCANONICAL 0x8000000000001000ul

/* tileloadd tmm0, [rbp + rsi*1 + 0], with RBP non-canonical (128 bytes of red zone kept). */
static void load_rbp_base(void) {
    __asm__ volatile("sub $128, %%rsp\n\tpush %%rbp\n\tmov %0, %%rbp\n\t"
                     ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x44, 0x35, 0x00\n\t"
                     "pop %%rbp\n\tadd $128, %%rsp" ::"r"(NONCANONICAL), "S"(64L)
                     : "memory");
}

/* tileloadd tmm0, [rdi + rbp*1]: RBP as the index, the base RDI (the data segment). */
static void load_rbp_index(void) {
    __asm__ volatile("sub $128, %%rsp\n\tpush %%rbp\n\tmov $64, %%rbp\n\t"
                     ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x2f\n\t"
                     "pop %%rbp\n\tadd $128, %%rsp" ::"D"(NONCANONICAL)
                     : "memory");
}

/* ldtilecfg [rbp + 0], RBP non-canonical. */
static void ldtilecfg_rbp(void) {
    __asm__ volatile("sub $128, %%rsp\n\tpush %%rbp\n\tmov %0, %%rbp\n\t"
                     ".byte 0xc4, 0xe2, 0x78, 0x49, 0x45, 0x00\n\t"
                     "pop %%rbp\n\tadd $128, %%rsp" ::"r"(NONCANONICAL)
                     : "memory");
}

/* A 64-byte row from the last 32 canonical bytes (in the page no process can map). */
static void load_across_canonical_end(void) { tileload0((void *)0x7fffffffffe0ul, 64); }

static int canonical(void) {
    report_fault("[rbp + rsi] load", load_rbp_base);
    report_fault("[rdi + rbp] load", load_rbp_index);
    report_fault("[rbp] ldtilecfg", ldtilecfg_rbp);
    report_fault("row across the canonical end", load_across_canonical_end);
    tilerelease();
    return 0;
}

static int alignment_check(void) {
    static uint8_t data[1024] __attribute__((aligned(64))), back[1024] __attribute__((aligned(64)));
    pattern(data, 3);
    __asm__ volatile("pushfq\n\torl $0x40000, (%%rsp)\n\tpopfq" ::: "cc");
    for (int i = 0; i < 6; i++) {
        ldtilecfg(&cfg);
        tilezero0();
        tileload0(data, 64);
        tilestore0(back, 64);
    }
    __asm__ volatile("pushfq\n\tandl $0xfffbffff, (%%rsp)\n\tpopfq" ::: "cc");
    tilerelease();
    printf("with AC set: %s\n", memcmp(data, back, sizeof data) ? "wrong" : "ok");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    config(&cfg, 16);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "writeonly"))
        return writeonly();
    if (!strcmp(mode, "vvar"))
        return vvar();
    if (!strcmp(mode, "stack"))
        return stack();
    if (!strcmp(mode, "sigbus"))
        return sigbus();
    if (!strcmp(mode, "xom"))
        return xom();
    if (!strcmp(mode, "seccomp"))
        return seccomp();
    if (!strcmp(mode, "pkru"))
        return pkru();
    if (!strcmp(mode, "canonical"))
        return canonical();
    if (!strcmp(mode, "ac"))
        return alignment_check();
    return 2;
}
