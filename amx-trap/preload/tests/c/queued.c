/* Promise 3 (amx-trap/README.md), for signals that arrive while a patched site runs its
 * instruction: every queued instance is delivered once, in the order sent, with its own
 * siginfo, as Linux delivers them between the silicon's instructions.
 *
 * <work> is `amx` (a loop of one patched TDPBSSD, where most signals arrive in the middle of
 * the emulated instruction) or `plain` (the same loop without the product: what the kernel
 * does, for the output to compare with).
 *
 *   rt <work> <n>       another thread queues SIGRTMIN n times to the looping thread
 *                       (pthread_sigqueue, si_value 0..n-1), in bursts of 16 sent as fast as
 *                       it can: every value, in order, SI_QUEUE, this process's pid
 *   rt-process <work> <n>  the same, queued to the process (sigqueue); only the looping thread
 *                       leaves SIGRTMIN unblocked
 *   kill <work> <n>     a child process sends SIGUSR1 with kill() n times, each once the one
 *                       before was handled, then SIGUSR2 with sigqueue(): si_code, si_pid and
 *                       si_uid as the kernel gives them
 *   threads <work> <t> <n>  t threads run the loop; the main thread, blocking the signals,
 *                       queues SIGRTMIN to the process n times and sends SIGUSR1 with kill()
 *                       n times, each once the one before was handled: each delivered once
 *
 * The `hold` modes make the instruction last as long as they like: a patched TILELOADD (or, for
 * `plain`, a load) reads a page that userfaultfd keeps missing until another thread, which
 * took the fault's event, has sent its signals to the loading thread and lets it go on. The
 * first signal comes in the middle of the instruction, the others after it. With `amx` the
 * handler runs AMX instructions of its own under another configuration: the load, resumed,
 * must still complete with the page's bytes.
 *
 *   hold-rt <work> <n>     SIGRTMIN n times (pthread_sigqueue, values 0..n-1): every value, in
 *                          order
 *   hold-usr1 <work>       SIGUSR1 twice, 20 ms apart (values 0, 1): the second arrives after
 *                          the first was taken, so both are delivered, each with its value
 *   hold-limit <work> <n>  RLIMIT_SIGPENDING n signals above what is queued now; SIGRTMIN
 *                          once, then n times more once the first was taken: all n + 1
 *                          delivered, in order, none refused
 *   hold-mixed <work> <n>  SIGRTMIN (value 0), then SIGUSR1 (value 1000), then SIGRTMIN n - 1
 *                          times more: each once, the SIGRTMIN values in order
 *
 * Each hold mode with `-store` appended (`hold-rt-store`, ...) waits in a TILESTORED (or, for
 * `plain`, a store) to the missing page instead: the store, resumed, must leave the tile's
 * bytes in the page.
 */
#include "hostile.h"
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

enum { MAX = 4096, BURST = 16 };

static volatile int stop_loop, amx_work;
static volatile long loop_dots;
static volatile int values[MAX], codes[MAX], pids[MAX];
static volatile int received, disorder_seen;

/* The loop: TDPBSSD tmm2, tmm0, tmm1 (or nothing), counting, until stop_loop. */
__attribute__((noinline)) static void loop(void) {
    if (amx_work) {
        __asm__ volatile("1:\n"
                         ".byte 0xc4, 0xe2, 0x73, 0x5e, 0xd0\n"
                         "lock incq %0\n"
                         "cmpl $0, %1\n"
                         "je 1b\n"
                         : "+m"(loop_dots)
                         : "m"(stop_loop)
                         : "memory", "cc");
    } else {
        __asm__ volatile("1:\n"
                         "pause\n"
                         "lock incq %0\n"
                         "cmpl $0, %1\n"
                         "je 1b\n"
                         : "+m"(loop_dots)
                         : "m"(stop_loop)
                         : "memory", "cc");
    }
}

/* The tiles the loop's product reads, configured on the calling thread. */
static void prepare_tiles(void) {
    static uint8_t a[1024], b[1024];
    pattern(a, 5);
    pattern(b, 6);
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tileload0(a, 64);
    tileload1(b, 64);
    tilezero0();
}

