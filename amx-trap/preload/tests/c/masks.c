/* Promise 1 and 2 (amx-trap/README.md): masks, pending signals and the calls that wait for
 * them, in a program without AMX instructions: every line the same as without the library.
 *
 *   waits    ppoll, pselect, epoll_pwait and sigsuspend with a wait mask that blocks SIGUSR2,
 *            which another process sends during the wait: the handler runs as the call
 *            returns and the thread's own mask comes back
 *   bsd      sigblock, siggetmask and sigsetmask (the C library makes them without its
 *            sigprocmask), then a fault the program handles: a shell's child unblocks
 *            everything with sigsetmask(0)
 *   blocked  SIGSEGV and SIGTRAP sent (not raised by a fault) while blocked: pending with the
 *            default action and with SIG_IGN ("blocked signals are never ignored"), SIG_IGN
 *            discards a pending one
 *   efault   masks and actions at addresses the kernel cannot read or write: EFAULT, through
 *            sigprocmask, pthread_sigmask and syscall(2)
 *   stored   actions installed with every signal in sa_mask, read back: the kernel keeps
 *            neither SIGKILL nor SIGSTOP there, and blocks neither in the handler
 */
#include "hostile.h"
/* The BSD mask calls are deprecated, and what a shell still makes. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/wait.h>

static volatile int usr1, usr2;

static void count(int sig) {
    if (sig == SIGUSR1)
        usr1++;
    else
        usr2++;
}

/* One wait, SIGUSR2 sent by a child during it, SIGUSR1 after it to end a sigsuspend. */
static void wait_once(const char *call) {
    usr1 = usr2 = 0;
    sigset_t wait_mask;
    sigemptyset(&wait_mask);
    sigaddset(&wait_mask, SIGUSR2);
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        usleep(30000);
        kill(parent, SIGUSR2);
        usleep(60000);
        kill(parent, SIGUSR1);
        _exit(0);
    }
    struct timespec ts = {0, 150 * 1000000};
    if (!strcmp(call, "ppoll")) {
        ppoll(NULL, 0, &ts, &wait_mask);
    } else if (!strcmp(call, "pselect")) {
        pselect(0, NULL, NULL, NULL, &ts, &wait_mask);
    } else if (!strcmp(call, "epoll_pwait")) {
        struct epoll_event ev;
        int ep = epoll_create1(0);
        epoll_pwait(ep, &ev, 1, 150, &wait_mask);
        close(ep);
    } else {
        sigsuspend(&wait_mask);
    }
    int after = usr2;
    waitpid(child, NULL, 0);
    /* SIGUSR1 may come after a timed wait: it is handled, whichever. */
    printf("%s: SIGUSR2 handled as the call returned %d\n", call, after);
}

static int waits(void) {
    signal(SIGUSR1, count);
    signal(SIGUSR2, count);
    wait_once("ppoll");
    wait_once("pselect");
    wait_once("epoll_pwait");
    wait_once("sigsuspend");
    return 0;
}

static sigjmp_buf out;

static void leave(int sig) {
    (void)sig;
    siglongjmp(out, 1);
}

static int bsd(void) {
    int blocked = sigblock((1 << (SIGUSR1 - 1)) | (1 << (SIGSEGV - 1)));
    printf("sigblock returned %#x, siggetmask %#x, sigprocmask %#llx\n", blocked, siggetmask(),
           mask_now());
    int before = sigsetmask(0);
    printf("sigsetmask(0) returned %#x, mask now %#llx\n", before, mask_now());
    signal(SIGSEGV, leave);
    int handled = 0;
    if (sigsetjmp(out, 1) == 0)
        *(volatile int *)8 = 1;
    else
        handled = 1;
    printf("fault handled %d\n", handled);
    return 0;
}

static int is_pending(int sig) {
    sigset_t p;
    sigpending(&p);
    return sigismember(&p, sig);
}

static void block(int sig, int how) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(how, &s, NULL);
}

static int delivered;

static void note(int sig) {
    (void)sig;
    delivered++;
}

static int blocked(void) {
    int sigs[] = {SIGSEGV, SIGTRAP};
    for (int i = 0; i < 2; i++) {
        int sig = sigs[i];
        signal(sig, SIG_DFL);
        block(sig, SIG_BLOCK);
        kill(getpid(), sig);
        printf("%d default, blocked, sent: pending %d\n", sig, is_pending(sig));
        signal(sig, SIG_IGN);
        printf("%d then ignored: pending %d\n", sig, is_pending(sig));
        kill(getpid(), sig);
        printf("%d ignored, blocked, sent: pending %d\n", sig, is_pending(sig));
        block(sig, SIG_UNBLOCK);
        printf("%d unblocked: pending %d\n", sig, is_pending(sig));
        delivered = 0;
        signal(sig, note);
        block(sig, SIG_BLOCK);
        kill(getpid(), sig);
        signal(sig, SIG_IGN);
        signal(sig, note);
        block(sig, SIG_UNBLOCK);
        printf("%d pending, then ignored, then handled: delivered %d\n", sig, delivered);
        signal(sig, SIG_DFL);
    }
    return 0;
}

static void say(const char *what, long rc, int err) {
    printf("%s: %ld %s\n", what, rc, rc == 0 ? "" : strerror(err));
}

static int efault(void) {
    void *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    /* (The C library reads a new set itself: an unreadable one is a fault, not EFAULT.) */
    long rc = sigprocmask(SIG_BLOCK, NULL, ro);
    say("sigprocmask, old unwritable", rc, errno);
    rc = pthread_sigmask(SIG_BLOCK, NULL, ro);
    say("pthread_sigmask, old unwritable", rc, rc);
    rc = syscall(SYS_rt_sigprocmask, SIG_BLOCK, none, NULL, 8);
    say("rt_sigprocmask, set unreadable", rc, errno);
    rc = syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, ro, 8);
    say("rt_sigprocmask, old unwritable", rc, errno);
    rc = syscall(SYS_rt_sigaction, SIGUSR1, none, NULL, 8);
    say("rt_sigaction, action unreadable", rc, errno);
    rc = syscall(SYS_rt_sigaction, SIGSEGV, NULL, ro, 8);
    say("rt_sigaction of SIGSEGV, old unwritable", rc, errno);
    printf("mask afterwards %#llx\n", mask_now());
    return 0;
}

static void show_stored(int sig) {
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    printf("handler %d: KILL blocked %d, STOP blocked %d, USR2 blocked %d\n", sig,
           sigismember(&now, SIGKILL), sigismember(&now, SIGSTOP), sigismember(&now, SIGUSR2));
}

static int stored(void) {
    int sigs[] = {SIGSEGV, SIGILL, SIGUSR1};
    for (int i = 0; i < 3; i++) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = show_stored;
        sigfillset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
        sigaction(sigs[i], NULL, &old);
        printf("signal %d: KILL in sa_mask %d, STOP %d, USR2 %d\n", sigs[i],
               sigismember(&old.sa_mask, SIGKILL), sigismember(&old.sa_mask, SIGSTOP),
               sigismember(&old.sa_mask, SIGUSR2));
        raise(sigs[i]);
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "waits";
    if (!strcmp(mode, "waits"))
        return waits();
    if (!strcmp(mode, "bsd"))
        return bsd();
    if (!strcmp(mode, "blocked"))
        return blocked();
    if (!strcmp(mode, "efault"))
        return efault();
    if (!strcmp(mode, "stored"))
        return stored();
    return 2;
}
