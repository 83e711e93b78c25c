//! Writing a zmm register of the interrupted context: the AMX-AVX512 row moves' destination.
//!
//! The thread's vector registers are in its signal frame's XSAVE state (standard format, as the
//! kernel's `XSAVE` wrote it), which `rt_sigreturn` loads back with `XRSTOR`. A 512-bit
//! register lies in up to three state components:
//!
//! | register | bits 0..127 | bits 128..255 | bits 256..511 |
//! |---|---|---|---|
//! | zmm0..zmm15 | the legacy area's XMM slots (component 1, offset 160, 16 bytes each) | YMM_Hi128 (component 2, 16 bytes each) | ZMM_Hi256 (component 6, 32 bytes each) |
//! | zmm16..zmm31 | Hi16_ZMM (component 7, 64 bytes each) | | |
//!
//! The offsets of components 2, 6 and 7 come from CPUID leaf 0xD, read once at installation
//! ([`prepare`]). A component whose XSTATE_BV bit is clear is in its initial state (all zero)
//! and its bytes in the frame are undefined: the writer zeroes them, sets the bit, and then
//! writes the register, so that `XRSTOR` loads the component from the frame.
//!
//! The engine writes zmm registers only where the host has AVX-512 (AVX512F) and the OS
//! enables its state (XCR0 bits 1, 2, 5, 6 and 7). Elsewhere [`available`] is false, the
//! modelled CPU reports no AMX-AVX512, and the row moves raise #UD as on a CPU without it.
//!
//! Nothing here allocates, locks or panics: it runs in the engine's signal handler.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::kframe::{self, u32_at, u64_at};

/// Where the components of a zmm register lie in standard-format XSAVE state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Offset of component 2 (YMM_Hi128: bits 128..255 of zmm0..zmm15).
    pub(crate) ymm_hi128: usize,
    /// Offset of component 6 (ZMM_Hi256: bits 256..511 of zmm0..zmm15).
    pub(crate) zmm_hi256: usize,
    /// Offset of component 7 (Hi16_ZMM: zmm16..zmm31).
    pub(crate) hi16_zmm: usize,
}

/// XCR0 bits of the state a zmm register needs: SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM.
const ZMM_XCR0: u64 = (1 << 1) | (1 << 2) | (1 << 5) | (1 << 6) | (1 << 7);

/// The legacy area's XMM registers: 16 slots of 16 bytes (component 1).
const XMM_AREA: (usize, usize) = (kframe::XMM0, 256);

static AVAILABLE: AtomicBool = AtomicBool::new(false);
static YMM_HI128: AtomicU32 = AtomicU32::new(0);
static ZMM_HI256: AtomicU32 = AtomicU32::new(0);
static HI16_ZMM: AtomicU32 = AtomicU32::new(0);

