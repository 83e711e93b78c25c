/* An ordinary AMX program in C: what the preload library must run unmodified.
 *
 * Usage: amx_program [run | xfd | die-gp | die-ud]
 *   run     CPUID, the permission, every instruction, results as hex; a #GP and a #UD caught by
 *           its own handlers (REG_TRAPNO read from the context, left with siglongjmp)
 *   xfd     a tile-data instruction before the permission request, caught
 *   die-gp  a #GP with no handler: the process must die of SIGSEGV
 *   die-ud  a #UD with no handler: the process must die of SIGILL
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <immintrin.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed, aligned(64))) tilecfg;

static sigjmp_buf resume;
static volatile int seen_sig, seen_code;
static volatile long seen_trapno;
static volatile void *seen_addr;

static void on_fault(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = ctx;
    seen_sig = sig;
    seen_code = info->si_code;
    seen_addr = info->si_addr;
    seen_trapno = uc->uc_mcontext.gregs[REG_TRAPNO];
    siglongjmp(resume, 1);
}

static void handle(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

/* GCC 12's _tile_loadconfig and _tile_storeconfig tell the compiler they read or write only 8
 * bytes of the configuration, so stores to the rest could be dropped, or reads of it moved:
 * memory barriers keep them. */
static void load_config(const tilecfg *cfg) {
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(cfg);
}

static void store_config(tilecfg *cfg) {
    _tile_storeconfig(cfg);
    __asm__ volatile("" ::: "memory");
}

static void full_config(tilecfg *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg->colsb[t] = 64;
        cfg->rows[t] = 16;
    }
}

static void hex(const char *name, const uint8_t *p, int n) {
    printf("%s ", name);
    for (int i = 0; i < n; i++)
        printf("%02x", p[i]);
    printf("\n");
}

static uint8_t a[1024], b[1024], out[1024];
static volatile int handler_saw_init;

/* A handler that uses AMX itself: it must start from the INIT state and leave the interrupted
 * code's state alone, as Linux arranges on the silicon. */
static void on_usr1(int sig) {
    (void)sig;
    tilecfg seen, mine;
    store_config(&seen);
    static const uint8_t zero[64];
    handler_saw_init = memcmp(&seen, zero, 64) == 0;
    memset(&mine, 0, sizeof mine);
    mine.palette_id = 1;
    mine.colsb[1] = 8;
    mine.rows[1] = 2;
    load_config(&mine);
    _tile_zero(1);
}

static int run(void) {
    unsigned eax, ebx, ecx, edx;
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    printf("cpuid7 tile=%u int8=%u bf16=%u\n", (edx >> 24) & 1, (edx >> 25) & 1, (edx >> 22) & 1);
    __cpuid_count(0x1D, 1, eax, ebx, ecx, edx);
    printf("palette1 %08x %08x %08x\n", eax, ebx, ecx);

    unsigned long mask = 0;
    syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mask);
    printf("perm before %d\n", (int)((mask >> XFEATURE_XTILEDATA) & 1));
    long rc = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mask);
    printf("perm request %ld after %d\n", rc, (int)((mask >> XFEATURE_XTILEDATA) & 1));

    for (int i = 0; i < 1024; i++) {
        a[i] = (uint8_t)(i * 37 + 11);
        b[i] = (uint8_t)(i * 101 + 3);
    }
    tilecfg cfg;
    full_config(&cfg);
    load_config(&cfg);
    _tile_loadd(1, a, 64);
    _tile_stream_loadd(2, b, 64);

    _tile_zero(0);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, out, 64);
    hex("ssd", out, 1024);
    _tile_zero(0);
    _tile_dpbsud(0, 1, 2);
    _tile_stored(0, out, 64);
    hex("sud", out, 1024);
    _tile_zero(0);
    _tile_dpbusd(0, 1, 2);
    _tile_stored(0, out, 64);
    hex("usd", out, 1024);
    _tile_zero(0);
    _tile_dpbuud(0, 1, 2);
    _tile_stored(0, out, 64);
    hex("uud", out, 1024);
    _tile_zero(3);
    _tile_dpbf16ps(3, 1, 2);
    _tile_stored(3, out, 64);
    hex("bf16", out, 1024);
    tilecfg shown;
    store_config(&shown);
    printf("config kept %d\n", memcmp(&shown, &cfg, 64) == 0);

    signal(SIGUSR1, on_usr1);
    raise(SIGUSR1);
    store_config(&shown);
    _tile_stored(1, out, 64);
    printf("handler saw init %d, state restored %d\n", handler_saw_init,
           memcmp(&shown, &cfg, 64) == 0 && memcmp(out, a, 1024) == 0);
    /* The same through System V's sigset. */
    handler_saw_init = 0;
    sigset(SIGUSR2, on_usr1);
    raise(SIGUSR2);
    store_config(&shown);
    _tile_stored(1, out, 64);
    printf("sigset handler saw init %d, state restored %d\n", handler_saw_init,
           memcmp(&shown, &cfg, 64) == 0 && memcmp(out, a, 1024) == 0);

    handle(SIGSEGV);
    handle(SIGILL);
    tilecfg bad = cfg;
    bad.reserved[3] = 1;
    if (sigsetjmp(resume, 1) == 0) {
        load_config(&bad);
        printf("gp not raised\n");
    } else {
        printf("gp sig=%d code=%d trapno=%ld addr=%p\n", seen_sig, seen_code, seen_trapno,
               (void *)seen_addr);
    }
    store_config(&shown);
    printf("config after gp kept %d\n", memcmp(&shown, &cfg, 64) == 0);

    _tile_release();
    if (sigsetjmp(resume, 1) == 0) {
        _tile_zero(0);
        printf("ud not raised\n");
    } else {
        printf("ud sig=%d code=%d trapno=%ld\n", seen_sig, seen_code, seen_trapno);
    }
    /* A SIGILL that is not AMX's reaches the handler too. */
    if (sigsetjmp(resume, 1) == 0) {
        __builtin_trap();
    } else {
        printf("ud2 sig=%d code=%d trapno=%ld\n", seen_sig, seen_code, seen_trapno);
    }
    return 0;
}

static int xfd(void) {
    handle(SIGILL);
    tilecfg cfg;
    full_config(&cfg);
    load_config(&cfg);
    if (sigsetjmp(resume, 1) == 0) {
        _tile_zero(0);
        printf("xfd not raised\n");
    } else {
        printf("xfd sig=%d code=%d trapno=%ld\n", seen_sig, seen_code, seen_trapno);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "run";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(mode, "run"))
        return run();
    if (!strcmp(mode, "xfd"))
        return xfd();
    tilecfg cfg;
    full_config(&cfg);
    if (!strcmp(mode, "die-gp")) {
        cfg.palette_id = 2;
        load_config(&cfg);
    } else if (!strcmp(mode, "die-ud")) {
        _tile_zero(0);
    }
    printf("survived %s\n", mode);
    return 0;
}
