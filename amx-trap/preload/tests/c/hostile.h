/* Shared pieces of the hostile test programs: AMX instructions as bytes (no -mamx flags
 * needed, so any gcc builds them), the tile configuration, the permission, printing. */
#ifndef HOSTILE_H
#define HOSTILE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed, aligned(64))) tilecfg;

/* Palette 1 with every tile 16 rows of 64 bytes, or `rows` rows. */
static inline void config(tilecfg *c, int rows) {
    memset(c, 0, sizeof *c);
    c->palette_id = 1;
    for (int t = 0; t < 8; t++) {
        c->colsb[t] = 64;
        c->rows[t] = (uint8_t)rows;
    }
}

/* The instructions, each as its bytes, operands in fixed registers. */
static inline void ldtilecfg(const tilecfg *c) {
    __asm__ volatile(".byte 0xc4, 0xe2, 0x78, 0x49, 0x07" ::"D"(c) : "memory");
}
static inline void sttilecfg(tilecfg *c) {
    __asm__ volatile(".byte 0xc4, 0xe2, 0x79, 0x49, 0x07" ::"D"(c) : "memory");
}
static inline void tilerelease(void) { __asm__ volatile(".byte 0xc4, 0xe2, 0x78, 0x49, 0xc0" ::: "memory"); }
/* tilezero tmm0 */
static inline void tilezero0(void) { __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x49, 0xc0" ::: "memory"); }
/* tileloadd tmm0, [rdi + rsi*1] */
static inline void tileload0(const void *p, long stride) {
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37" ::"D"(p), "S"(stride) : "memory");
}
/* tileloadd tmm1, [rdi + rsi*1] */
static inline void tileload1(const void *p, long stride) {
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x0c, 0x37" ::"D"(p), "S"(stride) : "memory");
}
/* tilestored [rdi + rsi*1], tmm0 */
static inline void tilestore0(void *p, long stride) {
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x37" ::"D"(p), "S"(stride) : "memory");
}
/* tilestored [rdi + rsi*1], tmm1 */
static inline void tilestore1(void *p, long stride) {
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7a, 0x4b, 0x0c, 0x37" ::"D"(p), "S"(stride) : "memory");
}
/* tilestored [rdi + rsi*1], tmm2 */
static inline void tilestore2(void *p, long stride) {
    __asm__ volatile(".byte 0xc4, 0xe2, 0x7a, 0x4b, 0x14, 0x37" ::"D"(p), "S"(stride) : "memory");
}
/* tdpbssd tmm2, tmm0, tmm1 */
static inline void tdpbssd201(void) { __asm__ volatile(".byte 0xc4, 0xe2, 0x73, 0x5e, 0xd0" ::: "memory"); }
/* tdpbf16ps tmm2, tmm0, tmm1 */
static inline void tdpbf16ps201(void) { __asm__ volatile(".byte 0xc4, 0xe2, 0x72, 0x5c, 0xd0" ::: "memory"); }

/* The address space the process uses now, in bytes. */
static inline unsigned long vm_size(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %lu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

/* Asks Linux (or the engine) for tile data. */
static inline long request_amx(void) {
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
}

/* A 16 x 64-byte pattern from `seed`. */
static inline void pattern(uint8_t *p, int seed) {
    for (int i = 0; i < 1024; i++)
        p[i] = (uint8_t)(i * 31 + seed * 17 + 5);
}

/* A small checksum of n bytes. */
static inline unsigned sum(const void *p, size_t n) {
    const uint8_t *b = (const uint8_t *)p;
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

/* The first 64 signals of the current mask. */
static inline unsigned long long mask_now(void) {
    sigset_t s;
    sigprocmask(SIG_BLOCK, NULL, &s);
    unsigned long long m = 0;
    for (int i = 1; i <= 64; i++)
        if (sigismember(&s, i) == 1)
            m |= 1ull << (i - 1);
    return m;
}

#define BIT(sig) (1ull << ((sig) - 1))

#endif
