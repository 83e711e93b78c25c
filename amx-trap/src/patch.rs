//! Patching hot instruction sites: repeat executions at emulator speed.
//!
//! A signal round trip costs microseconds, the emulator's work tens to hundreds of nanoseconds.
//! So once an AMX instruction has trapped [`PATCH_AFTER`] times at the same address (a *site*),
//! the engine rewrites the site's first five bytes into `jmp rel32` to a stub of its own, and
//! later executions run the instruction through a function call instead of a signal
//! ([`crate::fastpath`]).
//!
//! **Writing the jump** while other threads may be executing the site is the breakpoint-first
//! sequence of cross-modifying code: `int3` over byte 0, a core-serializing
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)`, bytes 1..4 (the displacement),
//! sync, byte 0 = `E9`, sync. A thread sees the original instruction (SIGILL: the slow path),
//! the `int3` (SIGTRAP: the engine emulates the site's instruction, but only while the site is
//! being written and its other bytes are the site's: any other `int3` is the program's), or
//! the complete jump; never a mix. The bytes are written through `/proc/self/mem` (as a
//! debugger writes breakpoints), so the code's page protections never change under other
//! threads. Removing a patch is the same sequence backwards.
//!
//! **What the engine never patches**: a site in a shared mapping (the write would reach the
//! file, or another process), in a writable one (a JIT that writes its code in place, with no
//! system call the engine sees, could write into the jump's bytes, or lose its write to the
//! engine's own), or on the main thread's stack (a stub page within reach would stop its
//! growth); a site whose bytes changed since it trapped; and any site while the engine does
//! not hold SIGTRAP (its `int3` must never reach a handler of the program's).
//! Stub pages are placed within reach of the jump but never above the program break, where the
//! heap of `brk` grows.
//!
//! **What the program can still observe**: its own code bytes, read back, show the jump (five
//! bytes) instead of the instruction's first five. The preload removes a site's patch before
//! the program `mprotect`s, `mremap`s, `madvise`s or unmaps its page, so a JIT that makes its
//! code writable to change it sees its own bytes; and every execution of a patched site checks
//! that the instruction's other bytes are unchanged (a program that rewrites them in place gets
//! the instruction it wrote). `AMX_TRAP_PATCH=0` turns patching off.
//!
//! Patching happens inside the SIGILL handler of the thread that trapped, under a try-lock (a
//! busy lock means "patch on a later trap", never a wait). The site table is a fixed static
//! array of atomics: the handlers allocate nothing and take no lock.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use amx_tilecfg::decode::{self, Decoded, Instruction, Operation, MAX_LEN};

use crate::{access, fastpath, signals};

/// Traps at one address after which the site is patched: the second execution patches it, so
/// code run once (initialisation) costs no patch.
pub const PATCH_AFTER: u32 = 2;

/// Sites the table holds; sites beyond stay on the slow path.
const MAX_SITES: usize = 1024;

/// Slots probed from a site's hash slot.
const PROBES: usize = 32;

/// A site's life: counting traps, claimed by the thread patching it, its `int3` or jump being
/// written (the instruction is published from here on), patched, its patch being removed,
/// retired for good (its instruction stays valid for a thread still in its stub), or refused.
const COUNTING: u8 = 0;
const CLAIMED: u8 = 1;
const PATCHING: u8 = 2;
const PATCHED: u8 = 3;
const UNPATCHING: u8 = 4;
const DEAD: u8 = 5;
const REFUSED: u8 = 6;

pub(crate) struct Site {
    /// The instruction's address; 0: free slot.
    addr: AtomicU64,
    state: AtomicU8,
    traps: AtomicU32,
    /// The stub.
    stub: AtomicU64,
    /// Written once by the patching thread before `state` becomes [`PATCHING`] (release);
    /// read only after `state` was seen at [`PATCHING`] or later (acquire).
    insn: UnsafeCell<Instruction>,
    /// The instruction's bytes, published with `insn`.
    bytes: UnsafeCell<[u8; MAX_LEN]>,
}

// SAFETY: every field but `insn` and `bytes` is atomic; those follow the publication protocol
// documented on them (a retired site is never written again), so no read races with a write.
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
        bytes: UnsafeCell::new([0; MAX_LEN]),
    }
}; MAX_SITES];

/// Whether new sites are patched (the environment and [`set_patching`]).
static ENABLED: AtomicBool = AtomicBool::new(true);
/// Whether the process can patch: the stubs' entry chosen, the membarrier registered.
static READY: AtomicBool = AtomicBool::new(false);
/// Held while a site is written (and its stub made): one patch at a time.
static PATCH_LOCK: AtomicBool = AtomicBool::new(false);
/// Sites patched so far.
static PATCHED_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Whether the engine's SIGTRAP must be checked before each patch (in-process: the program may
/// have replaced it; the preload keeps it).
static CHECK_SIGTRAP: AtomicBool = AtomicBool::new(true);

const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 5;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 6;

/// A trapped AMX instruction's thread had SIGTRAP in its kernel mask (`mask`): a program that
/// installed the engine itself blocked it on a thread that runs AMX code, against the README's
/// rule. A site another thread patches passes through an int3, whose SIGTRAP would end such a
/// thread, which on the silicon meets no int3: no site is patched from then on. (Under the
/// preload the kernel never blocks the engine's signals.)
pub(crate) fn note_mask(mask: u64) {
    if mask & crate::signals::bit(libc::SIGTRAP) != 0 && ENABLED.load(Ordering::Relaxed) {
        ENABLED.store(false, Ordering::Release);
    }
}

/// Turns patching of hot sites on or off for sites not patched yet (sites already patched stay
/// patched). On by default, off when `AMX_TRAP_PATCH=0` was set when the engine was installed.
/// Patched and unpatched sites give the same results and raise the same exceptions; patching
/// only changes the cost of repeat executions.
pub fn set_patching(on: bool) {
    ENABLED.store(on, Ordering::Release);
}

/// Whether the engine patches hot sites: [`set_patching`] on, and the process able to (the
/// engine installed, the core-serializing membarrier available, the engine compiled with
/// optimization: unoptimized, a patched site would run over 100 KiB of the program's stack).
pub fn patching() -> bool {
    ENABLED.load(Ordering::Acquire) && READY.load(Ordering::Acquire)
}

/// How many instruction sites are patched in this process.
pub fn patched_sites() -> usize {
    PATCHED_COUNT.load(Ordering::Relaxed)
}

/// Prepares patching when the engine is installed: reads `AMX_TRAP_PATCH`, chooses the stubs'
/// entry and registers the membarrier. `sigtrap_kept`: the preload keeps SIGTRAP itself.
/// Outside signal context.
pub(crate) fn prepare(sigtrap_kept: bool) {
    if READY.load(Ordering::Acquire) {
        return;
    }
    if std::env::var_os("AMX_TRAP_PATCH").is_some_and(|v| v == "0") {
        ENABLED.store(false, Ordering::Release);
    }
    // Compiled without optimization (`build.rs`), the engine's code a patched site runs on the
    // program's stack needs over 100 KiB of it, more than a handler's alternate stack or a
    // coroutine's may hold: such a build traps every execution instead.
    if cfg!(amx_trap_unoptimized) {
        return;
    }
    CHECK_SIGTRAP.store(!sigtrap_kept, Ordering::Relaxed);
    if !fastpath::prepare() || !register_membarrier() {
        return;
    }
    READY.store(true, Ordering::Release);
}

fn register_membarrier() -> bool {
    // SAFETY: membarrier takes no pointers.
    unsafe {
        crate::sys::call(
            libc::SYS_membarrier,
            &[
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE as u64,
                0,
                0,
            ],
        ) == 0
    }
}

/// Makes every running thread of the process execute a core-serializing instruction before it
/// returns to user space.
fn sync_cores() -> bool {
    let sync = || {
        // SAFETY: membarrier takes no pointers.
        unsafe {
            crate::sys::call(
                libc::SYS_membarrier,
                &[MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE as u64, 0, 0],
            ) == 0
        }
    };
    // A forked child may need to register again.
    sync() || (register_membarrier() && sync())
}

fn hash(addr: u64) -> usize {
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % MAX_SITES
}

/// The table entries a site at `addr` may occupy, in probing order.
fn probes(addr: u64) -> impl Iterator<Item = &'static Site> {
    let from = SITES.get(hash(addr)..).unwrap_or_default();
    from.iter().chain(SITES.iter()).take(PROBES)
}

/// The live (not retired) site at `addr`, if the table has it.
fn find(addr: u64) -> Option<&'static Site> {
    for s in probes(addr) {
        match s.addr.load(Ordering::Acquire) {
            0 => return None,
            a if a == addr && s.state.load(Ordering::Acquire) != DEAD => return Some(s),
            _ => {}
        }
    }
    None
}

/// The live site at `addr`, entered into the table if absent (`None` when the table is full
/// there).
fn find_or_insert(addr: u64) -> Option<&'static Site> {
    for s in probes(addr) {
        match s
            .addr
            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Some(s),
            Err(a) if a == addr && s.state.load(Ordering::Acquire) != DEAD => return Some(s),
            Err(_) => {}
        }
    }
    None
}

/// The site with table index `index`.
pub(crate) fn site(index: u32) -> Option<&'static Site> {
    SITES.get(index as usize)
}

fn site_index(site: &Site) -> u32 {
    ((site as *const Site as usize - SITES.as_ptr() as usize) / std::mem::size_of::<Site>()) as u32
}

impl Site {
    /// The site's address.
    pub(crate) fn addr(&self) -> u64 {
        self.addr.load(Ordering::Acquire)
    }

    /// The site's stub.
    pub(crate) fn stub(&self) -> u64 {
        self.stub.load(Ordering::Acquire)
    }

    /// The site's instruction and bytes, once published.
    pub(crate) fn published(&self) -> Option<(Instruction, [u8; MAX_LEN])> {
        match self.state.load(Ordering::Acquire) {
            PATCHING | PATCHED | UNPATCHING | DEAD => {
                // SAFETY: the state is at PATCHING or later, so the writes to `insn` and
                // `bytes` happened before (release/acquire on `state`) and there is none after.
                Some(unsafe { (*self.insn.get(), *self.bytes.get()) })
            }
            _ => None,
        }
    }
}

/// The jump of a site patched to `stub`: `E9` and the displacement.
fn jump(site: u64, stub: u64) -> Option<[u8; 5]> {
    let rel = i32::try_from(stub.wrapping_sub(site.wrapping_add(5)) as i64).ok()?;
    let mut j = [0xE9, 0, 0, 0, 0];
    j[1..].copy_from_slice(&rel.to_le_bytes());
    Some(j)
}

/// What the bytes `code` at `rip` are, for a site of the table: the instruction the program
/// has there now, if the site's first five bytes are the engine's (its `int3` while being
/// written, or its jump): the site's own instruction when its other bytes are unchanged, else
/// the instruction the program made by changing them (the site's patch is then removed).
pub(crate) fn patched_since(rip: u64, code: &[u8]) -> Option<Decoded> {
    // A retired site's jump may still be in the code (a patch that could not be removed).
    let site = find_any(rip)?;
    let (insn, bytes) = site.published()?;
    let len = usize::from(insn.len);
    let head = code.get(..5)?;
    let original = bytes.get(..5)?;
    // The original head: the instruction trapped itself (counted by the caller). Anything the
    // engine writes there (the int3, the jump, or a mix of them with the original bytes, read
    // while a writing was under way) means the site's instruction trapped, the engine's bytes
    // arriving since.
    let ours = head != original && engine_head(head, original, jump(rip, site.stub()));
    if !ours {
        return None;
    }
    let tail = code.get(5..len.max(5))?;
    if tail == bytes.get(5..len.max(5))? {
        return Some(Decoded::Amx(insn));
    }
    // The program changed the instruction's other bytes in place: its instruction is its own
    // first bytes with them.
    let mut now = [0u8; MAX_LEN];
    let n = code.len().min(MAX_LEN);
    let (first, rest) = now.get_mut(..n)?.split_at_mut_checked(5)?;
    first.copy_from_slice(bytes.get(..5)?);
    rest.copy_from_slice(code.get(5..n)?);
    unpatch(site, false);
    Some(decode::decode(now.get(..n)?))
}

/// The instruction of a site whose `int3` the thread met at `at` (SIGTRAP at `at + 1`): an
/// `int3` the engine wrote while writing the site's jump or removing it. By the time the
/// handler reads the site the writing may have gone on, so the site's bytes may be the `int3`,
/// the jump or the original instruction; any other byte, or an `int3` outside such a window
/// (a program's own, or one filling a freed page), is the program's.
pub(crate) fn int3_site(at: u64) -> Option<Instruction> {
    let site = find_any(at)?;
    let before = site.state.load(Ordering::Acquire);
    let (insn, bytes) = site.published()?;
    let len = usize::from(insn.len);
    let mut buf = [0u8; MAX_LEN];
    let code = buf.get_mut(..len)?;
    if access::fetch(at, code) < len {
        return None;
    }
    let jump = jump(at, site.stub())?;
    let (head, tail) = code.split_at_checked(5)?;
    let (original, original_tail) = bytes.get(..len)?.split_at_checked(5)?;
    let mixed = engine_head(head, original, Some(jump));
    // The state before the bytes were read, and after: a window open at either time may have
    // left any mix of the int3, the jump and the original bytes.
    let ours = match (before, site.state.load(Ordering::Acquire)) {
        (PATCHING | UNPATCHING, _) | (_, PATCHING | UNPATCHING) => mixed,
        // The window closed after this thread met the int3: the jump, or the instruction back.
        (_, PATCHED) => head == jump,
        // Retired: the instruction back, or a jump that stayed (a retired site's stub still
        // runs the instruction). An int3 read after the window closed is the program's.
        (_, DEAD) => head == original || head == jump,
        _ => false,
    };
    (ours && tail == original_tail).then_some(insn)
}

/// Whether each of the five bytes `head` is the site's original byte, its jump's, or (the
/// first) the engine's `int3`: what a read of a site may see while the engine writes it.
fn engine_head(head: &[u8], original: &[u8], jump: Option<[u8; 5]>) -> bool {
    head.len() == 5
        && head.iter().enumerate().all(|(i, b)| {
            original.get(i) == Some(b)
                || jump.is_some_and(|j| j.get(i) == Some(b))
                || (i == 0 && *b == 0xCC)
        })
}

/// The newest site at `addr`, retired or not.
fn find_any(addr: u64) -> Option<&'static Site> {
    find(addr).or_else(|| {
        probes(addr)
            .take_while(|s| s.addr.load(Ordering::Acquire) != 0)
            .filter(|s| s.addr.load(Ordering::Acquire) == addr)
            .last()
    })
}

/// Called by the SIGILL handler for every AMX instruction it is about to emulate at `rip`
/// (`code`: its bytes): counts the trap and patches the site once it is hot.
pub(crate) fn trapped(rip: u64, insn: &Instruction, code: &[u8]) {
    if !patching() {
        return;
    }
    let Some(site) = find_or_insert(rip) else {
        return;
    };
    match site.state.load(Ordering::Acquire) {
        COUNTING => {}
        // Patched, yet the original instruction trapped: the code was replaced (a library
        // unloaded and loaded again at the same address). The old entry retires.
        PATCHED => {
            // A trap from before the patch, handled after it was written: the jump is there,
            // nothing was replaced.
            let mut head = [0u8; 5];
            if access::fetch(rip, &mut head) == 5 && jump(rip, site.stub()) == Some(head) {
                return;
            }
            if site
                .state
                .compare_exchange(PATCHED, DEAD, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                PATCHED_COUNT.fetch_sub(1, Ordering::Relaxed);
            }
            return;
        }
        _ => return,
    }
    if site.traps.fetch_add(1, Ordering::Relaxed).saturating_add(1) < PATCH_AFTER {
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
    let done = patch(site, rip, insn, code);
    PATCH_LOCK.store(false, Ordering::Release);
    if done {
        PATCHED_COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a site may not be patched now, if it may not.
fn refused(rip: u64, insn: &Instruction, code: &[u8]) -> bool {
    if usize::from(insn.len) < 5 || code.len() < usize::from(insn.len) {
        return true;
    }
    // An AMX-AVX512 row move writes a zmm register: the slow path writes it in the signal
    // frame; a patched site runs in the program's context, where the stub would have to
    // preserve and write the vector state itself. They stay on the slow path.
    if matches!(insn.op, Operation::RowMove { .. }) {
        return true;
    }
    // The bytes must still be this instruction (the program may rewrite its code).
    let mut buf = [0u8; MAX_LEN];
    let n = access::fetch(rip, &mut buf);
    let now = buf.get(..n).unwrap_or_default();
    let same = n.min(code.len());
    if decode::decode(now) != Decoded::Amx(*insn) || now.get(..same) != code.get(..same) {
        return true;
    }
    // Shared, writable and stack mappings are never patched (see `maps::patchable`).
    crate::maps::patchable(rip) != Some(true)
}

/// Writes the jump for `site` (claimed by this thread). Returns whether the site is patched.
fn patch(site: &Site, rip: u64, insn: &Instruction, code: &[u8]) -> bool {
    if CHECK_SIGTRAP.load(Ordering::Relaxed) && !engine_holds_sigtrap() {
        // The int3 could reach the program's own SIGTRAP handler: not now.
        site.state.store(COUNTING, Ordering::Release);
        return false;
    }
    if refused(rip, insn, code) {
        site.state.store(REFUSED, Ordering::Release);
        return false;
    }
    let mut bytes = [0u8; MAX_LEN];
    let len = usize::from(insn.len).min(MAX_LEN);
    if let (Some(to), Some(from)) = (bytes.get_mut(..len), code.get(..len)) {
        to.copy_from_slice(from);
    }
    // SAFETY: the site is CLAIMED by this thread: no one reads `insn` or `bytes` before
    // PATCHING.
    unsafe {
        *site.insn.get() = *insn;
        *site.bytes.get() = bytes;
    }
    let Some(stub) = fastpath::build_stub(rip, site_index(site)) else {
        site.state.store(REFUSED, Ordering::Release);
        return false;
    };
    site.stub.store(stub, Ordering::Release);
    let Some(jump) = jump(rip, stub) else {
        site.state.store(REFUSED, Ordering::Release);
        return false;
    };
    let Some(mem) = Mem::open() else {
        site.state.store(REFUSED, Ordering::Release);
        return false;
    };
    if !sync_cores() {
        site.state.store(REFUSED, Ordering::Release);
        return false;
    }
    // From here a thread may meet the int3: the instruction is published first.
    site.state.store(PATCHING, Ordering::Release);
    let ok = mem.poke(rip, &[0xCC])
        && sync_cores()
        && mem.poke(rip.wrapping_add(1), &jump[1..])
        && sync_cores()
        && mem.poke(rip, &jump[..1])
        && sync_cores();
    if ok {
        site.state.store(PATCHED, Ordering::Release);
        return true;
    }
    // Put the instruction back; should that fail too, the int3 stays and the SIGTRAP path
    // keeps emulating the site (state PATCHING), which is correct.
    if mem.poke(rip.wrapping_add(1), &bytes[1..5]) && sync_cores() && mem.poke(rip, &bytes[..1]) {
        sync_cores();
        site.state.store(REFUSED, Ordering::Release);
    }
    false
}

/// In a `fork` child: a patch another thread of the parent had under way stays as far as it
/// got (a site left PATCHING keeps being emulated at its `int3`), and the lock that thread held
/// is free, as no thread of the child holds it.
pub(crate) fn forked() {
    PATCH_LOCK.store(false, Ordering::Release);
}

/// Removes `site`'s patch: its original first bytes written back (if its jump is still
/// there), the entry retired. With `wait`, waits for a patch in progress on another thread
/// (outside signal handlers only: a handler must not wait for the code it interrupted);
/// without, gives up when one is.
fn unpatch(site: &Site, wait: bool) {
    while PATCH_LOCK.swap(true, Ordering::Acquire) {
        if !wait {
            return;
        }
        std::hint::spin_loop();
    }
    if site
        .state
        .compare_exchange(PATCHED, UNPATCHING, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        let rip = site.addr();
        // SAFETY: UNPATCHING is a published state: `bytes` is written and stays so.
        let bytes = unsafe { *site.bytes.get() };
        let mut head = [0u8; 5];
        let ours = access::fetch(rip, &mut head) == 5 && jump(rip, site.stub()) == Some(head);
        // The barrier first: a process that may no longer use it (a sandbox that denies
        // membarrier since the site was patched) keeps the jump, which still runs the
        // instruction, rather than an int3 before the jump's displacement, which would be a
        // breakpoint of the program's once the site is retired.
        if ours && sync_cores() {
            if let Some(mem) = Mem::open() {
                let _ = mem.poke(rip, &[0xCC])
                    && sync_cores()
                    && mem.poke(rip.wrapping_add(1), &bytes[1..5])
                    && sync_cores()
                    && mem.poke(rip, &bytes[..1])
                    && sync_cores();
            }
        }
        site.state.store(DEAD, Ordering::Release);
        PATCHED_COUNT.fetch_sub(1, Ordering::Relaxed);
    }
    PATCH_LOCK.store(false, Ordering::Release);
}

/// Removes the patches of every site in `start..start + len` (the program is about to change,
/// protect, move or unmap that memory).
pub fn unpatch_range(start: u64, len: u64) {
    if PATCHED_COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let end = start.saturating_add(len);
    for site in &SITES {
        let at = site.addr();
        if at != 0 && at < end && at.saturating_add(MAX_LEN as u64) > start {
            unpatch(site, true);
        }
    }
}

/// Whether the engine's entry is SIGTRAP's action in the kernel's table.
fn engine_holds_sigtrap() -> bool {
    signals::kernel_action(libc::SIGTRAP)
        .is_some_and(|a| a.handler == crate::entry::handler() as u64)
}

/// `/proc/self/mem`, kept open for writing code as a debugger writes breakpoints.
pub(crate) static MEM: crate::sys::OwnFile =
    crate::sys::OwnFile::new(c"/proc/self/mem", libc::O_RDWR | libc::O_CLOEXEC);

/// Writes into this process's code through `/proc/self/mem`.
struct Mem;

impl Mem {
    /// `None` where `/proc/self/mem` cannot be opened (a sandbox, no `/proc`).
    fn open() -> Option<Mem> {
        MEM.get().map(|_| Mem)
    }

    /// Writes `bytes` at `addr` of this process. The file is checked (and opened again where
    /// need be) for each write: another thread of the program may close every descriptor
    /// between two writes of a patch (`close_range`), which would leave the site half patched.
    fn poke(&self, addr: u64, bytes: &[u8]) -> bool {
        i64::try_from(addr).is_ok()
            && MEM
                .get()
                .is_some_and(|f| crate::sys::pwrite(f.fd(), bytes, addr) == Ok(bytes.len() as u64))
    }
}

/// Writes `bytes` into a page of the engine's own executable stubs (read+execute: the write goes
/// through `/proc/self/mem`, as for a site).
pub(crate) fn poke_code(addr: u64, bytes: &[u8]) -> bool {
    Mem::open().is_some_and(|m| m.poke(addr, bytes))
}

/// The site a stub at `stub` serves (its number is in the stub; checked against the table).
pub(crate) fn by_stub(stub: u64, index: u32) -> Option<&'static Site> {
    site(index).filter(|s| s.stub() == stub)
}
