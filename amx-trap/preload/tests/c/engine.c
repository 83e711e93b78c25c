/* Promise 5 (amx-trap/README.md): no engine path changes errno, allocates or waits for a lock a
 * signal can interrupt.
 *
 *   errno      errno kept across trapped instructions, patched sites, a fault at a patched
 *              site repaired by the program's handler, handlers the engine enters
 *   malloc     the C library's allocator, replaced by the program's, is never called from
 *              inside an AMX instruction (trapped, patched, faulting)
 *   interrupt  a timer's handler running AMX instructions interrupts malloc and free
 */
#include "hostile.h"
#include <sys/mman.h>
#include <sys/time.h>

static volatile int in_amx;
static volatile long allocations;

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

/* The program's allocator: the C library's, counting calls made inside an instruction. */
void *malloc(size_t n) {
    allocations += in_amx;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m) {
    allocations += in_amx;
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
    allocations += in_amx;
    return __libc_realloc(p, n);
}
void free(void *p) {
    allocations += in_amx;
    __libc_free(p);
}
void *memalign(size_t a, size_t n) {
    allocations += in_amx;
    return __libc_memalign(a, n);
}
int posix_memalign(void **p, size_t a, size_t n) {
    allocations += in_amx;
    *p = __libc_memalign(a, n);
    return *p ? 0 : ENOMEM;
}
void *aligned_alloc(size_t a, size_t n) {
    allocations += in_amx;
    return __libc_memalign(a, n);
}

static uint8_t *page;

static void unprotect(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    in_amx = 0;
    mprotect((void *)((uintptr_t)info->si_addr & ~4095ul), 4096, PROT_READ | PROT_WRITE);
    in_amx = 1;
}

/* One load site, hot after a few calls: rows at stride 512 from `p` (page + 4096 is row 8). */
static __attribute__((noinline)) void load_site(const void *p) { tileload0(p, 512); }

static int check_errno(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = unprotect;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    tilecfg c;
    config(&c, 16);
    errno = 1234;
    ldtilecfg(&c);
    printf("trapped: errno %d\n", errno);
    errno = 1234;
    for (int i = 0; i < 10; i++)
        load_site(page);
    printf("hot site: errno %d\n", errno);
    /* The first row faults: nothing of the operand is readable when the handler runs. */
    mprotect(page, 4096, PROT_NONE);
    errno = 1234;
    load_site(page);
    printf("fault repaired at the hot site: errno %d\n", errno);
    mprotect(page, 4096, PROT_NONE);
    errno = 1234;
    tileload1(page, 512);
    printf("fault repaired at a cold site: errno %d\n", errno);
    return 0;
}

static void leave(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)info;
    (void)ctx;
    in_amx = 0;
    mprotect(page + 4096, 4096, PROT_READ | PROT_WRITE);
}

static int check_malloc(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = leave;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    static uint8_t out[1024];
    tilecfg c;
    config(&c, 16);
    /* Every kind of instruction, trapped and then patched, then a fault on a patched site. */
    for (int i = 0; i < 20; i++) {
        in_amx = 1;
        ldtilecfg(&c);
        load_site(page);
        tileload1(page, 64);
        tdpbssd201();
        tilestore0(out, 64);
        tilezero0();
        in_amx = 0;
    }
    mprotect(page + 4096, 4096, PROT_NONE);
    in_amx = 1;
    load_site(page);
    in_amx = 0;
    printf("allocations inside instructions: %ld\n", allocations);
    return 0;
}

static volatile long ticks;
static uint8_t tick_out[1024];

static void tick(int sig) {
    (void)sig;
    tilecfg c;
    config(&c, 1);
    ldtilecfg(&c);
    tilezero0();
    tilestore0(tick_out, 64);
    tilerelease();
    ticks++;
}

static int interrupt(void) {
    signal(SIGALRM, tick);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    void *keep[64] = {0};
    for (long i = 0; i < 200000 || ticks < 20; i++) {
        int k = (int)(i % 64);
        free(keep[k]);
        keep[k] = malloc((size_t)(i % 4096) + 1);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("allocator and timer: done, %s\n", ticks >= 20 ? "ticked" : "no ticks");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    const char *mode = argc > 1 ? argv[1] : "errno";
    if (!strcmp(mode, "errno"))
        return check_errno();
    if (!strcmp(mode, "malloc"))
        return check_malloc();
    if (!strcmp(mode, "interrupt"))
        return interrupt();
    return 2;
}
