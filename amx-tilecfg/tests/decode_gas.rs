//! The trap engine's decoder against an independent assembler: GNU as assembles every AMX
//! instruction in every memory-operand form (each base and index register, each scale, no,
//! 8-bit and 32-bit displacements, no base, no index, RIP-relative, 32-bit addressing) and
//! every register form; the decoder must read back exactly the operation, operands and length
//! that were written. Skipped, saying why, where `as` and `objcopy` are not installed.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use amx_tilecfg::decode::{decode, Address, Decoded, Operation};
use amx_tilecfg::DotKind;

const REGS: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15",
];
const REGS32: [&str; 16] = [
    "eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "r8d", "r9d", "r10d", "r11d", "r12d",
    "r13d", "r14d", "r15d",
];

/// A memory-operand instruction: mnemonic, operation for a tile, whether the tile comes last.
type MemoryOp = (&'static str, fn(u8) -> Operation, bool);

/// One instruction: its source line and what the decoder must return.
struct Case {
    line: String,
    op: Operation,
    mem: Option<Address>,
}

fn address(base: Option<u8>, index: Option<u8>, scale: u8, disp: i32) -> Address {
    Address {
        base,
        index,
        scale,
        disp,
        rip_relative: false,
        addr32: false,
        segment: None,
    }
}

/// `[base + index*scale + disp]` in Intel syntax.
fn operand(regs: &[&str; 16], base: Option<u8>, index: Option<u8>, scale: u8, disp: i32) -> String {
    let mut parts = Vec::new();
    if let Some(b) = base {
        parts.push(regs[b as usize].to_string());
    }
    if let Some(i) = index {
        parts.push(format!("{}*{}", regs[i as usize], 1 << scale));
    }
    let mut s = parts.join(" + ");
    if disp != 0 || parts.is_empty() {
        if s.is_empty() {
            s = format!("{disp}");
        } else if disp < 0 {
            write!(s, " - {}", -(disp as i64)).unwrap();
        } else {
            write!(s, " + {disp}").unwrap();
        }
    }
    format!("[{s}]")
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let memory_ops: [MemoryOp; 3] = [
        ("tileloadd", Operation::Tileloadd, false),
        ("tileloaddt1", Operation::Tileloaddt1, false),
        ("tilestored", Operation::Tilestored, true),
    ];
    let disps = [0, -8, 0x7F, -0x80, 0x12345, -0x7654_3210];
    for (k, (name, op, store)) in memory_ops.into_iter().enumerate() {
        for base in 0..16u8 {
            for index in (0..16u8).filter(|&i| i != 4) {
                for scale in 0..4u8 {
                    let disp = disps[(base as usize + index as usize + scale as usize + k) % 6];
                    let t = (base + index + scale) % 8;
                    let mem = operand(&REGS, Some(base), Some(index), scale, disp);
                    let line = if store {
                        format!("{name} {mem}, tmm{t}")
                    } else {
                        format!("{name} tmm{t}, {mem}")
                    };
                    out.push(Case {
                        line,
                        op: op(t),
                        mem: Some(address(Some(base), Some(index), scale, disp)),
                    });
                }
            }
            // No index: a SIB without one (stride 0).
            for disp in disps {
                let mem = operand(&REGS, Some(base), None, 0, disp);
                let t = base % 8;
                let line = if store {
                    format!("{name} {mem}, tmm{t}")
                } else {
                    format!("{name} tmm{t}, {mem}")
                };
                out.push(Case {
                    line,
                    op: op(t),
                    mem: Some(address(Some(base), None, 0, disp)),
                });
            }
        }
        // No base: [index*scale + disp32].
        for index in (0..16u8).filter(|&i| i != 4) {
            let mem = operand(&REGS, None, Some(index), 3, 0x40);
            let line = if store {
                format!("{name} {mem}, tmm2")
            } else {
                format!("{name} tmm2, {mem}")
            };
            out.push(Case {
                line,
                op: op(2),
                mem: Some(address(None, Some(index), 3, 0x40)),
            });
        }
        // 32-bit addressing (prefix 67).
        for base in (0..16u8).step_by(3) {
            let mem = operand(&REGS32, Some(base), Some(6), 1, 16);
            let line = if store {
                format!("{name} {mem}, tmm5")
            } else {
                format!("{name} tmm5, {mem}")
            };
            let mut a = address(Some(base), Some(6), 1, 16);
            a.addr32 = true;
            out.push(Case {
                line,
                op: op(5),
                mem: Some(a),
            });
        }
    }
    for (name, op) in [
        ("ldtilecfg", Operation::Ldtilecfg),
        ("sttilecfg", Operation::Sttilecfg),
    ] {
        for base in 0..16u8 {
            for disp in disps {
                out.push(Case {
                    line: format!("{name} {}", operand(&REGS, Some(base), None, 0, disp)),
                    op,
                    mem: Some(address(Some(base), None, 0, disp)),
                });
            }
            out.push(Case {
                line: format!("{name} {}", operand(&REGS, Some(base), Some(9), 2, 4)),
                op,
                mem: Some(address(Some(base), Some(9), 2, 4)),
            });
        }
        let mut rip = address(None, None, 0, 0x1000);
        rip.rip_relative = true;
        out.push(Case {
            line: format!("{name} [rip + 0x1000]"),
            op,
            mem: Some(rip),
        });
    }
    out.push(Case {
        line: "tilerelease".into(),
        op: Operation::Tilerelease,
        mem: None,
    });
    for t in 0..8 {
        out.push(Case {
            line: format!("tilezero tmm{t}"),
            op: Operation::Tilezero(t),
            mem: None,
        });
    }
    let dots = [
        ("tdpbssd", DotKind::Tdpbssd),
        ("tdpbsud", DotKind::Tdpbsud),
        ("tdpbusd", DotKind::Tdpbusd),
        ("tdpbuud", DotKind::Tdpbuud),
        ("tdpbf16ps", DotKind::Tdpbf16ps),
        ("tdpfp16ps", DotKind::Tdpfp16ps),
    ];
    for (name, kind) in dots {
        for c in 0..8 {
            for a in 0..8 {
                for b in 0..8 {
                    if c != a && c != b && a != b {
                        out.push(Case {
                            line: format!("{name} tmm{c}, tmm{a}, tmm{b}"),
                            op: Operation::DotProduct { kind, c, a, b },
                            mem: None,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Assembles `source` with GNU as; the `.text` bytes, or why not.
fn assemble(source: &str, dir: &Path) -> Result<Vec<u8>, String> {
    let (s, o, bin) = (
        dir.join("forms.s"),
        dir.join("forms.o"),
        dir.join("forms.bin"),
    );
    std::fs::write(&s, source).map_err(|e| e.to_string())?;
    let run = |cmd: &mut Command| -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)))
        }
    };
    run(Command::new("as").arg("--64").arg("-o").arg(&o).arg(&s))?;
    run(Command::new("objcopy")
        .args(["-O", "binary", "-j", ".text"])
        .arg(&o)
        .arg(&bin))?;
    std::fs::read(&bin).map_err(|e| e.to_string())
}

#[test]
fn decoder_reads_back_every_form_gnu_as_writes() {
    let cases = cases();
    let mut source = String::from(".intel_syntax noprefix\n");
    for c in &cases {
        source.push_str(&c.line);
        source.push('\n');
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let code = match assemble(&source, dir) {
        Ok(code) => code,
        Err(why) => amx_test_support::skip_not_applicable!("needs GNU as and objcopy: {why}"),
    };
    let mut at = 0;
    for c in &cases {
        let insn = match decode(&code[at..]) {
            Decoded::Amx(i) => i,
            other => panic!(
                "{}: {other:?} at {at}: {:02x?}",
                c.line,
                &code[at..(at + 15).min(code.len())]
            ),
        };
        assert_eq!(insn.op, c.op, "{}", c.line);
        assert_eq!(insn.mem, c.mem, "{}", c.line);
        at += usize::from(insn.len);
    }
    assert_eq!(at, code.len(), "lengths add up to the assembled code");
    println!("{} instructions decoded", cases.len());
}
