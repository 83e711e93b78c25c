//! The next AMX generations under the trap engine (docs/semantics.md sections 15 to 19):
//! AMX-FP8, AMX-COMPLEX, AMX-MOVRS and AMX-AVX512 executed from their machine code give the
//! emulator's results and the known values, raise their exceptions in the silicon's order, and
//! are #UD where the modelled CPU does not report them.
//!
//! The model is chosen when the engine installs (`AMX_TRAP_CPU`), so each body runs in a child
//! process of this test binary with its own model. Where the CPU has AMX itself, the engine does
//! not install and the tests say so and pass.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use std::sync::atomic::Ordering;

use amx_runtime::intrinsics::*;
use amx_runtime::{Emulator, TileUnit};
use amx_trap as trap;

mod trap_support;
use trap_support::*;

/// `si_code` of #UD and of XFD's #NM (docs/semantics.md section 1).
const ILL_ILLOPC: i32 = 1;
const ILL_ILLOPN: i32 = 2;

/// This thread's tile `t` as the engine holds it (via the safe API's XSAVE replacement).
fn tile(t: u8) -> [u8; 1024] {
    let mut hw = amx_runtime::Hardware::new().expect("the engine is active");
    hw.resync();
    hw.tile_data(t).unwrap()
}

/// Whether the engine runs `cpu`'s instructions here: it emulates every AMX instruction on a
/// CPU without AMX, and assists AMX silicon that lacks some of `cpu`'s extensions. Elsewhere a
/// visible skip.
fn engine_runs(cpu: &str) -> bool {
    let model = match cpu {
        "spr" => trap::Model::SapphireRapids,
        "gnr" => trap::Model::GraniteRapids,
        "gnr-d" => trap::Model::GraniteRapidsD,
        _ => trap::Model::DiamondRapids,
    };
    if amx_runtime::Hardware::new().is_ok() && !trap::is_active() {
        if trap::runs_here(model) {
            return true;
        }
        amx_test_support::skip(
            amx_test_support::Kind::NotApplicable,
            format!("this AMX silicon executes every instruction of AMX_TRAP_CPU={cpu} itself"),
        );
        return false;
    }
    trap_engine()
}

/// Runs the `#[ignore]`d body `test` in a child with `AMX_TRAP_CPU=cpu`.
fn run_child(test: &str, cpu: &str) {
    if !engine_runs(cpu) {
        return;
    }
    Child::new(test)
        .env("AMX_TRAP_CPU", cpu)
        .run()
        .assert_passed();
}

/// Installs the engine in a child with the permission granted, after making [`record`] the
/// handler of `signals` (the engine keeps handlers installed before it; one installed after it
/// would take the engine's own signals).
fn engine_in_child(signals: &[libc::c_int]) -> bool {
    if !in_child() {
        return false;
    }
    for &sig in signals {
        handle(sig);
    }
    trap::install().unwrap();
    amx_runtime::permit::request_permission().unwrap();
    true
}

