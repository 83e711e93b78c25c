/* A debugger's stack walk where an AMX instruction faults: on the silicon gdb stops at the
 * instruction, and `bt` shows the function that ran it and its callers. Under the library gdb
 * stops first inside the engine (the engine's own copy of the operand faults), and `bt` there
 * must walk on through the engine's frames into the same functions.
 *
 *   trapped  a TILELOADD from an unmapped address at a site run for the first time (the
 *            engine takes its SIGILL)
 *   patched  the same site run 1000 times with a valid address first (patched by then), then
 *            with the unmapped one: the fault comes in the site's fast path
 *
 * The program's SIGSEGV handler ends it with status 3, so that its fault is not fatal.
 */
#include "hostile.h"

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
