//! Patching hot instruction sites: repeat executions at emulator speed.
//!
//! A signal round trip costs microseconds, the emulator's work tens to hundreds of nanoseconds.
//! So once an AMX instruction has trapped [`PATCH_AFTER`] times at the same address (a *site*),
//! the engine rewrites the site's first five bytes into `jmp rel32` to a stub of its own, and
//! later executions run the instruction through a function call instead of a signal:
//!
//! 1. **The stub** (one page per site, mapped within ±2 GiB of it, made read+execute before
//!    the jump to it exists) steps over the red zone (`lea rsp, [rsp-128]`) and calls the
//!    engine's common entry ([`super::stub`]). The entry saves every general-purpose register
//!    and RFLAGS, the vector state the compiled code can change (ymm0-15 and MXCSR; with
//!    `XSAVE`, x87 to AVX-512, where the OS enables AVX-512 state) in an aligned area below
//!    them, loads the default MXCSR (the one a signal handler gets, so results are those of
//!    the slow path bit for bit), and calls
//!    [`fast`] with the saved registers. [`fast`] takes the instruction the site table holds,
//!    decoded when the site was patched, and runs [`execute`] on the thread's emulator (on the
//!    engine's work stack, allocation-free, lock-free). Memory operands are copied directly
//!    ([`super::fastcopy`]): a fault inside the copy is caught by the engine's SIGSEGV handler
//!    and the access is redone with the slow path's `process_vm_readv`/`writev`, which computes
//!    the exact page fault. The entry restores everything and returns to the address [`fast`]
//!    chose with `ret 128`, which also gives back the red zone.
//! 2. **Completed**: the stub resumes after the instruction (the bytes of the site past the
//!    jump are never executed). **Faulted** (#UD, #GP, #PF, XFD): the stub resumes, with every
//!    register as the instruction found it, at a `ud2` of its own; the SIGILL handler
//!    recognises it ([`fault_exit`]), puts RIP back on the site and runs the instruction on the
//!    slow path, which raises the exception exactly as an unpatched site does: the program's
//!    handler sees RIP at the site, the original registers, the silicon's signal, code,
//!    `si_addr` and REG_TRAPNO, and start_row left at the faulting row.
//! 3. **Writing the jump** while other threads may be executing the site is the breakpoint-first
//!    sequence of cross-modifying code: `int3` over byte 0, a core-serializing
//!    `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` on every thread of the process,
//!    bytes 1..4 (the displacement), sync, byte 0 = `E9`, sync. A thread sees the original
//!    instruction (SIGILL: slow path), the `int3` (SIGTRAP: the engine's handler, first in
//!    line, emulates the site's instruction on the slow path and chains every other SIGTRAP to
//!    the program's action), or the complete jump; never a mix. The bytes are written through
//!    `/proc/self/mem` (as a debugger writes breakpoints), so the code's page protections are
//!    never changed under other threads: a file-backed text page becomes a private copy, as on
//!    any write to it. Where that write, the membarrier or an executable stub page is refused,
//!    the site stays on the slow path, which is always correct.
//!
//! Patching happens inside the SIGILL handler of the thread that trapped, under a try-lock (a
//! busy lock means "patch on a later trap", never a wait). The site table is a fixed static
//! array of atomics, so the handlers allocate nothing and take no lock.
//!
//! `AMX_TRAP_PATCH=0` in the environment when the engine is installed turns patching off (every
//! execution traps); [`set_patching`] does the same at run time for sites not yet patched.
//!
//! Inherited and unusual cases: `fork` copies the patched code and the stubs, so a child runs
//! them as its parent did; `exec` discards them. Code unloaded and replaced at a patched
//! address traps as new code and stays on the slow path (the table's instruction serves a SIGILL
//! at the site only while the bytes there are the engine's `int3` or jump). A signal arriving while a thread is in a stub runs its handler on the thread's
//! stack below the stub's frame; a handler that runs AMX instructions there opens a
//! [`HandlerScope`](super::HandlerScope) (the preload does it for every handler), as on the
//! slow path. A handler that leaves a stub by `siglongjmp` abandons the instruction midway
//! (the silicon would have completed or not started it). The stub needs about 1.5 KiB of the
//! program's stack (about 4 KiB with `XSAVE`).
//!
//! Limits: a SIGTRAP handler the program installs after the engine receives the `int3` of a
//! thread that reaches a site in the microseconds it is being patched. Without the preload, a
//! SIGSEGV handler the program installs after the engine also receives faults of the direct
//! copy (at an address inside the engine, instead of the slow path's exact report); the engine
//! checks its SIGSEGV handler each time it patches a site and copies through the slow path
//! from then on if it was replaced.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use super::deliver::{self, deliver, Action};
use super::exec::{execute, Outcome};
use super::handler::Errno;
use super::regs::{context, Regs};
use super::{fastcopy, handler, memory, state, stub};
use amx_tilecfg::decode::{self, Decoded, Instruction, Operation, MAX_LEN};

