//! The encoding rules of the AMX instructions: the bytes at an address to an AMX
//! [`Instruction`], or the reason they are not one. The project's only x86 decoder: the
//! `amx-trap` engine, the encoding tests and the runtime's asm unit tests all read machine code
//! through it.
//!
//! Two layers: [`vex_any`] splits any three-byte-VEX (C4) instruction into its fields
//! (prefixes, map, VEX bits, opcode, ModRM, SIB, displacement, length) without judging them
//! ([`vex`] keeps those of map 0F38), and [`evex`] does the same for a four-byte EVEX (62)
//! instruction; [`decode`] applies the AMX encoding rules of
//! [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
//! sections 2-8 and 15-19 to those fields: the VEX-encoded AMX instructions of map 0F38
//! (AMX-TILE, AMX-INT8, AMX-BF16, AMX-FP16, AMX-COMPLEX, AMX-MOVRS), AMX-FP8 in VEX map 5, and the
//! EVEX-encoded AMX-AVX512 row moves of maps 0F38 and 0F3A.
//!
//! Addressing follows 64-bit mode: ModRM.rm = 100 selects a SIB byte whatever VEX.B says;
//! mod = 00 with rm = 101 is RIP-relative; a SIB base of 101 with mod = 00 is "no base,
//! disp32"; a SIB index of 100 without VEX.X is "no index" (with VEX.X it is r12). An
//! address-size prefix (67) gives 32-bit addressing; FS and GS segment prefixes add their base;
//! the other segment prefixes are ignored, as 64-bit mode does.

use crate::DotKind;

/// Longest x86 instruction.
pub const MAX_LEN: usize = 15;

/// Opcodes (map 0F38) of the AMX-TILE, AMX-INT8, AMX-BF16 and AMX-FP16 instructions.
pub const AMX_OPCODES: [u8; 4] = [0x49, 0x4B, 0x5C, 0x5E];

/// Opcodes (VEX map 0F38) of AMX-MOVRS (4A: TILELOADDRS, TILELOADDRST1) and AMX-COMPLEX (6C).
pub const NEXT_VEX_OPCODES: [u8; 2] = [0x4A, 0x6C];

/// The opcode (VEX map 5) of the AMX-FP8 dot products.
pub const FP8_OPCODE: u8 = 0xFD;

/// VEX and EVEX map numbers (the `mmmmm` field).
pub mod map {
    /// 0F38.
    pub const M0F38: u8 = 2;
    /// 0F3A.
    pub const M0F3A: u8 = 3;
    /// Map 5.
    pub const MAP5: u8 = 5;
}

/// A segment whose base an address adds (FS or GS; the others have base 0 in 64-bit mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    /// The FS prefix (64).
    Fs,
    /// The GS prefix (65).
    Gs,
}

/// The fields of one three-byte-VEX instruction, as encoded (no validity rules applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VexFields {
    /// Legacy prefix bytes before C4 (all of them, whatever they are).
    pub prefixes: usize,
    /// The opcode map (VEX.mmmmm: 2 = 0F38, 5 = map 5).
    pub map: u8,
    /// An address-size prefix (67) is among them.
    pub addr32: bool,
    /// The last FS or GS prefix among them.
    pub segment: Option<Segment>,
    /// A prefix VEX forbids (66, F2, F3, F0, REX) is among them: #UD.
    pub forbidden_prefix: bool,
    /// VEX.R, VEX.X, VEX.B, un-inverted (true extends the register number by 8).
    pub r: bool,
    /// VEX.X (extends the SIB index).
    pub x: bool,
    /// VEX.B (extends ModRM.rm or the SIB base).
    pub b: bool,
    /// VEX.W.
    pub w: bool,
    /// VEX.vvvv, un-inverted.
    pub vvvv: u8,
    /// VEX.L.
    pub l: bool,
    /// VEX.pp: 0 none, 1 = 66, 2 = F3, 3 = F2.
    pub pp: u8,
    /// The opcode byte.
    pub opcode: u8,
    /// The ModRM byte.
    pub modrm: u8,
    /// The SIB byte, when ModRM selects one.
    pub sib: Option<u8>,
    /// The displacement (sign-extended disp8, or disp32), 0 when there is none.
    pub disp: i32,
    /// Total length in bytes, prefixes included.
    pub len: usize,
}

/// VEX.pp of each mandatory prefix.
pub mod pp {
    /// No prefix.
    pub const NP: u8 = 0;
    /// 66.
    pub const P66: u8 = 1;
    /// F3.
    pub const PF3: u8 = 2;
    /// F2.
    pub const PF2: u8 = 3;
}

impl VexFields {
    /// ModRM.mod = 11: a register operand, no memory.
    pub fn register_form(&self) -> bool {
        self.modrm >> 6 == 3
    }

    /// ModRM.reg extended by VEX.R.
    pub fn reg(&self) -> u8 {
        ((self.modrm >> 3) & 7) | (u8::from(self.r) << 3)
    }

    /// ModRM.rm extended by VEX.B (for a memory form with a SIB: 4 or 12, not the base).
    pub fn rm(&self) -> u8 {
        (self.modrm & 7) | (u8::from(self.b) << 3)
    }

    /// The SIB scale as a shift (0 = x1).
    pub fn scale(&self) -> Option<u8> {
        self.sib.map(|s| s >> 6)
    }

    /// The SIB index register, or `None` (no SIB, or index 100 without VEX.X).
    pub fn index(&self) -> Option<u8> {
        let sib = self.sib?;
        let index = ((sib >> 3) & 7) | (u8::from(self.x) << 3);
        (index != 4).then_some(index)
    }

    /// The base register of a memory form (SIB base or ModRM.rm, extended by VEX.B), `None`
    /// for RIP-relative and for "no base, disp32", and for register forms.
    pub fn base(&self) -> Option<u8> {
        if self.register_form() || self.rip_relative() {
            return None;
        }
        let mode = self.modrm >> 6;
        match self.sib {
            Some(sib) if sib & 7 == 5 && mode == 0 => None,
            Some(sib) => Some((sib & 7) | (u8::from(self.b) << 3)),
            None => Some(self.rm()),
        }
    }

    /// mod = 00, rm = 101: the address is relative to the next instruction.
    pub fn rip_relative(&self) -> bool {
        self.modrm >> 6 == 0 && self.modrm & 7 == 5
    }
}