/// `f32` values of a tile's first `n` dwords.
fn floats(t: &[u8; 1024], n: usize) -> Vec<f32> {
    t.chunks_exact(4)
        .take(n)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A tile whose every dword is `d`.
fn filled(d: u32) -> Vec<u8> {
    d.to_le_bytes().repeat(256)
}

// ---------------------------------------------------------------------------------------------
// AMX-FP8 and AMX-COMPLEX

#[test]
#[ignore = "run by fp8_and_complex_products_give_the_emulators_results in a child process"]
fn child_products() {
    if !engine_in_child(&[]) {
        return;
    }
    assert_eq!(trap::model(), trap::Model::DiamondRapids);
    let image = CONFIG_16X64;
    let a = bytes(11, 1024);
    let b = bytes(12, 1024);
    let c = bytes(13, 1024);
    // The engine: each product from C's initial bytes, through the intrinsics' machine code.
    let mut out = Vec::new();
    for k in 0..6 {
        let mut stored = vec![0u8; 1024];
        // SAFETY: the engine executes these; the buffers are 16 x 64 bytes.
        unsafe {
            _tile_loadconfig(image.as_ptr());
            _tile_loadd::<0>(c.as_ptr(), 64);
            _tile_loadd::<1>(a.as_ptr(), 64);
            _tile_loadd::<2>(b.as_ptr(), 64);
            match k {
                0 => _tile_dpbf8ps::<0, 1, 2>(),
                1 => _tile_dpbhf8ps::<0, 1, 2>(),
                2 => _tile_dphbf8ps::<0, 1, 2>(),
                3 => _tile_dphf8ps::<0, 1, 2>(),
                4 => _tile_cmmimfp16ps::<0, 1, 2>(),
                _ => _tile_cmmrlfp16ps::<0, 1, 2>(),
            }
            _tile_stored::<0>(stored.as_mut_ptr(), 64);
        }
        out.push(stored);
    }
    // The emulator, directly.
    let mut expect = Vec::new();
    for k in 0..6 {
        let mut emu = Emulator::new();
        emu.ldtilecfg(&image).unwrap();
        emu.tileloadd(0, &c, 64).unwrap();
        emu.tileloadd(1, &a, 64).unwrap();
        emu.tileloadd(2, &b, 64).unwrap();
        match k {
            0 => emu.tdpbf8ps(0, 1, 2),
            1 => emu.tdpbhf8ps(0, 1, 2),
            2 => emu.tdphbf8ps(0, 1, 2),
            3 => emu.tdphf8ps(0, 1, 2),
            4 => emu.tcmmimfp16ps(0, 1, 2),
            _ => emu.tcmmrlfp16ps(0, 1, 2),
        }
        .unwrap();
        let mut stored = vec![0u8; 1024];
        emu.tilestored(0, &mut stored, 64).unwrap();
        expect.push(stored);
    }
    for (k, (o, e)) in out.iter().zip(&expect).enumerate() {
        assert_eq!(o, e, "product {k}");
    }

    // Known values: K = 16 dwords per row, C starting at zero.
    // bf8 1.0 = 0x3C, bf8 2.0 = 0x40; hf8 1.0 = 0x38, hf8 2.0 = 0x40; hf8 -0.5 = 0xB0.
    let known = |a: u32, b: u32, k: usize| -> Vec<f32> {
        let (a, b) = (filled(a), filled(b));
        // SAFETY: as above.
        unsafe {
            _tile_loadconfig(image.as_ptr());
            _tile_zero::<3>();
            _tile_loadd::<4>(a.as_ptr(), 64);
            _tile_loadd::<5>(b.as_ptr(), 64);
            match k {
                0 => _tile_dpbf8ps::<3, 4, 5>(),
                1 => _tile_dpbhf8ps::<3, 4, 5>(),
                2 => _tile_dphbf8ps::<3, 4, 5>(),
                3 => _tile_dphf8ps::<3, 4, 5>(),
                4 => _tile_cmmimfp16ps::<3, 4, 5>(),
                _ => _tile_cmmrlfp16ps::<3, 4, 5>(),
            }
        }
        floats(&tile(3), 256)
    };
    // 64 products of 1 x 2 per element.
    assert!(known(0x3C3C_3C3C, 0x4040_4040, 0)
        .iter()
        .all(|&v| v == 128.0));
    assert!(known(0x3C3C_3C3C, 0x4040_4040, 1)
        .iter()
        .all(|&v| v == 128.0));
    assert!(known(0x3838_3838, 0x4040_4040, 2)
        .iter()
        .all(|&v| v == 128.0));
    // hf8: 2 x -0.5 = -1, 64 times.
    assert!(known(0x4040_4040, 0xB0B0_B0B0, 3)
        .iter()
        .all(|&v| v == -64.0));
    // (1 + 2i)(3 + 4i) = -5 + 10i, 16 times (fp16: 1 = 0x3C00, 2 = 0x4000, 3 = 0x4200,
    // 4 = 0x4400; the real part in the low half).
    assert!(known(0x4000_3C00, 0x4400_4200, 4)
        .iter()
        .all(|&v| v == 160.0));
    assert!(known(0x4000_3C00, 0x4400_4200, 5)
        .iter()
        .all(|&v| v == -80.0));
    // Bytes past C's shape are zero, and start_row is cleared (D3, D4): a 4 x 16-byte C.
    let small = amx_test_support::image::image(1, 0, &[(0, 4, 16), (1, 4, 8), (2, 2, 16)]);
    // SAFETY: as above.
    unsafe {
        _tile_loadconfig(small.as_ptr());
        _tile_loadd::<0>(c.as_ptr(), 64);
        _tile_loadd::<1>(a.as_ptr(), 64);
        _tile_loadd::<2>(b.as_ptr(), 64);
        _tile_dphf8ps::<0, 1, 2>();
    }
    let t0 = tile(0);
    for r in 0..16 {
        let past = if r < 4 { 16 } else { 0 };
        assert!(
            t0[r * 64 + past..r * 64 + 64].iter().all(|&x| x == 0),
            "row {r}"
        );
    }
    // SAFETY: legal in any state.
    unsafe { _tile_release() };
}

#[test]
fn fp8_and_complex_products_give_the_emulators_results() {
    run_child("child_products", "dmr");
}

// ---------------------------------------------------------------------------------------------
// AMX-MOVRS

#[test]
#[ignore = "run by movrs_loads_are_tileloadd in a child process"]
fn child_movrs() {
    if !engine_in_child(&[libc::SIGSEGV]) {
        return;
    }
    let src = bytes(21, 8192);
    let reference = |base: usize, stride: usize| -> [u8; 1024] {
        let mut t = [0u8; 1024];
        for r in 0..16 {
            let at = base + r * stride;
            t[r * 64..r * 64 + 64].copy_from_slice(&src[at..at + 64]);
        }
        t
    };
    // SAFETY: every row lies inside `src`.
    unsafe {
        _tile_loadconfig(CONFIG_16X64.as_ptr());
        _tile_loaddrs::<1>(src.as_ptr(), 128);
        _tile_stream_loaddrs::<2>(src.as_ptr().add(64), 192);
        // tileloaddrs tmm3, [r8 + rax*4 + 291] (the MC form).
        core::arch::asm!(
            ".byte 0xc4, 0xc2, 0x7b, 0x4a, 0x9c, 0x80, 0x23, 0x01, 0x00, 0x00",
            in("r8") src.as_ptr().wrapping_sub(291),
            in("rax") 64usize,
        );
        // tileloaddrst1 tmm6, [rbx + 64]: no index, stride 0.
        core::arch::asm!(
            "push rbx", "mov rbx, {p}",
            ".byte 0xc4, 0xe2, 0x79, 0x4a, 0x74, 0x23, 0x40",
            "pop rbx",
            p = in(reg) src.as_ptr(),
        );
    }
    assert_eq!(tile(1), reference(0, 128));
    assert_eq!(tile(2), reference(64, 192));
    assert_eq!(tile(3), reference(0, 256));
    assert_eq!(tile(6), reference(64, 0));
    // The emulator's own TILELOADDRS agrees, with the zeroing past a smaller shape (T3).
    let small = amx_test_support::image::image(1, 0, &[(4, 5, 12)]);
    // SAFETY: as above.
    unsafe {
        _tile_loadconfig(small.as_ptr());
        _tile_loaddrs::<4>(src.as_ptr().add(7), 100);
    }
    let mut emu = Emulator::new();
    emu.ldtilecfg(&small).unwrap();
    emu.tileloaddrs(4, &src[7..], 100).unwrap();
    assert_eq!(tile(4), emu.tile_data(4).unwrap());

    // An unmapped row: SIGSEGV (SEGV_MAPERR) with that row's address, REG_TRAPNO 14, start_row
    // left at the row; the rows before it are loaded.
    let pages = two_pages();
    // SAFETY: the first page is ours to fill; the second is unmapped.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), pages as *mut u8, 4096);
        libc::munmap((pages + 4096) as *mut libc::c_void, 4096);
    }
    for (bytes, name) in [
        ([0xc4u8, 0xe2, 0x7b, 0x4a, 0x04, 0x37], "tileloaddrs"),
        ([0xc4u8, 0xe2, 0x79, 0x4a, 0x04, 0x37], "tileloaddrst1"),
    ] {
        SKIP.store(6, Ordering::SeqCst);
        let base = pages + 4096 - 3 * 128;
        let at: u64;
        // SAFETY: rows 0..3 lie in the first page; the handler skips the faulting load.
        unsafe {
            _tile_loadconfig(CONFIG_16X64.as_ptr());
            if bytes[2] == 0x7b {
                core::arch::asm!(
                    "lea {at}, [rip + 2f]",
                    "2:",
                    ".byte 0xc4, 0xe2, 0x7b, 0x4a, 0x04, 0x37",
                    at = out(reg) at,
                    in("rdi") base,
                    in("rsi") 128usize,
                );
            } else {
                core::arch::asm!(
                    "lea {at}, [rip + 2f]",
                    "2:",
                    ".byte 0xc4, 0xe2, 0x79, 0x4a, 0x04, 0x37",
                    at = out(reg) at,
                    in("rdi") base,
                    in("rsi") 128usize,
                );
            }
        }
        let (sig, code, trapno, addr, _, rip) = seen();
        assert_eq!(
            (sig, code, trapno, addr, rip),
            (
                libc::SIGSEGV,
                1, // SEGV_MAPERR
                14,
                (pages + 4096) as u64,
                at
            ),
            "{name}"
        );
        let mut cfg = [0u8; 64];
        // SAFETY: 64 writable bytes.
        unsafe { _tile_storeconfig(cfg.as_mut_ptr()) };
        assert_eq!(cfg[1], 3, "{name}: start_row at the faulting row");
        let t0 = tile(0);
        for r in 0..3 {
            let at = 4096 - 3 * 128 + r * 128;
            assert_eq!(
                &t0[r * 64..r * 64 + 64],
                &src[at..at + 64],
                "{name} row {r}"
            );
        }
    }
    // SAFETY: legal in any state.
    unsafe { _tile_release() };
}

