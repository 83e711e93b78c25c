/* The engine's files never take the program's descriptor numbers: one thread closes a number
 * and puts its own file there with dup2, over and over (the number is free for a moment each
 * time, and a file opened then gets it), while another thread runs 256 AMX instructions that
 * the engine patches (reading /proc/self/maps and writing /proc/self/mem for each). On the
 * silicon nothing else opens files in the process: the number always holds the program's
 * file.
 *
 * Prints "closed N, other M": how often the number was found closed, or holding another file,
 * right after the program's dup2.
 *
 * With the argument `vfork`: 8 vfork children, each loading the configuration and running a
 * site of its own until it is patched, then _exit, the parent patching a site of its own after
 * each: the parent's open descriptors are as many after as before (a child runs in its
 * parent's memory, where the engine keeps its files' numbers). Prints "descriptors before N,
 * after M". */
#include "hostile.h"
#include <fcntl.h>
#include <pthread.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define SITE __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x49, 0xc0; nop" ::: "memory");
#define SITE4 SITE SITE SITE SITE
#define SITE16 SITE4 SITE4 SITE4 SITE4
#define SITE64 SITE16 SITE16 SITE16 SITE16

__attribute__((noinline)) static void sites(void) { SITE64 SITE64 SITE64 SITE64 }

__attribute__((noinline)) static void warm(void) { SITE }

#define OWN_SITE(n) __attribute__((noinline)) static void own_site_##n(void) { SITE }
OWN_SITE(0) OWN_SITE(1) OWN_SITE(2) OWN_SITE(3) OWN_SITE(4) OWN_SITE(5) OWN_SITE(6) OWN_SITE(7)
OWN_SITE(8) OWN_SITE(9) OWN_SITE(10) OWN_SITE(11) OWN_SITE(12) OWN_SITE(13) OWN_SITE(14)
OWN_SITE(15)
static void (*const own_sites[16])(void) = {
    own_site_0, own_site_1, own_site_2,  own_site_3,  own_site_4,  own_site_5,
    own_site_6, own_site_7, own_site_8,  own_site_9,  own_site_10, own_site_11,
    own_site_12, own_site_13, own_site_14, own_site_15};

static int open_descriptors(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static int vfork_mode(const tilecfg *c) {
    int before = open_descriptors();
    for (int i = 0; i < 8; i++) {
        pid_t child = vfork();
        if (child == 0) {
            ldtilecfg(c);
            for (int k = 0; k < 3; k++)
                own_sites[2 * i]();
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
        for (int k = 0; k < 3; k++)
            own_sites[2 * i + 1]();
    }
    printf("descriptors before %d, after %d\n", before, open_descriptors());
    return 0;
}

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

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (request_amx())
        return 1;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    /* The first patch opens the engine's files. */
    for (int i = 0; i < 3; i++)
        warm();
    if (argc > 1 && !strcmp(argv[1], "vfork"))
        return vfork_mode(&c);
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
