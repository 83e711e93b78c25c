//! The library's own `memcpy`, `memmove`, `memset`, `memcmp` and `bcmp`, hidden (bound inside
//! the library, never exported), which the compiler's calls in the engine resolve to.
//!
//! Otherwise those calls go through the dynamic linker to the first definition in the
//! process: the C library's, or a sanitizer's interceptor (ThreadSanitizer, AddressSanitizer
//! and other tools preloaded or linked before the C library define them). An interceptor may
//! take locks and run deferred signal handlers, which the engine's signal paths must never do:
//! under ThreadSanitizer the engine's clearing of a tile from a handler's restorer ran the
//! program's handler again, for ever. These use the string instructions (`rep movsb` and
//! `rep stosb`, fast on CPUs with ERMS; the engine's copies are of tiles and signal frames),
//! with the direction flag clear as every caller leaves it (the C ABI, and the engine's
//! entries clear it).

core::arch::global_asm!(
    ".pushsection .text.amx_trap_bytes,\"ax\",@progbits",
    ".p2align 4",
    ".globl memcpy",
    ".hidden memcpy",
    ".type memcpy, @function",
    "memcpy:",
    "    mov rax, rdi",
    "    mov rcx, rdx",
    "    rep movsb",
    "    ret",
    ".size memcpy, . - memcpy",
    ".p2align 4",
    ".globl memmove",
    ".hidden memmove",
    ".type memmove, @function",
    // Forwards unless the destination starts inside the source, then backwards.
    "memmove:",
    "    mov rax, rdi",
    "    mov rcx, rdx",
    "    mov r8, rdi",
    "    sub r8, rsi",
    "    cmp r8, rdx",
    "    jb 2f",
    "    rep movsb",
    "    ret",
    "2:",
    "    lea rsi, [rsi + rdx - 1]",
    "    lea rdi, [rdi + rdx - 1]",
    "    std",
    "    rep movsb",
    "    cld",
    "    ret",
    ".size memmove, . - memmove",
    ".p2align 4",
    ".globl memset",
    ".hidden memset",
    ".type memset, @function",
    "memset:",
    "    mov r8, rdi",
    "    mov eax, esi",
    "    mov rcx, rdx",
    "    rep stosb",
    "    mov rax, r8",
    "    ret",
    ".size memset, . - memset",
    ".p2align 4",
    ".globl memcmp",
    ".hidden memcmp",
    ".type memcmp, @function",
    ".globl bcmp",
    ".hidden bcmp",
    ".type bcmp, @function",
    // The first differing bytes' difference, as unsigned bytes (0: equal).
    "memcmp:",
    "bcmp:",
    "    xor eax, eax",
    "    mov rcx, rdx",
    "    test rcx, rcx",
    "    jz 3f",
    "    repe cmpsb",
    "    je 3f",
    "    movzx eax, byte ptr [rdi - 1]",
    "    movzx ecx, byte ptr [rsi - 1]",
    "    sub eax, ecx",
    "3:",
    "    ret",
    ".size memcmp, . - memcmp",
    ".size bcmp, . - bcmp",
    ".popsection",
);

#[cfg(test)]
mod tests {
    extern "C" {
        fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8;
        fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8;
        fn memset(d: *mut u8, c: i32, n: usize) -> *mut u8;
        fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32;
    }

    /// Each routine against a byte loop, over lengths, offsets and overlaps.
    #[test]
    fn the_routines_do_what_the_c_library_does() {
        let pattern: Vec<u8> = (0..600u32).map(|i| (i * 37 % 251) as u8).collect();
        for n in [0, 1, 2, 7, 8, 63, 64, 65, 300] {
            for (d, s) in [(0, 100), (100, 0), (10, 13), (13, 10), (50, 50)] {
                let mut buf = pattern.clone();
                let want = {
                    let mut w = pattern.clone();
                    let src: Vec<u8> = w[s..s + n].to_vec();
                    w[d..d + n].copy_from_slice(&src);
                    w
                };
                // SAFETY: both ranges lie in `buf` (600 bytes).
                let r = unsafe { memmove(buf.as_mut_ptr().add(d), buf.as_ptr().add(s), n) };
                assert_eq!(r, buf.as_mut_ptr().wrapping_add(d));
                assert_eq!(buf, want, "memmove {d} {s} {n}");
                if d.abs_diff(s) >= n {
                    let mut buf = pattern.clone();
                    // SAFETY: as above, not overlapping.
                    unsafe { memcpy(buf.as_mut_ptr().add(d), buf.as_ptr().add(s), n) };
                    assert_eq!(buf, want, "memcpy {d} {s} {n}");
                }
            }
            let mut buf = pattern.clone();
            // SAFETY: 5 + n <= 600.
            let r = unsafe { memset(buf.as_mut_ptr().add(5), 0x1A5, n) };
            assert_eq!(r, buf.as_mut_ptr().wrapping_add(5));
            let mut want = pattern.clone();
            want[5..5 + n].fill(0xA5);
            assert_eq!(buf, want, "memset {n}");
            for at in 0..n {
                for (x, y) in [(1u8, 2u8), (200, 3), (3, 200)] {
                    let (mut a, mut b) = (pattern[..n].to_vec(), pattern[..n].to_vec());
                    (a[at], b[at]) = (x, y);
                    // SAFETY: both hold n bytes.
                    let got = unsafe { memcmp(a.as_ptr(), b.as_ptr(), n) };
                    assert_eq!(got.signum(), (i32::from(x) - i32::from(y)).signum());
                }
            }
            // SAFETY: n <= 600.
            assert_eq!(unsafe { memcmp(pattern.as_ptr(), pattern.as_ptr(), n) }, 0);
        }
    }
}
