//! Delivering a signal to the program as the kernel would.
//!
//! The program's handler is entered the way the kernel enters it: the engine writes a signal
//! frame of the kernel's layout ([`crate::kframe`]) where the kernel would put it (below the
//! interrupted stack pointer's red zone, or at the top of the alternate stack for `SA_ONSTACK`,
//! failing with SIGSEGV where the alternate stack would overflow), with the interrupted
//! context, the siginfo and the FP state, and then `rt_sigreturn`s into the handler with the
//! registers, mask and FP state (reset) the kernel gives one. No frame of the engine's lies
//! between the handler and the interrupted code: the handler may return, `siglongjmp` out,
//! throw a C++ exception through the frame, change the context, at any depth.
//!
//! Tile state follows the frame, as Linux keeps XSAVE state in it: a configured thread's
//! configuration and tiles go into the frame, above the FP state, and the handler starts with
//! the INIT state. The handler returns into the engine's restorer (its return address), which
//! puts the saved tile state back and calls `rt_sigreturn`. A handler left any other way
//! abandons its frame, and the tile state stays what the handler left, as on the silicon.
//! The restorer is described to unwinders (DWARF CFI, a signal frame) like the C library's.

use std::sync::atomic::Ordering;

use amx_runtime::{TileUnit, TILE_BYTES};

use crate::access;
use crate::entry::{si_code, Ctx, Resume};
use crate::kframe::{self, reg, RtFrame, Stack, Ucontext};
use crate::signals::{self, bit, Action};
use crate::slot::{self, Slot};

/// The tile state in a frame: the configuration image, then the 8 tiles.
pub(crate) const TILE_AREA: usize = 64 + 8 * TILE_BYTES;

/// Marks the FP state's reserved padding of a frame the engine built.
const MARK: u32 = 0x5458_4d41;
/// Mixed into the marker's check word.
const KEY: u64 = 0x616d_785f_7472_6170;

/// `si_code` values.
pub(crate) const SI_KERNEL: i32 = 0x80;
const SI_TKILL: i32 = -6;

/// Delivers `sig` with `info` to the program, for the thread interrupted at `ctx`. `sync`: the
/// signal is an exception of the interrupted instruction (blocked or ignored, it kills the
/// process, as the kernel's forced delivery does).
pub(crate) fn deliver<'a>(
    slot: &Slot,
    ctx: &'a mut Ctx,
    sig: i32,
    info: &[u8; 128],
    sync: bool,
) -> Resume<'a> {
    let held = slot.held_back.load(Ordering::Relaxed);
    let g = &mut ctx.frame.uc.gregs;
    if sync {
        slot.program_trap.store(
            g[reg::TRAPNO] << 32 | g[reg::ERR] & 0xFFFF_FFFF,
            Ordering::Relaxed,
        );
    } else {
        // Between two instructions, as the silicon's interrupts come: RF clear, and the
        // thread's last trap the program's own, not a #UD or breakpoint the engine consumed.
        let trap = slot.program_trap.load(Ordering::Relaxed);
        g[reg::TRAPNO] = trap >> 32;
        g[reg::ERR] = trap & 0xFFFF_FFFF;
        g[reg::EFL] &= !0x1_0000;
    }
    // The mask the interrupted context gets back.
    let interrupted = signals::program_mask(ctx.frame.uc.sigmask & !held);
    let (action, effective) = match admit(sig, info, sync, interrupted) {
        Admitted::Handler(action, effective) => (action, effective),
        Admitted::Nothing => return Resume::Context(ctx),
        Admitted::Fatal => {
            slot.ending.store(true, Ordering::Relaxed);
            ctx.frame.uc.sigmask &= !bit(sig);
            return Resume::Context(ctx);
        }
    };
    match launch(slot, ctx, sig, info, &action, interrupted, effective) {
        Ok(()) => Resume::Handler(ctx),
        Err(()) => cannot_deliver(slot, ctx, sig),
    }
}

