/* A debugger's stack walk where an AMX instruction faults: on the silicon gdb stops at the
 * instruction, and `bt` shows the function that ran it and its callers. Under the library gdb
 * stops first inside the engine (the engine's own copy of the operand faults), and `bt` there
 * must walk on through the engine's frames into the same functions.
 *
 *   trapped  a TILELOADD from an unmapped address at a site run for the first time (the
 *            engine takes its SIGILL)
 *   patched  the same site run 1000 times with a valid address first (patched by then), then
 *            with the unmapped one: the fault comes in the site's fast path
 *   signals  no AMX: three SIGUSR1 handled, and a NULL store whose SIGSEGV handler leaves by
 *            siglongjmp (under valgrind, which checks every signal frame a handler returns
 *            through, the library must stay out of the way)
 *
 * The program's SIGSEGV handler ends it with status 3, so that its fault is not fatal.
 */
#include "hostile.h"
#include <setjmp.h>

static volatile int usr1;
static void on_usr1(int sig) {
    (void)sig;
    usr1++;
}
static sigjmp_buf out;
static void on_null(int sig) { siglongjmp(out, sig); }

static int signals(void) {
    signal(SIGUSR1, on_usr1);
    for (int i = 0; i < 3; i++)
        raise(SIGUSR1);
    signal(SIGSEGV, on_null);
    int got = sigsetjmp(out, 1);
    if (got == 0)
        *(volatile int *)16 = 1;
    printf("handled %d SIGUSR1, left the SIGSEGV handler with %d\n", usr1, got);
    return 0;
}

static void on_segv(int sig) {
    (void)sig;
    _exit(3);
}

__attribute__((noinline)) void amx_victim(const void *p) {
    tileload0(p, 64);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void amx_caller(const void *p) {
    amx_victim(p);
    __asm__ volatile("" ::: "memory");
}

static uint8_t rows[16 * 64];

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "signals"))
        return signals();
    if (argc < 2 || request_amx() != 0)
        return 2;
    signal(SIGSEGV, on_segv);
    tilecfg c;
    config(&c, 16);
    ldtilecfg(&c);
    if (!strcmp(argv[1], "patched"))
        for (int i = 0; i < 1000; i++)
            amx_caller(rows);
    amx_caller((const void *)0x10);
    return 0;
}
