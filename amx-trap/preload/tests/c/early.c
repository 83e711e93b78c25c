/* AMX in the constructor of a library the program links: the loader runs it before the
 * constructor of a preloaded library, so before the engine's own. Built twice: with -DLIBRARY
 * as a shared library, then as the program linked with it.
 *
 * The library's constructor asks for the permission, runs AMX instructions (a tile loaded and
 * stored back), and starts a worker thread that blocks every signal, as pool threads do,
 * before it runs AMX instructions of its own when main asks. On the silicon all of it works.
 */
#include "hostile.h"
#include <pthread.h>
#include <semaphore.h>

#ifdef LIBRARY

long early_permission = -2;
int early_errno, early_tiles;
sem_t early_go, early_done;
int early_worker_tiles;

static int round_trip(int seed) {
    static uint8_t in[16 * 64], out[16 * 64];
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    pattern(in, seed);
    memset(out, 0, sizeof out);
    tileload0(in, 64);
    tilestore0(out, 64);
    tilerelease();
    return !memcmp(in, out, sizeof in);
}

static void *worker(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    sem_wait(&early_go);
    early_worker_tiles = round_trip(7);
    sem_post(&early_done);
    return NULL;
}

__attribute__((constructor)) static void early(void) {
    errno = 0;
    early_permission = request_amx();
    early_errno = errno;
    if (early_permission == 0)
        early_tiles = round_trip(3);
    sem_init(&early_go, 0, 0);
    sem_init(&early_done, 0, 0);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_detach(t);
}

#else

extern long early_permission;
extern int early_errno, early_tiles, early_worker_tiles;
extern sem_t early_go, early_done;

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    printf("constructor permission: %ld (errno %d)\n", early_permission, early_errno);
    printf("constructor tiles: %s\n", early_tiles ? "ok" : "WRONG");
    sem_post(&early_go);
    sem_wait(&early_done);
    printf("worker tiles: %s\n", early_worker_tiles ? "ok" : "WRONG");
    unsigned long long perm = 0;
    syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm);
    printf("main permission has tile data: %d\n", (int)!!(perm & (1ull << XFEATURE_XTILEDATA)));
    return 0;
}

#endif