/// What [`admit`] decided.
enum Admitted {
    /// The program's handler runs, with its action, and the mask in effect when the signal
    /// came (a wait's own, during `sigsuspend`).
    Handler(Action, u64),
    /// No handler runs: ignored, made pending, or left to the kernel's default.
    Nothing,
    /// The signal ends the process ([`arm_fatal`]): the interrupted context resumes, with the
    /// signal unblocked, only for the kernel to end the process there.
    Fatal,
}

/// What the kernel decides before it enters a handler for `sig`, the interrupted context's
/// mask being `interrupted` (the program's view). A signal that ends the process (a
/// synchronous one no handler can take, one of the engine's five with the default action) is
/// armed to do so at the interrupted context.
fn admit(sig: i32, info: &[u8; 128], sync: bool, interrupted: u64) -> Admitted {
    signals::catch_up(sig);
    let action = signals::program_action(sig);
    // During a wait (`sigsuspend`, `ppoll`...) the wait's mask is in effect. A wrapped signal
    // that mask blocks cannot have come during the wait (the kernel blocked it too): it came
    // as the call returned, with the program's own mask back.
    let effective = match signals::wait_mask() {
        Some(wait) if signals::owned(sig) || wait & bit(sig) == 0 => wait,
        _ => interrupted,
    };
    if effective & bit(sig) != 0 && !sync {
        // Sent while the program (its view of the engine's signals) blocks it: pending,
        // whatever its action ("blocked signals are never ignored", `sig_ignored`).
        signals::keep_pending(sig, info, si_code(info) == SI_TKILL);
        return Admitted::Nothing;
    }
    if !action.is_handler() {
        if action.handler == libc::SIG_IGN && !sync {
            return Admitted::Nothing;
        }
        if !signals::owned(sig) {
            // A wrapped signal whose handler went meanwhile: the kernel's default, once the
            // signal is unblocked again on the way out.
            let _ = signals::raise_here(sig, info);
            return Admitted::Nothing;
        }
        arm_fatal(sig, info);
        return Admitted::Fatal;
    }
    if effective & bit(sig) != 0 {
        // A fault the program blocks: the kernel's forced delivery ends the process.
        arm_fatal(sig, info);
        return Admitted::Fatal;
    }
    if action.flags & libc::SA_RESETHAND as u64 != 0 {
        signals::reset_after_delivery(sig);
    }
    Admitted::Handler(action, effective)
}

/// Makes `sig` end the process at the context the thread resumes, as its default action
/// does on the silicon there: with the default action in the kernel, queued with `info`
/// (blocked in the engine's own context until then). A core dump, a debugger and a crash
/// reporter then see the program's registers and stack at the faulting instruction, not the
/// engine's. The caller resumes a context that leaves the signal unblocked, without entering
/// another handler first (the kernel takes a synchronous signal before any other).
/// Where the default action cannot be set or the signal cannot be sent (a sandbox refusing
/// `rt_sigaction` or every way of sending it), the process ends here instead, from the
/// engine's stack ([`crate::fatal::die_of`]): resumed, the program would meet the engine's
/// entry again, with the same fault, for ever.
fn arm_fatal(sig: i32, info: &[u8; 128]) {
    if !signals::kernel_default(sig) {
        crate::fatal::die_of(sig);
    }
    signals::block(bit(sig));
    if !signals::raise_here(sig, info) {
        crate::fatal::die_of(sig);
    }
}