/// Traps at one address after which the site is patched: the second execution patches it, so
/// code run once (initialisation) costs no patch.
pub const PATCH_AFTER: u32 = 2;

/// Sites the table holds; sites beyond stay on the slow path.
const MAX_SITES: usize = 1024;

/// Slots probed from a site's hash slot.
const PROBES: usize = 32;

const PAGE: u64 = 4096;

/// A site's life: counting traps, claimed by the thread patching it, its int3 or jump written
/// (the instruction in the table is valid from here on), patched, or refused for good.
const COUNTING: u8 = 0;
const CLAIMED: u8 = 1;
const PATCHING: u8 = 2;
const PATCHED: u8 = 3;
const REFUSED: u8 = 4;

struct Site {
    /// The instruction's address; 0: free slot.
    addr: AtomicU64,
    state: AtomicU8,
    traps: AtomicU32,
    /// The stub's page.
    stub: AtomicU64,
    /// Written once by the patching thread before `state` becomes [`PATCHING`] (release); read
    /// only after `state` was seen at [`PATCHING`] or later (acquire).
    insn: UnsafeCell<Instruction>,
}

// SAFETY: every field but `insn` is atomic; `insn` follows the publication protocol documented
// on it, so no read races with its one write.
unsafe impl Sync for Site {}

static SITES: [Site; MAX_SITES] = [const {
    Site {
        addr: AtomicU64::new(0),
        state: AtomicU8::new(COUNTING),
        traps: AtomicU32::new(0),
        stub: AtomicU64::new(0),
        insn: UnsafeCell::new(Instruction {
            op: Operation::Tilerelease,
            mem: None,
            len: 0,
        }),
    }
}; MAX_SITES];

/// Whether new sites are patched (the environment and [`set_patching`]).
static ENABLED: AtomicBool = AtomicBool::new(true);
/// Whether the process can patch: the stub's save area fits, SIGTRAP is the engine's, the
/// membarrier is registered.
static READY: AtomicBool = AtomicBool::new(false);
/// Held while a site is written (and its stub allocated): one patch at a time.
static PATCH_LOCK: AtomicBool = AtomicBool::new(false);
/// Sites patched so far.
static PATCHED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Linux's `si_code` of a trap instruction (`int3`).
const SI_KERNEL: i32 = 0x80;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 5;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 6;

/// Turns patching of hot sites on or off for sites not patched yet (sites already patched stay
/// patched). On by default, off when `AMX_TRAP_PATCH=0` was set when the engine was installed.
/// Patched and unpatched sites give the same results and raise the same exceptions; patching
/// only changes the cost of repeat executions.
pub fn set_patching(on: bool) {
    ENABLED.store(on, Ordering::Release);
}

/// Whether the engine patches hot sites: [`set_patching`] on, and the process able to (the
/// engine installed, the core-serializing membarrier available).
pub fn patching() -> bool {
    ENABLED.load(Ordering::Acquire) && READY.load(Ordering::Acquire)
}

/// How many instruction sites are patched in this process.
pub fn patched_sites() -> usize {
    PATCHED_COUNT.load(Ordering::Relaxed)
}

/// Prepares patching when the engine is installed: reads `AMX_TRAP_PATCH`, checks the stub's
/// save area, registers the membarrier and takes SIGTRAP (for the patching window) and, unless
/// the engine already has it, SIGSEGV (for the direct copy). Outside signal context.
pub(crate) fn prepare() {
    if READY.load(Ordering::Acquire) {
        return;
    }
    if std::env::var_os("AMX_TRAP_PATCH").is_some_and(|v| v == "0") {
        ENABLED.store(false, Ordering::Release);
    }
    if !stub::prepare() || !register_membarrier() {
        return;
    }
    if !take_sigtrap() {
        return;
    }
    fastcopy::prepare();
    READY.store(true, Ordering::Release);
}

fn register_membarrier() -> bool {
    // SAFETY: membarrier takes no pointers.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE,
            0,
            0,
        ) == 0
    }
}

