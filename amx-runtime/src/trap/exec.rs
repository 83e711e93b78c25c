//! The execute step: one decoded AMX instruction on an emulated unit, with its memory operand
//! computed from the registers and accessed fault-safely. Callable from the SIGILL handler and
//! from ordinary code alike (it allocates nothing and takes no lock).
//!
//! The order of the checks is the silicon's
//! ([semantics.md section 12](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#12-exception-priority)):
//! the #UD conditions that
//! depend on the tile configuration, then XFD (no permission), then the memory operand
//! (#GP for a non-canonical address, #PF for an inaccessible page), then LDTILECFG's #GP rules.

use amx_tilecfg::{image, DotKind, TileShape};

use super::decode::{Address, Instruction, Operation, Segment};
use super::memory::{self, PageFault, Span};
use super::regs::Regs;
use super::{model, permission_granted};
use crate::unit::{check, Emulator, TileUnit, ROW_BYTES, TILE_BYTES};

/// The exception an instruction raised instead of completing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exception {
    /// #UD: SIGILL, `ILL_ILLOPN`, REG_TRAPNO 6.
    InvalidOpcode,
    /// #GP(0): SIGSEGV, `SI_KERNEL`, REG_TRAPNO 13.
    GeneralProtection,
    /// XFD #NM (tile data without the XTILEDATA permission): SIGILL, `ILL_ILLOPC`, REG_TRAPNO 0
    /// as Linux reports it.
    DeviceNotAvailable,
    /// #PF: SIGSEGV, `SEGV_MAPERR` or `SEGV_ACCERR`, REG_TRAPNO 14.
    PageFault(PageFault),
}

/// How an instruction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It completed; `regs.rip` now points past it.
    Completed,
    /// It raised an exception; `regs.rip` still points at it (a load or store that faulted
    /// on a row left start_row at that row, so running it again resumes there).
    Fault(Exception),
}

/// Executes `insn` (at `regs.rip`) on `unit`, reading and writing the process's memory as the
/// instruction would.
pub fn execute(insn: &Instruction, regs: &mut Regs, unit: &mut Emulator) -> Outcome {
    match step(insn, regs, unit) {
        Ok(()) => {
            regs.rip = regs.rip.wrapping_add(u64::from(insn.len));
            Outcome::Completed
        }
        Err(e) => Outcome::Fault(e),
    }
}

fn step(insn: &Instruction, regs: &Regs, unit: &mut Emulator) -> Result<(), Exception> {
    let cfg = unit.loaded_config();
    // The TILECFG-dependent #UD conditions come before XFD (section 12).
    let shape = match insn.op {
        Operation::Tilezero(t) => Some(check::tilezero_refusal(&cfg, t).map_err(ud)?),
        Operation::Tileloadd(t) | Operation::Tileloaddt1(t) | Operation::Tilestored(t) => {
            Some(check::tile_memory_refusal(&cfg, t).map_err(ud)?)
        }
        Operation::DotProduct { kind, c, a, b } => {
            if kind == DotKind::Tdpfp16ps && !model().amx_fp16() {
                return Err(Exception::InvalidOpcode);
            }
            check::dot_refusal(&cfg, (c, a, b), unit.tmul_limits()).map_err(ud)?;
            None
        }
        Operation::Ldtilecfg | Operation::Sttilecfg | Operation::Tilerelease => None,
    };
    if insn.op.touches_tile_data() && !permission_granted() {
        return Err(Exception::DeviceNotAvailable);
    }
    let next = regs.rip.wrapping_add(u64::from(insn.len));
    let ea = |m: &Address| effective_address(m, regs, next);
    match (insn.op, insn.mem, shape) {
        (Operation::Ldtilecfg, Some(m), _) => {
            let addr = canonical_span(ea(&m), 64, m.addr32)?;
            let mut img = [0u8; 64];
            memory::read_spans(&[addr], &mut [&mut img[..]]).map_err(|(_, f)| pf(f))?;
            // Checked first, without the message an emulator fault would format.
            if !check::ldtilecfg_accepts(&img, unit.palette_table()) {
                return Err(Exception::GeneralProtection);
            }
            unit.ldtilecfg(&img)
                .map_err(|_| Exception::GeneralProtection)
        }
        (Operation::Sttilecfg, Some(m), _) => {
            let addr = canonical_span(ea(&m), 64, m.addr32)?;
            let img = unit.sttilecfg();
            memory::write_spans(&[addr], &[&img[..]]).map_err(|(_, f)| pf(f))
        }
        (Operation::Tilerelease, _, _) => {
            unit.tilerelease();
            Ok(())
        }
        (Operation::Tilezero(t), _, _) => unit.tilezero(t).map_err(ud),
        (Operation::Tileloadd(t) | Operation::Tileloaddt1(t), Some(m), Some(shape)) => {
            load(unit, t, shape, &m, regs, next)
        }
        (Operation::Tilestored(t), Some(m), Some(shape)) => store(unit, t, shape, &m, regs, next),
        (Operation::DotProduct { kind, c, a, b }, _, _) => match kind {
            DotKind::Tdpbssd => unit.tdpbssd(c, a, b),
            DotKind::Tdpbsud => unit.tdpbsud(c, a, b),
            DotKind::Tdpbusd => unit.tdpbusd(c, a, b),
            DotKind::Tdpbuud => unit.tdpbuud(c, a, b),
            DotKind::Tdpbf16ps => unit.tdpbf16ps(c, a, b),
            DotKind::Tdpfp16ps => unit.tdpfp16ps(c, a, b),
        }
        .map_err(ud),
        // A memory form without its operand cannot come out of the decoder.
        _ => Err(Exception::InvalidOpcode),
    }
}