#[test]
fn movrs_loads_are_tileloadd() {
    run_child("child_movrs", "dmr");
}

// ---------------------------------------------------------------------------------------------
// AMX-AVX512

/// The twelve row moves: their bytes (destination zmm22, row from ecx or imm8 123) and
/// the emulator's function for them.
type RowFn = fn(&mut Emulator, u8, u32) -> Result<[u8; 64], amx_runtime::Fault>;

/// Executes `tilemovrow zmm22, tmm3, ecx`-like forms on tmm3 with `ecx = row` and reads zmm22
/// back; `k` picks the form (0..6 register forms, 6..12 imm8 forms with row 123).
///
/// # Safety
/// The CPU has AVX-512F with its state enabled, and the engine models AMX-AVX512.
#[target_feature(enable = "avx512f")]
unsafe fn row_move(k: usize, row: u32) -> [u8; 64] {
    let mut out = [0u8; 64];
    macro_rules! run {
        ($($b:literal),*) => {
            // SAFETY: the caller's contract; `out` is 64 bytes.
            unsafe {
                core::arch::asm!(
                    concat!(".byte ", $($b, ", ",)* "0x90"),
                    "vmovdqu64 [{out}], zmm22",
                    out = in(reg) out.as_mut_ptr(),
                    in("ecx") row,
                    out("zmm22") _,
                )
            }
        };
    }
    match k {
        0 => run!("0x62", "0xe2", "0x75", "0x48", "0x4a", "0xf3"),
        1 => run!("0x62", "0xe2", "0x76", "0x48", "0x4a", "0xf3"),
        2 => run!("0x62", "0xe2", "0x77", "0x48", "0x6d", "0xf3"),
        3 => run!("0x62", "0xe2", "0x76", "0x48", "0x6d", "0xf3"),
        4 => run!("0x62", "0xe2", "0x74", "0x48", "0x6d", "0xf3"),
        5 => run!("0x62", "0xe2", "0x75", "0x48", "0x6d", "0xf3"),
        6 => run!("0x62", "0xe3", "0x7d", "0x48", "0x07", "0xf3", "0x7b"),
        7 => run!("0x62", "0xe3", "0x7e", "0x48", "0x07", "0xf3", "0x7b"),
        8 => run!("0x62", "0xe3", "0x7f", "0x48", "0x07", "0xf3", "0x7b"),
        9 => run!("0x62", "0xe3", "0x7e", "0x48", "0x77", "0xf3", "0x7b"),
        10 => run!("0x62", "0xe3", "0x7c", "0x48", "0x07", "0xf3", "0x7b"),
        _ => run!("0x62", "0xe3", "0x7f", "0x48", "0x77", "0xf3", "0x7b"),
    }
    out
}

