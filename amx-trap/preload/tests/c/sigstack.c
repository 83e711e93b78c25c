/* Alternate signal stack sizes as Linux on an AMX CPU reports and enforces them.
 *
 *   sizes     the smallest signal stack as the program can ask for it: getauxval
 *             (AT_MINSIGSTKSZ), sysconf(_SC_MINSIGSTKSZ), sysconf(_SC_SIGSTKSZ), and the same
 *             through the C library's other names, __getauxval and __sysconf
 *   own       the permission request with the caller's own 8 KiB alternate stack (ENOSPC),
 *             without it (granted); then, holding the permission, sigaltstack with stacks of
 *             every size class: 1 KiB under the smallest (ENOMEM); 112 and 111 bytes under
 *             it (ENOMEM and taken, as on a kernel built with 32-bit emulation; 111 bytes
 *             under is ENOMEM on one without); the smallest; the same stack again; a smaller
 *             one (ENOMEM, the old one kept), through syscall(2) too; SS_DISABLE; and from a
 *             handler running on the stack (EPERM before ENOMEM)
 *   threads   the request while another thread has an 8 KiB stack (ENOSPC), after it disabled
 *             it (granted); a thread that ended with a small stack does not count
 *   fits [n]  holding the permission, a handler on an alternate stack of the smallest size
 *             plus n bytes (n may be negative), interrupting code with a tile configuration
 *             loaded: it runs on that stack and the tiles are intact after it
 */
#include "hostile.h"
#include <pthread.h>
#include <sys/auxv.h>

static void say(const char *what, int rc) {
    if (rc == 0)
        printf("%s: 0\n", what);
    else
        printf("%s: -1 %s\n", what, strerror(errno));
}

static int set_stack(size_t size) {
    stack_t ss = {.ss_sp = malloc(size), .ss_size = size, .ss_flags = 0};
    return sigaltstack(&ss, NULL);
}

static int off(void) {
    stack_t ss = {.ss_flags = SS_DISABLE};
    return sigaltstack(&ss, NULL);
}

static size_t now_size(void) {
    stack_t ss;
    sigaltstack(NULL, &ss);
    return (ss.ss_flags & SS_DISABLE) ? 0 : ss.ss_size;
}

/* The C library's other names of getauxval and sysconf, which libraries call. */
extern unsigned long __getauxval(unsigned long);
extern long __sysconf(int);

static int sizes(void) {
    printf("auxv: %lu\n", getauxval(AT_MINSIGSTKSZ));
    printf("minsigstksz: %ld\n", sysconf(_SC_MINSIGSTKSZ));
    printf("sigstksz: %ld\n", sysconf(_SC_SIGSTKSZ));
    printf("other names agree: %d\n",
           __getauxval(AT_MINSIGSTKSZ) == getauxval(AT_MINSIGSTKSZ) &&
               __sysconf(_SC_MINSIGSTKSZ) == sysconf(_SC_MINSIGSTKSZ) &&
               __sysconf(_SC_SIGSTKSZ) == sysconf(_SC_SIGSTKSZ));
    return 0;
}

static volatile int handler_rc = -2, handler_errno;

static void change_in_handler(int sig) {
    (void)sig;
    stack_t ss = {.ss_sp = malloc(4096), .ss_size = 4096, .ss_flags = 0};
    handler_rc = sigaltstack(&ss, NULL);
    handler_errno = errno;
}

static int own(void) {
    size_t min = getauxval(AT_MINSIGSTKSZ);
    say("8 KiB stack before the permission", set_stack(8192));
    say("request with it", (int)request_amx());
    say("disable", off());
    say("request without it", (int)request_amx());
    say("1 KiB under the smallest", set_stack(min - 1024));
    say("112 bytes under", set_stack(min - 112));
    say("111 bytes under", set_stack(min - 111));
    say("the smallest", set_stack(min));
    stack_t same;
    sigaltstack(NULL, &same);
    say("the same again", sigaltstack(&same, NULL));
    say("8 KiB", set_stack(8192));
    printf("kept: %s\n", now_size() == min ? "yes" : "no");
    stack_t small = {.ss_sp = malloc(8192), .ss_size = 8192, .ss_flags = 0};
    say("8 KiB through syscall", (int)syscall(SYS_sigaltstack, &small, NULL));
    say("under MINSIGSTKSZ", set_stack(1024));
    say("disable again", off());
    say("a large one", set_stack(min + 65536));
    struct sigaction sa = {.sa_handler = change_in_handler, .sa_flags = SA_ONSTACK};
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    errno = handler_errno;
    say("4 KiB from a handler on the stack", handler_rc);
    return 0;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int stage;

static void wait_stage(int s) {
    pthread_mutex_lock(&lock);
    while (stage < s)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
}

static void set_stage(int s) {
    pthread_mutex_lock(&lock);
    stage = s;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void *holder(void *arg) {
    (void)arg;
    set_stack(8192);
    set_stage(1);
    wait_stage(2);
    off();
    set_stage(3);
    wait_stage(4);
    return NULL;
}

static void *ender(void *arg) {
    (void)arg;
    set_stack(8192);
    return NULL;
}

static int threads(void) {
    pthread_t t, e;
    pthread_create(&e, NULL, ender, NULL);
    pthread_join(e, NULL);
    pthread_create(&t, NULL, holder, NULL);
    wait_stage(1);
    say("request while a thread has 8 KiB", (int)request_amx());
    set_stage(2);
    wait_stage(3);
    say("request after it disabled it", (int)request_amx());
    set_stage(4);
    pthread_join(t, NULL);
    return 0;
}

static volatile uintptr_t handler_sp;

static void note_sp(int sig) {
    (void)sig;
    volatile char here;
    handler_sp = (uintptr_t)&here;
}

static int fits(long delta) {
    if (request_amx() != 0) {
        printf("no permission: %s\n", strerror(errno));
        return 1;
    }
    size_t size = getauxval(AT_MINSIGSTKSZ) + delta;
    char *base = malloc(size);
    stack_t ss = {.ss_sp = base, .ss_size = size, .ss_flags = 0};
    say("the stack", sigaltstack(&ss, NULL));
    struct sigaction sa = {.sa_handler = note_sp, .sa_flags = SA_ONSTACK};
    sigaction(SIGUSR1, &sa, NULL);
    static uint8_t a[1024], out[1024];
    pattern(a, 7);
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tileload0(a, 64);
    raise(SIGUSR1);
    tilestore0(out, 64);
    tilerelease();
    int on = handler_sp > (uintptr_t)base && handler_sp < (uintptr_t)base + size;
    printf("handler on the stack: %s\n", on ? "yes" : "no");
    printf("tiles kept: %s\n", memcmp(a, out, sizeof a) == 0 ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "sizes";
    if (!strcmp(mode, "sizes"))
        return sizes();
    if (!strcmp(mode, "own"))
        return own();
    if (!strcmp(mode, "threads"))
        return threads();
    if (!strcmp(mode, "fits"))
        return fits(argc > 2 ? atol(argv[2]) : 0);
    return 2;
}
