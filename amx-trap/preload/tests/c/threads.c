/* Promise 9 (amx-trap/README.md): the engine's state of a thread is reused once the thread has
 * ended, and a state that cannot be allocated is reported, never raised as #UD.
 *
 *   many <n>   n short-lived threads, one after the other, each running AMX instructions,
 *              under an address-space limit of what the process uses plus 256 MiB
 *   oom        a thread's first AMX instruction when no memory can be mapped any more
 *   oomhandler the same, the program having a SIGSEGV handler: Linux answers a thread whose AMX
 *              state it cannot allocate with force_sig(SIGSEGV), which that handler gets
 *              (SI_KERNEL, no address)
 *   oomsignal  no AMX at all: a thread's first handled signal when no memory can be mapped
 */
#include "hostile.h"
#include <pthread.h>
#include <sys/resource.h>

static void *amx_thread(void *arg) {
    uint8_t *out = arg;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tilezero0();
    tilestore0(out, 64);
    tilerelease();
    return NULL;
}

/* The address space the process uses now, in bytes. */
static unsigned long vm_size(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %lu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

static int many(long n) {
    static uint8_t out[1024];
    /* A first thread, so that the C library's thread stack and arena exist before the limit. */
    pthread_t t;
    pthread_create(&t, NULL, amx_thread, out);
    pthread_join(t, NULL);
    struct rlimit rl = {vm_size() + (256ul << 20), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &rl);
    long done = 0;
    for (long i = 0; i < n; i++) {
        memset(out, 0xAA, sizeof out);
        if (pthread_create(&t, NULL, amx_thread, out) != 0) {
            printf("pthread_create failed at %ld\n", i);
            break;
        }
        pthread_join(t, NULL);
        done += out[0] == 0 && out[1023] == 0;
    }
    printf("threads done: %ld of %ld\n", done, n);
    return 0;
}

static pthread_barrier_t started, limited;

static void *late_thread(void *arg) {
    /* Running: whatever the thread's start mapped (the C library's arena for it reserves and
     * then trims 128 MiB) is in place before the limit is read. */
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&limited);
    return amx_thread(arg);
}

static int oom(void) {
    static uint8_t out[1024];
    pthread_t t;
    pthread_barrier_init(&started, NULL, 2);
    pthread_barrier_init(&limited, NULL, 2);
    pthread_create(&t, NULL, late_thread, out);
    pthread_barrier_wait(&started);
    /* No more address space: the thread's first AMX instruction finds none for its state. */
    struct rlimit rl = {vm_size(), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &rl);
    pthread_barrier_wait(&limited);
    pthread_join(t, NULL);
    printf("the thread ran\n");
    return 0;
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    char b[96];
    int n = snprintf(b, sizeof b, "handler: signal %d code %d addr %p\n", sig, si->si_code,
                     si->si_addr);
    write(1, b, n);
    _exit(0);
}

static int oomhandler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    return oom();
}

static volatile int usr1;
static void on_usr1(int sig) { (void)sig; usr1++; }
static pthread_barrier_t signalled;

static void *quiet_thread(void *arg) {
    (void)arg;
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&limited);
    pthread_barrier_wait(&signalled);
    return NULL;
}

static int oomsignal(void) {
    signal(SIGUSR1, on_usr1);
    pthread_t t;
    pthread_barrier_init(&started, NULL, 2);
    pthread_barrier_init(&limited, NULL, 2);
    pthread_barrier_init(&signalled, NULL, 2);
    pthread_create(&t, NULL, quiet_thread, NULL);
    pthread_barrier_wait(&started);
    struct rlimit rl = {vm_size(), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &rl);
    pthread_barrier_wait(&limited);
    /* The thread waits in the barrier: the signal interrupts it there. */
    pthread_kill(t, SIGUSR1);
    usleep(100000);
    pthread_barrier_wait(&signalled);
    pthread_join(t, NULL);
    printf("signals handled: %d\n", usr1);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    /* Without AMX instructions: runs without the permission, on any CPU. */
    if (argc > 1 && !strcmp(argv[1], "oomsignal"))
        return oomsignal();
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "many") && argc > 2)
        return many(atol(argv[2]));
    if (!strcmp(mode, "oom"))
        return oom();
    if (!strcmp(mode, "oomhandler"))
        return oomhandler();
    return 2;
}