/// Makes every running thread of the process execute a core-serializing instruction before it
/// returns to user space.
fn sync_cores() -> bool {
    let sync = || {
        // SAFETY: membarrier takes no pointers.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE,
                0,
                0,
            ) == 0
        }
    };
    // A forked child may need to register again.
    sync() || (register_membarrier() && sync())
}

fn take_sigtrap() -> bool {
    if deliver::owned(libc::SIGTRAP) {
        return true;
    }
    let ours = Action {
        handler: on_sigtrap as *const () as usize,
        flags: libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART,
        mask: !0,
    }
    .to_c();
    // SAFETY: an all-zero sigaction is valid.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are live sigactions; the handler is async-signal-safe.
    if unsafe { deliver::real_sigaction(libc::SIGTRAP, &ours, &mut old) } != 0 {
        return false;
    }
    deliver::record(libc::SIGTRAP, Action::from_c(&old));
    true
}

fn hash(addr: u64) -> usize {
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % MAX_SITES
}

/// The site at `addr`, if the table has it.
fn find(addr: u64) -> Option<&'static Site> {
    let h = hash(addr);
    for i in 0..PROBES {
        let s = &SITES[(h + i) % MAX_SITES];
        match s.addr.load(Ordering::Acquire) {
            a if a == addr => return Some(s),
            0 => return None,
            _ => {}
        }
    }
    None
}

/// The site at `addr`, entered into the table if absent (`None` when the table is full there).
fn find_or_insert(addr: u64) -> Option<&'static Site> {
    let h = hash(addr);
    for i in 0..PROBES {
        let s = &SITES[(h + i) % MAX_SITES];
        match s
            .addr
            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Some(s),
            Err(a) if a == addr => return Some(s),
            Err(_) => {}
        }
    }
    None
}

/// The site's instruction, once published.
fn published(s: &Site) -> Option<Instruction> {
    match s.state.load(Ordering::Acquire) {
        // SAFETY: the state is at PATCHING or later, so the write to `insn` happened before
        // (release/acquire on `state`) and there is none after.
        PATCHING | PATCHED => Some(unsafe { *s.insn.get() }),
        _ => None,
    }
}