/* Set by the hold modes with `amx`: the handler runs AMX instructions of its own (another
 * configuration, a load and a store of tile 0) while the interrupted load waits, as a
 * handler may on the silicon, whose signal frame gives the load its state back. */
static volatile int handler_amx;

static void on_queued(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    if (handler_amx) {
        static uint8_t in[1024], out[1024];
        tilecfg c;
        config(&c, 4);
        ldtilecfg(&c);
        tileload0(in, 64);
        tilestore0(out, 64);
    }
    int i = received;
    if (i < MAX) {
        values[i] = info->si_value.sival_int;
        codes[i] = info->si_code;
        pids[i] = info->si_pid;
    }
    received = i + 1;
}

static void handle(int sig, void (*fn)(int, siginfo_t *, void *)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fn;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static void block(int sig, int how) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    pthread_sigmask(how, &s, NULL);
}

/* Waits up to 5 s for `*v` to reach `want`. */
static int wait_for(volatile int *v, int want) {
    for (int i = 0; i < 5000 && *v < want; i++)
        usleep(1000);
    return *v >= want;
}

/* Waits until the loop has gone round `n` times more. */
static void let_loop(long n) {
    long from = loop_dots;
    for (int i = 0; i < 5000 && loop_dots - from < n; i++)
        usleep(1000);
}

static pthread_t looper;
static int n_signals, to_process;

/* Queues n_signals SIGRTMIN with increasing values, retrying while the queue is full. */
static void *sender(void *arg) {
    (void)arg;
    block(SIGRTMIN, SIG_BLOCK);
    let_loop(100);
    /* In bursts, each once the one before was handled: the first of each is likely to come in
     * the middle of an instruction, with the rest of the burst queued behind it. */
    for (int i = 0; i < n_signals; i++) {
        if (i % BURST == 0) {
            wait_for(&received, i);
            let_loop(10);
        }
        union sigval v = {.sival_int = i};
        int rc;
        while ((rc = to_process ? (sigqueue(getpid(), SIGRTMIN, v) ? errno : 0)
                                : pthread_sigqueue(looper, SIGRTMIN, v)) == EAGAIN)
            sched_yield();
        if (rc != 0) {
            printf("queueing failed: %d\n", rc);
            break;
        }
    }
    wait_for(&received, n_signals);
    stop_loop = 1;
    return NULL;
}

/* What arrived, in the order it arrived. */
static void report_queue(int n) {
    int missing = 0, dup = 0, out_of_order = 0, first_bad = -1, wrong_code = 0, wrong_pid = 0;
    static unsigned char seen[MAX];
    memset(seen, 0, sizeof seen);
    int count = received < MAX ? received : MAX;
    for (int i = 0; i < count; i++) {
        int v = values[i];
        if (v >= 0 && v < MAX) {
            if (seen[v])
                dup++;
            seen[v] = 1;
        }
        if (v != i) {
            out_of_order++;
            if (first_bad < 0)
                first_bad = i;
        }
        if (codes[i] != SI_QUEUE)
            wrong_code++;
        if (pids[i] != getpid())
            wrong_pid++;
    }
    for (int v = 0; v < n; v++)
        missing += !seen[v];
    printf("received: %d of %d\n", received, n);
    printf("missing %d duplicated %d\n", missing, dup);
    printf("out of order: %d", out_of_order);
    if (first_bad >= 0)
        printf(" (first at %d: value %d)", first_bad, values[first_bad]);
    printf("\n");
    printf("si_code not SI_QUEUE: %d, si_pid not ours: %d\n", wrong_code, wrong_pid);
    fprintf(stderr, "first values:");
    for (int i = 0; i < count && i < 12; i++)
        fprintf(stderr, " %d", values[i]);
    fprintf(stderr, "\n");
}

static int queue(int n, int process) {
    n_signals = n < MAX ? n : MAX;
    to_process = process;
    handle(SIGRTMIN, on_queued);
    looper = pthread_self();
    pthread_t t;
    pthread_create(&t, NULL, sender, NULL);
    loop();
    pthread_join(t, NULL);
    report_queue(n_signals);
    printf("loop ran: %s\n", loop_dots > 100 ? "yes" : "no");
    return 0;
}

