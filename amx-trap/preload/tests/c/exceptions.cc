// Promise 4 (amx-trap/README.md): a C++ exception thrown from a signal handler
// (-fnon-call-exceptions) leaves the handler through the engine's frame as through the kernel's;
// the tile state stays what the handler left. Handlers of ordinary signals, of a fault the CPU
// raises, and of an exception of an AMX instruction (the engine raises it), at depth 1 and 2.
//
//   (no argument)  the above
//   oom            no AMX: the address space used up first (the engine can map no state for
//                  the thread, and has no work stack), then a fault whose handler throws
#include "hostile.h"
#include <stdexcept>
#include <sys/mman.h>
#include <sys/resource.h>

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

static char alternate[64 * 1024];
static volatile int on_alternate;

static void throw_on_fault(int) {
    char here;
    on_alternate = &here >= alternate && &here < alternate + sizeof alternate;
    throw std::runtime_error("segv");
}

static int oom() {
    // The unwinder's own first-use allocations done before memory runs out.
    try {
        throw 1;
    } catch (int) {
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = throw_on_fault;
    sa.sa_flags = SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    struct rlimit rl;
    getrlimit(RLIMIT_AS, &rl);
    rl.rlim_cur = vm_size() + (256 << 10);
    setrlimit(RLIMIT_AS, &rl);
    while (mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) !=
           MAP_FAILED) {
    }
    // Without an alternate stack; with one the handler does not ask for (the engine takes its
    // faults there); with one it asks for.
    for (int round = 0; round < 3; round++) {
        if (round == 1) {
            stack_t st;
            memset(&st, 0, sizeof st);
            st.ss_sp = alternate;
            st.ss_size = sizeof alternate;
            sigaltstack(&st, NULL);
        }
        if (round == 2) {
            sa.sa_flags |= SA_ONSTACK;
            sigaction(SIGSEGV, &sa, NULL);
        }
        try {
            *(volatile int *)16 = 1;
            printf("no fault\n");
        } catch (const std::exception &e) {
            printf("caught %s without memory, on the alternate stack %d\n", e.what(),
                   on_alternate);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && !strcmp(argv[1], "oom"))
        return oom();
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