/// The emulator's row move `k` (as in [`row_move`]).
fn emulated_row(k: usize) -> RowFn {
    match k % 6 {
        0 => |e, t, r| e.tilemovrow(t, r),
        1 => |e, t, r| e.tcvtrowd2ps(t, r),
        2 => |e, t, r| e.tcvtrowps2bf16h(t, r),
        3 => |e, t, r| e.tcvtrowps2bf16l(t, r),
        4 => |e, t, r| e.tcvtrowps2phh(t, r),
        _ => |e, t, r| e.tcvtrowps2phl(t, r),
    }
}

#[test]
#[ignore = "run by row_moves_write_zmm_or_are_refused in a child process"]
fn child_row_moves() {
    if !engine_in_child(&[libc::SIGILL]) {
        return;
    }
    let caps = amx_runtime::detect();
    let data = bytes(31, 1024);
    let image = amx_test_support::image::image(1, 0, &[(3, 16, 64)]);
    // SAFETY: the engine executes these.
    unsafe {
        _tile_loadconfig(image.as_ptr());
        _tile_loadd::<3>(data.as_ptr(), 64);
    }
    let mut emu = Emulator::new();
    emu.ldtilecfg(&image).unwrap();
    emu.tileloadd(3, &data, 64).unwrap();
    if caps.amx_avx512 {
        // The host has AVX-512: the engine writes zmm22 in the interrupted context.
        assert!(caps.zmm_enabled());
        for k in 0..12 {
            for row in [0u32, 5, 15, 16, 0x1_0002] {
                let want_row = if k < 6 { row } else { (1 << 16) | 59 };
                let want = emulated_row(k)(&mut emu, 3, want_row).unwrap();
                // SAFETY: the host has AVX-512 and the model AMX-AVX512 (detected).
                let got = unsafe { row_move(k, row) };
                assert_eq!(got, want, "form {k}, row {row:#x}");
            }
        }
        // A nonzero row of a known value: TCVTROWD2PS of int32 3 is 3.0.
        let threes = filled(3);
        // SAFETY: as above.
        let got = unsafe {
            _tile_loadd::<3>(threes.as_ptr(), 64);
            row_move(1, 7)
        };
        assert!(got.chunks_exact(4).all(|c| c == 3.0f32.to_le_bytes()));
        println!("zmm written");
    } else {
        // No AVX-512 state on the host: the model has no AMX-AVX512, and every form is #UD
        // (SIGILL, ILL_ILLOPN, REG_TRAPNO 6) at the instruction, as on a CPU without it.
        assert!(!caps.amx_avx512);
        for (k, code) in [
            &[0x62u8, 0xe2, 0x75, 0x48, 0x4a, 0xf3][..],
            &[0x62, 0xe3, 0x7d, 0x48, 0x07, 0xf3, 0x7b],
        ]
        .iter()
        .enumerate()
        {
            SKIP.store(code.len(), Ordering::SeqCst);
            let at: u64;
            // SAFETY: the handler skips the instruction; nothing else runs.
            unsafe {
                if k == 0 {
                    core::arch::asm!("lea {at}, [rip + 2f]", "2:",
                        ".byte 0x62, 0xe2, 0x75, 0x48, 0x4a, 0xf3", at = out(reg) at);
                } else {
                    core::arch::asm!("lea {at}, [rip + 2f]", "2:",
                        ".byte 0x62, 0xe3, 0x7d, 0x48, 0x07, 0xf3, 0x7b", at = out(reg) at);
                }
            }
            let (sig, si_code, trapno, _, _, rip) = seen();
            assert_eq!(
                (sig, si_code, trapno, rip),
                (libc::SIGILL, ILL_ILLOPN, 6, at),
                "form {k}"
            );
        }
        println!("refused");
    }
    // SAFETY: legal in any state.
    unsafe { _tile_release() };
}

