//! The registers an AMX instruction reads: the 16 general-purpose registers (for its memory
//! operand or row index) and RIP (advanced past it when it completes), and the one it may
//! write: an AMX-AVX512 row move's zmm destination.

use crate::kframe::{reg, Ucontext};

/// General-purpose registers in encoding order (0 = rax, 1 = rcx, 2 = rdx, 3 = rbx, 4 = rsp,
/// 5 = rbp, 6 = rsi, 7 = rdi, 8..15 = r8..r15) and the instruction pointer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Regs {
    /// rax .. r15, in encoding order.
    pub(crate) gpr: [u64; 16],
    /// The address of the instruction; `execute` advances it past the instruction when it
    /// completes.
    pub(crate) rip: u64,
    /// The zmm register a completed AMX-AVX512 row move writes (number, 64 bytes
    /// little-endian), for the caller to put into the interrupted context.
    pub(crate) zmm: Option<(u8, [u8; 64])>,
}

/// The `gregs` slot of each register in encoding order.
const SLOT: [usize; 16] = [
    reg::RAX,
    reg::RCX,
    reg::RDX,
    reg::RBX,
    reg::RSP,
    reg::RBP,
    reg::RSI,
    reg::RDI,
    reg::R8,
    reg::R8 + 1,
    reg::R8 + 2,
    reg::R8 + 3,
    reg::R8 + 4,
    reg::R8 + 5,
    reg::R8 + 6,
    reg::R8 + 7,
];

impl Regs {
    /// The interrupted thread's registers.
    pub(crate) fn of(uc: &Ucontext) -> Regs {
        Regs {
            gpr: SLOT.map(|s| uc.gregs.get(s).copied().unwrap_or(0)),
            rip: uc.rip(),
            zmm: None,
        }
    }
}
