//! Direct, fault-recovering copies for the fast path of patched sites.
//!
//! `process_vm_readv`/`writev` (the slow path's access, [`super::memory`]) costs a system call
//! per instruction, more than the emulator's whole tile load. On the fast path the operand
//! rows are copied by [`copy`], a small assembly routine whose address range the engine's
//! SIGSEGV handler knows: a fault inside it resumes at its recovery label, which returns
//! "faulted". The access is then redone through the slow path's system calls, which compute
//! the exact page fault (address, and whether the page is mapped) the silicon would raise;
//! and should the memory have become accessible meanwhile, that access simply succeeds. So a
//! bad operand never raises a signal anywhere but at the instruction itself.
//!
//! The SIGSEGV handler: the engine's own when it occupies SIGSEGV (the preload), else one this
//! module installs when patching is prepared, which recovers copy faults and passes every other
//! SIGSEGV on to the action it replaced, as the kernel would have delivered it. Direct copies
//! are used only while that handler is in place ([`check_guard`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::deliver::{self, Action};
use super::memory::Span;
use super::regs::context;

thread_local! {
    /// Whether this thread's memory accesses are the fast path's (direct copies).
    static DIRECT: Cell<bool> = const { Cell::new(false) };
}

/// Whether a SIGSEGV handler that recovers copy faults is in place.
static GUARD: AtomicBool = AtomicBool::new(false);
/// The address range of [`copy`] (end exclusive), measured once.
static START: AtomicU64 = AtomicU64::new(0);
static END: AtomicU64 = AtomicU64::new(0);
/// The action our own SIGSEGV handler replaced (when the engine does not occupy SIGSEGV).
static PREV_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREV_FLAGS: AtomicU64 = AtomicU64::new(0);
static PREV_MASK: AtomicU64 = AtomicU64::new(0);
/// Whether our own SIGSEGV handler was installed.
static OWN_HANDLER: AtomicBool = AtomicBool::new(false);

/// Offset of the recovery label in [`copy`].
const RECOVER: u64 = 2;

/// Copies `len` bytes from `src` to `dst`; returns 0, or 1 when an access faulted (the copy is
/// then partial). Uses AVX (the fast path exists only where the OS enables AVX state).
///
/// # Safety
/// `dst..dst+len` is writable memory of the caller's that nothing else accesses meanwhile; an
/// inaccessible `src` (or `dst`) range is recovered from only while [`GUARD`] holds.
#[unsafe(naked)]
unsafe extern "C" fn copy(dst: *mut u8, src: *const u8, len: usize) -> u64 {
    core::arch::naked_asm!(
        "jmp 3f",
        // The recovery label, at offset RECOVER.
        "mov eax, 1",
        "vzeroupper",
        "ret",
        "3:",
        // 64 bytes at a time (a tile row), then 16, then single bytes.
        "cmp rdx, 64",
        "jb 8f",
        "9:",
        "vmovdqu ymm0, [rsi]",
        "vmovdqu ymm1, [rsi + 32]",
        "vmovdqu [rdi], ymm0",
        "vmovdqu [rdi + 32], ymm1",
        "add rsi, 64",
        "add rdi, 64",
        "sub rdx, 64",
        "cmp rdx, 64",
        "jae 9b",
        // Clean upper halves again for the SSE code the caller runs.
        "vzeroupper",
        "8:",
        "cmp rdx, 16",
        "jb 5f",
        "4:",
        "movdqu xmm0, [rsi]",
        "movdqu [rdi], xmm0",
        "add rsi, 16",
        "add rdi, 16",
        "sub rdx, 16",
        "cmp rdx, 16",
        "jae 4b",
        "5:",
        "test rdx, rdx",
        "jz 7f",
        "6:",
        "movzx eax, byte ptr [rsi]",
        "mov byte ptr [rdi], al",
        "inc rsi",
        "inc rdi",
        "dec rdx",
        "jnz 6b",
        "7:",
        "xor eax, eax",
        "ret",
        // The end marker `prepare` looks for.
        "ud2",
        "ud2",
        "ud2",
    )
}

/// Measures [`copy`]'s range and makes sure a SIGSEGV handler recovers its faults. Outside
/// signal context, once.
pub(crate) fn prepare() {
    let start = copy as *const () as u64;
    // SAFETY: the routine's own code bytes, readable (text); the scan stops at its end marker,
    // within the 256 bytes it spans.
    let code = unsafe { std::slice::from_raw_parts(start as *const u8, 256) };
    let Some(end) = code
        .windows(6)
        .position(|w| w == [0x0F, 0x0B, 0x0F, 0x0B, 0x0F, 0x0B])
    else {
        return;
    };
    // The recovery label must be where RECOVER says: `jmp short` then `mov eax, 1`.
    if code[0] != 0xEB || code[RECOVER as usize] != 0xB8 {
        return;
    }
    START.store(start, Ordering::Relaxed);
    END.store(start + end as u64, Ordering::Relaxed);
    if !deliver::owned(libc::SIGSEGV) {
        let ours = Action {
            handler: on_sigsegv as *const () as usize,
            flags: libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART,
            mask: 0,
        }
        .to_c();
        // SAFETY: an all-zero sigaction is valid.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are live sigactions; the handler is async-signal-safe.
        if unsafe { deliver::real_sigaction(libc::SIGSEGV, &ours, &mut old) } != 0 {
            return;
        }
        let old = Action::from_c(&old);
        PREV_HANDLER.store(old.handler, Ordering::Relaxed);
        PREV_FLAGS.store(old.flags as u32 as u64, Ordering::Relaxed);
        PREV_MASK.store(old.mask, Ordering::Relaxed);
        OWN_HANDLER.store(true, Ordering::Release);
    }
    GUARD.store(true, Ordering::Release);
}