/// Delivers `sig` to the program from the kernel's own frame (`info` and `uc` are its siginfo
/// and context), for a thread that has no slot and cannot map one, so has no work stack. Such a
/// thread has never run an AMX instruction (its first one maps a slot): there is no tile state
/// to save or to reset for the handler. Returns only where no handler runs; otherwise the
/// thread leaves through `rt_sigreturn` into the handler.
///
/// The handler gets a frame as the kernel's, which unwinders, C++ exceptions and `siglongjmp`
/// go through as through the kernel's, and which returns into the engine's restorer. Where the
/// kernel put the entry's frame where the handler's goes (a wrapped signal's entry has the
/// program's `SA_ONSTACK`; one of the engine's five has it always, so the frames coincide
/// unless the handler avoids an alternate stack the entry took), that frame becomes the
/// handler's: it holds the interrupted context and FP state already. Otherwise the handler's
/// is written where the kernel would put it; in the one case where that lies on the stack the
/// engine runs on (never, where the kernel places frames as [`place`] does), below it.
pub(crate) fn deliver_in_place(sig: i32, info: &mut [u8; 128], uc: &mut Ucontext, sync: bool) {
    let interrupted = signals::program_mask(uc.sigmask);
    let (action, effective) = match admit(sig, info, sync, interrupted) {
        Admitted::Handler(action, effective) => (action, effective),
        Admitted::Nothing => return,
        Admitted::Fatal => {
            uc.sigmask &= !bit(sig);
            return;
        }
    };
    info[..4].copy_from_slice(&sig.to_le_bytes());
    let (mask, oldmask) = (uc.sigmask, uc.gregs[reg::OLDMASK]);
    let frame = match frame_in_place(uc, info, &action, interrupted) {
        Ok(frame) => frame,
        Err(()) => {
            (uc.sigmask, uc.gregs[reg::OLDMASK]) = (mask, oldmask);
            // As `cannot_deliver`: SIGSEGV, fatal if that was SIGSEGV's own delivery. Its
            // siginfo replaces the signal's in the kernel's frame, which its handler may run on.
            *info = siginfo(libc::SIGSEGV, SI_KERNEL, 0);
            if sig == libc::SIGSEGV {
                arm_fatal(libc::SIGSEGV, info);
                uc.sigmask &= !bit(libc::SIGSEGV);
                return;
            }
            return deliver_in_place(libc::SIGSEGV, info, uc, true);
        }
    };
    let nodefer = action.flags & libc::SA_NODEFER as u64 != 0;
    let handler_mask = effective | action.mask | if nodefer { 0 } else { bit(sig) };
    // The handler's entry, in a frame of the engine's own on this stack, below the handler's.
    let mut entry = RtFrame {
        pretcode: 0,
        uc: *uc,
        info: [0; 128],
    };
    let real = signals::set_program_view(handler_mask);
    enter(&mut entry.uc, sig, action.handler, frame, real);
    // SAFETY: `entry` is complete (the interrupted context, its registers changed as above),
    // without FP state. The engine's frames below the kernel's are abandoned: none holds
    // anything to release (no slot, no lock, nothing allocated).
    unsafe { crate::entry::sigreturn_from(&entry.uc) }
}

