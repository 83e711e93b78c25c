/* Promise 8 (amx-trap/README.md): the engine's patches of hot sites never reach a file or another
 * process, never run after the program changed its code, never turn into a SIGTRAP the program did
 * not ask for (or swallow one it did), and never stop the heap from growing.
 *
 *   shared       hot code in a MAP_SHARED file mapping: the file keeps its bytes
 *   rewrite      hot code rewritten in place (a displacement): the new instruction runs; on a
 *                writable page (never patched) with plain stores, on a read-only one (patched)
 *                through /proc/self/mem
 *   remap        hot code unmapped and replaced, and moved with mremap
 *   int3         a freed code page refilled with int3: SIGTRAP at the old entry
 *   sigtrap      the program's SIGTRAP handler, while threads run sites being patched: it sees
 *                only the program's own int3
 *   brk          a hot site in a non-PIE executable, then the heap grows by 256 MiB (run with
 *                address space randomization off, so that the heap starts right after it)
 *   bytes        whether the hot code's bytes read back changed (what a program can see)
 *   forks        fork, again and again, while another thread's sites are being patched; each
 *                child changes the protection of that code (which removes patches) and exits:
 *                none may hang on the patch another thread of its parent had under way
 */
#include "hostile.h"
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static tilecfg cfg;

/* tileloadd tmm0, [rdi + rsi*1 + disp32]; tilestored [rdx + rsi*1], tmm0; ret */
static const uint8_t copy_disp[] = {0xc4, 0xe2, 0x7b, 0x4b, 0x84, 0x37, 0, 0, 0, 0,
                                    0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x32, 0xc3};

typedef void (*copy_fn)(const void *, long, void *);

/* Calls `f` `n` times on known data; whether every call gave the data at `src + disp`. */
static int run(copy_fn f, int n, long disp) {
    static uint8_t src[2048], dst[1024];
    /* No period that a displacement could hide: each 256-byte block differs. */
    for (int i = 0; i < 2048; i++)
        src[i] = (uint8_t)(i * 5 + 3 + (i >> 8) * 29);
    int ok = 1;
    for (int i = 0; i < n; i++) {
        memset(dst, 0, sizeof dst);
        ldtilecfg(&cfg);
        f(src, 64, dst);
        ok &= memcmp(dst, src + disp, 1024) == 0;
    }
    return ok;
}

/* Hot code in a shared mapping of a file, mapped with `prot`. */
static int shared_with(int prot, const char *name) {
    char path[] = "/tmp/amx-trap-code-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    uint8_t page[4096];
    memset(page, 0xcc, sizeof page);
    memcpy(page, copy_disp, sizeof copy_disp);
    write(fd, page, sizeof page);
    uint8_t *code = mmap(NULL, 4096, prot, MAP_SHARED, fd, 0);
    int ok = run((copy_fn)code, 50, 0);
    uint8_t after[4096];
    pread(fd, after, sizeof after, 0);
    /* Left mapped: the next mapping gets an address, and so sites, of its own. */
    close(fd);
    int fd2 = open(path, O_RDONLY);
    uint8_t disk[4096];
    read(fd2, disk, sizeof disk);
    close(fd2);
    unlink(path);
    printf("shared file mapping %s: results %s, file unchanged %d, on disk unchanged %d\n", name,
           ok ? "ok" : "wrong", memcmp(after, page, sizeof page) == 0,
           memcmp(disk, page, sizeof page) == 0);
    return 0;
}

static int shared(void) {
    /* Read-only, where a forced write would be refused anyway, and writable (a JIT's code
     * shared with another process), where it would reach the file. */
    return shared_with(PROT_READ | PROT_EXEC, "r-x") |
           shared_with(PROT_READ | PROT_WRITE | PROT_EXEC, "rwx");
}

static uint8_t *rwx_code(void) {
    uint8_t *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
    memset(code, 0xcc, 4096);
    memcpy(code, copy_disp, sizeof copy_disp);
    return code;
}

