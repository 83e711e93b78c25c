//! What the trap engine's test binaries share: the engine (through
//! `amx_test_support::needs::trap_engine`), the child-process harness, test data, and a fault
//! handler that records what it was given.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, AtomicUsize, Ordering};

pub use amx_test_support::needs::trap_engine;
pub use amx_test_support::{in_child, Child};

/// The address of two fresh read-write pages (8 KiB) of an anonymous private mapping, for the
/// tests that make the second one fault.
pub fn two_pages() -> usize {
    // SAFETY: a new anonymous mapping, shared with nothing.
    let pages = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(pages, libc::MAP_FAILED, "mmap of two pages");
    pages as usize
}

/// `n` random bytes from `seed`.
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    amx_test_support::SplitMix64::new(seed).bytes(n)
}

/// Palette 1 with every tile 16 rows of 64 bytes.
pub static CONFIG_16X64: [u8; 64] = amx_test_support::TileImage::palette(1)
    .all_tiles(16, 64)
    .bytes();

// What the handlers saw: signal, si_code, REG_TRAPNO, si_addr, REG_ERR, RIP, RSI.
pub static SEEN_SIG: AtomicI32 = AtomicI32::new(0);
pub static SEEN_CODE: AtomicI32 = AtomicI32::new(0);
pub static SEEN_TRAPNO: AtomicI64 = AtomicI64::new(-1);
pub static SEEN_ADDR: AtomicU64 = AtomicU64::new(0);
pub static SEEN_ERR: AtomicI64 = AtomicI64::new(-1);
pub static SEEN_RIP: AtomicU64 = AtomicU64::new(0);
pub static SEEN_RSI: AtomicU64 = AtomicU64::new(0);
/// Bytes the handler moves RIP on by (0: return to retry).
pub static SKIP: AtomicUsize = AtomicUsize::new(0);
/// A page the handler makes readable and writable before retrying.
pub static UNPROTECT: AtomicUsize = AtomicUsize::new(0);

/// Records what the handler was given, moves RIP on by [`SKIP`] and unprotects [`UNPROTECT`].
pub extern "C" fn record(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the siginfo and context of an SA_SIGINFO handler.
    unsafe {
        let uc = &mut *ctx.cast::<libc::ucontext_t>();
        let g = &mut uc.uc_mcontext.gregs;
        SEEN_SIG.store(sig, Ordering::SeqCst);
        SEEN_CODE.store((*info).si_code, Ordering::SeqCst);
        SEEN_ADDR.store((*info).si_addr() as u64, Ordering::SeqCst);
        SEEN_TRAPNO.store(g[libc::REG_TRAPNO as usize], Ordering::SeqCst);
        SEEN_ERR.store(g[libc::REG_ERR as usize], Ordering::SeqCst);
        SEEN_RIP.store(g[libc::REG_RIP as usize] as u64, Ordering::SeqCst);
        SEEN_RSI.store(g[libc::REG_RSI as usize] as u64, Ordering::SeqCst);
        g[libc::REG_RIP as usize] += SKIP.load(Ordering::SeqCst) as i64;
        let page = UNPROTECT.swap(0, Ordering::SeqCst);
        if page != 0 {
            libc::mprotect(
                page as *mut libc::c_void,
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
            );
        }
    }
}

/// Makes [`record`] the handler of `sig`.
pub fn handle(sig: libc::c_int) {
    // SAFETY: an all-zero sigaction is valid; the handler only uses atomics and mprotect.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = record as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// (signal, code, trapno, addr, err, rip), clearing the signal.
pub fn seen() -> (i32, i32, i64, u64, i64, u64) {
    (
        SEEN_SIG.swap(0, Ordering::SeqCst),
        SEEN_CODE.load(Ordering::SeqCst),
        SEEN_TRAPNO.load(Ordering::SeqCst),
        SEEN_ADDR.load(Ordering::SeqCst),
        SEEN_ERR.load(Ordering::SeqCst),
        SEEN_RIP.load(Ordering::SeqCst),
    )
}
