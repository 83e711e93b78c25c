// Promise 4 (amx-trap/README.md): a C++ exception thrown from a signal handler
// (-fnon-call-exceptions) leaves the handler through the engine's frame as through the kernel's;
// the tile state stays what the handler left. Handlers of ordinary signals, of a fault the CPU
// raises, and of an exception of an AMX instruction (the engine raises it), at depth 1 and 2.
#include "hostile.h"
#include <stdexcept>

static void make_state(int rows) {
    tilecfg c;
    config(&c, rows);
    ldtilecfg(&c);
}

static int rows_now() {
    tilecfg c;
    memset(&c, 0xAA, sizeof c);
    sttilecfg(&c);
    return c.palette_id == 0 ? 0 : c.rows[0];
}

static void thrower(int sig) {
    make_state(5);
    throw std::runtime_error(sig == SIGSEGV ? "segv" : sig == SIGILL ? "ill" : "other");
}

// Depth 2: this handler faults itself; the fault's handler throws through both frames.
static void relay(int) {
    make_state(9);
    *(volatile int *)16 = 1;
}

static volatile int zero = 0;

int main() {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = thrower;
    sa.sa_flags = SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGILL, &sa, NULL);
    sa.sa_handler = relay;
    sigaction(SIGFPE, &sa, NULL);

    make_state(16);
    try {
        *(volatile int *)16 = 1;
    } catch (const std::exception &e) {
        printf("caught %s, rows %d\n", e.what(), rows_now());
    }
    // TILEZERO without a configuration: #UD, delivered by the engine where it runs.
    tilerelease();
    try {
        tilezero0();
        printf("no #UD\n");
    } catch (const std::exception &e) {
        printf("caught %s, rows %d\n", e.what(), rows_now());
    }
    make_state(16);
    try {
        printf("%d\n", 1 / zero);
    } catch (const std::exception &e) {
        printf("caught %s from depth 2, rows %d\n", e.what(), rows_now());
    }
    return 0;
}