/// The legacy prefixes at the start of `code`: their count, an address-size prefix, the last FS
/// or GS prefix, and whether one VEX and EVEX forbid (66, F2, F3, F0, REX) is among them.
/// `None` when `code` ends inside them or they fill the longest instruction.
fn legacy_prefixes(code: &[u8]) -> Option<(usize, bool, Option<Segment>, bool)> {
    let mut at = 0;
    let (mut addr32, mut segment, mut forbidden) = (false, None, false);
    loop {
        match *code.get(at)? {
            0x67 => addr32 = true,
            0x64 => segment = Some(Segment::Fs),
            0x65 => segment = Some(Segment::Gs),
            0x26 | 0x2E | 0x36 | 0x3E => {}
            0x66 | 0xF2 | 0xF3 | 0xF0 | 0x40..=0x4F => forbidden = true,
            _ => break,
        }
        at += 1;
        if at >= MAX_LEN {
            return None;
        }
    }
    Some((at, addr32, segment, forbidden))
}

/// The SIB byte, the displacement and the offset past them of a ModRM operand whose ModRM byte
/// is `modrm`, its SIB (if any) at `code[at]` (64-bit addressing). `None` when `code` ends first.
fn operand_bytes(code: &[u8], mut at: usize, modrm: u8) -> Option<(Option<u8>, i32, usize)> {
    let mode = modrm >> 6;
    let sib = if mode != 3 && modrm & 7 == 4 {
        let s = *code.get(at)?;
        at += 1;
        Some(s)
    } else {
        None
    };
    let disp_len = match mode {
        0 if modrm & 7 == 5 => 4,
        0 if sib.is_some_and(|s| s & 7 == 5) => 4,
        1 => 1,
        2 => 4,
        _ => 0,
    };
    let disp = match disp_len {
        1 => i32::from(*code.get(at)? as i8),
        4 => i32::from_le_bytes(code.get(at..at + 4)?.try_into().ok()?),
        _ => 0,
    };
    Some((sib, disp, at + disp_len))
}

/// Splits the instruction at the start of `code` when it is a three-byte-VEX (C4) instruction
/// of map 0F38, after any legacy prefixes; `None` for anything else, or when `code` ends before
/// the instruction does.
pub fn vex(code: &[u8]) -> Option<VexFields> {
    vex_any(code).filter(|f| f.map == map::M0F38)
}

/// Splits the instruction at the start of `code` when it is a three-byte-VEX (C4) instruction
/// of any map, after any legacy prefixes; `None` for anything else, or when `code` ends before
/// the instruction does. (An instruction of map 0F3A has an imm8 this does not count: no AMX
/// instruction is VEX-encoded there.)
pub fn vex_any(code: &[u8]) -> Option<VexFields> {
    let (prefixes, addr32, segment, forbidden) = legacy_prefixes(code)?;
    let at = prefixes;
    let [c4, p1, p2, opcode, modrm] = [0, 1, 2, 3, 4].map(|i| code.get(at + i).copied());
    let (p1, p2, opcode, modrm) = (p1?, p2?, opcode?, modrm?);
    if c4? != 0xC4 {
        return None;
    }
    let (sib, disp, len) = operand_bytes(code, at + 5, modrm)?;
    if len > MAX_LEN {
        return None;
    }
    Some(VexFields {
        prefixes,
        map: p1 & 0x1F,
        addr32,
        segment,
        forbidden_prefix: forbidden,
        r: p1 & 0x80 == 0,
        x: p1 & 0x40 == 0,
        b: p1 & 0x20 == 0,
        w: p2 & 0x80 != 0,
        vvvv: !(p2 >> 3) & 0xF,
        l: p2 & 0x04 != 0,
        pp: p2 & 3,
        opcode,
        modrm,
        sib,
        disp,
        len,
    })
}

/// The fields of one EVEX (62) instruction, as encoded (no validity rules applied). The bits
/// that are stored inverted (R, X, B, R', vvvv, V') are given un-inverted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvexFields {
    /// Legacy prefix bytes before 62.
    pub prefixes: usize,
    /// A prefix EVEX forbids (66, F2, F3, F0, REX) is among them: #UD.
    pub forbidden_prefix: bool,
    /// EVEX.R (ModRM.reg + 8).
    pub r: bool,
    /// EVEX.X (SIB index + 8; in a register form, ModRM.rm + 16 for a vector register).
    pub x: bool,
    /// EVEX.B (ModRM.rm or SIB base + 8).
    pub b: bool,
    /// EVEX.R' (ModRM.reg + 16).
    pub r2: bool,
    /// Bit 3 of the first payload byte: reserved (0) without APX.
    pub p0_bit3: bool,
    /// The opcode map (EVEX.mmm: 2 = 0F38, 3 = 0F3A).
    pub map: u8,
    /// EVEX.W.
    pub w: bool,
    /// EVEX.vvvv.
    pub vvvv: u8,
    /// Bit 2 of the second payload byte: fixed 1.
    pub p1_bit2: bool,
    /// EVEX.pp: 0 none, 1 = 66, 2 = F3, 3 = F2.
    pub pp: u8,
    /// EVEX.z (zeroing-masking).
    pub z: bool,
    /// EVEX.L'L (vector length: 2 = 512 bits).
    pub ll: u8,
    /// EVEX.b (broadcast, or rounding control in a register form).
    pub bcst: bool,
    /// EVEX.V' (vvvv + 16).
    pub v2: bool,
    /// EVEX.aaa (the opmask register).
    pub aaa: u8,
    /// The opcode byte.
    pub opcode: u8,
    /// The ModRM byte.
    pub modrm: u8,
    /// The SIB byte, when ModRM selects one.
    pub sib: Option<u8>,
    /// The immediate byte (map 0F3A only).
    pub imm8: Option<u8>,
    /// Total length in bytes, prefixes included.
    pub len: usize,
}

impl EvexFields {
    /// ModRM.mod = 11: a register operand, no memory.
    pub fn register_form(&self) -> bool {
        self.modrm >> 6 == 3
    }

    /// ModRM.reg extended by EVEX.R and EVEX.R' (a vector register 0..=31).
    pub fn reg(&self) -> u8 {
        ((self.modrm >> 3) & 7) | (u8::from(self.r) << 3) | (u8::from(self.r2) << 4)
    }