/// Makes the frame the program's handler runs on, for [`deliver_in_place`]: the kernel's frame
/// of the entry where it lies where the handler's goes, else a copy of it written there (see
/// there). The frame returns into the restorer, records the program's view of the
/// interrupted mask, and has the engine's marker with no tile state saved: were a slot mapped
/// while the handler runs, the restorer would give the interrupted code the INIT state, which
/// it had. `Err` where the frame cannot be written (no stack left).
fn frame_in_place(
    uc: &mut Ucontext,
    info: &[u8; 128],
    action: &Action,
    interrupted: u64,
) -> Result<u64, ()> {
    let uc_at = uc as *mut Ucontext as u64;
    let kernel_frame = uc_at.wrapping_sub(8);
    let fp_len = if uc.fpregs != 0 {
        // SAFETY: the kernel's FP state in its frame, at least the 512 legacy bytes.
        kframe::fp_size(unsafe { &*(uc.fpregs as *const [u8; 512]) })
    } else {
        0
    };
    let onstack = action.flags & libc::SA_ONSTACK as u64 != 0;
    let mut place = place(uc, onstack, fp_len, false).ok_or(())?;
    uc.sigmask = interrupted;
    uc.gregs[reg::OLDMASK] = interrupted;
    if place.frame == kernel_frame && (fp_len == 0 || place.fp == uc.fpregs) {
        let pretcode = restorer();
        put(kernel_frame, (&pretcode as *const u64).cast(), 8)?;
        if fp_len > 0 {
            let mark = marker(0, uc_at);
            put(uc.fpregs + kframe::sw::PADDING as u64, mark.as_ptr(), 20)?;
        }
        return Ok(kernel_frame);
    }
    // The stack the engine runs on, from the kernel's frame down to well below this function.
    let here = &place as *const Place as u64;
    let live_top = kernel_frame
        + (std::mem::size_of::<RtFrame>() as u64).max(
            uc.fpregs
                .wrapping_sub(kernel_frame)
                .wrapping_add(fp_len as u64),
        );
    let live = here.saturating_sub(LIVE_BELOW)..live_top;
    let end = (place.fp.wrapping_add(fp_len as u64))
        .max(place.frame + std::mem::size_of::<RtFrame>() as u64);
    if end > live.start && place.frame < live.end {
        let mut below = *uc;
        below.gregs[reg::RSP] = live.start;
        place = self::place(&below, false, fp_len, false).ok_or(())?;
    }
    let mut frame = RtFrame {
        pretcode: restorer(),
        uc: *uc,
        info: *info,
    };
    frame.uc.fpregs = if fp_len > 0 { place.fp } else { 0 };
    put(
        place.frame,
        (&frame as *const RtFrame).cast(),
        std::mem::size_of::<RtFrame>(),
    )?;
    if fp_len > 0 {
        put(place.fp, uc.fpregs as *const u8, fp_len)?;
        let mark = marker(0, place.frame.wrapping_add(8));
        put(place.fp + kframe::sw::PADDING as u64, mark.as_ptr(), 20)?;
    }
    Ok(place.frame)
}

/// How far below [`frame_in_place`]'s own frame the engine's stack may still be in use before
/// it leaves: the calls that write the handler's frame.
const LIVE_BELOW: u64 = 16 * 1024;

/// A handler frame that cannot be written (no stack left, an alternate stack too small): as
/// Linux does, SIGSEGV, and death if that was SIGSEGV's own delivery.
fn cannot_deliver<'a>(slot: &Slot, ctx: &'a mut Ctx, sig: i32) -> Resume<'a> {
    let info = siginfo(libc::SIGSEGV, SI_KERNEL, 0);
    if sig == libc::SIGSEGV {
        arm_fatal(libc::SIGSEGV, &info);
        slot.ending.store(true, Ordering::Relaxed);
        ctx.frame.uc.sigmask &= !bit(libc::SIGSEGV);
        return Resume::Context(ctx);
    }
    deliver(slot, ctx, libc::SIGSEGV, &info, true)
}

/// A siginfo of the kernel's, for an exception.
pub(crate) fn siginfo(sig: i32, code: i32, addr: u64) -> [u8; 128] {
    let mut info = [0u8; 128];
    info[..4].copy_from_slice(&sig.to_le_bytes());
    info[8..12].copy_from_slice(&code.to_le_bytes());
    info[16..24].copy_from_slice(&addr.to_le_bytes());
    info
}

/// Where a handler frame goes, as the kernel's `get_sigframe` decides.
struct Place {
    /// The frame (its return address slot).
    frame: u64,
    /// The FP state.
    fp: u64,
    /// The tile state, for a configured thread.
    tiles: Option<u64>,
}

fn on_stack(stack: &Stack, sp: u64) -> bool {
    stack.flags & kframe::SS_DISABLE == 0
        && stack.size != 0
        && sp > stack.sp
        && sp - stack.sp <= stack.size
}

fn place(uc: &Ucontext, onstack: bool, fp_len: usize, tiles: bool) -> Option<Place> {
    let stack = uc.stack;
    let mut sp = uc.rsp().wrapping_sub(128);
    let nested = on_stack(&stack, uc.rsp());
    let enabled = stack.flags & kframe::SS_DISABLE == 0 && stack.size != 0;
    let entering = onstack && enabled && !on_stack(&stack, sp);
    if entering {
        sp = stack.sp.wrapping_add(stack.size);
    }
    let tiles = tiles.then(|| {
        sp = sp.wrapping_sub(TILE_AREA as u64) & !63;
        sp
    });
    sp = sp.wrapping_sub(fp_len as u64) & !63;
    let fp = sp;
    sp = sp.wrapping_sub(std::mem::size_of::<RtFrame>() as u64);
    let frame = (sp & !15).wrapping_sub(8);
    if (nested || entering) && !on_stack(&stack, frame) {
        return None;
    }
    Some(Place { frame, fp, tiles })
}

