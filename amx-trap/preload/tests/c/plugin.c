/* The engine's library opened as a plugin (dlopen, not LD_PRELOAD) and closed again: AMX keeps
 * working after dlclose, as on the silicon, where no library stands behind the instructions.
 *
 *   plugin LIBRARY   dlopen, the permission through the library's arch_prctl, a product,
 *                    dlclose, a product on this thread and on a new one, then the same again
 *                    after a second dlopen and dlclose.
 *
 * Prints, per product, whether TDPBSSD gave the plain loop's sums, and whether the library is
 * still mapped after dlclose (the engine keeps it resident; with AMX silicon it installs
 * nothing, and the C library unmaps it). */
#include "hostile.h"
#include <dlfcn.h>
#include <pthread.h>

static int8_t a[16][64], b[16][64];

/* TDPBSSD of a and b, against a plain loop (b in the tile layout: its row r holds k = 4r to
 * 4r + 3 of column n in bytes 4n to 4n + 3). */
static const char *product(void) {
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    static __thread int32_t out[16][16];
    static const int32_t zero[16][16];
    memset(out, 0x55, sizeof out);
    tileload0(a, 64);
    tileload1(b, 64);
    /* tileloadd tmm2, [rdi + rsi*1]: C starts from zero. */
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x14, 0x37" ::"D"(zero), "S"(64L) : "memory");
    tdpbssd201();
    tilestore2(out, 64);
    tilerelease();
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            int32_t want = 0;
            for (int k = 0; k < 64; k++)
                want += (int32_t)a[m][k] * (int32_t)b[k / 4][n * 4 + k % 4];
            if (out[m][n] != want)
                return "wrong";
        }
    return "ok";
}

static void *on_a_thread(void *arg) {
    (void)arg;
    return (void *)product();
}

static int mapped(const char *path) {
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, name))
            found = 1;
    if (f)
        fclose(f);
    return found;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: plugin LIBRARY\n");
        return 2;
    }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 64; j++) {
            a[i][j] = (int8_t)(i * 7 - j * 3);
            b[i][j] = (int8_t)(j * 5 - i * 11);
        }
    for (int round = 1; round <= 2; round++) {
        void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            printf("dlopen: %s\n", dlerror());
            return 1;
        }
        /* Opened with RTLD_LOCAL, the library's arch_prctl is not the program's: ask it. */
        long (*perm)(int, unsigned long) = (long (*)(int, unsigned long))dlsym(lib, "arch_prctl");
        long granted = perm ? perm(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) : -1;
        if (granted != 0)
            granted = request_amx(); /* the silicon's kernel, where the library forwards */
        printf("round %d permission: %ld\n", round, granted);
        printf("round %d before dlclose: %s\n", round, product());
        printf("round %d dlclose: %d\n", round, dlclose(lib));
        fflush(stdout);
        printf("round %d after dlclose: %s\n", round, product());
        pthread_t t;
        void *r = NULL;
        pthread_create(&t, NULL, on_a_thread, NULL);
        pthread_join(t, &r);
        printf("round %d new thread after dlclose: %s\n", round, (const char *)r);
        printf("round %d mapped after dlclose: %s\n", round, mapped(argv[1]) ? "yes" : "no");
        fflush(stdout);
    }
    return 0;
}