    /// ModRM.rm extended by EVEX.B and, for a register form, EVEX.X (0..=31).
    pub fn rm(&self) -> u8 {
        let x = self.register_form() && self.x;
        (self.modrm & 7) | (u8::from(self.b) << 3) | (u8::from(x) << 4)
    }
}

/// Splits the instruction at the start of `code` when it is an EVEX (62) instruction, after any
/// legacy prefixes; `None` for anything else, or when `code` ends before the instruction does.
/// (In 64-bit mode 62 is always EVEX.)
pub fn evex(code: &[u8]) -> Option<EvexFields> {
    let (prefixes, _, _, forbidden) = legacy_prefixes(code)?;
    let at = prefixes;
    let [e, p0, p1, p2, opcode, modrm] = [0, 1, 2, 3, 4, 5].map(|i| code.get(at + i).copied());
    let (p0, p1, p2, opcode, modrm) = (p0?, p1?, p2?, opcode?, modrm?);
    if e? != 0x62 {
        return None;
    }
    let map = p0 & 7;
    let (sib, _, mut len) = operand_bytes(code, at + 6, modrm)?;
    let imm8 = if map == map::M0F3A {
        let imm = *code.get(len)?;
        len += 1;
        Some(imm)
    } else {
        None
    };
    if len > MAX_LEN {
        return None;
    }
    Some(EvexFields {
        prefixes,
        forbidden_prefix: forbidden,
        r: p0 & 0x80 == 0,
        x: p0 & 0x40 == 0,
        b: p0 & 0x20 == 0,
        r2: p0 & 0x10 == 0,
        p0_bit3: p0 & 0x08 != 0,
        map,
        w: p1 & 0x80 != 0,
        vvvv: !(p1 >> 3) & 0xF,
        p1_bit2: p1 & 0x04 != 0,
        pp: p1 & 3,
        z: p2 & 0x80 != 0,
        ll: (p2 >> 5) & 3,
        bcst: p2 & 0x10 != 0,
        v2: p2 & 0x08 == 0,
        aaa: p2 & 7,
        opcode,
        modrm,
        sib,
        imm8,
        len,
    })
}

/// What an AMX instruction does, with its tile operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// LDTILECFG m512.
    Ldtilecfg,
    /// STTILECFG m512.
    Sttilecfg,
    /// TILERELEASE.
    Tilerelease,
    /// TILEZERO tmm.
    Tilezero(u8),
    /// TILELOADD tmm, sibmem.
    Tileloadd(u8),
    /// TILELOADDT1 tmm, sibmem.
    Tileloaddt1(u8),
    /// TILESTORED sibmem, tmm.
    Tilestored(u8),
    /// A dot product: C (ModRM.reg), A (ModRM.rm), B (VEX.vvvv).
    DotProduct {
        /// Which one.
        kind: DotKind,
        /// The accumulator tile.
        c: u8,
        /// The first source tile.
        a: u8,
        /// The second source tile.
        b: u8,
    },
    /// TILELOADDRS tmm, sibmem (AMX-MOVRS).
    Tileloaddrs(u8),
    /// TILELOADDRST1 tmm, sibmem (AMX-MOVRS).
    Tileloaddrst1(u8),
    /// An AMX-FP8 or AMX-COMPLEX dot product: C (ModRM.reg), A (ModRM.rm), B (VEX.vvvv).
    Product {
        /// Which one.
        kind: ProductKind,
        /// The accumulator tile.
        c: u8,
        /// The first source tile.
        a: u8,
        /// The second source tile.
        b: u8,
    },
    /// An AMX-AVX512 row move: a row of a tile, possibly converted, into a zmm register.
    RowMove {
        /// Which one.
        kind: RowKind,
        /// The destination zmm register (ModRM.reg with EVEX.R and R', 0..=31).
        zmm: u8,
        /// The source tile (ModRM.rm).
        tile: u8,
        /// Where the row index comes from.
        row: RowIndex,
    },
}

/// The AMX-FP8 and AMX-COMPLEX dot products (semantics.md sections 16 and 17).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProductKind {
    /// TDPBF8PS: bf8 x bf8.
    Tdpbf8ps,
    /// TDPBHF8PS: bf8 x hf8.
    Tdpbhf8ps,
    /// TDPHBF8PS: hf8 x bf8.
    Tdphbf8ps,
    /// TDPHF8PS: hf8 x hf8.
    Tdphf8ps,
    /// TCMMIMFP16PS: the imaginary part of complex fp16 products.
    Tcmmimfp16ps,
    /// TCMMRLFP16PS: the real part of complex fp16 products.
    Tcmmrlfp16ps,
}

/// The AMX-AVX512 row moves (semantics.md section 18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowKind {
    /// TILEMOVROW: the dwords as they are.
    Tilemovrow,
    /// TCVTROWD2PS: int32 to fp32.
    Tcvtrowd2ps,
    /// TCVTROWPS2BF16H: fp32 to bf16 in the high half of each dword.
    Tcvtrowps2bf16h,
    /// TCVTROWPS2BF16L: fp32 to bf16 in the low half.
    Tcvtrowps2bf16l,
    /// TCVTROWPS2PHH: fp32 to fp16 in the high half.
    Tcvtrowps2phh,
    /// TCVTROWPS2PHL: fp32 to fp16 in the low half.
    Tcvtrowps2phl,
}

/// Where an AMX-AVX512 row move takes its row index from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowIndex {
    /// The low 32 bits of a general-purpose register (EVEX.vvvv, 0 = eax .. 15 = r15d): row
    /// `r32 & 0xFFFF`, 64-byte chunk `r32 >> 16`.
    Register(u8),
    /// The imm8: row `imm8 & 0x3F`, chunk `imm8 >> 6`.
    Immediate(u8),
}

impl RowIndex {
    /// The row index in the 32-bit form (row in the low 16 bits, chunk above), `gpr` giving
    /// a register's value: what [`RowIndex::Immediate`] stands for in that form.
    pub fn as_r32(self, gpr: impl Fn(u8) -> u64) -> u32 {
        match self {
            RowIndex::Register(r) => gpr(r) as u32,
            RowIndex::Immediate(imm) => (u32::from(imm >> 6) << 16) | u32::from(imm & 0x3F),
        }
    }
}