/// The engine's marker in the FP state's reserved padding of a frame it built whose `uc` is at
/// `uc_at`: the tile state saved at `tiles` (0: none, the INIT state), and a check word
/// (`saved_tiles` reads it back).
fn marker(tiles: u64, uc_at: u64) -> [u8; 20] {
    let mut mark = [0u8; 20];
    mark[..4].copy_from_slice(&MARK.to_le_bytes());
    mark[4..12].copy_from_slice(&tiles.to_le_bytes());
    mark[12..20].copy_from_slice(&(tiles ^ uc_at ^ KEY).to_le_bytes());
    mark
}

/// Writes `len` bytes of the engine's at `at` in the program's memory, with every protection
/// key enabled (the kernel writes its frames so).
fn put(at: u64, data: *const u8, len: usize) -> Result<(), ()> {
    access::with_pkru(0, || {
        // SAFETY: `data` is the engine's, `len` bytes; the destination is the program's, any
        // address (a fault is recovered).
        unsafe { access::copy(at as *mut u8, data, len) }.map_err(|_| ())
    })
}

/// Writes the handler's frame and turns `ctx` into the handler's entry.
fn launch(
    slot: &Slot,
    ctx: &mut Ctx,
    sig: i32,
    info: &[u8; 128],
    action: &Action,
    interrupted: u64,
    effective: u64,
) -> Result<(), ()> {
    let unit = slot.unit();
    let configured = unit.is_configured();
    let fp_len = if ctx.frame.uc.fpregs != 0 {
        ctx.fp_size()
    } else {
        0
    };
    let onstack = action.flags & libc::SA_ONSTACK as u64 != 0;
    let place = place(&ctx.frame.uc, onstack, fp_len, configured).ok_or(())?;
    let uc_at = place.frame.wrapping_add(8);

    // The frame: the interrupted context as the handler sees it.
    let mut frame = ctx.frame;
    frame.pretcode = restorer();
    frame.uc.fpregs = if fp_len > 0 { place.fp } else { 0 };
    frame.uc.sigmask = interrupted;
    frame.uc.gregs[reg::OLDMASK] = interrupted;
    frame.info = *info;
    frame.info[..4].copy_from_slice(&sig.to_le_bytes());
    put(
        place.frame,
        (&frame as *const RtFrame).cast(),
        std::mem::size_of::<RtFrame>(),
    )?;
    if fp_len > 0 {
        let mark = marker(place.tiles.unwrap_or(0), uc_at);
        if let Some(padding) = ctx
            .fp_mut()
            .get_mut(kframe::sw::PADDING..kframe::sw::PADDING + 20)
        {
            padding.copy_from_slice(&mark);
        }
        put(place.fp, ctx.fp().as_ptr(), fp_len)?;
    }
    if let Some(at) = place.tiles {
        let config = unit.loaded_config();
        put(at, config.as_ptr(), 64)?;
        for t in 0..8u8 {
            if let Some(tile) = unit.tile_bytes(t) {
                put(
                    at.wrapping_add(64 + u64::from(t) * TILE_BYTES as u64),
                    tile.as_ptr(),
                    TILE_BYTES,
                )?;
            }
        }
        // The handler starts from the INIT state.
        unit.tilerelease();
    }

    let nodefer = action.flags & libc::SA_NODEFER as u64 != 0;
    let handler_mask = effective | action.mask | if nodefer { 0 } else { bit(sig) };
    let real = signals::set_program_view(handler_mask);
    enter(&mut ctx.frame.uc, sig, action.handler, place.frame, real);
    Ok(())
}