/* kill: what a handler learns about a sender in another process. */
static volatile int *shared_count;
static volatile int usr1_code = 99, usr1_pid, usr1_uid, usr1_bad;
static volatile int usr2_code = 99, usr2_pid, usr2_value;

static void on_usr1(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    if (info->si_code != usr1_code && usr1_code != 99)
        usr1_bad++;
    usr1_code = info->si_code;
    usr1_pid = info->si_pid;
    usr1_uid = (int)info->si_uid;
    __atomic_add_fetch(shared_count, 1, __ATOMIC_SEQ_CST);
}

static void on_usr2(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    usr2_code = info->si_code;
    usr2_pid = info->si_pid;
    usr2_value = info->si_value.sival_int;
    stop_loop = 1;
}

static int kill_from_child(int n) {
    shared_count = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared_count == MAP_FAILED)
        return 1;
    handle(SIGUSR1, on_usr1);
    handle(SIGUSR2, on_usr2);
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        /* Each SIGUSR1 once the one before was handled: no two pending at once. */
        usleep(20000);
        for (int i = 0; i < n; i++) {
            kill(parent, SIGUSR1);
            for (int t = 0; t < 5000000 && *shared_count <= i; t++)
                sched_yield();
        }
        union sigval v = {.sival_int = 4321};
        sigqueue(parent, SIGUSR2, v);
        _exit(0);
    }
    loop();
    int status;
    waitpid(child, &status, 0);
    printf("usr1 handled: %d of %d\n", *shared_count, n);
    printf("usr1 si_code %d (changed %d times), from the child %d, uid ours %d\n", usr1_code,
           usr1_bad, usr1_pid == child, usr1_uid == (int)getuid());
    printf("usr2 si_code %d, from the child %d, value %d\n", usr2_code, usr2_pid == child,
           usr2_value);
    return 0;
}

/* threads: process-directed signals while several threads loop. */
static volatile int rt_count, usr1_count;
static volatile unsigned char rt_seen[MAX];
static volatile int rt_dup;

static void on_rt_any(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    int v = info->si_value.sival_int;
    if (v >= 0 && v < MAX && __atomic_exchange_n(&rt_seen[v], 1, __ATOMIC_SEQ_CST))
        __atomic_add_fetch(&rt_dup, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&rt_count, 1, __ATOMIC_SEQ_CST);
}

static void on_usr1_any(int sig) {
    (void)sig;
    __atomic_add_fetch(&usr1_count, 1, __ATOMIC_SEQ_CST);
}

static void *loop_thread(void *arg) {
    (void)arg;
    if (amx_work)
        prepare_tiles();
    loop();
    return NULL;
}

static int threads(int nthreads, int n) {
    if (n > MAX)
        n = MAX;
    handle(SIGRTMIN, on_rt_any);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1_any;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    pthread_t t[16];
    if (nthreads > 16)
        nthreads = 16;
    for (int i = 0; i < nthreads; i++)
        pthread_create(&t[i], NULL, loop_thread, NULL);
    block(SIGRTMIN, SIG_BLOCK);
    block(SIGUSR1, SIG_BLOCK);
    let_loop(100 * nthreads);
    for (int i = 0; i < n; i++) {
        union sigval v = {.sival_int = i};
        while (sigqueue(getpid(), SIGRTMIN, v) != 0 && errno == EAGAIN)
            sched_yield();
    }
    wait_for(&rt_count, n);
    for (int i = 0; i < n; i++) {
        kill(getpid(), SIGUSR1);
        wait_for(&usr1_count, i + 1);
    }
    usleep(20000);
    stop_loop = 1;
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    int missing = 0;
    for (int v = 0; v < n; v++)
        missing += !rt_seen[v];
    printf("rt delivered: %d of %d, missing %d, duplicated %d\n", rt_count, n, missing, rt_dup);
    printf("usr1 delivered: %d of %d\n", usr1_count, n);
    return 0;
}

/* hold: one load site (or store site), its instruction blocked on a missing page as long as
 * the test wants. */