/// The instruction-set extension a decoded instruction belongs to: the CPUID feature it needs
/// beyond AMX-TILE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Extension {
    /// AMX-TILE, AMX-INT8 or AMX-BF16 (every AMX CPU has them).
    Base,
    /// AMX-FP16 (TDPFP16PS).
    Fp16,
    /// AMX-FP8.
    Fp8,
    /// AMX-COMPLEX.
    Complex,
    /// AMX-MOVRS.
    Movrs,
    /// AMX-AVX512 (also needs the AVX-512 state enabled).
    Avx512,
}

impl Operation {
    /// Whether the instruction touches tile data (and so needs the XTILEDATA permission):
    /// everything but LDTILECFG, STTILECFG and TILERELEASE
    /// ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md) L7, S4, R2).
    pub fn touches_tile_data(&self) -> bool {
        !matches!(
            self,
            Operation::Ldtilecfg | Operation::Sttilecfg | Operation::Tilerelease
        )
    }

    /// The extension whose CPUID bit the instruction needs.
    pub fn extension(&self) -> Extension {
        match self {
            Operation::DotProduct {
                kind: DotKind::Tdpfp16ps,
                ..
            } => Extension::Fp16,
            Operation::Tileloaddrs(_) | Operation::Tileloaddrst1(_) => Extension::Movrs,
            Operation::Product {
                kind: ProductKind::Tcmmimfp16ps | ProductKind::Tcmmrlfp16ps,
                ..
            } => Extension::Complex,
            Operation::Product { .. } => Extension::Fp8,
            Operation::RowMove { .. } => Extension::Avx512,
            _ => Extension::Base,
        }
    }
}

/// A memory operand: `segment:[base + index << scale + disp]`, or RIP-relative.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address {
    /// Base register (0 = rax .. 15 = r15), if any.
    pub base: Option<u8>,
    /// Index register, if any.
    pub index: Option<u8>,
    /// Scale as a shift (0..=3).
    pub scale: u8,
    /// Displacement.
    pub disp: i32,
    /// Relative to the next instruction's address.
    pub rip_relative: bool,
    /// 32-bit address size (prefix 67): every sum wraps at 2^32.
    pub addr32: bool,
    /// FS or GS base added.
    pub segment: Option<Segment>,
}

/// One decoded AMX instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instruction {
    /// What it does.
    pub op: Operation,
    /// Its memory operand (LDTILECFG, STTILECFG, the loads and the store).
    pub mem: Option<Address>,
    /// Its length in bytes.
    pub len: u8,
}

/// What the bytes at an address are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// An AMX instruction with a valid encoding.
    Amx(Instruction),
    /// An AMX opcode whose encoding the silicon rejects with #UD (a memory form where a
    /// register is required or the reverse, no SIB for a tile load, tmm8 and up, VEX.W or
    /// VEX.L set, vvvv not 1111 where unused, a forbidden prefix; for EVEX also a length other
    /// than 512 bits, masking, EVEX.b, and the reserved payload bits).
    Invalid,
    /// Not an AMX instruction (or cut short).
    NotAmx,
}

/// Decodes the instruction at the start of `code` (at most [`MAX_LEN`] bytes are looked at).
pub fn decode(code: &[u8]) -> Decoded {
    if let Some(f) = evex(code) {
        return decode_evex(&f);
    }
    let Some(f) = vex_any(code) else {
        return Decoded::NotAmx;
    };
    let amx = match f.map {
        map::M0F38 => AMX_OPCODES.contains(&f.opcode) || NEXT_VEX_OPCODES.contains(&f.opcode),
        map::MAP5 => f.opcode == FP8_OPCODE,
        _ => false,
    };
    if !amx {
        return Decoded::NotAmx;
    }
    match operation(&f) {
        Some(op) if !f.forbidden_prefix && !f.w && !f.l => Decoded::Amx(Instruction {
            op,
            mem: (!f.register_form()).then(|| address(&f)),
            len: f.len as u8,
        }),
        _ => Decoded::Invalid,
    }
}

/// The AMX-AVX512 forms: `(map, opcode, pp)` to the row move and whether its row is an imm8
/// (semantics.md section 18, from LLVM's MC tests).
fn row_kind(map: u8, opcode: u8, pp: u8) -> Option<(RowKind, bool)> {
    let kind = match (map, opcode, pp) {
        (map::M0F38, 0x4A, pp::P66) => (RowKind::Tilemovrow, false),
        (map::M0F38, 0x4A, pp::PF3) => (RowKind::Tcvtrowd2ps, false),
        (map::M0F38, 0x6D, pp::PF2) => (RowKind::Tcvtrowps2bf16h, false),
        (map::M0F38, 0x6D, pp::PF3) => (RowKind::Tcvtrowps2bf16l, false),
        (map::M0F38, 0x6D, pp::NP) => (RowKind::Tcvtrowps2phh, false),
        (map::M0F38, 0x6D, pp::P66) => (RowKind::Tcvtrowps2phl, false),
        (map::M0F3A, 0x07, pp::P66) => (RowKind::Tilemovrow, true),
        (map::M0F3A, 0x07, pp::PF3) => (RowKind::Tcvtrowd2ps, true),
        (map::M0F3A, 0x07, pp::PF2) => (RowKind::Tcvtrowps2bf16h, true),
        (map::M0F3A, 0x77, pp::PF3) => (RowKind::Tcvtrowps2bf16l, true),
        (map::M0F3A, 0x07, pp::NP) => (RowKind::Tcvtrowps2phh, true),
        (map::M0F3A, 0x77, pp::PF2) => (RowKind::Tcvtrowps2phl, true),
        _ => return None,
    };
    Some(kind)
}

/// An EVEX instruction: an AMX-AVX512 row move, or not AMX.
///
/// #UD (semantics.md section 18): a forbidden prefix; EVEX.W = 1; a length other than 512
/// bits; zeroing, an opmask or EVEX.b (none is defined for these instructions); the reserved
/// payload bits (bit 3 of P0 set, bit 2 of P1 clear); a memory form; a tile past tmm7 (EVEX.B
/// or EVEX.X); EVEX.V' for the register form's GPR (no APX) and vvvv or V' not 1111 for the
/// imm8 form.
fn decode_evex(f: &EvexFields) -> Decoded {
    let Some((kind, immediate)) = row_kind(f.map, f.opcode, f.pp) else {
        return Decoded::NotAmx;
    };
    let valid = !f.forbidden_prefix
        && !f.w
        && f.ll == 2
        && !f.z
        && f.aaa == 0
        && !f.bcst
        && !f.p0_bit3
        && f.p1_bit2
        && f.register_form()
        && !f.v2
        && (!immediate || f.vvvv == 0);
    let tile = f.rm();
    if !valid || tile >= 8 {
        return Decoded::Invalid;
    }
    let row = match (immediate, f.imm8) {
        (true, Some(imm)) => RowIndex::Immediate(imm),
        (true, None) => return Decoded::Invalid,
        (false, _) => RowIndex::Register(f.vvvv),
    };
    Decoded::Amx(Instruction {
        op: Operation::RowMove {
            kind,
            zmm: f.reg(),
            tile,
            row,
        },
        mem: None,
        len: f.len as u8,
    })
}