/// Turns `uc` (the interrupted context) into the entry of `handler` for `sig` on the frame at
/// `frame`, as the kernel sets one up: its three arguments (the siginfo and `uc` in the frame),
/// DF, RF and TF clear, no FP state (`rt_sigreturn` gives the handler the initial one), the
/// kernel's mask `real`. The kernel disarms an `SS_AUTODISARM` alternate stack at every
/// delivery, whether or not the handler runs on it (`signal_delivered`); the frame keeps it
/// for the way back.
fn enter(uc: &mut Ucontext, sig: i32, handler: usize, frame: u64, real: u64) {
    let uc_at = frame.wrapping_add(8);
    uc.gregs[reg::RIP] = handler as u64;
    uc.gregs[reg::RSP] = frame;
    uc.gregs[reg::RDI] = sig as u64;
    uc.gregs[reg::RSI] = uc_at.wrapping_add(std::mem::size_of::<Ucontext>() as u64);
    uc.gregs[reg::RDX] = uc_at;
    uc.gregs[reg::RAX] = 0;
    uc.gregs[reg::EFL] &= !(0x400 | 0x1_0000 | 0x100);
    uc.fpregs = 0;
    uc.sigmask = real;
    if uc.stack.flags & kframe::SS_AUTODISARM != 0 {
        signals::disable_altstack();
        uc.stack = Stack {
            flags: kframe::SS_DISABLE,
            ..Stack::default()
        };
    }
}

// The restorer, the return address of every handler the engine enters. RSP is the frame's
// `uc`. It blocks every signal but SIGSEGV and SIGBUS (the copy routine's), counts itself as
// engine work on the thread (a SIGSEGV or SIGBUS sent meanwhile is held back), and on the
// thread's work stack puts back the tile state and the program's mask, then returns through
// rt_sigreturn. Its unwind information is a signal frame's (`kframe::signal_frame_cfi`).
core::arch::global_asm!(
    ".pushsection .text.amx_trap_restorer,\"ax\",@progbits",
    ".p2align 4",
    kframe::signal_frame_cfi!(),
    "    nop",
    ".hidden amx_trap_restorer",
    ".globl amx_trap_restorer",
    ".type amx_trap_restorer, @function",
    "amx_trap_restorer:",
    "    mov eax, 14",
    "    xor edi, edi",
    "    lea rsi, [rip + 7f]",
    "    xor edx, edx",
    "    mov r10d, 8",
    "    syscall",
    ".hidden amx_trap_restorer_blocked",
    ".globl amx_trap_restorer_blocked",
    "amx_trap_restorer_blocked:",
    // AC off for the engine's work, whatever the handler left (rt_sigreturn restores the
    // frame's flags).
    "    pushfq",
    "    and dword ptr [rsp], {no_ac}",
    "    popfq",
    "    mov rbx, rsp",
    "    mov rax, qword ptr [rip + amx_trap_thread@GOTTPOFF]",
    "    mov rax, qword ptr fs:[rax]",
    "    test rax, rax",
    "    jz 2f",
    "    add qword ptr [rax], 1",
    "    mov rsp, rax",
    "2:",
    "    and rsp, -16",
    "    mov rdi, rbx",
    "    call {restore}",
    "    mov rsp, rbx",
    "    mov eax, 15",
    "    syscall",
    "    ud2",
    ".cfi_endproc",
    ".hidden amx_trap_restorer_end",
    ".globl amx_trap_restorer_end",
    "amx_trap_restorer_end:",
    ".size amx_trap_restorer, amx_trap_restorer_end - amx_trap_restorer",
    ".p2align 3",
    "7:",
    "    .quad {mask}",
    ".popsection",
    restore = sym restore_entry,
    mask = const signals::ENTRY_MASK,
    no_ac = const crate::entry::NO_AC,
);

extern "C" {
    fn amx_trap_restorer();
    fn amx_trap_restorer_blocked();
    fn amx_trap_restorer_end();
}

