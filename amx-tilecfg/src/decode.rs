//! The encoding rules of the AMX instructions: the bytes at an address to an AMX
//! [`Instruction`], or the reason they are not one. The project's only x86 decoder: the
//! `amx-trap` engine, the encoding tests and the runtime's asm unit tests all read machine code
//! through it.
//!
//! Two layers: [`vex`] splits any three-byte-VEX (C4) instruction of map 0F38 into its fields
//! (prefixes, VEX bits, opcode, ModRM, SIB, displacement, length) without judging them;
//! [`decode`] applies the AMX encoding rules of
//! [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
//! sections 2-8 to those fields.
//!
//! Addressing follows 64-bit mode: ModRM.rm = 100 selects a SIB byte whatever VEX.B says;
//! mod = 00 with rm = 101 is RIP-relative; a SIB base of 101 with mod = 00 is "no base,
//! disp32"; a SIB index of 100 without VEX.X is "no index" (with VEX.X it is r12). An
//! address-size prefix (67) gives 32-bit addressing; FS and GS segment prefixes add their base;
//! the other segment prefixes are ignored, as 64-bit mode does.

use crate::DotKind;

/// Longest x86 instruction.
pub const MAX_LEN: usize = 15;

/// Opcodes (map 0F38) of the AMX instructions.
pub const AMX_OPCODES: [u8; 4] = [0x49, 0x4B, 0x5C, 0x5E];

/// A segment whose base an address adds (FS or GS; the others have base 0 in 64-bit mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    /// The FS prefix (64).
    Fs,
    /// The GS prefix (65).
    Gs,
}

/// The fields of one three-byte-VEX instruction of map 0F38, as encoded (no validity rules
/// applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VexFields {
    /// Legacy prefix bytes before C4 (all of them, whatever they are).
    pub prefixes: usize,
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

/// Splits the instruction at the start of `code` when it is a three-byte-VEX (C4) instruction
/// of map 0F38, after any legacy prefixes; `None` for anything else, or when `code` ends before
/// the instruction does.
pub fn vex(code: &[u8]) -> Option<VexFields> {
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
    let prefixes = at;
    let [c4, p1, p2, opcode, modrm] = [0, 1, 2, 3, 4].map(|i| code.get(at + i).copied());
    let (p1, p2, opcode, modrm) = (p1?, p2?, opcode?, modrm?);
    if c4? != 0xC4 || p1 & 0x1F != 0x02 {
        return None;
    }
    at += 5;
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
    at += disp_len;
    if at > MAX_LEN {
        return None;
    }
    Some(VexFields {
        prefixes,
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
        len: at,
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
    /// VEX.L set, vvvv not 1111 where unused, a forbidden prefix).
    Invalid,
    /// Not an AMX instruction (or cut short).
    NotAmx,
}

/// Decodes the instruction at the start of `code` (at most [`MAX_LEN`] bytes are looked at).
pub fn decode(code: &[u8]) -> Decoded {
    let Some(f) = vex(code) else {
        return Decoded::NotAmx;
    };
    if !AMX_OPCODES.contains(&f.opcode) {
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
        _ => None,
    }
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
}
