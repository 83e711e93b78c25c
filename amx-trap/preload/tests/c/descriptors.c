/* The engine's files never take the program's descriptor numbers: one thread closes a number
 * and puts its own file there with dup2, over and over (the number is free for a moment each
 * time, and a file opened then gets it), while another thread runs 256 AMX instructions that
 * the engine patches (reading /proc/self/maps and writing /proc/self/mem for each). On the
 * silicon nothing else opens files in the process: the number always holds the program's
 * file.
 *
 * Prints "closed N, other M": how often the number was found closed, or holding another file,
 * right after the program's dup2. */
#include "hostile.h"
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

#define SITE __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x49, 0xc0; nop" ::: "memory");
#define SITE4 SITE SITE SITE SITE
#define SITE16 SITE4 SITE4 SITE4 SITE4
#define SITE64 SITE16 SITE16 SITE16 SITE16

__attribute__((noinline)) static void sites(void) { SITE64 SITE64 SITE64 SITE64 }

__attribute__((noinline)) static void warm(void) { SITE }

static volatile int stop;
static int file, number;
static ino_t inode;
static volatile long closed, other, rounds;

static void *juggle(void *arg) {
    (void)arg;
    while (!stop) {
        close(number);
        dup2(file, number);
        struct stat st;
        if (fstat(number, &st) != 0)
            closed++;
        else if (st.st_ino != inode)
            other++;
        rounds++;
    }
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (request_amx())
        return 1;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    /* The first patch opens the engine's files. */
    for (int i = 0; i < 3; i++)
        warm();
    FILE *tmp = tmpfile();
    file = fileno(tmp);
    struct stat st;
    fstat(file, &st);
    inode = st.st_ino;
    number = open("/dev/null", O_RDONLY);
    close(number);
    pthread_t t;
    pthread_create(&t, NULL, juggle, NULL);
    while (rounds < 1000)
        sched_yield();
    for (int i = 0; i < 3; i++)
        sites();
    stop = 1;
    pthread_join(t, NULL);
    printf("closed %ld, other %ld\n", closed, other);
    return 0;
}