/// The restorer's address.
pub(crate) fn restorer() -> u64 {
    amx_trap_restorer as *const () as u64
}

/// Where an interrupted restorer stands: `Some(true)` before it blocked the signals, `Some(false)`
/// after, `None` outside it.
pub(crate) fn in_restorer(rip: u64) -> Option<bool> {
    let start = amx_trap_restorer as *const () as u64;
    let blocked = amx_trap_restorer_blocked as *const () as u64;
    let end = amx_trap_restorer_end as *const () as u64;
    if (start..blocked).contains(&rip) {
        Some(true)
    } else if (blocked..end).contains(&rip) {
        Some(false)
    } else {
        None
    }
}

extern "C" fn restore_entry(uc: *mut Ucontext) {
    let uc_at = uc as u64;
    // SAFETY: the restorer passes the `uc` of the frame the handler returned from, in the
    // program's memory (the engine wrote it; a handler may have changed it, as it may change
    // any frame).
    let uc = unsafe { &mut *uc };
    if slot::current().is_none() {
        // A thread without a slot (its handlers entered by `deliver_in_place`): nothing counts
        // the restorer as engine work, so a SIGSEGV or SIGBUS that `restore` releases would be
        // taken here, inside the restorer, with its mask. Blocked, it comes at the context the
        // frame returns to, as the kernel delivers a signal that `rt_sigreturn` unblocks. (Not
        // SIGSYS: a seccomp filter trapping the engine's own system call here, blocked, would
        // end the process; a SIGSYS another process sent comes here, as on a thread with a
        // slot it would not.)
        signals::block(bit(libc::SIGSEGV) | bit(libc::SIGBUS));
    }
    restore(uc, uc_at);
    if let Some(slot) = slot::current() {
        crate::entry::raise_held_back(slot);
    }
}

/// Puts back what a frame the engine built saved: the tile state, and the program's mask as
/// the kernel will install it (the engine's signals never blocked, the program's view of them
/// kept). `uc` is the frame's `uc` (or a copy of it), found at `uc_at`. Idempotent: a signal
/// that interrupted the restorer redoes it (`finish_restorer`).
pub(crate) fn restore(uc: &mut Ucontext, uc_at: u64) {
    if let Some(slot) = slot::current() {
        match saved_tiles(uc, uc_at) {
            Saved::At(tiles) => put_back(slot, tiles),
            Saved::Init => put_back(slot, 0),
            Saved::Elsewhere => {}
        }
    }
    uc.sigmask = signals::set_program_view(uc.sigmask);
    signals::release_pending();
}

/// The tile state a frame returns to, as `rt_sigreturn` will read its FP state.
enum Saved {
    /// The state the engine saved at this address (0: the INIT state).
    At(u64),
    /// The INIT state: `rt_sigreturn` resets every state component the frame does not restore
    /// (`fpu__restore_sig`): with no FP state (`fpregs` NULL, as in a frame the engine stacked
    /// on a handler's entry, whose state is INIT), with FP state it cannot read (it then
    /// raises SIGSEGV), or without valid XSAVE markers (it restores the legacy x87 and SSE
    /// state alone).
    Init,
    /// FP state the engine did not write (the handler pointed `fpregs` at another valid state):
    /// its tile components are not the engine's to read, and the tiles stay as the handler
    /// left them.
    Elsewhere,
}