#[test]
fn row_moves_write_zmm_or_are_refused() {
    run_child("child_row_moves", "dmr");
}

// ---------------------------------------------------------------------------------------------
// The order of the exceptions, and the models without the features

/// Executes `code` (one instruction, `$len` bytes) with the handler skipping it and returns
/// (signal, si_code, REG_TRAPNO); 0 for the signal when nothing was raised.
macro_rules! raised {
    ($len:literal, $($b:literal),*) => {{
        SKIP.store($len, Ordering::SeqCst);
        // SAFETY: the handler skips the instruction when it faults; the operands it may read
        // (rdi + rsi) are CONFIG_16X64's 64 bytes, at stride 0.
        unsafe {
            core::arch::asm!(
                concat!(".byte ", $($b, ", ",)* "0x90"),
                in("rdi") CONFIG_16X64.as_ptr(),
                in("rsi") 0usize,
                in("ecx") 0u32,
            )
        };
        let (sig, code, trapno, _, _, _) = seen();
        (sig, code, trapno)
    }};
}

const UD: (i32, i32, i64) = (libc::SIGILL, ILL_ILLOPN, 6);
/// XFD's SIGILL carries the thread's last trap (Linux records none for it): here always a #UD
/// of the instructions before.
const NM: (i32, i32, i64) = (libc::SIGILL, ILL_ILLOPC, 6);