fn ud<T>(_: T) -> Exception {
    Exception::InvalidOpcode
}

fn pf(f: PageFault) -> Exception {
    Exception::PageFault(f)
}

/// Whether every address from `addr` to `addr + len - 1` is canonical (48-bit).
fn canonical(addr: u64, len: usize) -> bool {
    let ok = |a: u64| {
        let top = a >> 47;
        top == 0 || top == (1 << 17) - 1
    };
    let last = addr.wrapping_add(len.saturating_sub(1) as u64);
    ok(addr) && ok(last) && last >= addr
}

fn canonical_span(addr: u64, len: usize, addr32: bool) -> Result<Span, Exception> {
    if addr32 || canonical(addr, len) {
        Ok(Span { addr, len })
    } else {
        Err(Exception::GeneralProtection)
    }
}

fn register(regs: &Regs, r: u8, addr32: bool) -> u64 {
    let v = regs.gpr[usize::from(r & 15)];
    if addr32 {
        v & 0xFFFF_FFFF
    } else {
        v
    }
}

fn segment_base(segment: Option<Segment>) -> u64 {
    let code: libc::c_long = match segment {
        None => return 0,
        Some(Segment::Fs) => 0x1003, // ARCH_GET_FS
        Some(Segment::Gs) => 0x1004, // ARCH_GET_GS
    };
    let mut base: u64 = 0;
    // SAFETY: ARCH_GET_FS/GS write one u64 to the given address, a live local.
    let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, code, &mut base as *mut u64) };
    if rc == 0 {
        base
    } else {
        0
    }
}

/// The address of the first byte (row 0) of a memory operand: segment base + base + disp
/// (+ the next instruction's address when RIP-relative); the SIB index is the row stride.
fn effective_address(m: &Address, regs: &Regs, next: u64) -> u64 {
    let mut a = if m.rip_relative {
        next
    } else {
        m.base.map_or(0, |b| register(regs, b, m.addr32))
    };
    a = a.wrapping_add(m.disp as i64 as u64);
    if m.addr32 {
        a &= 0xFFFF_FFFF;
    }
    a.wrapping_add(segment_base(m.segment))
}

/// The stride of a tile load or store: index << scale, 0 without an index.
fn stride(m: &Address, regs: &Regs) -> u64 {
    m.index
        .map_or(0, |i| register(regs, i, m.addr32) << m.scale)
}

