//! A signal for a thread that has no slot and cannot map one (the address space is exhausted):
//! what the engine does from the kernel's own frame, without a work stack.
//!
//! Such a thread has never run an AMX instruction (its first one maps a slot), so its tiles are
//! in INIT and it has no tile state to save or emulate:
//!
//! - a signal for the program (a wrapped one, a fault of the program's, a SIGILL that is not
//!   AMX) is delivered as the kernel delivers it: the program's handler is entered on a frame
//!   of the kernel's layout, the kernel's own frame of the entry where it lies where the
//!   handler's goes ([`deliver_in_place`]), so a program without AMX instructions behaves as
//!   without the engine however little memory is left;
//! - an AMX instruction meets, in order, the #UD conditions of the INIT state (every instruction
//!   on tiles: none is configured), then what Linux gives a thread whose AMX state it cannot
//!   allocate: SIGSEGV (`SI_KERNEL`, no address), delivered to the program's handler if it has
//!   one, else the process ends after the engine says why. LDTILECFG and STTILECFG get that
//!   SIGSEGV too: they need the state the engine cannot map (on the silicon, where TILECFG
//!   needs no allocation, the SIGSEGV would come at the thread's first instruction on tile
//!   data). TILERELEASE in INIT changes nothing and completes.

use amx_tilecfg::decode::{self, Decoded, Instruction, Operation, MAX_LEN};
use amx_tilecfg::TmulLimits;

use crate::deliver::{deliver_in_place, siginfo, SI_KERNEL};
use crate::entry::{si_code, synchronous};
use crate::exec;
use crate::fastpath::{self, Exit};
use crate::kframe::{reg, Ucontext};
use crate::{access, cpuid, patch};

/// Linux's `si_code` for #UD (docs/semantics.md section 1).
const ILL_ILLOPN: i32 = 2;

/// Takes `sig` (`info` and `uc`: the kernel's frame) for a thread without a slot; `errno`: why
/// none could be mapped. Returns when the thread may resume in `uc`.
pub(crate) fn take(sig: i32, info: &mut [u8; 128], uc: &mut Ucontext, errno: i32) {
    let code = si_code(info);
    let sync = synchronous(sig, code);
    if !(sig == libc::SIGILL && code > 0) {
        // A signal that came while a patched site's stub or the engine's entry ran (which
        // found no slot and is on its way to the fault exit): at the site, for the program.
        // The fault exit's own SIGILL is the stub's, taken below.
        fastpath::settle_without_slot(uc);
    }
    match sig {
        libc::SIGILL if code > 0 => {
            let rip = match fastpath::exit(None, uc.rip()) {
                // A patched site's stub found no slot: the instruction is the site's.
                Some(Exit::Fault(site)) => site.addr(),
                Some(Exit::Deferred(resume)) => {
                    uc.gregs[reg::RIP] = resume;
                    return;
                }
                None => uc.rip(),
            };
            uc.gregs[reg::RIP] = rip;
            if !crate::emulating() {
                // Assisting the silicon needs the thread's unit.
                crate::fatal::no_memory(errno);
            }
            let mut buf = [0u8; MAX_LEN];
            let n = access::fetch(rip, &mut buf);
            let bytes = buf.get(..n).unwrap_or_default();
            match patch::patched_since(rip, bytes).unwrap_or_else(|| decode::decode(bytes)) {
                Decoded::Amx(insn) => amx(&insn, info, uc, errno),
                Decoded::Invalid => invalid_opcode(info, uc),
                Decoded::NotAmx => deliver_in_place(sig, info, uc, true),
            }
        }
        libc::SIGSEGV if code == SI_KERNEL && cpuid::faulting() => {
            if !cpuid::answer_at(uc.rip(), &mut uc.gregs) {
                deliver_in_place(sig, info, uc, sync)
            }
        }
        libc::SIGTRAP if code == SI_KERNEL => {
            let at = uc.rip().wrapping_sub(1);
            match patch::int3_site(at) {
                // The `int3` of a site being patched: the site's instruction.
                Some(insn) => {
                    uc.gregs[reg::RIP] = at;
                    amx(&insn, info, uc, errno)
                }
                None => deliver_in_place(sig, info, uc, sync),
            }
        }
        _ => deliver_in_place(sig, info, uc, sync),
    }
}

/// An AMX instruction at `uc`'s RIP, on a thread in INIT that has no state.
fn amx(insn: &Instruction, info: &mut [u8; 128], uc: &mut Ucontext, errno: i32) {
    // INIT: the configuration is 64 zero bytes, no tile is configured.
    if exec::refusal(insn, &[0; 64], TmulLimits::ARCHITECTURAL).is_err() {
        return invalid_opcode(info, uc);
    }
    if matches!(insn.op, Operation::Tilerelease) {
        uc.gregs[reg::RIP] = uc.rip().wrapping_add(u64::from(insn.len));
        return;
    }
    // Linux's answer where it cannot allocate a thread's AMX state: force_sig(SIGSEGV). The
    // #NM it comes from leaves REG_TRAPNO 0, as for the permission's SIGILL.
    uc.gregs[reg::TRAPNO] = 0;
    uc.gregs[reg::ERR] = 0;
    *info = siginfo(libc::SIGSEGV, SI_KERNEL, 0);
    if !crate::signals::program_action(libc::SIGSEGV).is_handler() {
        crate::fatal::no_memory(errno);
    }
    deliver_in_place(libc::SIGSEGV, info, uc, true)
}

/// #UD at `uc`'s RIP: SIGILL, `ILL_ILLOPN`, REG_TRAPNO 6.
fn invalid_opcode(info: &mut [u8; 128], uc: &mut Ucontext) {
    let rip = uc.rip();
    uc.gregs[reg::TRAPNO] = 6;
    uc.gregs[reg::ERR] = 0;
    *info = siginfo(libc::SIGILL, ILL_ILLOPN, rip);
    deliver_in_place(libc::SIGILL, info, uc, true)
}