#[test]
#[ignore = "run by exceptions_come_in_the_silicons_order in a child process"]
fn child_order() {
    if !in_child() {
        return;
    }
    handle(libc::SIGILL);
    trap::install().unwrap();
    // Unconfigured: #UD before XFD for every new instruction.
    // tdpbf8ps tmm0, tmm1, tmm2 (C4 E5 68 FD C1)
    assert_eq!(raised!(5, "0xc4", "0xe5", "0x68", "0xfd", "0xc1"), UD);
    // tcmmimfp16ps tmm0, tmm1, tmm2 (C4 E2 69 6C C1)
    assert_eq!(raised!(5, "0xc4", "0xe2", "0x69", "0x6c", "0xc1"), UD);
    // tileloaddrs tmm0, [rdi + rsi] (C4 E2 7B 4A 04 37)
    assert_eq!(
        raised!(6, "0xc4", "0xe2", "0x7b", "0x4a", "0x04", "0x37"),
        UD
    );
    // SAFETY: a valid configuration.
    unsafe { _tile_loadconfig(CONFIG_16X64.as_ptr()) };
    // Configured, no permission: XFD for valid operands, #UD first for aliased ones.
    assert_eq!(raised!(5, "0xc4", "0xe5", "0x68", "0xfd", "0xc1"), NM);
    assert_eq!(raised!(5, "0xc4", "0xe5", "0x78", "0xfd", "0xc0"), UD);
    assert_eq!(raised!(5, "0xc4", "0xe2", "0x69", "0x6c", "0xc1"), NM);
    assert_eq!(raised!(5, "0xc4", "0xe2", "0x79", "0x6c", "0xc0"), UD);
    assert_eq!(
        raised!(6, "0xc4", "0xe2", "0x79", "0x4a", "0x04", "0x37"),
        NM
    );
    // tilemovrow zmm22, tmm3, ecx: XFD where the model has AMX-AVX512, else #UD.
    let row = raised!(6, "0x62", "0xe2", "0x75", "0x48", "0x4a", "0xf3");
    let avx512 = amx_runtime::detect().amx_avx512;
    assert_eq!(row, if avx512 { NM } else { UD });
    // Encodings the silicon rejects: #UD whatever the state (TDPBF8PS with VEX.W).
    assert_eq!(raised!(5, "0xc4", "0xe5", "0xe8", "0xfd", "0xc1"), UD);
    amx_runtime::permit::request_permission().unwrap();
    // With the permission they complete.
    assert_eq!(raised!(5, "0xc4", "0xe5", "0x68", "0xfd", "0xc1").0, 0);
    assert_eq!(
        raised!(6, "0xc4", "0xe2", "0x7b", "0x4a", "0x04", "0x37").0,
        0
    );
    // SAFETY: legal in any state.
    unsafe { _tile_release() };
}

#[test]
fn exceptions_come_in_the_silicons_order() {
    run_child("child_order", "dmr");
}