fn address(f: &VexFields) -> Address {
    Address {
        base: f.base(),
        index: f.index(),
        scale: f.scale().unwrap_or(0),
        disp: f.disp,
        rip_relative: f.rip_relative(),
        addr32: f.addr32,
        segment: f.segment,
    }
}

/// The operation the fields encode, or `None` for an encoding that raises #UD.
fn operation(f: &VexFields) -> Option<Operation> {
    let memory = !f.register_form();
    let reg = f.reg();
    let tile = (reg < 8).then_some(reg);
    if f.map == map::MAP5 {
        // AMX-FP8: VEX.128.{NP,F2,F3,66}.MAP5.W0 FD 11:rrr:bbb.
        let kind = match f.pp {
            pp::NP => ProductKind::Tdpbf8ps,
            pp::PF2 => ProductKind::Tdpbhf8ps,
            pp::PF3 => ProductKind::Tdphbf8ps,
            _ => ProductKind::Tdphf8ps,
        };
        return product(f, kind);
    }
    match (f.opcode, f.pp) {
        (0x49, pp::NP) if memory => (reg == 0 && f.vvvv == 0).then_some(Operation::Ldtilecfg),
        (0x49, pp::NP) => {
            (f.modrm == 0xC0 && !f.r && !f.b && f.vvvv == 0).then_some(Operation::Tilerelease)
        }
        (0x49, pp::P66) if memory => (reg == 0 && f.vvvv == 0).then_some(Operation::Sttilecfg),
        (0x49, pp::PF2) if !memory => {
            (f.rm() == 0 && f.vvvv == 0).then_some(Operation::Tilezero(tile?))
        }
        (0x4B, p) if memory && f.sib.is_some() && f.vvvv == 0 => match p {
            pp::PF2 => Some(Operation::Tileloadd(tile?)),
            pp::P66 => Some(Operation::Tileloaddt1(tile?)),
            pp::PF3 => Some(Operation::Tilestored(tile?)),
            _ => None,
        },
        (0x5E | 0x5C, p) if !memory => {
            let kind = match (f.opcode, p) {
                (0x5E, pp::PF2) => DotKind::Tdpbssd,
                (0x5E, pp::PF3) => DotKind::Tdpbsud,
                (0x5E, pp::P66) => DotKind::Tdpbusd,
                (0x5E, _) => DotKind::Tdpbuud,
                (_, pp::PF3) => DotKind::Tdpbf16ps,
                (_, pp::PF2) => DotKind::Tdpfp16ps,
                _ => return None,
            };
            let (a, b) = (f.rm(), f.vvvv);
            (a < 8 && b < 8).then_some(Operation::DotProduct {
                kind,
                c: tile?,
                a,
                b,
            })
        }
        (0x4A, p) if memory && f.sib.is_some() && f.vvvv == 0 => match p {
            pp::PF2 => Some(Operation::Tileloaddrs(tile?)),
            pp::P66 => Some(Operation::Tileloaddrst1(tile?)),
            _ => None,
        },
        (0x6C, pp::P66) => product(f, ProductKind::Tcmmimfp16ps),
        (0x6C, pp::NP) => product(f, ProductKind::Tcmmrlfp16ps),
        _ => None,
    }
}

