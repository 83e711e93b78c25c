/* The next AMX generations from C: AMX-FP8, AMX-COMPLEX, AMX-MOVRS and AMX-AVX512 instructions
 * emitted as bytes (assemblers without these extensions do not know their mnemonics), run under
 * the preload with AMX_TRAP_CPU=dmr.
 *
 * Usage: next_gen [run | movrs-fault | rowmove | thread <n> | handler | refused]
 *   run          CPUID leaf 0x1E subleaf 1, then every FP8 and complex product from a zero C and
 *                both MOVRS loads, results as hex
 *   movrs-fault  TILELOADDRS whose fourth row is unmapped: the handler reports the SIGSEGV
 *   rowmove      TILEMOVROW zmm22, tmm0, ecx: the row as hex where the CPU reports AMX-AVX512,
 *                else the #UD its handler sees
 *   thread <n>   in two new threads, each on an alternate signal stack n bytes larger than the
 *                kernel's smallest (AT_MINSIGSTKSZ): TILELOADDRS and TILELOADDRST1, then
 *                TDPBF8PS from a zero C, the result as hex. In the first thread the MOVRS loads
 *                are its first tile-data instructions; in the second a TILEZERO comes first, so
 *                that the engine's first signal there carries the whole tile state.
 *   handler      TDPBF8PS inside a SIGUSR1 handler (its own configuration, from the INIT state
 *                every handler starts in), while the interrupted code holds other tiles: the
 *                handler's result as hex, then whether the interrupted tiles came back
 *   refused      in a new thread (no tile data used yet), TDPBF8PS while Linux cannot give the
 *                thread its tile state (run with AMX_TRAP_TEST_REFUSE_TILE_STATE=1): what the
 *                program's SIGSEGV handler sees, and whether it was at the instruction
 */
#include "hostile.h"

#include <cpuid.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/mman.h>

static sigjmp_buf resume;
static volatile int seen_sig, seen_code;
static volatile long seen_trapno;
static void *volatile seen_addr;
static void *volatile seen_rip;

static void on_fault(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = ctx;
    seen_sig = sig;
    seen_code = info->si_code;
    seen_addr = info->si_addr;
    seen_trapno = uc->uc_mcontext.gregs[REG_TRAPNO];
    seen_rip = (void *)uc->uc_mcontext.gregs[REG_RIP];
    siglongjmp(resume, 1);
}

