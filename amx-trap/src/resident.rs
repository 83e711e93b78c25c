//! The engine stays mapped for the life of the process once it is installed.
//!
//! Installing hands the kernel the engine's signal handlers and writes jumps into the
//! program's code towards stubs that call the engine. Where the engine lives in a shared
//! object the program loaded with `dlopen` (the preload library opened as a plugin, a Rust
//! `cdylib` that calls [`crate::install`]), a `dlclose` would unmap that code under them: the
//! next AMX instruction, or any fault, would jump into unmapped memory and the process would
//! die of SIGSEGV. On the silicon no library stands behind an AMX instruction, so nothing
//! the program closes can take the instructions away. So installation marks the object
//! holding the engine `RTLD_NODELETE`: its `dlclose` then returns 0 and leaves it mapped, with
//! its state (the threads' slots, the patch sites, the reserve) intact.

/// Marks the shared object that holds this code `RTLD_NODELETE`, as glibc documents for an
/// object already loaded (`dlopen` with `RTLD_NOLOAD`), once per process. Nothing to do, and
/// nothing done, where the engine is part of the executable, which is never unloaded:
/// `dlopen` then finds no object by that name, or the executable itself, resident anyway.
pub(crate) fn pin() {
    static PINNED: std::sync::Once = std::sync::Once::new();
    PINNED.call_once(mark);
}

fn mark() {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::uninit();
    let here = mark as fn() as *const libc::c_void;
    // SAFETY: dladdr reads the loader's tables and writes `info`, which is valid for writes;
    // a nonzero result means it filled `info`.
    if unsafe { libc::dladdr(here, info.as_mut_ptr()) } == 0 {
        return;
    }
    // SAFETY: dladdr returned nonzero, so `info` is initialized.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return;
    }
    // The handle is kept on purpose, never closed: it is the reference that keeps the object.
    // SAFETY: `dli_fname` is the loader's NUL-terminated name of a loaded object; with
    // RTLD_NOLOAD dlopen loads nothing and runs no constructor, it only marks that object.
    let _handle = unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
}