#[test]
#[ignore = "run by a_refused_tile_state_is_the_silicons_sigsegv in a child process"]
fn child_refused_tile_state() {
    if !engine_in_child(&[libc::SIGSEGV, libc::SIGILL]) {
        return;
    }
    assert!(trap::assists_silicon(), "run only where the engine assists");
    trap::simulate_tile_state_refusal(true);
    std::thread::spawn(|| {
        // SAFETY: a valid configuration; TILECFG is not under XFD, so this new thread still
        // has not used tile data (its frames have no room for tiles).
        unsafe { _tile_loadconfig(CONFIG_16X64.as_ptr()) };
        SKIP.store(5, Ordering::SeqCst);
        let at: u64;
        // tdpbf8ps tmm0, tmm1, tmm2 (C4 E5 68 FD C1), assisted: its first tile data.
        // SAFETY: the SIGSEGV handler skips the 5 bytes; the instruction touches no memory.
        unsafe {
            core::arch::asm!(
                "lea {at}, [rip + 2f]",
                "2:",
                ".byte 0xc4, 0xe5, 0x68, 0xfd, 0xc1",
                "nop",
                at = out(reg) at,
            )
        };
        // As Linux's XFD handler out of memory: SIGSEGV, SI_KERNEL, no address, at the
        // instruction, in the program's handler.
        let (sig, code, trapno, addr, err, rip) = seen();
        assert_eq!(
            (sig, code, trapno, addr, err),
            (libc::SIGSEGV, 0x80, 0, 0, 0)
        );
        assert_eq!(rip, at, "the SIGSEGV is at the instruction");
        // Once the kernel gives the state, the same instruction completes.
        trap::simulate_tile_state_refusal(false);
        assert_eq!(raised!(5, "0xc4", "0xe5", "0x68", "0xfd", "0xc1").0, 0);
        // SAFETY: legal in any state.
        unsafe { _tile_release() };
    })
    .join()
    .unwrap();
}

/// Where the engine assists the silicon and a thread's first tile data finds Linux out of
/// memory, the program gets the SIGSEGV the silicon's first use would (simulated: the engine
/// queues the kernel's signal itself in place of its TILEZERO).
#[test]
fn a_refused_tile_state_is_the_silicons_sigsegv() {
    let assisting = amx_runtime::Hardware::new().is_ok()
        && !trap::is_active()
        && trap::runs_here(trap::Model::DiamondRapids);
    if !assisting {
        amx_test_support::skip(
            amx_test_support::Kind::NotApplicable,
            "the engine asks Linux for a thread's tile state only when it assists AMX silicon \
             that lacks AMX-FP8",
        );
        return;
    }
    Child::new("child_refused_tile_state")
        .env("AMX_TRAP_CPU", "dmr")
        .run()
        .assert_passed();
}

#[test]
#[ignore = "run by models_without_the_features_refuse_them in a child process"]
fn child_without_features() {
    if !engine_in_child(&[libc::SIGILL]) {
        return;
    }
    let model = trap::model();
    let caps = amx_runtime::detect();
    // SAFETY: a valid configuration.
    unsafe { _tile_loadconfig(CONFIG_16X64.as_ptr()) };
    let fp8 = raised!(5, "0xc4", "0xe5", "0x68", "0xfd", "0xc1");
    let complex = raised!(5, "0xc4", "0xe2", "0x69", "0x6c", "0xc1");
    let movrs = raised!(6, "0xc4", "0xe2", "0x7b", "0x4a", "0x04", "0x37");
    let row = raised!(6, "0x62", "0xe2", "0x75", "0x48", "0x4a", "0xf3");
    let done = |on: bool| if on { (0, 0, 0) } else { UD };
    let only_sig = |r: (i32, i32, i64)| if r.0 == 0 { (0, 0, 0) } else { r };
    assert_eq!(only_sig(fp8), done(model.amx_fp8()), "{model:?}");
    assert_eq!(only_sig(complex), done(model.amx_complex()), "{model:?}");
    assert_eq!(only_sig(movrs), done(model.amx_movrs()), "{model:?}");
    assert_eq!(only_sig(row), UD, "{model:?}: no AMX-AVX512");
    // detect() reports what the model has.
    assert_eq!(
        (
            caps.amx_fp16,
            caps.amx_complex,
            caps.amx_fp8,
            caps.amx_movrs,
            caps.amx_avx512
        ),
        (
            model.amx_fp16(),
            model.amx_complex(),
            model.amx_fp8(),
            model.amx_movrs(),
            false
        ),
        "{model:?}"
    );
    // SAFETY: legal in any state.
    unsafe { _tile_release() };
}

#[test]
fn models_without_the_features_refuse_them() {
    for cpu in ["spr", "gnr", "gnr-d"] {
        if !engine_runs(cpu) {
            continue;
        }
        Child::new("child_without_features")
            .env("AMX_TRAP_CPU", cpu)
            .run()
            .assert_passed();
    }
}