static void catch_with_longjmp(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static void hex(const char *name, const uint8_t *p, int n) {
    printf("%s ", name);
    for (int i = 0; i < n; i++)
        printf("%02x", p[i]);
    printf("\n");
}

static uint8_t a[1024], b[1024], out[1024];
static tilecfg cfg;

/* C = tmm2 (zeroed first), A = tmm0, B = tmm1; C stored to `out`. */
#define PRODUCT(name, bytes)                                                                     \
    do {                                                                                         \
        __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x49, 0xd0" ::: "memory"); /* tilezero tmm2 */ \
        __asm__ volatile(".byte " bytes ::: "memory");                                           \
        /* tilestored [rdi + rsi*1], tmm2 */                                                     \
        __asm__ volatile(".byte 0xc4, 0xe2, 0x7a, 0x4b, 0x14, 0x37" ::"D"(out), "S"(64L)         \
                         : "memory");                                                            \
        hex(name, out, 1024);                                                                    \
    } while (0)

static int run(void) {
    unsigned eax = 0, ebx, ecx, edx;
    __cpuid_count(0x1E, 1, eax, ebx, ecx, edx);
    printf("cpuid1e1 %08x\n", eax);
    request_amx();
    for (int i = 0; i < 1024; i++) {
        a[i] = (uint8_t)(i * 37 + 11);
        b[i] = (uint8_t)(i * 101 + 3);
    }
    config(&cfg, 16);
    ldtilecfg(&cfg);
    tileload0(a, 64);
    tileload1(b, 64);
    PRODUCT("tdpbf8ps", "0xc4, 0xe5, 0x70, 0xfd, 0xd0");
    PRODUCT("tdpbhf8ps", "0xc4, 0xe5, 0x73, 0xfd, 0xd0");
    PRODUCT("tdphbf8ps", "0xc4, 0xe5, 0x72, 0xfd, 0xd0");
    PRODUCT("tdphf8ps", "0xc4, 0xe5, 0x71, 0xfd, 0xd0");
    PRODUCT("tcmmimfp16ps", "0xc4, 0xe2, 0x71, 0x6c, 0xd0");
    PRODUCT("tcmmrlfp16ps", "0xc4, 0xe2, 0x70, 0x6c, 0xd0");
    /* tileloaddrs tmm0, [rdi + rsi*1]; tileloaddrst1 tmm1, [rdi + rsi*1] */
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x4a, 0x04, 0x37" ::"D"(a + 5), "S"(32L) : "memory");
    __asm__ volatile(".byte 0xc4, 0xe2, 0x79, 0x4a, 0x0c, 0x37" ::"D"(b + 7), "S"(48L) : "memory");
    tilestore0(out, 64);
    hex("tileloaddrs", out, 1024);
    tilestore1(out, 64);
    hex("tileloaddrst1", out, 1024);
    tilerelease();
    return 0;
}

static int movrs_fault(void) {
    request_amx();
    uint8_t *pages = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED)
        return 2;
    munmap(pages + 4096, 4096);
    catch_with_longjmp(SIGSEGV);
    config(&cfg, 16);
    ldtilecfg(&cfg);
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

/* tilemovrow zmm22, tmm0, ecx (row 5), then zmm22 to `dst`: nothing else in an AVX-512
 * function, which runs only where the engine completes the row move. */
__attribute__((target("avx512f"), noinline)) static void movrow(uint8_t *dst) {
    __asm__ volatile(".byte 0x62, 0xe2, 0x75, 0x48, 0x4a, 0xf0\n\t"
                     "vmovdqu64 %%zmm22, (%0)" ::"r"(dst), "c"(5)
                     : "memory", "xmm22");
}

static int rowmove(void) {
    request_amx();
    for (int i = 0; i < 1024; i++)
        a[i] = (uint8_t)(i * 37 + 11);
    config(&cfg, 16);
    ldtilecfg(&cfg);
    tileload0(a, 64);
    catch_with_longjmp(SIGILL);
    if (sigsetjmp(resume, 1) == 0) {
        movrow(out);
        hex("rowmove", out, 64);
    } else {
        printf("rowmove sig=%d code=%d trapno=%ld\n", seen_sig, seen_code, seen_trapno);
    }
    return 0;
}

static uint8_t handler_out[1024];
static volatile int handler_cfg_was_init = -1;

static void on_usr1(int sig) {
    (void)sig;
    tilecfg now, c;
    sttilecfg(&now);
    int init = 1;
    for (int i = 0; i < 64; i++)
        init &= ((uint8_t *)&now)[i] == 0;
    handler_cfg_was_init = init;
    config(&c, 16);
    ldtilecfg(&c);
    tileload0(a, 64);
    tileload1(b, 64);
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x49, 0xd0\n\t" /* tilezero tmm2 */
                     ".byte 0xc4, 0xe5, 0x70, 0xfd, 0xd0" /* tdpbf8ps tmm2, tmm0, tmm1 */
                     ::: "memory");
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7a, 0x4b, 0x14, 0x37" ::"D"(handler_out), "S"(64L)
                     : "memory");
    tilerelease();
}