/// What `rt_sigreturn` of the frame whose `uc` is at `uc_at` does to the tile state.
fn saved_tiles(uc: &Ucontext, uc_at: u64) -> Saved {
    if uc.fpregs == 0 {
        return Saved::Init;
    }
    // The software bytes (464..512): MAGIC1, the sizes, and the engine's marker.
    let mut sw = [0u8; 48];
    // SAFETY: the engine's buffer; the frame's FP state is the program's memory (the engine
    // wrote it; a handler may point `fpregs` anywhere, which rt_sigreturn reads too).
    let read = unsafe {
        access::copy(
            sw.as_mut_ptr(),
            uc.fpregs.wrapping_add(kframe::sw::AT as u64) as *const u8,
            sw.len(),
        )
    };
    if read.is_err() {
        return Saved::Init;
    }
    let at = |offset: usize| offset - kframe::sw::AT;
    let word32 = |offset: usize| kframe::u32_at(&sw, at(offset)).unwrap_or(0) as usize;
    let word64 = |offset: usize| kframe::u64_at(&sw, at(offset)).unwrap_or(0);
    // The kernel's checks of the XSAVE markers (check_xstate_in_sigframe): failing them, it
    // restores the legacy state alone and resets the rest, the tiles among it.
    let xstate_size = word32(kframe::sw::XSTATE_SIZE);
    if word32(kframe::sw::AT) != kframe::sw::MAGIC1 as usize
        || xstate_size < 512 + 64
        || xstate_size > word32(kframe::sw::EXTENDED_SIZE)
    {
        return Saved::Init;
    }
    let mut magic2 = [0u8; 4];
    // SAFETY: as above.
    let read = unsafe {
        access::copy(
            magic2.as_mut_ptr(),
            uc.fpregs.wrapping_add(xstate_size as u64) as *const u8,
            4,
        )
    };
    if read.is_err() || u32::from_le_bytes(magic2) != kframe::MAGIC2 {
        return Saved::Init;
    }
    let marker = kframe::sw::PADDING;
    let tiles = word64(marker + 4);
    let ours = word32(marker) == MARK as usize && word64(marker + 12) == tiles ^ uc_at ^ KEY;
    if ours {
        Saved::At(tiles)
    } else {
        Saved::Elsewhere
    }
}

/// Loads the tile state saved at `tiles` (0: the INIT state) into the thread's unit.
fn put_back(slot: &Slot, tiles: u64) {
    let unit = slot.unit();
    if tiles == 0 {
        unit.tilerelease();
        return;
    }
    let mut config = [0u8; 64];
    // SAFETY: the engine's buffer; the saved state is the program's memory.
    if unsafe { access::copy(config.as_mut_ptr(), tiles as *const u8, 64) }.is_err()
        || unit.ldtilecfg(&config).is_err()
    {
        unit.tilerelease();
        return;
    }
    for t in 0..8u8 {
        let mut tile = [0u8; TILE_BYTES];
        let at = tiles.wrapping_add(64 + u64::from(t) * TILE_BYTES as u64);
        // SAFETY: as above.
        if unsafe { access::copy(tile.as_mut_ptr(), at as *const u8, TILE_BYTES) }.is_ok() {
            unit.set_tile_bytes(t, &tile);
        }
    }
}

/// Rolls a restorer that a signal interrupted forward to where it was going: the tile state
/// and mask put back, `ctx` the context the handler's frame returns to. The frame's `uc` is at
/// the interrupted RSP until the restorer moved it (which it does only with signals blocked).
pub(crate) fn finish_restorer(ctx: &mut Ctx) -> Result<(), ()> {
    let uc_at = ctx.frame.uc.rsp();
    let mut uc = std::mem::MaybeUninit::<Ucontext>::uninit();
    // SAFETY: reads the frame's `uc` into the engine's buffer (a fault is recovered); any bytes
    // make a valid Ucontext (plain integers).
    let uc = unsafe {
        access::copy(
            uc.as_mut_ptr().cast(),
            uc_at as *const u8,
            std::mem::size_of::<Ucontext>(),
        )
        .map_err(|_| ())?;
        uc.assume_init_mut()
    };
    // As the restorer would, on the frame as the handler left it.
    restore(uc, uc_at);
    let fp_at = uc.fpregs;
    ctx.frame.uc = *uc;
    if fp_at != 0 {
        let mut head = [0u8; 512];
        // SAFETY: the engine's buffer; the frame's FP state is the program's memory.
        unsafe { access::copy(head.as_mut_ptr(), fp_at as *const u8, 512) }.map_err(|_| ())?;
        ctx.set_fp_from_program(fp_at, kframe::fp_size(&head))?;
    }
    Ok(())
}