extern const unsigned char hold_site[], hold_store_site[];
static int hold_store;
static uint8_t *hold_page, hold_source[4096] __attribute__((aligned(4096)));
static int hold_uffd, hold_n, hold_eagain = -1;
static volatile int hold_during;
static const char *hold_mode;

__attribute__((noinline)) static void load_site(const void *p) {
    if (amx_work)
        __asm__ volatile(".globl hold_site\n"
                         "hold_site:\n"
                         ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37\n" ::"D"(p),
                         "S"(64L)
                         : "memory");
    else
        __asm__ volatile(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" /* nop, where the product was */
                         "movb (%%rdi), %%al\n" ::"D"(p)
                         : "rax", "memory");
}

__attribute__((noinline)) static void store_site(void *p) {
    if (amx_work)
        __asm__ volatile(".globl hold_store_site\n"
                         "hold_store_site:\n"
                         ".byte 0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x37\n" ::"D"(p),
                         "S"(64L)
                         : "memory");
    else
        __asm__ volatile(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" /* nop, where the store was */
                         "movb $1, (%%rdi)\n" ::"D"(p)
                         : "memory");
}

static int queue_to_looper(int sig, int value) {
    union sigval v = {.sival_int = value};
    return pthread_sigqueue(looper, sig, v);
}

/* The signals of each hold mode, sent while the looping thread waits for the page. */
static void hold_signals(void) {
    if (!strcmp(hold_mode, "hold-usr1")) {
        queue_to_looper(SIGUSR1, 0);
        usleep(20000);
        queue_to_looper(SIGUSR1, 1);
    } else if (!strcmp(hold_mode, "hold-mixed")) {
        queue_to_looper(SIGRTMIN, 0);
        usleep(20000);
        queue_to_looper(SIGUSR1, 1000);
        usleep(20000);
        for (int i = 1; i < hold_n; i++)
            queue_to_looper(SIGRTMIN, i);
    } else {
        queue_to_looper(SIGRTMIN, 0);
        usleep(20000);
        int refused = 0;
        for (int i = 1; i < hold_n; i++)
            refused += queue_to_looper(SIGRTMIN, i) == EAGAIN;
        hold_eagain = refused;
    }
    usleep(20000);
    hold_during = received;
}

/* Takes the page's first fault, sends the signals, then lets the load go on. */
static void *resolver(void *arg) {
    (void)arg;
    block(SIGRTMIN, SIG_BLOCK);
    block(SIGUSR1, SIG_BLOCK);
    struct pollfd pfd = {.fd = hold_uffd, .events = POLLIN};
    for (;;) {
        if (poll(&pfd, 1, 5000) <= 0) {
            printf("no page fault came\n");
            return NULL;
        }
        struct uffd_msg msg;
        if (read(hold_uffd, &msg, sizeof msg) != sizeof msg)
            continue;
        if (msg.event == UFFD_EVENT_PAGEFAULT)
            break;
    }
    hold_signals();
    struct uffdio_copy copy = {
        .dst = (unsigned long)hold_page, .src = (unsigned long)hold_source, .len = 4096};
    if (ioctl(hold_uffd, UFFDIO_COPY, &copy) != 0 && errno != EEXIST)
        printf("UFFDIO_COPY: %d\n", errno);
    return NULL;
}

