/* A SIGSEGV sent by another thread while a trapped TILELOADD waits for a page (one userfaultfd
 * keeps missing), and then the same load's own fault on a later row: both reach the program,
 * the sent one first, as on the silicon. (The engine once kept a held-back SIGSEGV blocked for
 * the rest of its work, and the load's fault then met it blocked: the kernel ended the
 * process.)
 *
 *   held amx     rows 0..7 of the load lie at the end of a page that userfaultfd keeps
 *                missing, rows 8..15 on the next page, which is not mapped. A thread takes
 *                the fault's event, sends SIGSEGV to the loading thread (pthread_kill), waits
 *                20 ms, and lets the page come. The load is the site's first execution, so it
 *                traps (no site is patched before its second).
 *   held plain   the same with a plain 16-row copy instead of the load: the kernel's own
 *                behaviour, for the output to compare with.
 *
 * Prints the signals the SIGSEGV handler saw, in order: "sent" (SI_TKILL) and "fault at +N"
 * (SEGV_MAPERR, N the offset of si_addr from the unmapped page). */
#include "hostile.h"
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

static uint8_t *pages, source[4096] __attribute__((aligned(4096)));
static int uffd;
static pthread_t loader;
static sigjmp_buf back;
static char seen[256];
static volatile int n_seen;

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    char one[64];
    if (info->si_code == SI_TKILL)
        snprintf(one, sizeof one, "%ssent", n_seen ? ", " : "");
    else
        snprintf(one, sizeof one, "%sfault at +%ld", n_seen ? ", " : "",
                 (long)((uint8_t *)info->si_addr - (pages + 4096)));
    strncat(seen, one, sizeof seen - strlen(seen) - 1);
    n_seen++;
    if (info->si_code != SI_TKILL)
        siglongjmp(back, 1);
}

static void *resolver(void *arg) {
    (void)arg;
    struct pollfd pfd = {.fd = uffd, .events = POLLIN};
    for (;;) {
        if (poll(&pfd, 1, 5000) <= 0) {
            printf("no page fault came\n");
            return NULL;
        }
        struct uffd_msg msg;
        if (read(uffd, &msg, sizeof msg) == sizeof msg && msg.event == UFFD_EVENT_PAGEFAULT)
            break;
    }
    pthread_kill(loader, SIGSEGV);
    usleep(20000);
    struct uffdio_copy copy = {.dst = (unsigned long)pages, .src = (unsigned long)source, .len = 4096};
    if (ioctl(uffd, UFFDIO_COPY, &copy) != 0 && errno != EEXIST)
        printf("UFFDIO_COPY: %d\n", errno);
    return NULL;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 2)
        return 2;
    int amx = !strcmp(argv[1], "amx");
    if (amx && request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    pages = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(pages + 4096, 4096);
    uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    if (uffd < 0)
        uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
    struct uffdio_api api = {.api = UFFD_API};
    struct uffdio_register reg = {.range = {.start = (unsigned long)pages, .len = 4096},
                                  .mode = UFFDIO_REGISTER_MODE_MISSING};
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0 || ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) {
        printf("no userfaultfd: %d\n", errno);
        return 0;
    }
    memset(source, 7, sizeof source);
    loader = pthread_self();
    pthread_t t;
    pthread_create(&t, NULL, resolver, NULL);
    uint8_t *rows = pages + 4096 - 8 * 64;
    tilecfg c;
    config(&c, 16);
    if (amx)
        ldtilecfg(&c);
    if (sigsetjmp(back, 1) == 0) {
        if (amx) {
            tileload0(rows, 64);
        } else {
            static volatile int sum;
            for (int r = 0; r < 16; r++)
                sum += rows[r * 64];
        }
        printf("no fault\n");
    }
    pthread_join(t, NULL);
    if (amx)
        tilerelease();
    printf("seen: %s\n", seen);
    return 0;
}