static int rewrite(void) {
    uint8_t *code = rwx_code();
    int before = run((copy_fn)code, 50, 0);
    /* The displacement changed in place, with plain stores into the writable code. */
    int32_t disp = 512;
    memcpy((void *)(code + 6), &disp, 4);
    __builtin___clear_cache((char *)code, (char *)code + 16);
    int after = run((copy_fn)code, 50, 512);
    printf("rewritten in place: before %s, after %s\n", before ? "ok" : "wrong",
           after ? "ok" : "wrong");
    /* Hot sites on a writable page keep their bytes: a store into the first five would land
     * in a jump's displacement. */
    printf("writable code's first byte after 100 runs: %#x\n", code[0]);
    /* Code that is not writable, rewritten through /proc/self/mem (as a debugger or a
     * hot-patcher writes it), with no system call that protects or maps it: its patch is
     * there before the write, and the instruction written runs. */
    uint8_t *rx = rwx_code();
    mprotect(rx, 4096, PROT_READ | PROT_EXEC);
    int rx_before = run((copy_fn)rx, 50, 0);
    printf("read-only code's first byte after 50 runs: %#x\n", rx[0]);
    int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    int written = fd >= 0 && pwrite(fd, &disp, 4, (off_t)(uintptr_t)(rx + 6)) == 4;
    if (fd >= 0)
        close(fd);
    int rx_after = run((copy_fn)rx, 50, 512);
    printf("rewritten through /proc/self/mem: written %d, before %s, after %s\n", written,
           rx_before ? "ok" : "wrong", rx_after ? "ok" : "wrong");
    return 0;
}

static int remap(void) {
    uint8_t *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(code, 0xcc, 4096);
    memcpy(code, copy_disp, sizeof copy_disp);
    mprotect(code, 4096, PROT_READ | PROT_EXEC);
    int first = run((copy_fn)code, 50, 0);
    /* Unmapped, and a new mapping at the same address with another displacement. */
    munmap(code, 4096);
    uint8_t *again = mmap(code, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                          -1, 0);
    memset(again, 0xcc, 4096);
    memcpy(again, copy_disp, sizeof copy_disp);
    int32_t disp = 256;
    memcpy(again + 6, &disp, 4);
    mprotect(again, 4096, PROT_READ | PROT_EXEC);
    int second = run((copy_fn)again, 50, 256);
    /* Moved elsewhere by mremap. */
    uint8_t *moved = mremap(again, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED,
                            (uint8_t *)again + (64 << 20));
    int third = moved != MAP_FAILED && run((copy_fn)moved, 50, 256);
    /* Made writable, changed, made executable again. */
    mprotect(moved, 4096, PROT_READ | PROT_WRITE);
    disp = 64;
    memcpy(moved + 6, &disp, 4);
    mprotect(moved, 4096, PROT_READ | PROT_EXEC);
    int fourth = run((copy_fn)moved, 50, 64);
    printf("remapped: %d %d, moved %d, mprotected %d\n", first, second, third, fourth);
    return 0;
}

static sigjmp_buf out;
static volatile uintptr_t trap_at;
static volatile int traps;

static void on_trap(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)info;
    traps++;
    trap_at = (uintptr_t)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP] - 1;
    siglongjmp(out, 1);
}

static int int3(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGTRAP, &sa, NULL);
    uint8_t *code = rwx_code();
    run((copy_fn)code, 50, 0);
    /* Freed: filled with int3, as JITs fill freed code. */
    memset(code, 0xcc, 4096);
    __builtin___clear_cache((char *)code, (char *)code + 4096);
    if (sigsetjmp(out, 1) == 0) {
        run((copy_fn)code, 1, 0);
        printf("int3 page: no SIGTRAP\n");
    } else {
        printf("int3 page: SIGTRAP at the entry %d\n", trap_at == (uintptr_t)code);
    }
    return 0;
}

static volatile int go;
static uint8_t *routines;

