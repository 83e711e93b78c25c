//! What the engine does with each signal it takes, on its work stack: an AMX instruction's
//! SIGILL (emulate it, patch its site once hot), a patched site's exits, a `cpuid` that faulted
//! (answer it from the modelled CPU), the `int3` of a site being patched (emulate the site's
//! instruction); every other signal goes to the program ([`crate::deliver`]).

use std::sync::atomic::Ordering;

use amx_runtime::TileUnit;
use amx_tilecfg::decode::{self, Decoded, Instruction, MAX_LEN};

use crate::deliver::{deliver, siginfo, SI_KERNEL};
use crate::entry::{si_code, synchronous, Ctx, Resume};
use crate::exec::{execute, Exception, Outcome};
use crate::fastpath::{self, Exit};
use crate::kframe::{self, reg};
use crate::regs::Regs;
use crate::slot::Slot;
use crate::{access, assist, cpuid, patch};

/// Linux's `si_code` values for the exceptions (docs/semantics.md section 1).
const ILL_ILLOPC: i32 = 1;
const ILL_ILLOPN: i32 = 2;

/// Handles `sig`, which interrupted the context `ctx` (the kernel's frame, copied).
pub(crate) fn handle<'a>(slot: &Slot, sig: i32, ctx: &'a mut Ctx) -> Resume<'a> {
    let info = ctx.frame.info;
    let code = si_code(&info);
    let sync = synchronous(sig, code);
    if !sync {
        // A signal that interrupted a patched site's path or a handler's return: the program
        // meets it at the instruction boundary that path stands for.
        fastpath::settle(slot, ctx);
    }
    match sig {
        libc::SIGILL if code > 0 => {
            patch::note_mask(ctx.frame.uc.sigmask);
            sigill(slot, ctx, &info)
        }
        libc::SIGSEGV if code == SI_KERNEL && cpuid::faulting() => {
            let rip = ctx.frame.uc.rip();
            if cpuid::answer_at(rip, &mut ctx.frame.uc.gregs) {
                return Resume::Context(ctx);
            }
            deliver(slot, ctx, sig, &info, sync)
        }
        libc::SIGTRAP if code == SI_KERNEL => {
            let at = ctx.frame.uc.rip().wrapping_sub(1);
            match patch::int3_site(at) {
                Some(insn) => {
                    ctx.frame.uc.gregs[reg::RIP] = at;
                    emulate(slot, ctx, &insn)
                }
                None => deliver(slot, ctx, sig, &info, sync),
            }
        }
        _ => deliver(slot, ctx, sig, &info, sync),
    }
}

/// A SIGILL the CPU raised.
fn sigill<'a>(slot: &Slot, ctx: &'a mut Ctx, info: &[u8; 128]) -> Resume<'a> {
    let rip = ctx.frame.uc.rip();
    match fastpath::exit(Some(slot), rip) {
        Some(Exit::Fault(site)) => {
            // The fast path met a fault or a changed instruction: the slow path runs what is at
            // the site now (or raises the instruction's exception there).
            ctx.frame.uc.gregs[reg::RIP] = site.addr();
            return sigill(slot, ctx, info);
        }
        Some(Exit::Deferred(resume)) => {
            // The held-back signals are raised on the way out (`entry::finish`).
            ctx.frame.uc.gregs[reg::RIP] = resume;
            return Resume::Context(ctx);
        }
        None => {}
    }
    if !crate::emulating() {
        if crate::assisting() && si_code(info) == ILL_ILLOPN {
            return assist(slot, ctx, info);
        }
        return deliver(slot, ctx, libc::SIGILL, info, true);
    }
    let mut buf = [0u8; MAX_LEN];
    let n = access::fetch(rip, &mut buf);
    let code = buf.get(..n).unwrap_or_default();
    // A site patched after this thread trapped on it, or whose other bytes the program
    // changed: the instruction there now. Otherwise the instruction trapped itself: counted
    // for patching.
    let decoded = match patch::patched_since(rip, code) {
        Some(decoded) => decoded,
        None => {
            let decoded = decode::decode(code);
            if let Decoded::Amx(insn) = decoded {
                patch::trapped(rip, &insn, code);
            }
            decoded
        }
    };
    match decoded {
        Decoded::Amx(insn) => emulate(slot, ctx, &insn),
        // #UD on the silicon too.
        Decoded::Invalid => raise(slot, ctx, Exception::InvalidOpcode),
        Decoded::NotAmx => deliver(slot, ctx, libc::SIGILL, info, true),
    }
}

/// The program's PKRU in the interrupted context (its XSAVE state), where protection keys
/// exist.
fn program_pkru(ctx: &Ctx) -> Option<u32> {
    if !access::pku() {
        return None;
    }
    if ctx.frame.uc.fpregs == 0 {
        return Some(0);
    }
    let bv = ctx.fp().get(kframe::XSTATE_BV..kframe::XSTATE_BV + 8)?;
    // PKRU is component 9; absent from XSTATE_BV it is in its initial state, 0.
    if u64::from_le_bytes(bv.try_into().ok()?) & (1 << 9) == 0 {
        return Some(0);
    }
    let at = access::pkru_offset();
    let pkru = ctx.fp().get(at..at.saturating_add(4))?;
    Some(u32::from_le_bytes(pkru.try_into().ok()?))
}

