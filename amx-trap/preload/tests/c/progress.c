/* Promise 10 (amx-trap/README.md): a program whose timer handler runs AMX instructions makes
 * progress.
 *
 *   timer <period_us> <iterations>  a timer every period; its handler runs a few AMX
 *                                   instructions; the program's own loop of AMX work must get
 *                                   through its iterations between the ticks
 */
#include "hostile.h"
#include <sys/time.h>
#include <time.h>

static volatile long ticks;
static uint8_t buffer[1024];

static void tick(int sig) {
    (void)sig;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tileload0(buffer, 64);
    tileload1(buffer, 64);
    tdpbssd201();
    tilestore0(buffer, 64);
    tilezero0();
    tilerelease();
    ticks++;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 4 || strcmp(argv[1], "timer") != 0)
        return 2;
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    long period = atol(argv[2]), iterations = atol(argv[3]);
    signal(SIGALRM, tick);
    struct itimerval it = {{0, period}, {0, period}};
    setitimer(ITIMER_REAL, &it, NULL);
    static uint8_t mine[1024], out[1024];
    pattern(mine, 1);
    tilecfg c;
    config(&c, 16);
    for (long i = 0; i < iterations; i++) {
        ldtilecfg(&c);
        tileload0(mine, 64);
        tilestore0(out, 64);
        if (memcmp(out, mine, 1024) != 0) {
            printf("wrong at %ld\n", i);
            return 1;
        }
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("done %ld iterations, %s\n", iterations, ticks > 0 ? "ticked" : "no ticks");
    return 0;
}