/// XCR0, or 0 where the OS does not enable XSAVE.
fn xcr0() -> u64 {
    let leaf1 = raw_cpuid::native_cpuid::cpuid_count(1, 0);
    if leaf1.ecx & (1 << 27) == 0 {
        return 0;
    }
    let (lo, hi): (u32, u32);
    // SAFETY: XGETBV with ECX = 0 exists where CPUID reports OSXSAVE (checked); it reads XCR0.
    unsafe {
        core::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// The host's layout, where it has AVX-512 with its state enabled.
pub(crate) fn host_layout() -> Option<Layout> {
    let leaf0 = raw_cpuid::native_cpuid::cpuid_count(0, 0);
    if leaf0.eax < 0xD {
        return None;
    }
    let leaf7 = raw_cpuid::native_cpuid::cpuid_count(7, 0);
    if leaf7.ebx & (1 << 16) == 0 || xcr0() & ZMM_XCR0 != ZMM_XCR0 {
        return None;
    }
    let component = |i: u32, size: u32| {
        let r = raw_cpuid::native_cpuid::cpuid_count(0xD, i);
        // The standard format puts every user component at or past the XSAVE header.
        (r.eax == size && r.ebx >= 576).then_some(r.ebx as usize)
    };
    Some(Layout {
        ymm_hi128: component(2, 256)?,
        zmm_hi256: component(6, 512)?,
        hi16_zmm: component(7, 1024)?,
    })
}

/// Reads, once at installation, whether the engine can write zmm registers, and where.
pub(crate) fn prepare() {
    if let Some(l) = host_layout() {
        YMM_HI128.store(l.ymm_hi128 as u32, Ordering::Relaxed);
        ZMM_HI256.store(l.zmm_hi256 as u32, Ordering::Relaxed);
        HI16_ZMM.store(l.hi16_zmm as u32, Ordering::Relaxed);
        AVAILABLE.store(true, Ordering::Release);
    }
}

/// Whether the host's AVX-512 state is usable (found by [`prepare`]).
pub(crate) fn available() -> bool {
    AVAILABLE.load(Ordering::Acquire)
}

/// The layout [`prepare`] found, if any.
fn layout() -> Option<Layout> {
    available().then(|| Layout {
        ymm_hi128: YMM_HI128.load(Ordering::Relaxed) as usize,
        zmm_hi256: ZMM_HI256.load(Ordering::Relaxed) as usize,
        hi16_zmm: HI16_ZMM.load(Ordering::Relaxed) as usize,
    })
}

/// Writes `value` (64 bytes, little-endian) as zmm register `n` of the XSAVE state `fp`, laid
/// out as the host lays it out. `false` where the host has no usable AVX-512 state or the
/// state cannot hold the register (see [`write_with`]); `fp` is then unchanged.
pub(crate) fn write(fp: &mut [u8], n: u8, value: &[u8; 64]) -> bool {
    layout().is_some_and(|l| write_with(fp, l, n, value))
}

/// One piece of a register: its state component, the component's area (offset, size), where
/// the piece lies, and which bytes of the register it holds.
type Part = (u32, (usize, usize), usize, (usize, usize));

/// Writes `value` as zmm register `n` (0..=31) of the XSAVE state `fp` with the component
/// offsets of `layout`. `false`, leaving `fp` unchanged, where `fp` is not standard-format
/// XSAVE state that `rt_sigreturn` restores each needed component from: no XSAVE software
/// bytes, a needed component missing from their `xfeatures` or lying past the state's size,
/// the compacted format, or `n` past 31.
pub(crate) fn write_with(fp: &mut [u8], layout: Layout, n: u8, value: &[u8; 64]) -> bool {
    let n = usize::from(n);
    if n >= 32 || u32_at(fp, kframe::sw::AT) != Some(kframe::sw::MAGIC1) {
        return false;
    }
    // `struct _fpx_sw_bytes`: magic1, extended_size, xfeatures, xstate_size.
    let (Some(xfeatures), Some(xstate_size)) = (
        u64_at(fp, kframe::sw::XFEATURES),
        u32_at(fp, kframe::sw::XSTATE_SIZE),
    ) else {
        return false;
    };
    let end = fp.len().min(xstate_size as usize);
    let xcomp_bv = u64_at(fp, kframe::XSTATE_BV + 8).unwrap_or(0);
    if xcomp_bv & (1 << 63) != 0 {
        return false;
    }
    let parts: [Part; 3] = if n < 16 {
        [
            (1, XMM_AREA, XMM_AREA.0 + 16 * n, (0, 16)),
            (
                2,
                (layout.ymm_hi128, 256),
                layout.ymm_hi128 + 16 * n,
                (16, 32),
            ),
            (
                6,
                (layout.zmm_hi256, 512),
                layout.zmm_hi256 + 32 * n,
                (32, 64),
            ),
        ]
    } else {
        let at = layout.hi16_zmm + 64 * (n - 16);
        // One component: the same part three times.
        let part = (7, (layout.hi16_zmm, 1024), at, (0, 64));
        [part, part, part]
    };
    // Check everything before writing anything.
    for &(c, (start, size), _, _) in &parts {
        if xfeatures & (1 << c) == 0 || start.saturating_add(size) > end {
            return false;
        }
    }
    let Some(mut bv) = u64_at(fp, kframe::XSTATE_BV) else {
        return false;
    };
    for &(c, (start, size), at, (from, to)) in &parts {
        if bv & (1 << c) == 0 {
            // In its initial state: every register of the component is zero.
            if let Some(area) = fp.get_mut(start..start + size) {
                area.fill(0);
            }
            bv |= 1 << c;
        }
        if let (Some(dst), Some(src)) = (fp.get_mut(at..at + (to - from)), value.get(from..to)) {
            dst.copy_from_slice(src);
        }
    }
    if let Some(dst) = fp.get_mut(kframe::XSTATE_BV..kframe::XSTATE_BV + 8) {
        dst.copy_from_slice(&bv.to_le_bytes());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The standard layout of an AVX-512 CPU (CPUID leaf 0xD).
    const LAYOUT: Layout = Layout {
        ymm_hi128: 576,
        zmm_hi256: 1152,
        hi16_zmm: 1664,
    };
    const SIZE: usize = 2688;

    /// An XSAVE frame image of `SIZE` bytes with software bytes for `xfeatures`, every byte
    /// past the header 0xEE (what an INIT component's bytes may hold), XSTATE_BV `bv`.
    fn frame(xfeatures: u64, bv: u64) -> Vec<u8> {
        let mut fp = vec![0xEE; SIZE + 4];
        fp[464..468].copy_from_slice(&kframe::sw::MAGIC1.to_le_bytes());
        fp[468..472].copy_from_slice(&((SIZE + 4) as u32).to_le_bytes());
        fp[472..480].copy_from_slice(&xfeatures.to_le_bytes());
        fp[480..484].copy_from_slice(&(SIZE as u32).to_le_bytes());
        fp[512..576].fill(0);
        fp[512..520].copy_from_slice(&bv.to_le_bytes());
        fp
    }

    fn value(seed: u8) -> [u8; 64] {
        std::array::from_fn(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
    }

    #[test]
    fn low_registers_span_three_components() {
        let mut fp = frame(0xE7, 0xE7);
        let before = fp.clone();
        let v = value(5);
        assert!(write_with(&mut fp, LAYOUT, 5, &v));
        assert_eq!(&fp[160 + 80..160 + 96], &v[..16]);
        assert_eq!(&fp[576 + 80..576 + 96], &v[16..32]);
        assert_eq!(&fp[1152 + 160..1152 + 192], &v[32..]);
        // Nothing else changed.
        let changed = (0..fp.len()).filter(|&i| fp[i] != before[i]).count();
        assert!(changed <= 64, "{changed} bytes changed");
        assert_eq!(u64_at(&fp, 512), Some(0xE7));
    }

    #[test]
    fn high_registers_are_in_hi16_zmm() {
        let mut fp = frame(0xE7, 0xE7);
        let v = value(31);
        assert!(write_with(&mut fp, LAYOUT, 31, &v));
        assert_eq!(&fp[1664 + 15 * 64..1664 + 16 * 64], &v[..]);
        assert!(write_with(&mut fp, LAYOUT, 16, &v));
        assert_eq!(&fp[1664..1664 + 64], &v[..]);
    }

    #[test]
    fn init_components_are_zeroed_and_marked_in_use() {
        // x87 only in use: SSE, AVX and the AVX-512 components in their initial state.
        let mut fp = frame(0xE7, 0x01);
        let v = value(2);
        assert!(write_with(&mut fp, LAYOUT, 2, &v));
        assert_eq!(u64_at(&fp, 512), Some(0x47));
        // The other registers of those components read as zeros, not the frame's old bytes.
        assert!(fp[160..160 + 32].iter().all(|&b| b == 0));
        assert!(fp[160 + 48..416].iter().all(|&b| b == 0));
        assert!(fp[576..576 + 32].iter().all(|&b| b == 0));
        assert!(fp[1152 + 96..1664].iter().all(|&b| b == 0));
        assert_eq!(&fp[1152 + 64..1152 + 96], &v[32..]);
        // Hi16_ZMM untouched.
        assert!(fp[1664..2688].iter().all(|&b| b == 0xEE));
        let mut fp = frame(0xE7, 0x03);
        assert!(write_with(&mut fp, LAYOUT, 20, &v));
        assert_eq!(u64_at(&fp, 512), Some(0x83));
        assert!(fp[1664..1664 + 256].iter().all(|&b| b == 0));
        assert_eq!(&fp[1664 + 256..1664 + 320], &v[..]);
    }

    #[test]
    fn unusable_states_are_refused_unchanged() {
        let v = value(1);
        for (mut fp, n) in [
            // No AVX-512 components in xfeatures (an AVX2 host's frame).
            (frame(0x07, 0x07), 3),
            (frame(0x67, 0x07), 17),
            // Register past 31.
            (frame(0xE7, 0xE7), 32),
            // Cut short before Hi16_ZMM.
            (frame(0xE7, 0xE7)[..1700].to_vec(), 18),
            // No XSAVE software bytes: a legacy 512-byte frame.
            (vec![0u8; 512], 0),
        ] {
            let before = fp.clone();
            assert!(!write_with(&mut fp, LAYOUT, n, &v), "zmm{n}");
            assert_eq!(fp, before);
        }
        let mut fp = frame(0xE7, 0xE7);
        fp[527] = 0x80; // XCOMP_BV bit 63: compacted
        assert!(!write_with(&mut fp, LAYOUT, 0, &v));
    }

    // The real thing: a signal handler writes a register into the frame the kernel built, and
    // the thread finds it in the register after `rt_sigreturn`.

    static PENDING_N: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    static PENDING_VALUE: [AtomicU32; 16] = [const { AtomicU32::new(0) }; 16];
    static WROTE: AtomicBool = AtomicBool::new(false);

    extern "C" fn write_pending(_: libc::c_int, _: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let mut v = [0u8; 64];
        for (chunk, word) in v.chunks_exact_mut(4).zip(PENDING_VALUE.iter()) {
            chunk.copy_from_slice(&word.load(Ordering::SeqCst).to_le_bytes());
        }
        // SAFETY: the context of an SA_SIGINFO handler; its FP state is the kernel's frame,
        // `fp_size` bytes long as its software bytes say.
        let wrote = unsafe {
            let uc = &*ctx.cast::<libc::ucontext_t>();
            let fp = uc.uc_mcontext.fpregs as *mut u8;
            let len = kframe::fp_size(&*fp.cast::<[u8; 512]>());
            let fp = std::slice::from_raw_parts_mut(fp, len);
            write(fp, PENDING_N.load(Ordering::SeqCst), &v)
        };
        WROTE.store(wrote, Ordering::SeqCst);
    }

    /// Sends SIGUSR2 to this thread with zmm `$n` holding `fill` (its upper halves cleared by
    /// VZEROUPPER first where `$init`) and zmm `$other` holding `keep`, and reads both back.
    macro_rules! probe {
        ($name:ident, $n:tt, $other:tt) => {
            /// # Safety
            /// The CPU has AVX-512F and the OS enables its state.
            #[target_feature(enable = "avx512f")]
            unsafe fn $name(init: bool, fill: &[u8; 64], keep: &[u8; 64]) -> ([u8; 64], [u8; 64]) {
                let (mut got, mut kept) = ([0u8; 64], [0u8; 64]);
                // SAFETY: the function's contract; the buffers are 64 bytes; tgkill's
                // registers are declared; the handler only writes the frame.
                unsafe {
                    core::arch::asm!(
                        concat!("vmovdqu64 ", $other, ", [{keep}]"),
                        concat!("vmovdqu64 ", $n, ", [{fill}]"),
                        "test {init:e}, {init:e}",
                        "jz 2f",
                        "vzeroupper",
                        "2:",
                        "syscall",
                        concat!("vmovdqu64 [{got}], ", $n),
                        concat!("vmovdqu64 [{kept}], ", $other),
                        keep = in(reg) keep.as_ptr(),
                        fill = in(reg) fill.as_ptr(),
                        init = in(reg) u32::from(init),
                        got = in(reg) got.as_mut_ptr(),
                        kept = in(reg) kept.as_mut_ptr(),
                        inlateout("rax") libc::SYS_tgkill => _,
                        in("rdi") libc::getpid(),
                        in("rsi") libc::gettid(),
                        in("rdx") libc::SIGUSR2,
                        out("rcx") _,
                        out("r11") _,
                        out($n) _,
                        out($other) _,
                    );
                }
                (got, kept)
            }
        };
    }

    probe!(probe_0, "zmm0", "zmm1");
    probe!(probe_7, "zmm7", "zmm15");
    probe!(probe_15, "zmm15", "zmm16");
    probe!(probe_16, "zmm16", "zmm3");
    probe!(probe_22, "zmm22", "zmm31");
    probe!(probe_31, "zmm31", "zmm30");

    #[test]
    fn kernel_frames_take_the_written_register() {
        if host_layout().is_none() {
            eprintln!("skipped: the host has no usable AVX-512 state");
            return;
        }
        prepare();
        // SAFETY: an all-zero sigaction is valid; the handler writes only the frame and atomics.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = write_pending as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
        }
        type Probe = unsafe fn(bool, &[u8; 64], &[u8; 64]) -> ([u8; 64], [u8; 64]);
        let probes: [(u8, Probe); 6] = [
            (0, probe_0),
            (7, probe_7),
            (15, probe_15),
            (16, probe_16),
            (22, probe_22),
            (31, probe_31),
        ];
        for (n, probe) in probes {
            for init in [false, true] {
                let want = value(n.wrapping_add(100));
                for (word, chunk) in PENDING_VALUE.iter().zip(want.chunks_exact(4)) {
                    word.store(
                        u32::from_le_bytes(chunk.try_into().unwrap()),
                        Ordering::SeqCst,
                    );
                }
                PENDING_N.store(n, Ordering::SeqCst);
                WROTE.store(false, Ordering::SeqCst);
                let keep = value(n.wrapping_add(7));
                // SAFETY: the host has AVX-512 with its state enabled (checked above).
                let (got, kept) = unsafe { probe(init, &value(n), &keep) };
                assert!(WROTE.load(Ordering::SeqCst), "zmm{n}: not written");
                assert_eq!(got, want, "zmm{n} (vzeroupper: {init})");
                // The other register is untouched (a zmm0..15 one lost its upper half to
                // VZEROUPPER).
                let mut keep_now = keep;
                let other_low = !matches!(n, 15 | 22 | 31);
                if init && other_low {
                    keep_now[16..].fill(0);
                }
                assert_eq!(kept, keep_now, "zmm{n}'s neighbour (vzeroupper: {init})");
            }
        }
    }
}
