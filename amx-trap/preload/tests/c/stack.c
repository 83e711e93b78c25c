/* How much of the program's own stack an AMX instruction costs: on the silicon none; under the
 * engine a trapped instruction takes the kernel's signal frame and a patched site the frame,
 * the vector save area and the engine's own frames (amx-trap/README.md, "Stack use").
 *
 * A thread on a stack of the program's runs TDPBF16PS, TDPBSSD and TILESTORED in a loop until
 * their sites are patched, fills the stack below its frame with a marker, runs the loop again
 * and prints the deepest byte the loop changed, below the thread function's frame:
 *
 *   steady state: N bytes
 */
#include "hostile.h"
#include <pthread.h>

static uint8_t data[1024], out[1024];
static char stack[256 * 1024] __attribute__((aligned(4096)));
static size_t deepest;

static __attribute__((noinline)) void loop(int n) {
    for (int i = 0; i < n; i++) {
        tdpbf16ps201();
        tdpbssd201();
        tilestore2(out, 64);
    }
}

static void *work(void *arg) {
    (void)arg;
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    tileload0(data, 64);
    tileload1(data, 64);
    loop(200); /* every site patched by now, where the engine patches */
    char here;
    char *low = stack, *top = &here - 512;
    memset(low, 0xA5, (size_t)(top - low));
    loop(2000);
    size_t i = 0;
    while (low + i < top && (unsigned char)low[i] == 0xA5)
        i++;
    deepest = (size_t)(&here - (low + i));
    tilerelease();
    return NULL;
}

int main(void) {
    if (request_amx() != 0) {
        printf("no AMX permission\n");
        return 1;
    }
    pattern(data, 3);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stack, sizeof stack);
    pthread_t t;
    if (pthread_create(&t, &attr, work, NULL) != 0)
        return 1;
    pthread_join(t, NULL);
    printf("steady state: %zu bytes\n", deepest);
    return 0;
}