/// Called by the SIGILL handler for every AMX instruction it is about to emulate at `rip`:
/// counts the trap and patches the site once it is hot.
pub(crate) fn trapped(rip: u64, insn: &Instruction) {
    if !patching() {
        return;
    }
    let Some(site) = find_or_insert(rip) else {
        return;
    };
    if site.state.load(Ordering::Acquire) != COUNTING
        || site.traps.fetch_add(1, Ordering::Relaxed) + 1 < PATCH_AFTER
    {
        return;
    }
    if site
        .state
        .compare_exchange(COUNTING, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    if PATCH_LOCK.swap(true, Ordering::Acquire) {
        // Another thread is patching: this site waits for a later trap.
        site.state.store(COUNTING, Ordering::Release);
        return;
    }
    let done = patch(site, rip, insn);
    PATCH_LOCK.store(false, Ordering::Release);
    if done {
        PATCHED_COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

/// Writes the jump for `site` (claimed by this thread). Returns whether the site is patched.
fn patch(site: &Site, rip: u64, insn: &Instruction) -> bool {
    fastcopy::check_guard();
    // SAFETY: the site is CLAIMED by this thread: no one reads `insn` before PATCHING.
    unsafe { *site.insn.get() = *insn };
    // The bytes must still be this instruction (the program may rewrite its code).
    let mut code = [0u8; MAX_LEN];
    let n = memory::read_prefix(rip, &mut code);
    if decode::decode(&code[..n]) != Decoded::Amx(*insn) || insn.len < 5 {
        site.state.store(REFUSED, Ordering::Release);
        return false;
    }
    let Some(page) = stub::build(rip, site_index(site)) else {
        site.state.store(REFUSED, Ordering::Release);
        return false;
    };
    site.stub.store(page, Ordering::Release);
    let rel = page as i64 - (rip as i64 + 5);
    let Ok(rel) = i32::try_from(rel) else {
        site.state.store(REFUSED, Ordering::Release);
        return false;
    };
    // SAFETY: a NUL-terminated path; open has no other memory arguments.
    let fd = unsafe { libc::open(c"/proc/self/mem".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 || !sync_cores() {
        if fd >= 0 {
            // SAFETY: `fd` is ours.
            unsafe { libc::close(fd) };
        }
        site.state.store(REFUSED, Ordering::Release);
        return false;
    }
    // From here a thread may meet the int3: the instruction is published first.
    site.state.store(PATCHING, Ordering::Release);
    let ok = poke(fd, rip, &[0xCC]);
    let ok = ok && sync_cores() && poke(fd, rip + 1, &rel.to_le_bytes()) && sync_cores();
    let ok = ok && poke(fd, rip, &[0xE9]) && sync_cores();
    if !ok {
        // Put the instruction back; should that fail too, the int3 stays and the SIGTRAP
        // handler keeps emulating the site (state PATCHING), which is correct.
        if poke(fd, rip + 1, &code[1..5]) && sync_cores() && poke(fd, rip, &code[..1]) {
            sync_cores();
            site.state.store(REFUSED, Ordering::Release);
        }
    } else {
        site.state.store(PATCHED, Ordering::Release);
    }
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    ok
}

/// Writes `bytes` at `addr` of this process through `/proc/self/mem` (`fd`).
fn poke(fd: libc::c_int, addr: u64, bytes: &[u8]) -> bool {
    // SAFETY: `bytes` is a live buffer of its length; the kernel checks the target address.
    let n = unsafe { libc::pwrite64(fd, bytes.as_ptr().cast(), bytes.len(), addr as i64) };
    n == bytes.len() as isize
}

fn site_index(site: &Site) -> u32 {
    ((site as *const Site as usize - SITES.as_ptr() as usize) / std::mem::size_of::<Site>()) as u32
}

/// The instruction of the site at `rip` if `code` (the bytes there now) is the engine's `int3`
/// or jump: a thread that trapped on the original instruction, whose handler reads the bytes
/// after another thread patched them.
pub(crate) fn patched_since(rip: u64, code: &[u8]) -> Option<Instruction> {
    let first = *code.first()?;
    if first != 0xCC && first != 0xE9 {
        return None;
    }
    let site = find(rip)?;
    let insn = published(site)?;
    if first == 0xE9 {
        let rel = i32::from_le_bytes(code.get(1..5)?.try_into().ok()?);
        let target = rip.wrapping_add(5).wrapping_add(rel as i64 as u64);
        if target != site.stub.load(Ordering::Acquire) {
            return None;
        }
    }
    Some(insn)
}

/// If `rip` is a stub's fault exit (the `ud2` a faulted fast-path execution resumes at), the
/// site's address and instruction: the SIGILL handler then raises the exception at the site.
pub(crate) fn fault_exit(rip: u64) -> Option<(u64, Instruction)> {
    if rip % PAGE != stub::FAULT_EXIT {
        return None;
    }
    let page = rip - stub::FAULT_EXIT;
    SITES.iter().find_map(|s| {
        if s.stub.load(Ordering::Acquire) != page {
            return None;
        }
        Some((s.addr.load(Ordering::Acquire), published(s)?))
    })
}

/// The fast path: called by the stub's common entry with the site's number and the
/// interrupted registers (RIP set here); executes the instruction and returns the address to resume at (past
/// the instruction, or the stub's fault exit).
pub(crate) fn fast(index: u32, regs: &mut Regs) -> u64 {
    // Every stub carries its own site's number, always in range.
    let site = &SITES[index as usize % MAX_SITES];
    let stub = site.stub.load(Ordering::Acquire);
    let (Some(insn), addr) = (published(site), site.addr.load(Ordering::Acquire)) else {
        return stub + stub::FAULT_EXIT;
    };
    regs.rip = addr;
    let outcome = state::with_unit(|unit| fastcopy::direct(|| execute(&insn, regs, unit)));
    match outcome {
        Some(Outcome::Completed) => regs.rip,
        // The slow path raises the exception, or #UD for a thread being torn down.
        _ => stub + stub::FAULT_EXIT,
    }
}

/// The SIGTRAP handler: a thread that met the `int3` of a site being patched runs the site's
/// instruction on the slow path; any other SIGTRAP goes to the program's action.
pub(crate) extern "C" fn on_sigtrap(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    let _errno = Errno::save();
    let uc = uc.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes a valid siginfo_t and ucontext_t to an SA_SIGINFO handler; they
    // live on this handler's frame until it returns.
    let (info, ctx) = unsafe { (&mut *info, &mut *uc) };
    if info.si_code == SI_KERNEL {
        let at = context::rip(ctx).wrapping_sub(1);
        if let Some(insn) = find(at).and_then(published) {
            context::set_rip(ctx, at);
            // SAFETY: `uc` is this handler's context; RIP is the site's.
            unsafe { handler::emulate(&insn, uc, at) };
            return;
        }
    }
    // SAFETY: `uc` is this handler's context.
    unsafe { deliver(sig, info, uc, info.si_code > 0) };
}
