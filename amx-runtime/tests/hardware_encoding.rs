//! The machine code of every public intrinsic, compared with the encodings of docs/semantics.md
//! sections 2-8. Runs on any x86-64 Linux machine, AMX or not: the code is read, never executed.
//!
//! Each intrinsic is called from a small `#[inline(never)]` wrapper placed in a linker section
//! of its own whose name is a C identifier, so the linker defines `__start_<section>` and
//! `__stop_<section>` and the test reads exactly that wrapper's bytes. The wrapper holds the
//! instruction plus the moves that set up its registers; the test finds the one AMX
//! instruction in it and checks every field. Register-only forms are compared byte for byte;
//! the memory forms use whatever registers the compiler picked, so their fields are decoded
//! (and compared byte for byte in the usual case of the arguments left in `rdi` and `rsi`).
//! The literal byte strings below were produced by GNU as 2.40 from the same mnemonics, an
//! assembler independent of the LLVM one rustc uses.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use amx_runtime::intrinsics::*;

/// Defines `unsafe extern "C" fn $name(...)` in section `amx_enc_$name`.
macro_rules! wrapper {
    ($name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        #[unsafe(link_section = concat!("amx_enc_", stringify!($name)))]
        #[inline(never)]
        unsafe extern "C" fn $name($($arg: $ty),*) $body
    };
}

/// The machine code of wrapper `$name`.
macro_rules! code_of {
    ($name:ident) => {{
        // Keeps the wrapper (and so its section) in the binary.
        std::hint::black_box($name as *const ());
        unsafe extern "C" {
            #[link_name = concat!("__start_amx_enc_", stringify!($name))]
            static START: u8;
            #[link_name = concat!("__stop_amx_enc_", stringify!($name))]
            static STOP: u8;
        }
        let (start, stop) = (&raw const START, &raw const STOP);
        let len = stop as usize - start as usize;
        // SAFETY: the linker defines START and STOP as the bounds of the section that holds only
        // this wrapper's code, mapped readable for the life of the process; the bytes are read,
        // never executed.
        let code: &'static [u8] = unsafe { std::slice::from_raw_parts(start, len) };
        code
    }};
}

use amx_runtime::rules::decode::{self, pp::*};

/// One AMX instruction found in the code, with its fields as the project's decoder reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Vex {
    /// Offset in the code.
    at: usize,
    pp: u8,
    opcode: u8,
    /// ModRM.reg extended by VEX.R.
    reg: u8,
    /// ModRM.rm (or the SIB base) extended by VEX.B.
    rm: u8,
    /// VEX.vvvv, un-inverted.
    vvvv: u8,
    w: bool,
    l: bool,
    /// ModRM.mod == 11.
    register_form: bool,
    /// SIB scale (0 = x1), when there is a SIB.
    scale: Option<u8>,
    /// Whether the SIB names an index register (none means a stride of 0).
    has_index: bool,
}

impl Vex {
    fn scale(&self) -> Option<u8> {
        self.scale
    }
    fn has_index(&self) -> bool {
        self.has_index
    }
}

/// Every C4-VEX, map 0F38 instruction with an AMX opcode in `code`, found by decoding at every
/// offset (the wrappers hold other code around the instruction).
fn amx_in(code: &[u8]) -> Vec<Vex> {
    let mut found = Vec::new();
    for at in 0..code.len() {
        let Some(f) = decode::vex(&code[at..]) else {
            continue;
        };
        // A prefix byte before the instruction decodes to the same instruction: count it once.
        if f.prefixes != 0 || !decode::AMX_OPCODES.contains(&f.opcode) {
            continue;
        }
        found.push(Vex {
            at,
            pp: f.pp,
            opcode: f.opcode,
            reg: f.reg(),
            rm: f.rm(),
            vvvv: f.vvvv,
            w: f.w,
            l: f.l,
            register_form: f.register_form(),
            scale: f.scale(),
            has_index: f.index().is_some(),
        });
    }
    found
}

/// The single AMX instruction of a wrapper.
fn only_amx(name: &str, code: &[u8]) -> Vex {
    let found = amx_in(code);
    assert_eq!(
        found.len(),
        1,
        "{name}: expected one AMX instruction in {code:02x?}"
    );
    found[0]
}