static int hold(const char *mode, int n) {
    static char base[32];
    size_t len = strlen(mode);
    if (len > 6 && len < sizeof base && !strcmp(mode + len - 6, "-store")) {
        memcpy(base, mode, len - 6);
        base[len - 6] = 0;
        mode = base;
        hold_store = 1;
    }
    hold_mode = mode;
    hold_n = n < MAX ? n : MAX;
    int expect = !strcmp(mode, "hold-usr1") ? 2 : !strcmp(mode, "hold-mixed") ? hold_n + 1 : hold_n;
    if (!strcmp(mode, "hold-limit")) {
        /* n above what the user has queued now (SigQ: queued/limit), so that n queued fill it. */
        char line[256];
        long queued = 0;
        FILE *f = fopen("/proc/self/status", "r");
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "SigQ:", 5))
                queued = atol(line + 5);
        if (f)
            fclose(f);
        hold_n = n + 1;
        expect = hold_n;
        struct rlimit rl = {(rlim_t)(queued + n), (rlim_t)(queued + n)};
        if (setrlimit(RLIMIT_SIGPENDING, &rl) != 0) {
            printf("setrlimit: %d\n", errno);
            return 1;
        }
    }
    handle(SIGRTMIN, on_queued);
    handle(SIGUSR1, on_queued);
    looper = pthread_self();
    /* Hot first: the site is patched after it trapped twice. */
    static uint8_t warm[1024];
    for (int i = 0; i < 4; i++) {
        if (hold_store)
            store_site(warm);
        else
            load_site(warm);
    }
    hold_uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    if (hold_uffd < 0)
        hold_uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
    if (hold_uffd < 0) {
        printf("no userfaultfd: %d\n", errno);
        return 0;
    }
    struct uffdio_api api = {.api = UFFD_API};
    hold_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct uffdio_register reg = {.range = {.start = (unsigned long)hold_page, .len = 4096},
                                  .mode = UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(hold_uffd, UFFDIO_API, &api) != 0 || ioctl(hold_uffd, UFFDIO_REGISTER, &reg) != 0) {
        printf("no userfaultfd: %d\n", errno);
        return 0;
    }
    pattern(hold_source, 9);
    handler_amx = amx_work;
    /* The store's tile 0: bytes the page does not get from the resolver. */
    static uint8_t stored[1024];
    if (hold_store && amx_work) {
        pattern(stored, 13);
        tileload0(stored, 64);
    }
    pthread_t t;
    pthread_create(&t, NULL, resolver, NULL);
    if (hold_store)
        store_site(hold_page);
    else
        load_site(hold_page);
    pthread_join(t, NULL);
    wait_for(&received, expect);
    printf("received: %d of %d\n", received, expect);
    printf("values:");
    for (int i = 0; i < received && i < MAX; i++)
        printf(" %d", values[i]);
    printf("\n");
    int wrong_code = 0, wrong_pid = 0;
    for (int i = 0; i < received && i < MAX; i++) {
        wrong_code += codes[i] != SI_QUEUE;
        wrong_pid += pids[i] != getpid();
    }
    printf("si_code not SI_QUEUE: %d, si_pid not ours: %d\n", wrong_code, wrong_pid);
    if (hold_eagain >= 0)
        printf("refused: %d\n", hold_eagain);
    /* Not compared with the kernel's: where the instruction waits, the silicon delivers. */
    printf("handled while the instruction waited: %d\n", hold_during);
    if (amx_work && hold_store) {
        printf("patched: %s\n", hold_store_site[0] == 0xE9 ? "yes" : "no");
        printf("page: %s\n", memcmp(hold_page, stored, 1024) ? "wrong" : "the tile's");
    } else if (amx_work) {
        static uint8_t out[1024];
        tilestore0(out, 64);
        printf("patched: %s\n", hold_site[0] == 0xE9 ? "yes" : "no");
        printf("tile: %s\n", memcmp(out, hold_source, 1024) ? "wrong" : "the page's");
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 4 && !(argc == 3 && !strcmp(argv[1], "hold-usr1")))
        return 2;
    const char *mode = argv[1];
    amx_work = !strcmp(argv[2], "amx");
    if (amx_work) {
        if (request_amx() != 0) {
            printf("no permission\n");
            return 1;
        }
        if (strcmp(mode, "threads") != 0)
            prepare_tiles();
    }
    if (!strcmp(mode, "rt"))
        return queue(atoi(argv[3]), 0);
    if (!strcmp(mode, "rt-process"))
        return queue(atoi(argv[3]), 1);
    if (!strcmp(mode, "kill"))
        return kill_from_child(atoi(argv[3]));
    if (!strncmp(mode, "hold-", 5))
        return hold(mode, argc > 3 ? atoi(argv[3]) : 2);
    if (!strcmp(mode, "threads") && argc > 4)
        return threads(atoi(argv[3]), atoi(argv[4]));
    return 2;
}