static int handler(void) {
    request_amx();
    for (int i = 0; i < 1024; i++) {
        a[i] = (uint8_t)(i * 37 + 11);
        b[i] = (uint8_t)(i * 101 + 3);
    }
    signal(SIGUSR1, on_usr1);
    /* The interrupted code's own tiles: 8 rows, tmm0 loaded from `b`. */
    tilecfg mine;
    config(&mine, 8);
    ldtilecfg(&mine);
    tileload0(b, 64);
    raise(SIGUSR1);
    hex("handler", handler_out, 1024);
    printf("handler-started-init %d\n", handler_cfg_was_init);
    tilecfg after;
    sttilecfg(&after);
    uint8_t back[1024];
    memset(back, 0xEE, sizeof back);
    tilestore0(back, 64);
    int same_cfg = !memcmp(&after, &mine, sizeof mine);
    int same_tile = !memcmp(back, b, 8 * 64);
    printf("interrupted-state-back %d %d\n", same_cfg, same_tile);
    tilerelease();
    return 0;
}

static size_t extra;

static void *first_use(void *arg) {
    int zero_first = arg != NULL;
    /* The engine's signals arrive on this stack (its handlers are SA_ONSTACK): the kernel's
     * frame, with the thread's tile state, fills all but `extra` bytes of it. */
    size_t size = getauxval(AT_MINSIGSTKSZ) + extra;
    stack_t ss = {.ss_sp = malloc(size), .ss_size = size, .ss_flags = 0};
    if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0) {
        printf("sigaltstack failed\n");
        return NULL;
    }
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    if (zero_first)
        tilezero0();
    /* tileloaddrs tmm0, [rdi + rsi*1]; tileloaddrst1 tmm1, [rdx + rsi*1]; tilezero tmm2;
     * tdpbf8ps tmm2, tmm0, tmm1 */
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x4a, 0x04, 0x37\n\t"
                     ".byte 0xc4, 0xe2, 0x79, 0x4a, 0x0c, 0x32\n\t"
                     ".byte 0xc4, 0xe2, 0x7b, 0x49, 0xd0\n\t"
                     ".byte 0xc4, 0xe5, 0x70, 0xfd, 0xd0" ::"D"(a), "d"(b), "S"(64L)
                     : "memory");
    uint8_t result[1024];
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7a, 0x4b, 0x14, 0x37" ::"D"(result), "S"(64L)
                     : "memory");
    tilerelease();
    hex(zero_first ? "thread-zero-first" : "thread", result, 1024);
    return NULL;
}

static int thread(size_t bytes) {
    request_amx();
    for (int i = 0; i < 1024; i++) {
        a[i] = (uint8_t)(i * 37 + 11);
        b[i] = (uint8_t)(i * 101 + 3);
    }
    extra = bytes;
    for (int zero_first = 0; zero_first < 2; zero_first++) {
        pthread_t t;
        if (pthread_create(&t, NULL, first_use, zero_first ? &extra : NULL) != 0)
            return 2;
        pthread_join(t, NULL);
    }
    return 0;
}

static void *refused_thread(void *arg) {
    (void)arg;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c); /* TILECFG is not under XFD: the thread still has no tile data */
    /* Set between sigsetjmp and the longjmp: volatile, so its value survives the jump. */
    static void *volatile at;
    if (sigsetjmp(resume, 1) == 0) {
        void *here;
        /* tdpbf8ps tmm2, tmm0, tmm1, its address in `at` first */
        __asm__ volatile("lea 1f(%%rip), %0\n\t"
                         "mov %0, %1\n\t"
                         "1: .byte 0xc4, 0xe5, 0x70, 0xfd, 0xd0"
                         : "=&r"(here), "=m"(at)::"memory");
        printf("refused completed\n");
    } else {
        printf("refused sig=%d code=%d trapno=%ld addr=%p at-instruction=%d\n", seen_sig,
               seen_code, seen_trapno, seen_addr, seen_rip == at);
    }
    tilerelease();
    return NULL;
}

static int refused(void) {
    request_amx();
    catch_with_longjmp(SIGSEGV);
    pthread_t t;
    if (pthread_create(&t, NULL, refused_thread, NULL) != 0)
        return 2;
    pthread_join(t, NULL);
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
    if (!strcmp(mode, "handler"))
        return handler();
    if (!strcmp(mode, "refused"))
        return refused();
    if (!strcmp(mode, "thread") && argc > 2)
        return thread((size_t)atol(argv[2]));
    return 2;
}