/// An AMX-FP8 or AMX-COMPLEX product: register form, every tile below 8.
fn product(f: &VexFields, kind: ProductKind) -> Option<Operation> {
    let (c, a, b) = (f.reg(), f.rm(), f.vvvv);
    (f.register_form() && c < 8 && a < 8 && b < 8).then_some(Operation::Product { kind, c, a, b })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amx(code: &[u8]) -> Instruction {
        match decode(code) {
            Decoded::Amx(i) => i,
            other => panic!("{code:02x?}: {other:?}"),
        }
    }

    #[test]
    fn register_forms() {
        assert_eq!(
            amx(&[0xC4, 0xE2, 0x78, 0x49, 0xC0]).op,
            Operation::Tilerelease
        );
        assert_eq!(
            amx(&[0xC4, 0xE2, 0x7B, 0x49, 0xF8]).op,
            Operation::Tilezero(7)
        );
        assert_eq!(
            amx(&[0xC4, 0xE2, 0x53, 0x5E, 0xFE]).op,
            Operation::DotProduct {
                kind: DotKind::Tdpbssd,
                c: 7,
                a: 6,
                b: 5
            }
        );
        assert_eq!(
            amx(&[0xC4, 0xE2, 0x42, 0x5C, 0xE8]).op,
            Operation::DotProduct {
                kind: DotKind::Tdpbf16ps,
                c: 5,
                a: 0,
                b: 7
            }
        );
    }

    #[test]
    fn memory_forms() {
        // tileloadd tmm3, [rdi + rsi*1]
        let i = amx(&[0xC4, 0xE2, 0x7B, 0x4B, 0x1C, 0x37]);
        assert_eq!(i.op, Operation::Tileloadd(3));
        assert_eq!(i.len, 6);
        let m = i.mem.unwrap();
        assert_eq!((m.base, m.index, m.scale, m.disp), (Some(7), Some(6), 0, 0));
        // tilestored [r8 + r9*4 + 0x12345678], tmm1: VEX.X and VEX.B set.
        let i = amx(&[0xC4, 0x82, 0x7A, 0x4B, 0x8C, 0x88, 0x78, 0x56, 0x34, 0x12]);
        assert_eq!(i.op, Operation::Tilestored(1));
        let m = i.mem.unwrap();
        assert_eq!(
            (m.base, m.index, m.scale, m.disp, i.len),
            (Some(8), Some(9), 2, 0x1234_5678, 10)
        );
        // SIB without index (100), disp8 -1, base rsp.
        let i = amx(&[0xC4, 0xE2, 0x79, 0x4B, 0x44, 0x24, 0xFF]);
        let m = i.mem.unwrap();
        assert_eq!((m.base, m.index, m.disp), (Some(4), None, -1));
        // Index 100 with VEX.X is r12.
        let i = amx(&[0xC4, 0xA2, 0x7B, 0x4B, 0x04, 0x20]);
        assert_eq!(i.mem.unwrap().index, Some(12));
        // No base: mod 00, SIB base 101, disp32.
        let i = amx(&[0xC4, 0xE2, 0x7B, 0x4B, 0x04, 0x35, 0x10, 0, 0, 0]);
        let m = i.mem.unwrap();
        assert_eq!((m.base, m.index, m.disp, i.len), (None, Some(6), 16, 10));
        // ldtilecfg [rip + 0x100]
        let i = amx(&[0xC4, 0xE2, 0x78, 0x49, 0x05, 0x00, 0x01, 0, 0]);
        assert_eq!(i.op, Operation::Ldtilecfg);
        assert!(i.mem.unwrap().rip_relative);
        // sttilecfg [r13 + 8] with a 67 and an FS prefix.
        let i = amx(&[0x67, 0x64, 0xC4, 0xC2, 0x79, 0x49, 0x45, 0x08]);
        let m = i.mem.unwrap();
        assert_eq!((m.base, m.disp, m.addr32, i.len), (Some(13), 8, true, 8));
        assert_eq!(m.segment, Some(Segment::Fs));
    }

    #[test]
    fn invalid_encodings_are_ud() {
        for code in [
            &[0xC4, 0xE2, 0x78, 0x49, 0x0F][..], // LDTILECFG with ModRM.reg 1 (L8)
            &[0xC4, 0xE2, 0x78, 0x49, 0xC1],     // TILERELEASE with C1 (R3)
            &[0xC4, 0xE2, 0x7B, 0x4B, 0x07],     // TILELOADD without SIB (T1)
            &[0xC4, 0xE2, 0x7B, 0x4B, 0xC0],     // TILELOADD mod 11
            &[0xC4, 0xE2, 0x78, 0x4B, 0x04, 0x37], // NP 4B
            &[0xC4, 0xE2, 0x7B, 0x49, 0xC1],     // TILEZERO rm 1
            &[0xC4, 0xE2, 0xFB, 0x49, 0xC0],     // TILEZERO W1
            &[0xC4, 0xE2, 0x7F, 0x49, 0xC0],     // TILEZERO L1
            &[0xC4, 0xE2, 0x73, 0x49, 0xC0],     // TILEZERO vvvv != 1111
            &[0xC4, 0x62, 0x7B, 0x49, 0xC0],     // TILEZERO tmm8 (VEX.R)
            &[0x66, 0xC4, 0xE2, 0x7B, 0x49, 0xC0], // 66 before VEX
            &[0xC4, 0xE2, 0x6B, 0x5E, 0x01],     // TDPBSSD memory form
            &[0xC4, 0xC2, 0x6B, 0x5E, 0xC1],     // TDPBSSD A = tmm9
            &[0xC4, 0xE2, 0x29, 0x5C, 0xC1],     // 66 5C
        ] {
            assert_eq!(decode(code), Decoded::Invalid, "{code:02x?}");
        }
    }

    #[test]
    fn other_bytes_are_not_amx() {
        for code in [
            &[0x0F, 0x0B][..],
            &[0xC5, 0xF8, 0x77],
            &[0xC4, 0xE2, 0x7B],
            &[0xC4, 0xE3, 0x7B, 0x49, 0xC0],
            &[0xC4, 0xE2, 0x79, 0x18, 0x07],
            &[],
        ] {
            assert_eq!(decode(code), Decoded::NotAmx, "{code:02x?}");
        }
    }

    fn product(kind: ProductKind, c: u8, a: u8, b: u8) -> Operation {
        Operation::Product { kind, c, a, b }
    }

    #[test]
    fn fp8_and_complex_products() {
        // The MC bytes of semantics.md sections 16 and 17, and the other prefixes.
        for (pp, kind) in [
            (0x58, ProductKind::Tdpbf8ps),
            (0x5B, ProductKind::Tdpbhf8ps),
            (0x5A, ProductKind::Tdphbf8ps),
            (0x59, ProductKind::Tdphf8ps),
        ] {
            let i = amx(&[0xC4, 0xE5, pp, 0xFD, 0xF5]);
            assert_eq!((i.op, i.len, i.mem), (product(kind, 6, 5, 4), 5, None));
            assert_eq!(i.op.extension(), Extension::Fp8);
            assert!(i.op.touches_tile_data());
        }
        // tdphf8ps tmm0, tmm7, tmm3
        assert_eq!(
            amx(&[0xC4, 0xE5, 0x61, 0xFD, 0xC7]).op,
            product(ProductKind::Tdphf8ps, 0, 7, 3)
        );
        let i = amx(&[0xC4, 0xE2, 0x59, 0x6C, 0xF5]);
        assert_eq!(i.op, product(ProductKind::Tcmmimfp16ps, 6, 5, 4));
        assert_eq!(i.op.extension(), Extension::Complex);
        let i = amx(&[0xC4, 0xE2, 0x58, 0x6C, 0xF5]);
        assert_eq!(i.op, product(ProductKind::Tcmmrlfp16ps, 6, 5, 4));
    }

    #[test]
    fn movrs_loads() {
        // tileloaddrs tmm6, [rbx + 64] (MC)
        let i = amx(&[0xC4, 0xE2, 0x7B, 0x4A, 0x74, 0x23, 0x40]);
        assert_eq!((i.op, i.len), (Operation::Tileloaddrs(6), 7));
        assert_eq!(i.op.extension(), Extension::Movrs);
        let m = i.mem.unwrap();
        assert_eq!((m.base, m.index, m.disp), (Some(3), None, 64));
        // tileloaddrst1 tmm6, [rbp + 8*r14 + 268435456] (MC)
        let i = amx(&[0xC4, 0xA2, 0x79, 0x4A, 0xB4, 0xF5, 0, 0, 0, 0x10]);
        assert_eq!((i.op, i.len), (Operation::Tileloaddrst1(6), 10));
        let m = i.mem.unwrap();
        assert_eq!(
            (m.base, m.index, m.scale, m.disp),
            (Some(5), Some(14), 3, 0x1000_0000)
        );
        // tileloaddrs tmm3, [r8 + 4*rax + 291] (MC)
        let i = amx(&[0xC4, 0xC2, 0x7B, 0x4A, 0x9C, 0x80, 0x23, 0x01, 0, 0]);
        assert_eq!(i.op, Operation::Tileloaddrs(3));
        let m = i.mem.unwrap();
        assert_eq!(
            (m.base, m.index, m.scale, m.disp),
            (Some(8), Some(0), 2, 291)
        );
        // tileloaddrst1 tmm3, [2*rbp - 32]: no base (MC)
        let i = amx(&[0xC4, 0xE2, 0x79, 0x4A, 0x1C, 0x6D, 0xE0, 0xFF, 0xFF, 0xFF]);
        let m = i.mem.unwrap();
        assert_eq!((m.base, m.index, m.scale, m.disp), (None, Some(5), 1, -32));
        // With a GS prefix and a 67.
        let i = amx(&[0x65, 0x67, 0xC4, 0xE2, 0x7B, 0x4A, 0x74, 0x23, 0x40]);
        let m = i.mem.unwrap();
        assert_eq!((m.segment, m.addr32, i.len), (Some(Segment::Gs), true, 9));
    }

    fn row(kind: RowKind, zmm: u8, tile: u8, row: RowIndex) -> Operation {
        Operation::RowMove {
            kind,
            zmm,
            tile,
            row,
        }
    }

    #[test]
    fn avx512_row_moves() {
        use RowIndex::{Immediate, Register};
        use RowKind::*;
        // Every form of LLVM's MC test amx-avx512-intel.s.
        let cases: [(&[u8], Operation); 14] = [
            (
                &[0x62, 0xE2, 0x76, 0x48, 0x4A, 0xF5],
                row(Tcvtrowd2ps, 22, 5, Register(1)),
            ),
            (
                &[0x62, 0xE3, 0x7E, 0x48, 0x07, 0xF2, 0x7B],
                row(Tcvtrowd2ps, 22, 2, Immediate(123)),
            ),
            (
                &[0x62, 0xE2, 0x77, 0x48, 0x6D, 0xF5],
                row(Tcvtrowps2bf16h, 22, 5, Register(1)),
            ),
            (
                &[0x62, 0xE3, 0x7F, 0x48, 0x07, 0xF5, 0x7B],
                row(Tcvtrowps2bf16h, 22, 5, Immediate(123)),
            ),
            (
                &[0x62, 0xE2, 0x76, 0x48, 0x6D, 0xF2],
                row(Tcvtrowps2bf16l, 22, 2, Register(1)),
            ),
            (
                &[0x62, 0xE3, 0x7E, 0x48, 0x77, 0xF5, 0x7B],
                row(Tcvtrowps2bf16l, 22, 5, Immediate(123)),
            ),
            (
                &[0x62, 0xE2, 0x74, 0x48, 0x6D, 0xF5],
                row(Tcvtrowps2phh, 22, 5, Register(1)),
            ),
            (
                &[0x62, 0xE3, 0x7C, 0x48, 0x07, 0xF2, 0x7B],
                row(Tcvtrowps2phh, 22, 2, Immediate(123)),
            ),
            (
                &[0x62, 0xE2, 0x75, 0x48, 0x6D, 0xF5],
                row(Tcvtrowps2phl, 22, 5, Register(1)),
            ),
            (
                &[0x62, 0xE3, 0x7F, 0x48, 0x77, 0xF2, 0x7B],
                row(Tcvtrowps2phl, 22, 2, Immediate(123)),
            ),
            (
                &[0x62, 0xE2, 0x75, 0x48, 0x4A, 0xF3],
                row(Tilemovrow, 22, 3, Register(1)),
            ),
            (
                &[0x62, 0xE3, 0x7D, 0x48, 0x07, 0xF3, 0x7B],
                row(Tilemovrow, 22, 3, Immediate(123)),
            ),
            (
                &[0x62, 0xE2, 0x6D, 0x48, 0x4A, 0xF0],
                row(Tilemovrow, 22, 0, Register(2)),
            ),
            (
                &[0x62, 0xE3, 0x7D, 0x48, 0x07, 0xF0, 0x7B],
                row(Tilemovrow, 22, 0, Immediate(123)),
            ),
        ];
        for (code, op) in cases {
            let i = amx(code);
            assert_eq!(
                (i.op, usize::from(i.len), i.mem),
                (op, code.len(), None),
                "{code:02x?}"
            );
            assert_eq!(i.op.extension(), Extension::Avx512);
        }
        // The destination: EVEX.R adds 8, EVEX.R' 16; vvvv names r8d..r15d too.
        let zmm = |p0: u8| match amx(&[0x62, p0, 0x75, 0x48, 0x4A, 0xF3]).op {
            Operation::RowMove { zmm, .. } => zmm,
            op => panic!("{op:?}"),
        };
        assert_eq!(
            [zmm(0xF2), zmm(0x72), zmm(0xE2), zmm(0x62)],
            [6, 14, 22, 30]
        );
        assert_eq!(
            amx(&[0x62, 0xF2, 0x05, 0x48, 0x4A, 0xC1]).op,
            row(Tilemovrow, 0, 1, Register(15))
        );
        // A legacy segment or address-size prefix is allowed (and means nothing here).
        assert_eq!(amx(&[0x67, 0x62, 0xF2, 0x05, 0x48, 0x4A, 0xC1]).len, 7);
        // The row index in its 32-bit form.
        let gpr = |r: u8| 0xAAAA_0000_0000_0000 | u64::from(r) << 16 | 5;
        assert_eq!(Register(3).as_r32(gpr), 0x0003_0005);
        assert_eq!(Immediate(0x7B).as_r32(gpr), 0x0001_003B);
        assert_eq!(Immediate(0x05).as_r32(gpr), 5);
    }

    #[test]
    fn next_generation_invalid_encodings_are_ud() {
        for code in [
            &[0xC4, 0xE5, 0xD8, 0xFD, 0xF5][..],               // TDPBF8PS W1
            &[0xC4, 0xE5, 0x5C, 0xFD, 0xF5],                   // TDPBF8PS L1
            &[0xC4, 0x65, 0x58, 0xFD, 0xF5],                   // TDPBF8PS C = tmm14 (VEX.R)
            &[0xC4, 0xC5, 0x58, 0xFD, 0xF5],                   // TDPBF8PS A = tmm13 (VEX.B)
            &[0xC4, 0xE5, 0x18, 0xFD, 0xF5],                   // TDPBF8PS B = tmm12 (vvvv)
            &[0xC4, 0xE5, 0x58, 0xFD, 0x35, 0, 0, 0, 0],       // TDPBF8PS memory form
            &[0xF2, 0xC4, 0xE5, 0x58, 0xFD, 0xF5],             // F2 before VEX
            &[0xC4, 0xE2, 0x5B, 0x6C, 0xF5],                   // F2 6C
            &[0xC4, 0xE2, 0x5A, 0x6C, 0xF5],                   // F3 6C
            &[0xC4, 0xE2, 0xD9, 0x6C, 0xF5],                   // TCMMIMFP16PS W1
            &[0xC4, 0xE2, 0x5D, 0x6C, 0xF5],                   // TCMMIMFP16PS L1
            &[0xC4, 0xE2, 0x59, 0x6C, 0x35, 0, 0, 0, 0],       // TCMMIMFP16PS memory form
            &[0xC4, 0xE2, 0x39, 0x6C, 0xF5],                   // TCMMIMFP16PS B = tmm8
            &[0xC4, 0xE2, 0x7B, 0x4A, 0x37],                   // TILELOADDRS without SIB
            &[0xC4, 0xE2, 0x7B, 0x4A, 0xF7],                   // TILELOADDRS mod 11
            &[0xC4, 0xE2, 0x78, 0x4A, 0x74, 0x23, 0x40],       // NP 4A
            &[0xC4, 0xE2, 0x7A, 0x4A, 0x74, 0x23, 0x40],       // F3 4A
            &[0xC4, 0xE2, 0x73, 0x4A, 0x74, 0x23, 0x40],       // TILELOADDRS vvvv != 1111
            &[0xC4, 0x62, 0x7B, 0x4A, 0x74, 0x23, 0x40],       // TILELOADDRS tmm14 (VEX.R)
            &[0xC4, 0xE2, 0xFB, 0x4A, 0x74, 0x23, 0x40],       // TILELOADDRS W1
            &[0xC4, 0xE2, 0x7F, 0x4A, 0x74, 0x23, 0x40],       // TILELOADDRS L1
            &[0xF0, 0xC4, 0xE2, 0x7B, 0x4A, 0x74, 0x23, 0x40], // LOCK before VEX
            &[0x62, 0xE2, 0xF5, 0x48, 0x4A, 0xF3],             // TILEMOVROW W1
            &[0x62, 0xE2, 0x75, 0x28, 0x4A, 0xF3],             // 256 bits
            &[0x62, 0xE2, 0x75, 0x08, 0x4A, 0xF3],             // 128 bits
            &[0x62, 0xE2, 0x75, 0x68, 0x4A, 0xF3],             // L'L = 11
            &[0x62, 0xE2, 0x75, 0x49, 0x4A, 0xF3],             // opmask k1
            &[0x62, 0xE2, 0x75, 0xC8, 0x4A, 0xF3],             // zeroing
            &[0x62, 0xE2, 0x75, 0x58, 0x4A, 0xF3],             // EVEX.b
            &[0x62, 0xEA, 0x75, 0x48, 0x4A, 0xF3],             // P0 bit 3
            &[0x62, 0xE2, 0x71, 0x48, 0x4A, 0xF3],             // P1 bit 2 clear
            &[0x62, 0xE2, 0x75, 0x48, 0x4A, 0x33],             // memory form
            &[0x62, 0xE2, 0x75, 0x48, 0x4A, 0x73, 0x10],       // memory form, disp8
            &[0x62, 0xC2, 0x75, 0x48, 0x4A, 0xF3],             // tmm11 (EVEX.B)
            &[0x62, 0xA2, 0x75, 0x48, 0x4A, 0xF3],             // tile rm + 16 (EVEX.X)
            &[0x62, 0xE2, 0x75, 0x40, 0x4A, 0xF3],             // EVEX.V' on the GPR
            &[0x62, 0xE3, 0x75, 0x48, 0x07, 0xF3, 0x7B],       // imm form with vvvv != 1111
            &[0x62, 0xE3, 0x7D, 0x40, 0x07, 0xF3, 0x7B],       // imm form with V'
            &[0x66, 0x62, 0xE2, 0x75, 0x48, 0x4A, 0xF3],       // 66 before EVEX
            &[0x41, 0x62, 0xE2, 0x75, 0x48, 0x4A, 0xF3],       // REX before EVEX
        ] {
            assert_eq!(decode(code), Decoded::Invalid, "{code:02x?}");
        }
    }

    #[test]
    fn next_generation_neighbours_are_not_amx() {
        for code in [
            &[0xC4, 0xE5, 0x58, 0xFC, 0xF5][..],   // map 5, another opcode
            &[0xC4, 0xE3, 0x59, 0x6C, 0xF5, 0x00], // map 0F3A
            &[0xC4, 0xE5, 0x58, 0xFD],             // cut short
            &[0x62, 0xF1, 0x7C, 0x48, 0x58, 0xC0], // vaddps zmm0, zmm0, zmm0
            &[0x62, 0xE2, 0x77, 0x48, 0x4A, 0xF3], // EVEX F2 4A
            &[0x62, 0xE3, 0x7C, 0x48, 0x77, 0xF3, 0x7B], // EVEX NP 0F3A 77
            &[0x62, 0xE1, 0x75, 0x48, 0x4A, 0xF3], // EVEX map 0F
            &[0x62, 0xE2, 0x75, 0x48],             // cut short
            &[0x62, 0xE3, 0x7D, 0x48, 0x07, 0xF3], // cut before the imm8
        ] {
            assert_eq!(decode(code), Decoded::NotAmx, "{code:02x?}");
        }
        // vex() still keeps map 0F38 only.
        assert!(vex(&[0xC4, 0xE5, 0x58, 0xFD, 0xF5]).is_none());
        assert_eq!(
            vex_any(&[0xC4, 0xE5, 0x58, 0xFD, 0xF5]).map(|f| f.map),
            Some(5)
        );
    }
}