/// Executes `insn` (at the context's RIP) for the interrupted thread: completes it and moves
/// RIP past it, or delivers the exception it raised.
pub(crate) fn emulate<'a>(slot: &Slot, ctx: &'a mut Ctx, insn: &Instruction) -> Resume<'a> {
    let mut regs = Regs::of(&ctx.frame.uc);
    let pkru = program_pkru(ctx);
    let Some(outcome) = interruptible(slot, ctx, insn, || {
        execute(insn, &mut regs, slot.unit(), pkru)
    }) else {
        // Stopped by a signal: the instruction stays where it is (a load or store at
        // the row it reached, in start_row), and the signal held back meanwhile is delivered
        // there (`entry::finish`); the program's return from its handler runs it again.
        return Resume::Context(ctx);
    };
    complete_or_raise(slot, ctx, outcome, &regs)
}

/// Runs `run`, the execution of `insn` in the context `ctx`, with the program's handled
/// signals that the context does not block unblocked while `insn` reads or writes memory.
///
/// On the silicon a tile load or store waiting for a page that is not there (one that
/// userfaultfd keeps missing) is interrupted by a signal: its handler runs at the instruction,
/// which resumes from start_row afterwards. The engine's copy of the rows runs inside its
/// SIGILL handler, where the kernel would keep such a signal pending until the page came, and
/// a program whose handler must run for the page to come would wait forever. With them
/// unblocked the entry meets the signal: it holds it back and stops the copy at its row
/// (`Slot::stoppable_copy`, then `Slot::restart`, as at a patched site), waiting or not: the
/// silicon may interrupt a load or store between rows, and asking the kernel whether the page
/// is there would be a system call that sandboxes may kill.
///
/// Only the wrapped signals (under the preload): their handlers run behind the entry, which
/// holds them back; a handler the kernel called directly would run in the middle of the
/// engine's work. Not while a patched site's instruction is under way on the thread, whose
/// `restart` is its own. Two system calls per trapped load or store; products touch no
/// memory. Returns `run`'s result, or `None` where a signal stopped the instruction (before
/// `run`, or in its copy).
fn interruptible<R>(
    slot: &Slot,
    ctx: &Ctx,
    insn: &Instruction,
    run: impl FnOnce() -> R,
) -> Option<R> {
    let open = if insn.mem.is_some()
        && crate::signals::virtualized()
        && slot.fast_frame.load(Ordering::Acquire) == 0
    {
        crate::signals::wrapped() & !ctx.frame.uc.sigmask
    } else {
        0
    };
    if open == 0 {
        return Some(run());
    }
    slot.restart.store(false, Ordering::Release);
    slot.stoppable_copy.store(true, Ordering::Release);
    // Refused (a seccomp filter on rt_sigprocmask), the copy runs under the entry's mask, as
    // in a program that installed the engine itself; the mask before is then unknown, and
    // restoring a guess could unblock what the entry blocks.
    let Ok(before) = crate::sys::try_sigprocmask(libc::SIG_UNBLOCK, open) else {
        slot.stoppable_copy.store(false, Ordering::Release);
        return Some(run());
    };
    // A signal that came before the window (pending, delivered as the call unblocked it, and
    // held back) stops the instruction before its first row: held until the copy ended, it
    // could wait for a page that its handler must bring.
    let result = if slot.deferred.load(Ordering::Acquire) & open != 0 {
        slot.restart.store(true, Ordering::Release);
        None
    } else {
        Some(run())
    };
    crate::signals::set_mask(before);
    slot.stoppable_copy.store(false, Ordering::Release);
    if slot.restart.swap(false, Ordering::AcqRel) {
        return None;
    }
    result
}

/// Ends an executed instruction: completed, its zmm result (if any) goes into the frame and RIP
/// past it; else the exception it raised is delivered.
fn complete_or_raise<'a>(
    slot: &Slot,
    ctx: &'a mut Ctx,
    outcome: Outcome,
    regs: &Regs,
) -> Resume<'a> {
    match outcome {
        Outcome::Completed => {
            if let Some((n, value)) = regs.zmm {
                // The frame carries no XSAVE state that could take the register (the engine
                // checked at installation that the host's frames do): the instruction cannot
                // complete, and raises #UD as on a CPU without its state.
                if !crate::zmm::write(ctx.fp_mut(), n, &value) {
                    return raise(slot, ctx, Exception::InvalidOpcode);
                }
            }
            ctx.frame.uc.gregs[reg::RIP] = regs.rip;
            Resume::Context(ctx)
        }
        Outcome::Fault(e) => raise(slot, ctx, e),
    }
}