static void *hammer(void *arg) {
    long t = (long)arg;
    uint8_t src[2048], dst[1024];
    memset(src, (int)t, sizeof src);
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    while (!go)
        ;
    for (int r = 0; r < 100; r++)
        for (int i = 0; i < 8; i++)
            ((copy_fn)(routines + 64 * r))(src, 64, dst);
    return NULL;
}

static void on_program_trap(int sig) {
    (void)sig;
    traps++;
}

static int sigtrap(void) {
    signal(SIGTRAP, on_program_trap);
    routines = mmap(NULL, 64 * 100, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int r = 0; r < 100; r++)
        memcpy(routines + 64 * r, copy_disp, sizeof copy_disp);
    mprotect(routines, 64 * 100, PROT_READ | PROT_EXEC);
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, hammer, (void *)i);
    go = 1;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    int engine = traps;
    __asm__ volatile("int3");
    printf("program SIGTRAPs: %d during the patching, %d of its own int3\n", engine, traps - engine);
    return 0;
}

static __attribute__((noinline)) void hot_site(const void *p, void *q) {
    ldtilecfg(&cfg);
    tileload0(p, 64);
    tilestore0(q, 64);
}

static int brk_test(char **argv) {
    if (!(personality(0xffffffff) & ADDR_NO_RANDOMIZE)) {
        personality(ADDR_NO_RANDOMIZE);
        execv("/proc/self/exe", argv);
    }
    static uint8_t a[1024], b[1024];
    for (int i = 0; i < 20; i++)
        hot_site(a, b);
    void *start = sbrk(0);
    int grown = 0;
    for (int i = 0; i < 256; i++)
        if (sbrk(1 << 20) != (void *)-1)
            grown++;
    printf("heap grew by %d MiB of 256 (from %p)\n", grown, start);
    return 0;
}

static int bytes(void) {
    uint8_t *code = rwx_code();
    run((copy_fn)code, 50, 0);
    printf("code bytes read back unchanged: %d\n", memcmp(code, copy_disp, sizeof copy_disp) == 0);
    return 0;
}

#define FORK_SITES 400
static uint8_t *fork_code;
static volatile int patcher_done;

static void *patcher(void *arg) {
    (void)arg;
    static uint8_t src[2048], dst[1024];
    ldtilecfg(&cfg);
    for (int r = 0; r < FORK_SITES; r++)
        for (int i = 0; i < 3; i++)
            ((copy_fn)(fork_code + 64 * r))(src, 64, dst);
    patcher_done = 1;
    return NULL;
}

static int forks(void) {
    size_t size = 64 * FORK_SITES;
    fork_code = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int r = 0; r < FORK_SITES; r++)
        memcpy(fork_code + 64 * r, copy_disp, sizeof copy_disp);
    mprotect(fork_code, size, PROT_READ | PROT_EXEC);
    pthread_t t;
    pthread_create(&t, NULL, patcher, NULL);
    int made = 0, hung = 0;
    while (!patcher_done && made < 300 && !hung) {
        pid_t child = fork();
        if (child == 0) {
            mprotect(fork_code, size, PROT_READ | PROT_WRITE);
            _exit(0);
        }
        made++;
        int status, waited = 0;
        while (waitpid(child, &status, WNOHANG) == 0) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
            if (++waited > 2000) {
                hung++;
                kill(child, SIGKILL);
                waitpid(child, &status, 0);
                break;
            }
        }
    }
    pthread_join(t, NULL);
    printf("forks while patching: %s, children hung %d\n", made > 0 ? "made" : "none", hung);
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
    if (!strcmp(mode, "shared"))
        return shared();
    if (!strcmp(mode, "rewrite"))
        return rewrite();
    if (!strcmp(mode, "forks"))
        return forks();
    if (!strcmp(mode, "remap"))
        return remap();
    if (!strcmp(mode, "int3"))
        return int3();
    if (!strcmp(mode, "sigtrap"))
        return sigtrap();
    if (!strcmp(mode, "brk"))
        return brk_test(argv);
    if (!strcmp(mode, "bytes"))
        return bytes();
    return 2;
}