/// The rows `start_row..rows` of a tile access, as spans, up to (not including) the first row
/// whose address is not canonical; that row's number, if any.
fn row_spans(
    shape: TileShape,
    start: usize,
    base: u64,
    stride: u64,
    addr32: bool,
    out: &mut [Span; 16],
) -> (usize, Option<usize>) {
    let mut n = 0;
    for r in start..usize::from(shape.rows).min(16) {
        let mut addr = base.wrapping_add((r as u64).wrapping_mul(stride));
        if addr32 {
            addr &= 0xFFFF_FFFF;
        }
        let len = usize::from(shape.colsb);
        if !addr32 && !canonical(addr, len) {
            return (n, Some(r));
        }
        out[n] = Span { addr, len };
        n += 1;
    }
    (n, None)
}

fn load(
    unit: &mut Emulator,
    t: u8,
    shape: TileShape,
    m: &Address,
    regs: &Regs,
    next: u64,
) -> Result<(), Exception> {
    let start = usize::from(image::start_row(&unit.loaded_config()));
    let base = effective_address(m, regs, next);
    let mut spans = [Span { addr: 0, len: 0 }; 16];
    let (n, bad_row) = row_spans(shape, start, base, stride(m, regs), m.addr32, &mut spans);
    let colsb = usize::from(shape.colsb);
    let rows = usize::from(shape.rows).min(16);
    let Some(tile) = unit.tile_bytes_mut(t) else {
        return Err(Exception::InvalidOpcode);
    };
    // The memory rows go straight into the tile's rows (rows below start_row are not read:
    // they keep their bytes, T4). A row that faults may be left partly read: the silicon leaves
    // it unspecified, and resuming reads it again (T6).
    let result = {
        let mut out: [&mut [u8]; 16] = Default::default();
        for (i, row) in tile
            .chunks_exact_mut(ROW_BYTES)
            .skip(start)
            .take(n)
            .enumerate()
        {
            out[i] = &mut row[..colsb];
        }
        memory::read_spans(&spans[..n], &mut out[..n])
    };
    // Up to where the load got: rows read (or, on success, every row up to `rows`).
    let (end, outcome) = match (result, bad_row) {
        (Ok(()), None) => (rows, Ok(())),
        (Ok(()), Some(row)) => (row, Err(Exception::GeneralProtection)),
        (Err((i, f)), _) => (start + i, Err(pf(f))),
    };
    // TILELOADD's zeroing (T3): past colsb in each row read, and every row past `rows`.
    for row in tile.chunks_exact_mut(ROW_BYTES).take(end).skip(start) {
        row[colsb..].fill(0);
    }
    tile[rows * ROW_BYTES..].fill(0);
    // start_row records where to resume after a fault (T6), and is 0 after a completed load.
    unit.set_start_row(if outcome.is_ok() { 0 } else { end as u8 });
    outcome
}

fn store(
    unit: &mut Emulator,
    t: u8,
    shape: TileShape,
    m: &Address,
    regs: &Regs,
    next: u64,
) -> Result<(), Exception> {
    let start = usize::from(image::start_row(&unit.loaded_config()));
    let base = effective_address(m, regs, next);
    let mut spans = [Span { addr: 0, len: 0 }; 16];
    let (n, bad_row) = row_spans(shape, start, base, stride(m, regs), m.addr32, &mut spans);
    let tile = unit.tile_bytes(t).copied().unwrap_or([0; TILE_BYTES]);
    let result = {
        let mut data: [&[u8]; 16] = Default::default();
        for (i, chunk) in tile.chunks_exact(ROW_BYTES).skip(start).take(n).enumerate() {
            data[i] = chunk;
        }
        memory::write_spans(&spans[..n], &data[..n])
    };
    let (row, exception) = match (result, bad_row) {
        (Ok(()), None) => {
            unit.set_start_row(0);
            return Ok(());
        }
        (Ok(()), Some(row)) => (row, Exception::GeneralProtection),
        (Err((i, f)), _) => (start + i, pf(f)),
    };
    unit.set_start_row(row as u8);
    Err(exception)
}