/// Re-checks that the SIGSEGV handler recovering copy faults is still the kernel's: a program
/// may have replaced it. Direct copies stop for good if it was. Async-signal-safe.
pub(crate) fn check_guard() {
    if !GUARD.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: an all-zero sigaction is valid; a null new action only reads.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `now` is a live sigaction.
    if unsafe { deliver::real_sigaction(libc::SIGSEGV, std::ptr::null(), &mut now) } != 0 {
        GUARD.store(false, Ordering::Release);
        return;
    }
    let ours = if deliver::owned(libc::SIGSEGV) {
        super::handler::on_sigsegv as *const () as usize
    } else {
        on_sigsegv as *const () as usize
    };
    if now.sa_sigaction != ours {
        GUARD.store(false, Ordering::Release);
    }
}

/// Runs `f` with this thread's memory accesses made by direct copies.
pub(crate) fn direct<R>(f: impl FnOnce() -> R) -> R {
    let was = DIRECT.with(|d| d.replace(GUARD.load(Ordering::Relaxed)));
    let r = f();
    DIRECT.with(|d| d.set(was));
    r
}

/// Runs `f` with this thread's memory accesses made by system calls (the slow path's).
pub(crate) fn indirect<R>(f: impl FnOnce() -> R) -> R {
    let was = DIRECT.with(|d| d.replace(false));
    let r = f();
    DIRECT.with(|d| d.set(was));
    r
}

fn active() -> bool {
    DIRECT.with(|d| d.get())
}

/// Reads `spans` into `out` by direct copies, when on the fast path; false when not on it or
/// when an access faulted (the caller then reads with the system call, which finds the fault).
pub(crate) fn try_read(spans: &[Span], out: &mut [&mut [u8]]) -> bool {
    if !active() {
        return false;
    }
    spans.iter().zip(out.iter_mut()).all(|(s, o)| {
        let len = s.len.min(o.len());
        // SAFETY: `o` is the caller's exclusively borrowed buffer of at least `len` bytes; the
        // source is the program's operand, whose faults the guard recovers (`active`).
        unsafe { copy(o.as_mut_ptr(), s.addr as *const u8, len) == 0 }
    })
}

/// Writes `data` to `spans` by direct copies, as [`try_read`].
pub(crate) fn try_write(spans: &[Span], data: &[&[u8]]) -> bool {
    if !active() {
        return false;
    }
    spans.iter().zip(data.iter()).all(|(s, d)| {
        let len = s.len.min(d.len());
        // SAFETY: the destination is the program's operand, written as its instruction would
        // write it, faults recovered (`active`); the source is the caller's buffer.
        unsafe { copy(s.addr as *mut u8, d.as_ptr(), len) == 0 }
    })
}

/// If the fault described by `info` and `uc` happened inside [`copy`], resumes it at its
/// recovery label and returns true.
pub(crate) fn recover(info: &libc::siginfo_t, uc: &mut libc::ucontext_t) -> bool {
    let rip = context::rip(uc);
    let start = START.load(Ordering::Relaxed);
    if info.si_code <= 0 || start == 0 || rip < start || rip >= END.load(Ordering::Relaxed) {
        return false;
    }
    context::set_rip(uc, start + RECOVER);
    true
}

/// Our SIGSEGV handler (when the engine does not occupy SIGSEGV): recovers copy faults; every
/// other SIGSEGV goes to the action it replaced.
extern "C" fn on_sigsegv(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t and ucontext_t to an SA_SIGINFO handler.
    let (info, ctx) = unsafe { (&mut *info, &mut *uc.cast::<libc::ucontext_t>()) };
    if recover(info, ctx) {
        return;
    }
    let handler = PREV_HANDLER.load(Ordering::Relaxed);
    let flags = PREV_FLAGS.load(Ordering::Relaxed) as i32;
    match handler {
        libc::SIG_IGN if info.si_code <= 0 => {}
        libc::SIG_DFL | libc::SIG_IGN => {
            // The kernel's own default: back in its table; a fault then repeats when this
            // returns and ends the process with the right context, a sent signal is re-sent.
            let dfl = Action::DEFAULT.to_c();
            // SAFETY: `dfl` is a valid sigaction.
            unsafe { deliver::real_sigaction(sig, &dfl, std::ptr::null_mut()) };
            OWN_HANDLER.store(false, Ordering::Release);
            GUARD.store(false, Ordering::Release);
            if info.si_code <= 0 {
                // SAFETY: plain system calls on this thread.
                unsafe {
                    libc::syscall(
                        libc::SYS_tgkill,
                        libc::getpid(),
                        libc::syscall(libc::SYS_gettid),
                        sig,
                    );
                }
            }
        }
        h => {
            // The program's handler, under the mask it asked for, as the kernel calls it.
            let mut mask =
                deliver::sigset_bits(&ctx.uc_sigmask) | PREV_MASK.load(Ordering::Relaxed);
            if flags & libc::SA_NODEFER == 0 {
                mask |= deliver::bit(sig);
            }
            let old = deliver::block_all();
            deliver::set_mask(libc::SIG_SETMASK, mask);
            // SAFETY: the program installed this handler for SIGSEGV with these flags; it gets
            // what the kernel would pass it.
            unsafe {
                if flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute::<usize, _>(h);
                    f(sig, info, uc);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute::<usize, _>(h);
                    f(sig);
                }
            }
            deliver::set_mask(libc::SIG_SETMASK, old);
        }
    }
}