#[test]
#[ignore = "run by diamond_rapids_is_detected in a child process"]
fn child_detect() {
    if !engine_in_child(&[]) {
        return;
    }
    let caps = amx_runtime::detect();
    assert!(
        caps.amx_tile && caps.amx_int8 && caps.amx_bf16 && caps.amx_fp16,
        "{caps:?}"
    );
    assert!(
        caps.amx_complex && caps.amx_fp8 && caps.amx_movrs,
        "{caps:?}"
    );
    // AMX-AVX512 exactly where the host's AVX-512 state is usable.
    let leaf7 = raw_cpuid_avx512f();
    assert_eq!(caps.amx_avx512, leaf7 && caps.zmm_enabled(), "{caps:?}");
}

/// Whether the host reports AVX512F (CPUID.(7,0):EBX\[16\], which the engine does not change).
fn raw_cpuid_avx512f() -> bool {
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86-64 CPU.
    let r = unsafe { core::arch::x86_64::__cpuid_count(7, 0) };
    r.ebx & (1 << 16) != 0
}

#[test]
fn diamond_rapids_is_detected() {
    run_child("child_detect", "dmr");
}

// ---------------------------------------------------------------------------------------------
// Patching

#[test]
#[ignore = "run by hot_sites_patch_except_row_moves in a child process"]
fn child_patching() {
    if !engine_in_child(&[libc::SIGILL]) {
        return;
    }
    // Assisting silicon, the engine never patches: its sites run outside a signal frame, where
    // the tiles are in the registers.
    let assisting = trap::assists_silicon();
    if !trap::patching() && !assisting {
        amx_test_support::skip(
            amx_test_support::Kind::NotApplicable,
            "patching is not available in this process",
        );
        return;
    }
    let a = bytes(41, 1024);
    let b = bytes(42, 1024);
    let before = trap::patched_sites();
    // The same TILELOADDRS and TDPBF8PS sites, hot: patched once they have trapped often
    // enough, the later executions through the patched path.
    for _ in 0..40 {
        // SAFETY: the engine executes these; the buffers are 16 x 64 bytes.
        unsafe {
            _tile_loadconfig(CONFIG_16X64.as_ptr());
            _tile_zero::<0>();
            core::arch::asm!(
                ".byte 0xc4, 0xe2, 0x7b, 0x4a, 0x0c, 0x37", // tileloaddrs tmm1, [rdi + rsi]
                ".byte 0xc4, 0xe2, 0x79, 0x4a, 0x14, 0x32", // tileloaddrst1 tmm2, [rdx + rsi]
                ".byte 0xc4, 0xe5, 0x68, 0xfd, 0xc1",       // tdpbf8ps tmm0, tmm1, tmm2
                ".byte 0xc4, 0xe5, 0x68, 0xfd, 0xc1",
                in("rdi") a.as_ptr(),
                in("rdx") b.as_ptr(),
                in("rsi") 64usize,
            );
        }
    }
    let patched = trap::patched_sites() - before;
    if assisting {
        assert_eq!(patched, 0, "sites patched while assisting the silicon");
    } else {
        assert!(patched >= 3, "{patched} sites patched");
    }
    let mut emu = Emulator::new();
    emu.ldtilecfg(&CONFIG_16X64).unwrap();
    emu.tilezero(0).unwrap();
    emu.tileloaddrs(1, &a, 64).unwrap();
    emu.tileloaddrst1(2, &b, 64).unwrap();
    emu.tdpbf8ps(0, 1, 2).unwrap();
    emu.tdpbf8ps(0, 1, 2).unwrap();
    for t in 0..3 {
        assert_eq!(tile(t), emu.tile_data(t).unwrap(), "tmm{t}");
    }
    // A row move is never patched, however hot (completed where the host has AVX-512, #UD
    // skipped by the handler elsewhere).
    let before = trap::patched_sites();
    SKIP.store(6, Ordering::SeqCst);
    for _ in 0..40 {
        // SAFETY: the handler skips the instruction where it is #UD; zmm22 is declared.
        unsafe {
            core::arch::asm!(
                ".byte 0x62, 0xe2, 0x75, 0x48, 0x4a, 0xf3", // tilemovrow zmm22, tmm0, ecx
                in("ecx") 0u32,
                out("xmm22") _,
            );
        }
    }
    let _ = seen();
    assert_eq!(trap::patched_sites(), before);
    // SAFETY: legal in any state.
    unsafe { _tile_release() };
}

#[test]
fn hot_sites_patch_except_row_moves() {
    run_child("child_patching", "dmr");
}
