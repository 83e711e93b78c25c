//! `sigsetjmp` and the `longjmp` family: the C library saves and restores the kernel's mask,
//! which never blocks the engine's signals; the program's view of those goes along, kept in
//! the saved mask's unused words (the kernel's mask is its first 8 of 128 bytes).

use std::sync::atomic::{AtomicUsize, Ordering};

use engine::preload as trap;

use crate::active;

/// Offsets in glibc's `struct __jmp_buf_tag` (x86-64): registers (8 words), then
/// `__mask_was_saved` (an int), then `__saved_mask` (a 128-byte sigset_t).
const MASK_WAS_SAVED: usize = 64;
const SAVED_MASK: usize = 72;
/// The engine's word: in the saved mask past the kernel's 8 bytes.
const VIEW: usize = SAVED_MASK + 8;
/// Marks the engine's word (high half).
const MARK: u64 = 0x414d_5854 << 32;

/// The C library's `__sigsetjmp` (0 until resolved).
static REAL_SIGSETJMP: AtomicUsize = AtomicUsize::new(0);

/// `__sigsetjmp(env, savemask)` (what `sigsetjmp` expands to): the program's view of the
/// engine's signals is written into `env` first, then the C library's function runs with the
/// caller's registers and return address, as if called directly (it returns twice, so this
/// function keeps no frame of its own). A Rust function, so that the library exports it.
///
/// # Safety
/// As the C library's `__sigsetjmp`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __sigsetjmp(env: *mut u8, savemask: libc::c_int) -> libc::c_int {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {stash}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "jmp qword ptr [rip + {real}]",
        stash = sym stash,
        real = sym REAL_SIGSETJMP,
    )
}

/// Finds the C library's `__sigsetjmp` (from the constructor, or on the first call, made
/// before it ran).
pub(crate) fn resolve() {
    REAL_SIGSETJMP.store(crate::real::__sigsetjmp().unwrap_or(0), Ordering::Relaxed);
}

extern "C" fn stash(env: *mut u8, savemask: libc::c_int) {
    if REAL_SIGSETJMP.load(Ordering::Relaxed) == 0 {
        resolve();
    }
    if savemask != 0 && active() && !env.is_null() {
        let view = crate::sig::program_mask() & trap::ENGINE;
        // SAFETY: `env` is the caller's jmp_buf (200 bytes), this word in its saved mask.
        unsafe { env.add(VIEW).cast::<u64>().write_unaligned(MARK | view) };
    }
}

/// Before a jump: the program's view as `sigsetjmp` saved it, when it saved the mask.
fn restore_view(env: *const u8) {
    if !active() || env.is_null() {
        return;
    }
    // SAFETY: `env` is the caller's jmp_buf, filled by `__sigsetjmp`.
    let (saved, kernel, word) = unsafe {
        (
            env.add(MASK_WAS_SAVED).cast::<i32>().read_unaligned(),
            env.add(SAVED_MASK).cast::<u64>().read_unaligned(),
            env.add(VIEW).cast::<u64>().read_unaligned(),
        )
    };
    if saved == 0 {
        return;
    }
    let view = if word & !0xFFFF_FFFF == MARK {
        word & trap::ENGINE
    } else {
        0
    };
    crate::sig::set_program_mask((kernel & !trap::ENGINE) | view);
}

macro_rules! jump {
    ($($name:ident),*) => {
        $(
            /// The C library's function of this name, after the program's view is restored.
            ///
            /// # Safety
            /// As the C library's function.
            #[no_mangle]
            pub unsafe extern "C" fn $name(env: *mut libc::c_void, val: libc::c_int) -> ! {
                restore_view(env.cast_const().cast());
                match crate::real::$name() {
                    // SAFETY: forwarded.
                    Some(real) => unsafe { real(env, val) },
                    None => std::process::abort(),
                }
            }
        )*
    };
}

jump!(siglongjmp, longjmp, _longjmp, __longjmp_chk);