/// A #UD of the silicon (see `crate::assist`): an instruction of an extension the modelled CPU
/// has and the silicon lacks executes against the thread's tiles in the frame; any other goes
/// to the program as the kernel sent it.
fn assist<'a>(slot: &Slot, ctx: &'a mut Ctx, info: &[u8; 128]) -> Resume<'a> {
    let rip = ctx.frame.uc.rip();
    let mut buf = [0u8; MAX_LEN];
    let n = access::fetch(rip, &mut buf);
    let insn = match decode::decode(buf.get(..n).unwrap_or_default()) {
        Decoded::Amx(insn) if assist::assisted(insn.op.extension()) => insn,
        _ => return deliver(slot, ctx, libc::SIGILL, info, true),
    };
    let Some(tiles) = assist::frame_tiles(ctx.fp()) else {
        // XFD is armed for this thread: its frame has no room for tile data.
        if assist::permitted() && !slot.primed_at(rip) {
            // Enable tile data as the thread's first use does, and meet the instruction again
            // in a frame with room (once: a second frame without room is an #UD).
            if !assist::enable_tile_data() {
                // Linux could not allocate the thread's tile state: its XFD handler raises
                // SIGSEGV (SI_KERNEL, no address), which the silicon's first use would meet at
                // this instruction (REG_TRAPNO and REG_ERR as XFD's SIGILL leaves them).
                slot.set_primed_at(0);
                let g = &mut ctx.frame.uc.gregs;
                g[reg::TRAPNO] = 0;
                g[reg::ERR] = 0;
                let info = siginfo(libc::SIGSEGV, SI_KERNEL, 0);
                return deliver(slot, ctx, libc::SIGSEGV, &info, true);
            }
            slot.set_primed_at(rip);
            return Resume::Context(ctx);
        }
        // Without the permission the tiles are in their INIT state, so a tile-data
        // instruction raises the configuration's #UD or XFD's #NM, as the silicon would.
        slot.set_primed_at(0);
        let unit = slot.unit();
        let mut image = [0u8; 64];
        if let Some(saved) = tilecfg_of(ctx.fp()) {
            image = saved;
        }
        if unit.ldtilecfg(&image).is_err() {
            return deliver(slot, ctx, libc::SIGILL, info, true);
        }
        let mut regs = Regs::of(&ctx.frame.uc);
        let outcome = execute(&insn, &mut regs, unit, program_pkru(ctx));
        // The unit is scratch here: the tiles are the silicon's. Left configured, a delivery
        // would save it for the handler as if it were the thread's state.
        unit.tilerelease();
        return match outcome {
            Outcome::Fault(e) => raise(slot, ctx, e),
            // Completing needs room for its result: none here.
            Outcome::Completed => deliver(slot, ctx, libc::SIGILL, info, true),
        };
    };
    slot.set_primed_at(0);
    let unit = slot.unit();
    if !assist::load(unit, ctx.fp(), tiles) {
        return deliver(slot, ctx, libc::SIGILL, info, true);
    }
    let mut regs = Regs::of(&ctx.frame.uc);
    let pkru = program_pkru(ctx);
    let outcome = execute(&insn, &mut regs, unit, pkru);
    // The state goes back whatever the outcome: a load that faulted on a row has loaded the
    // rows before it and left start_row there.
    assist::store(unit, ctx.fp_mut(), tiles);
    unit.tilerelease();
    complete_or_raise(slot, ctx, outcome, &regs)
}

/// The TILECFG component of the XSAVE state `fp`, where it is saved and in use.
fn tilecfg_of(fp: &[u8]) -> Option<[u8; 64]> {
    let bv = kframe::u64_at(fp, kframe::XSTATE_BV)?;
    let at = assist::tilecfg_offset()?;
    if bv & (1 << 17) == 0 {
        return None;
    }
    fp.get(at..at.checked_add(64)?)?.try_into().ok()
}

/// Delivers the signal the silicon's exception `e` raises, at the context's instruction.
fn raise<'a>(slot: &Slot, ctx: &'a mut Ctx, e: Exception) -> Resume<'a> {
    let rip = ctx.frame.uc.rip();
    let g = &mut ctx.frame.uc.gregs;
    let (sig, info) = match e {
        Exception::InvalidOpcode => {
            g[reg::TRAPNO] = 6;
            g[reg::ERR] = 0;
            (libc::SIGILL, siginfo(libc::SIGILL, ILL_ILLOPN, rip))
        }
        Exception::DeviceNotAvailable => {
            // Linux raises XFD's SIGILL without recording a trap (`handle_xfd_event`): the
            // context shows the thread's last one, 0 for a thread that has had none.
            let trap = slot.program_trap.load(Ordering::Relaxed);
            g[reg::TRAPNO] = trap >> 32;
            g[reg::ERR] = trap & 0xFFFF_FFFF;
            (libc::SIGILL, siginfo(libc::SIGILL, ILL_ILLOPC, rip))
        }
        Exception::GeneralProtection => {
            g[reg::TRAPNO] = 13;
            g[reg::ERR] = 0;
            (libc::SIGSEGV, siginfo(libc::SIGSEGV, SI_KERNEL, 0))
        }
        Exception::Memory(f) => {
            g[reg::TRAPNO] = f.trapno;
            g[reg::ERR] = f.err;
            if f.trapno == 14 {
                g[reg::CR2] = f.addr();
            }
            (f.signal(), f.info)
        }
    };
    deliver(slot, ctx, sig, &info, true)
}
