/* Promise 7 (amx-trap/README.md): the addresses of tile rows computed as the silicon computes them,
 * in every operand form: 64-bit and 32-bit (prefix 67) address size, FS and GS bases, wrap-around
 * at 2^32, RIP-relative, scaled indexes, no base. Each line compares the tile with the bytes the
 * address names, read directly. */
#include "hostile.h"
#include <asm/prctl.h>
#include <sys/mman.h>

static tilecfg cfg;
static uint8_t *region; /* 64 KiB of known bytes, below 4 GiB */

static void expect(const char *form, uintptr_t row0, long stride) {
    uint8_t got[1024], want[1024];
    for (int r = 0; r < 16; r++)
        memcpy(want + 64 * r, (void *)(row0 + (uintptr_t)(r * stride)), 64);
    tilestore0(got, 64);
    printf("%s: %s\n", form, memcmp(got, want, 1024) ? "wrong" : "ok");
}

/* The same with 32-bit wrapping of every row's effective address before the base. */
static void expect32(const char *form, uintptr_t base, uint32_t ea0, uint32_t stride) {
    uint8_t got[1024], want[1024];
    for (int r = 0; r < 16; r++)
        memcpy(want + 64 * r, (void *)(base + (uint32_t)(ea0 + (uint32_t)r * stride)), 64);
    tilestore0(got, 64);
    printf("%s: %s\n", form, memcmp(got, want, 1024) ? "wrong" : "ok");
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (request_amx() != 0) {
        printf("no permission\n");
        return 1;
    }
    config(&cfg, 16);
    region = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT,
                  -1, 0);
    for (int i = 0; i < (1 << 16); i++)
        region[i] = (uint8_t)(i * 7 + i / 251);
    ldtilecfg(&cfg);

    /* tileloadd tmm0, [rdi + rsi*1]: the ordinary form. */
    tileload0(region + 100, 96);
    expect("[rdi + rsi]", (uintptr_t)region + 100, 96);

    /* tileloadd tmm0, [r13 + r14*2 + 8] (VEX.B, VEX.X, scale, disp8). */
    {
        register uintptr_t r13 __asm__("r13") = (uintptr_t)region + 40;
        register long r14 __asm__("r14") = 64;
        __asm__ volatile(".byte 0xc4, 0x82, 0x7b, 0x4b, 0x44, 0x75, 0x08" ::"r"(r13), "r"(r14)
                         : "memory");
    }
    expect("[r13 + r14*2 + 8]", (uintptr_t)region + 48, 128);

    /* tileloadd tmm0, [rsi*4 + disp32] (no base): the region's address as disp32 (it lies
     * below 2 GiB), in code written here. */
    {
        long disp_region = (long)(uintptr_t)region;
        uint8_t code[] = {0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0xb5, 0, 0, 0, 0, 0xc3};
        memcpy(code + 6, &disp_region, 4);
        uint8_t *fn = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memcpy(fn, code, sizeof code);
        __asm__ volatile("call *%0" ::"r"(fn), "S"(16l) : "memory", "rax", "rcx", "rdx", "rdi",
                         "r8", "r9", "r10", "r11");
        expect("[rsi*4 + disp32]", (uintptr_t)region, 64);
    }

    /* 67: tileloadd tmm0, [edi + esi*1]: the registers' high halves ignored. */
    __asm__ volatile(".byte 0x67, 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37" ::"D"(
                         (uintptr_t)region + 200 + 0xdead00000000ull),
                     "S"(64 + 0xbeef00000000ull)
                     : "memory");
    expect("67 [edi + esi]", (uintptr_t)region + 200, 64);

    /* 67 with wrap-around: edi + esi*r + disp8 wraps at 2^32 (row 0 at region, from
     * 0xffffffc0 + 0x40 + region). */
    __asm__ volatile(".byte 0x67, 0xc4, 0xe2, 0x7b, 0x4b, 0x44, 0x37, 0x40" ::"D"(
                         (uint32_t)((uintptr_t)region - 0x40)),
                     "S"(64l)
                     : "memory");
    expect("67 wrapping", (uintptr_t)region, 64);

    /* GS: a base of our choice (far above 4 GiB), a 32-bit offset added after wrapping. */
    uint8_t *high = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < (1 << 16); i++)
        high[i] = (uint8_t)(i * 13 + 1);
    if (syscall(SYS_arch_prctl, ARCH_SET_GS, (unsigned long)high) != 0) {
        printf("no gs\n");
        return 0;
    }
    /* 65: tileloadd tmm0, gs:[rdi + rsi*1] */
    __asm__ volatile(".byte 0x65, 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37" ::"D"(300l), "S"(96l)
                     : "memory");
    expect("gs:[rdi + rsi]", (uintptr_t)high + 300, 96);
    /* 67 65: tileloadd tmm0, gs:[edi + esi*1]: the offset wraps at 2^32, then the base. */
    __asm__ volatile(".byte 0x67, 0x65, 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37" ::"D"(
                         0x1234500000000ull + 1000),
                     "S"(0xffff00000000ull + 64)
                     : "memory");
    expect32("67 gs:[edi + esi]", (uintptr_t)high, 1000, 64);
    /* 67 65 with the offset wrapping past 2^32 between rows: esi = -64, edi = 64 * 15. */
    __asm__ volatile(".byte 0x67, 0x65, 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37" ::"D"(64l * 15 + 64),
                     "S"(0xffffffc0ul)
                     : "memory");
    expect32("67 gs: wrapping rows", (uintptr_t)high, 64 * 15 + 64, 0xffffffc0u);
    /* 65 stores too: tilestored gs:[rdi + rsi*1], tmm0, then read back directly. */
    uint8_t want[1024];
    tilestore0(want, 64);
    __asm__ volatile(".byte 0x65, 0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x37" ::"D"(8192l), "S"(64l)
                     : "memory");
    printf("gs: store: %s\n", memcmp(high + 8192, want, 1024) ? "wrong" : "ok");
    /* 64 67: fs:[edi] reads from the thread pointer up. */
    uintptr_t fs;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(fs));
    tilecfg one;
    config(&one, 1);
    ldtilecfg(&one);
    __asm__ volatile(".byte 0x67, 0x64, 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37" ::"D"(
                         0xabcd00000000ull + 0),
                     "S"(64l)
                     : "memory");
    uint8_t got[64];
    tilestore0(got, 64);
    printf("67 fs:[edi]: %s\n", memcmp(got, (void *)fs, 64) ? "wrong" : "ok");
    return 0;
}
