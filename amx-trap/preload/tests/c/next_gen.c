/* The next AMX generations from C: AMX-FP8, AMX-COMPLEX, AMX-MOVRS and AMX-AVX512 instructions
 * emitted as bytes (assemblers without these extensions do not know their mnemonics), run under
 * the preload with AMX_TRAP_CPU=dmr.
 *
 * Usage: next_gen [run | movrs-fault | rowmove]
 *   run          CPUID leaf 0x1E subleaf 1, then every FP8 and complex product from a zero C and
 *                both MOVRS loads, results as hex
 *   movrs-fault  TILELOADDRS whose fourth row is unmapped: the handler reports the SIGSEGV
 *   rowmove      TILEMOVROW zmm22, tmm3, ecx: the row as hex where the CPU reports AMX-AVX512,
 *                else the #UD its handler sees
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <immintrin.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

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
static void *volatile seen_addr;

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

static void configure(void) {
    static tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(&cfg);
}

static void hex(const char *name, const uint8_t *p, int n) {
    printf("%s ", name);
    for (int i = 0; i < n; i++)
        printf("%02x", p[i]);
    printf("\n");
}

static uint8_t a[1024], b[1024], out[1024];

/* C = tmm0, A = tmm1, B = tmm2. */
#define PRODUCT(name, bytes)                                                                     \
    do {                                                                                         \
        _tile_zero(0);                                                                           \
        __asm__ volatile(".byte " bytes ::: "memory");                                           \
        _tile_stored(0, out, 64);                                                                \
        hex(name, out, 1024);                                                                    \
    } while (0)

static int run(void) {
    unsigned eax = 0, ebx, ecx, edx;
    __cpuid_count(0x1E, 1, eax, ebx, ecx, edx);
    printf("cpuid1e1 %08x\n", eax);
    syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    for (int i = 0; i < 1024; i++) {
        a[i] = (uint8_t)(i * 37 + 11);
        b[i] = (uint8_t)(i * 101 + 3);
    }
    configure();
    _tile_loadd(1, a, 64);
    _tile_loadd(2, b, 64);
    PRODUCT("tdpbf8ps", "0xc4, 0xe5, 0x68, 0xfd, 0xc1");
    PRODUCT("tdpbhf8ps", "0xc4, 0xe5, 0x6b, 0xfd, 0xc1");
    PRODUCT("tdphbf8ps", "0xc4, 0xe5, 0x6a, 0xfd, 0xc1");
    PRODUCT("tdphf8ps", "0xc4, 0xe5, 0x69, 0xfd, 0xc1");
    PRODUCT("tcmmimfp16ps", "0xc4, 0xe2, 0x69, 0x6c, 0xc1");
    PRODUCT("tcmmrlfp16ps", "0xc4, 0xe2, 0x68, 0x6c, 0xc1");
    /* tileloaddrs tmm3, [rdi + rsi*1]; tileloaddrst1 tmm4, [rdi + rsi*1] */
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x4a, 0x1c, 0x37" ::"D"(a + 5), "S"(32L) : "memory");
    __asm__ volatile(".byte 0xc4, 0xe2, 0x79, 0x4a, 0x24, 0x37" ::"D"(b + 7), "S"(48L) : "memory");
    _tile_stored(3, out, 64);
    hex("tileloaddrs", out, 1024);
    _tile_stored(4, out, 64);
    hex("tileloaddrst1", out, 1024);
    _tile_release();
    return 0;
}

static int movrs_fault(void) {
    syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    uint8_t *pages = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED)
        return 2;
    munmap(pages + 4096, 4096);
    handle(SIGSEGV);
    configure();
    if (sigsetjmp(resume, 1) == 0) {
        /* Rows 0..2 at the end of the first page, row 3 at the start of the unmapped one. */
        __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x4a, 0x04, 0x37" ::"D"(pages + 4096 - 3 * 128),
                         "S"(128L)
                         : "memory");
        printf("fault not raised\n");
    } else {
        /* (The handler ran in the INIT tile state and left with siglongjmp: the state is INIT
         * now, so start_row cannot be read back here.) */
        printf("fault sig=%d code=%d trapno=%ld offset=%ld\n", seen_sig, seen_code, seen_trapno,
               (long)((uint8_t *)seen_addr - pages));
    }
    return 0;
}

/* tilemovrow zmm22, tmm3, ecx (row 5), then zmm22 to `dst`: nothing else in an AVX-512
 * function, which runs only where the engine completes the row move. */
__attribute__((target("avx512f"), noinline)) static void movrow(uint8_t *dst) {
    __asm__ volatile(".byte 0x62, 0xe2, 0x75, 0x48, 0x4a, 0xf3\n\t"
                     "vmovdqu64 %%zmm22, (%0)" ::"r"(dst), "c"(5)
                     : "memory", "xmm22");
}

static int rowmove(void) {
    syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    for (int i = 0; i < 1024; i++)
        a[i] = (uint8_t)(i * 37 + 11);
    configure();
    _tile_loadd(3, a, 64);
    handle(SIGILL);
    if (sigsetjmp(resume, 1) == 0) {
        movrow(out);
        hex("rowmove", out, 64);
    } else {
        printf("rowmove sig=%d code=%d trapno=%ld\n", seen_sig, seen_code, seen_trapno);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "run";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(mode, "run"))
        return run();
    if (!strcmp(mode, "movrs-fault"))
        return movrs_fault();
    if (!strcmp(mode, "rowmove"))
        return rowmove();
    return 2;
}
