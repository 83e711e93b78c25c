//! Threads: a new thread gets the mask its creator set (or its attributes'), as a thread the
//! kernel starts gets its creator's, and its creator's tile configuration with zeroed tile
//! data, as on the silicon; its engine state is given back when it ends.

use crate::{active, sig};

/// What a thread starts with: the program's function and argument, its mask, and its
/// creator's tile configuration.
struct Start {
    f: extern "C-unwind" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
    mask: u64,
    tiles: Option<[u8; 64]>,
}

/// The new thread's first function: the program's mask, then the program's function.
extern "C-unwind" fn started(start: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `pthread_create` passes the Box it leaked for this thread, used once.
    let Start {
        f,
        arg,
        mask,
        tiles,
    } = *unsafe { Box::from_raw(start.cast::<Start>()) };
    sig::set_program_mask(mask);
    if let Some(config) = tiles {
        engine::preload::inherit_tile_config(&config);
    }
    // A new thread has no alternate stack; its id may be an ended thread's.
    engine::preload::forget_signal_stack();
    let r = f(arg);
    engine::preload::thread_exit();
    r
}

/// `pthread_create(3)`.
///
/// # Safety
/// As the C library's `pthread_create`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    f: extern "C-unwind" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
) -> libc::c_int {
    let Some(real) = crate::real::pthread_create() else {
        return libc::ENOSYS;
    };
    if !active() {
        // SAFETY: forwarded.
        return unsafe { real(thread, attr, f, arg) };
    }
    // The mask the thread starts with: its attributes', else its creator's.
    let mut mask = sig::program_mask();
    if let (false, Some(get)) = (attr.is_null(), crate::real::pthread_attr_getsigmask_np()) {
        // SAFETY: an all-zero sigset_t is valid.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's valid attributes, only read; `set` is a live local.
        if unsafe { get(attr, &mut set) } == 0 {
            mask = sig::bits(&set);
        }
    }
    let tiles = engine::preload::tile_config();
    let start = Box::into_raw(Box::new(Start {
        f,
        arg,
        mask,
        tiles,
    }));
    // SAFETY: forwarded, with our start function and its argument.
    let rc = unsafe { real(thread, attr, started, start.cast()) };
    if rc != 0 {
        // SAFETY: the thread was not created: the Box is still ours.
        drop(unsafe { Box::from_raw(start) });
    }
    rc
}

/// `pthread_exit(3)`: the thread's engine state given back first.
///
/// # Safety
/// As the C library's `pthread_exit`.
#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_exit(value: *mut libc::c_void) -> ! {
    engine::preload::thread_exit();
    match crate::real::pthread_exit() {
        // SAFETY: forwarded.
        Some(real) => unsafe { real(value) },
        // SAFETY: ends the thread without the C library (no cleanup handlers then).
        None => unsafe {
            engine::sys::call(libc::SYS_exit, &[0]);
            libc::abort()
        },
    }
}