/// Asserts that `code` holds exactly `expected` once and no other AMX instruction.
fn assert_exact(name: &str, code: &[u8], expected: &[u8]) {
    let i = only_amx(name, code);
    assert_eq!(
        &code[i.at..(i.at + expected.len()).min(code.len())],
        expected,
        "{name}: got {code:02x?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Wrappers

wrapper!(loadconfig(p: *const u8) {
    // SAFETY: never called; only its code bytes are read.
    unsafe { _tile_loadconfig(p) }
});
wrapper!(storeconfig(p: *mut u8) {
    // SAFETY: never called; only its code bytes are read.
    unsafe { _tile_storeconfig(p) }
});
wrapper!(release() {
    // SAFETY: never called; only its code bytes are read.
    unsafe { _tile_release() }
});

/// One wrapper per tile for each single-tile intrinsic, and a function listing them.
macro_rules! per_tile {
    ($list:ident, $f:ident $params:tt $args:tt: $($name:ident = $t:literal),*) => {
        $(wrapper!($name $params {
            // SAFETY: never called; only its code bytes are read.
            unsafe { $f::<$t> $args }
        });)*
        fn $list() -> Vec<(u8, &'static [u8])> {
            vec![$(($t, code_of!($name))),*]
        }
    };
}

per_tile!(zeros, _tile_zero () ():
    zero0 = 0, zero1 = 1, zero2 = 2, zero3 = 3, zero4 = 4, zero5 = 5, zero6 = 6, zero7 = 7);
per_tile!(loads, _tile_loadd (p: *const u8, s: usize) (p, s):
    load0 = 0, load1 = 1, load2 = 2, load3 = 3, load4 = 4, load5 = 5, load6 = 6, load7 = 7);
per_tile!(stream_loads, _tile_stream_loadd (p: *const u8, s: usize) (p, s):
    stream0 = 0, stream1 = 1, stream2 = 2, stream3 = 3,
    stream4 = 4, stream5 = 5, stream6 = 6, stream7 = 7);
per_tile!(stores, _tile_stored (p: *mut u8, s: usize) (p, s):
    store0 = 0, store1 = 1, store2 = 2, store3 = 3, store4 = 4, store5 = 5, store6 = 6, store7 = 7);

/// Wrappers of one dot-product intrinsic on several (C, A, B) triples, and a function listing
/// them. The triples put every tile in every operand position.
macro_rules! dot_cases {
    ($list:ident, $f:ident: $($name:ident = [$c:literal, $a:literal, $b:literal]),*) => {
        $(wrapper!($name() {
            // SAFETY: never called; only its code bytes are read.
            unsafe { $f::<$c, $a, $b>() }
        });)*
        fn $list() -> Vec<([u8; 3], &'static [u8])> {
            vec![$(([$c, $a, $b], code_of!($name))),*]
        }
    };
}

dot_cases!(ssd, _tile_dpbssd:
    ssd012 = [0, 1, 2], ssd123 = [1, 2, 3], ssd234 = [2, 3, 4], ssd345 = [3, 4, 5],
    ssd456 = [4, 5, 6], ssd567 = [5, 6, 7], ssd670 = [6, 7, 0], ssd701 = [7, 0, 1],
    ssd765 = [7, 6, 5]);
dot_cases!(sud, _tile_dpbsud:
    sud012 = [0, 1, 2], sud123 = [1, 2, 3], sud234 = [2, 3, 4], sud345 = [3, 4, 5],
    sud456 = [4, 5, 6], sud567 = [5, 6, 7], sud670 = [6, 7, 0], sud701 = [7, 0, 1]);
dot_cases!(usd, _tile_dpbusd:
    usd012 = [0, 1, 2], usd123 = [1, 2, 3], usd234 = [2, 3, 4], usd345 = [3, 4, 5],
    usd456 = [4, 5, 6], usd567 = [5, 6, 7], usd670 = [6, 7, 0], usd701 = [7, 0, 1]);
dot_cases!(uud, _tile_dpbuud:
    uud012 = [0, 1, 2], uud123 = [1, 2, 3], uud234 = [2, 3, 4], uud345 = [3, 4, 5],
    uud456 = [4, 5, 6], uud567 = [5, 6, 7], uud670 = [6, 7, 0], uud701 = [7, 0, 1]);
dot_cases!(bf16, _tile_dpbf16ps:
    bf012 = [0, 1, 2], bf123 = [1, 2, 3], bf234 = [2, 3, 4], bf345 = [3, 4, 5],
    bf456 = [4, 5, 6], bf567 = [5, 6, 7], bf670 = [6, 7, 0], bf701 = [7, 0, 1],
    bf507 = [5, 0, 7]);
dot_cases!(fp16, _tile_dpfp16ps:
    fp012 = [0, 1, 2], fp123 = [1, 2, 3], fp234 = [2, 3, 4], fp345 = [3, 4, 5],
    fp456 = [4, 5, 6], fp567 = [5, 6, 7], fp670 = [6, 7, 0], fp701 = [7, 0, 1]);

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn tilerelease_is_c4_e2_78_49_c0() {
    // docs/semantics.md section 4: "C4 E2 78 49 C0 only".
    assert_exact(
        "_tile_release",
        code_of!(release),
        &[0xC4, 0xE2, 0x78, 0x49, 0xC0],
    );
}

/// LDTILECFG / STTILECFG: VEX.128.{NP,66}.0F38.W0 49 !(11):000:bbb.
fn check_config_form(name: &str, code: &[u8], pp: u8, gnu_as_rdi: [u8; 5]) {
    let i = only_amx(name, code);
    assert_eq!(
        (i.pp, i.opcode, i.w, i.l, i.vvvv),
        (pp, 0x49, false, false, 0),
        "{name}: {i:?}"
    );
    assert!(!i.register_form, "{name} must take a memory operand: {i:?}");
    assert_eq!(
        i.reg, 0,
        "{name}: ModRM.reg must be 000 (else #UD, L8): {i:?}"
    );
    if code[i.at + 4] == 0x07 && code[i.at + 1] == 0xE2 {
        assert_eq!(code[i.at..i.at + 5], gnu_as_rdi, "{name}");
    }
}

#[test]
fn ldtilecfg_encoding() {
    check_config_form(
        "_tile_loadconfig",
        code_of!(loadconfig),
        NP,
        [0xC4, 0xE2, 0x78, 0x49, 0x07],
    );
}

#[test]
fn sttilecfg_encoding() {
    check_config_form(
        "_tile_storeconfig",
        code_of!(storeconfig),
        P66,
        [0xC4, 0xE2, 0x79, 0x49, 0x07],
    );
}

#[test]
fn tilezero_encoding_for_each_tile() {
    // VEX.128.F2.0F38.W0 49 11:rrr:000 (vvvv = 1111).
    assert_eq!(zeros().len(), 8);
    for (t, code) in zeros() {
        assert_exact(
            &format!("_tile_zero::<{t}>"),
            code,
            &[0xC4, 0xE2, 0x7B, 0x49, 0xC0 | t << 3],
        );
    }
    // GNU as: `tilezero tmm0` = C4 E2 7B 49 C0, `tilezero tmm7` = C4 E2 7B 49 F8.
    assert_exact(
        "_tile_zero::<7>",
        zeros()[7].1,
        &[0xC4, 0xE2, 0x7B, 0x49, 0xF8],
    );
}

/// TILELOADD / TILELOADDT1 / TILESTORED: VEX.128.{F2,66,F3}.0F38.W0 4B !(11):rrr:100 with a
/// SIB whose index (the stride) has scale 1.
fn check_memory_form(name: &str, cases: Vec<(u8, &[u8])>, pp: u8, gnu_as_tmm3_rdi_rsi: [u8; 6]) {
    assert_eq!(cases.len(), 8);
    for (t, code) in cases {
        let i = only_amx(&format!("{name}::<{t}>"), code);
        assert_eq!(
            (i.pp, i.opcode, i.w, i.l, i.vvvv),
            (pp, 0x4B, false, false, 0),
            "{name}::<{t}>: {i:?}"
        );
        assert_eq!(i.reg, t, "{name}::<{t}>: ModRM.reg names the tile: {i:?}");
        assert!(!i.register_form, "{name}::<{t}>: {i:?}");
        assert_eq!(
            code[i.at + 4] & 7,
            4,
            "{name}::<{t}>: ModRM.rm must be 100 (SIB): {i:?}"
        );
        assert_eq!(
            i.scale(),
            Some(0),
            "{name}::<{t}>: the stride has scale 1: {i:?}"
        );
        assert!(
            i.has_index(),
            "{name}::<{t}>: the stride must be the SIB index: {i:?}"
        );
        // The usual allocation, [rdi + rsi*1]: compare all six bytes.
        if t == 3 && code[i.at + 1] == 0xE2 && code[i.at + 5] == 0x37 {
            assert_eq!(code[i.at..i.at + 6], gnu_as_tmm3_rdi_rsi, "{name}::<3>");
        }
    }
}

#[test]
fn tileloadd_encoding_for_each_tile() {
    check_memory_form(
        "_tile_loadd",
        loads(),
        PF2,
        [0xC4, 0xE2, 0x7B, 0x4B, 0x1C, 0x37],
    );
}

#[test]
fn tileloaddt1_encoding_for_each_tile() {
    check_memory_form(
        "_tile_stream_loadd",
        stream_loads(),
        P66,
        [0xC4, 0xE2, 0x79, 0x4B, 0x1C, 0x37],
    );
}

#[test]
fn tilestored_encoding_for_each_tile() {
    check_memory_form(
        "_tile_stored",
        stores(),
        PF3,
        [0xC4, 0xE2, 0x7A, 0x4B, 0x1C, 0x37],
    );
}

/// The dot products: VEX.128.pp.0F38.W0 op 11:rrr:bbb with ModRM.reg = C (dst), ModRM.rm = A
/// (src1), VEX.vvvv = B (src2), section 8's table.
fn check_dot(name: &str, cases: Vec<([u8; 3], &[u8])>, pp: u8, opcode: u8, gnu_as_012: [u8; 5]) {
    assert!(cases.len() >= 8);
    for ([c, a, b], code) in cases {
        let expected = [0xC4, 0xE2, (!b & 0xF) << 3 | pp, opcode, 0xC0 | c << 3 | a];
        assert_exact(&format!("{name}::<{c}, {a}, {b}>"), code, &expected);
        if [c, a, b] == [0, 1, 2] {
            assert_eq!(expected, gnu_as_012, "{name}");
        }
    }
}

#[test]
fn tdpbssd_encoding() {
    check_dot(
        "_tile_dpbssd",
        ssd(),
        PF2,
        0x5E,
        [0xC4, 0xE2, 0x6B, 0x5E, 0xC1],
    );
    // GNU as: `tdpbssd tmm7, tmm6, tmm5` = C4 E2 53 5E FE.
    assert_exact(
        "_tile_dpbssd::<7, 6, 5>",
        code_of!(ssd765),
        &[0xC4, 0xE2, 0x53, 0x5E, 0xFE],
    );
}

#[test]
fn tdpbsud_encoding() {
    check_dot(
        "_tile_dpbsud",
        sud(),
        PF3,
        0x5E,
        [0xC4, 0xE2, 0x6A, 0x5E, 0xC1],
    );
}

#[test]
fn tdpbusd_encoding() {
    check_dot(
        "_tile_dpbusd",
        usd(),
        P66,
        0x5E,
        [0xC4, 0xE2, 0x69, 0x5E, 0xC1],
    );
}

#[test]
fn tdpbuud_encoding() {
    check_dot(
        "_tile_dpbuud",
        uud(),
        NP,
        0x5E,
        [0xC4, 0xE2, 0x68, 0x5E, 0xC1],
    );
}

#[test]
fn tdpbf16ps_encoding() {
    check_dot(
        "_tile_dpbf16ps",
        bf16(),
        PF3,
        0x5C,
        [0xC4, 0xE2, 0x6A, 0x5C, 0xC1],
    );
    // GNU as: `tdpbf16ps tmm5, tmm0, tmm7` = C4 E2 42 5C E8.
    assert_exact(
        "_tile_dpbf16ps::<5, 0, 7>",
        code_of!(bf507),
        &[0xC4, 0xE2, 0x42, 0x5C, 0xE8],
    );
}

#[test]
fn tdpfp16ps_encoding() {
    check_dot(
        "_tile_dpfp16ps",
        fp16(),
        PF2,
        0x5C,
        [0xC4, 0xE2, 0x6B, 0x5C, 0xC1],
    );
}
