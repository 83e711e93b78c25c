//! The engine's signal handlers: SIGILL (every AMX instruction on a CPU without AMX) and, with
//! CPUID faulting, SIGSEGV (every `cpuid`). Each either completes the instruction and returns
//! past it, delivers the exception the instruction raised, or chains a signal that is not the
//! engine's to the program's action.

use super::decode::{self, Decoded, Instruction, MAX_LEN};
use super::deliver::{self, deliver};
use super::exec::{execute, Exception, Outcome};
use super::memory;
use super::regs::context;
use super::state;

/// Linux's `si_code` values for the exceptions
/// ([semantics.md section 1](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#1-how-linux-reports-each-exception)).
const ILL_ILLOPC: i32 = 1;
const ILL_ILLOPN: i32 = 2;
const SEGV_MAPERR: i32 = 1;
const SEGV_ACCERR: i32 = 2;
const SI_KERNEL: i32 = 0x80;

/// Restores errno on every way out of a handler (the interrupted code must see its own).
pub(super) struct Errno(i32);

impl Errno {
    pub(super) fn save() -> Errno {
        // SAFETY: __errno_location returns this thread's errno slot.
        Errno(unsafe { *libc::__errno_location() })
    }
}

impl Drop for Errno {
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

/// Delivers the signal the silicon's exception `e` raises, at the instruction at `rip`.
///
/// # Safety
/// `uc` is the running handler's context.
unsafe fn raise(e: Exception, uc: *mut libc::ucontext_t, rip: u64) {
    // SAFETY: the caller passes the handler's own context, exclusively ours until we return.
    let ctx = unsafe { &mut *uc };
    let (sig, mut info) = match e {
        Exception::InvalidOpcode => {
            context::set_exception(ctx, 6, 0, None);
            (
                libc::SIGILL,
                deliver::siginfo(libc::SIGILL, ILL_ILLOPN, rip),
            )
        }
        Exception::DeviceNotAvailable => {
            context::set_exception(ctx, 0, 0, None);
            (
                libc::SIGILL,
                deliver::siginfo(libc::SIGILL, ILL_ILLOPC, rip),
            )
        }
        Exception::GeneralProtection => {
            context::set_exception(ctx, 13, 0, None);
            (libc::SIGSEGV, deliver::siginfo(libc::SIGSEGV, SI_KERNEL, 0))
        }
        Exception::PageFault(f) => {
            // Error code: present, write, user.
            let err = u64::from(f.present) | u64::from(f.write) << 1 | 4;
            context::set_exception(ctx, 14, err, Some(f.addr));
            let code = if f.present { SEGV_ACCERR } else { SEGV_MAPERR };
            (libc::SIGSEGV, deliver::siginfo(libc::SIGSEGV, code, f.addr))
        }
    };
    // SAFETY: forwarded.
    unsafe { deliver(sig, &mut info, uc, true) };
}

/// Executes `insn`, the instruction at `rip` (the context's RIP), for the thread interrupted
/// at `uc`: completes it and moves RIP past it, or delivers the exception it raised.
///
/// # Safety
/// `uc` is the running handler's context.
pub(crate) unsafe fn emulate(insn: &Instruction, uc: *mut libc::ucontext_t, rip: u64) {
    // SAFETY: the caller passes the handler's own context.
    let ctx = unsafe { &mut *uc };
    let mut regs = context::read(ctx);
    // System-call copies even when this handler interrupted a patched site's fast path: a
    // direct copy faulting here, with SIGSEGV blocked, would kill the process.
    let outcome =
        super::fastcopy::indirect(|| state::with_unit(|unit| execute(insn, &mut regs, unit)));
    match outcome {
        Some(Outcome::Completed) => context::set_rip(ctx, regs.rip),
        Some(Outcome::Fault(e)) => {
            // SAFETY: `uc` is this handler's context.
            unsafe { raise(e, uc, rip) }
        }
        // The thread is exiting: its tile state is gone, as after TILERELEASE.
        None => {
            // SAFETY: `uc` is this handler's context.
            unsafe { raise(Exception::InvalidOpcode, uc, rip) }
        }
    }
}

/// The SIGILL handler.
pub(crate) extern "C" fn on_sigill(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    let _errno = Errno::save();
    let uc = uc.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes a valid siginfo_t and ucontext_t to an SA_SIGINFO handler; they
    // live on this handler's frame until it returns.
    let (info, ctx) = unsafe { (&mut *info, &mut *uc) };
    // A SIGILL sent by a process (si_code <= 0) is not an instruction's.
    if info.si_code <= 0 {
        // SAFETY: `uc` is this handler's context.
        unsafe { deliver(sig, info, uc, false) };
        return;
    }
    let rip = context::rip(ctx);
    // A patched site's stub resuming at its fault exit: the exception is raised at the site.
    if let Some((site, insn)) = super::patch::fault_exit(rip) {
        context::set_rip(ctx, site);
        // SAFETY: `uc` is this handler's context, its RIP the site's.
        unsafe { emulate(&insn, uc, site) };
        return;
    }
    let mut code = [0u8; MAX_LEN];
    let n = memory::read_prefix(rip, &mut code);
    // The site was patched after this thread trapped on it: the instruction is the table's.
    if let Some(insn) = super::patch::patched_since(rip, &code[..n]) {
        // SAFETY: `uc` is this handler's context.
        unsafe { emulate(&insn, uc, rip) };
        return;
    }
    match decode::decode(&code[..n]) {
        Decoded::Amx(insn) => {
            super::patch::trapped(rip, &insn);
            // SAFETY: `uc` is this handler's context.
            unsafe { emulate(&insn, uc, rip) }
        }
        // #UD on the silicon too: what the kernel reported is exactly that.
        Decoded::Invalid => {
            // SAFETY: `uc` is this handler's context.
            unsafe { raise(Exception::InvalidOpcode, uc, rip) }
        }
        Decoded::NotAmx => {
            // SAFETY: `uc` is this handler's context.
            unsafe { deliver(sig, info, uc, true) };
        }
    }
}

/// The SIGSEGV handler (with CPUID faulting): answers `cpuid` from the model, chains the rest.
pub(crate) extern "C" fn on_sigsegv(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    let _errno = Errno::save();
    let uc = uc.cast::<libc::ucontext_t>();
    // SAFETY: as in `on_sigill`.
    let (info, ctx) = unsafe { (&mut *info, &mut *uc) };
    // A fault inside the fast path's direct copy (fastcopy.rs) is the engine's to recover.
    if super::fastcopy::recover(info, ctx) {
        return;
    }
    if info.si_code == SI_KERNEL {
        let rip = context::rip(ctx);
        let mut code = [0u8; 2];
        if memory::read_prefix(rip, &mut code) == 2 && code == [0x0F, 0xA2] {
            let g = &mut ctx.uc_mcontext.gregs;
            let leaf = g[libc::REG_RAX as usize] as u32;
            let subleaf = g[libc::REG_RCX as usize] as u32;
            let [a, b, c, d] = super::cpuid::answer(leaf, subleaf);
            g[libc::REG_RAX as usize] = i64::from(a);
            g[libc::REG_RBX as usize] = i64::from(b);
            g[libc::REG_RCX as usize] = i64::from(c);
            g[libc::REG_RDX as usize] = i64::from(d);
            context::set_rip(ctx, rip + 2);
            return;
        }
    }
    // SAFETY: `uc` is this handler's context.
    unsafe { deliver(sig, info, uc, info.si_code > 0) };
}
