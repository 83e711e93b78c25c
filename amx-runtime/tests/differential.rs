//! Random instruction sequences run on the emulator and on the silicon, compared on every bit of
//! every tile, on the configuration, and on every fault.
//!
//! The sequences cover random configurations (odd shapes, start_row, invalid images, and
//! square R x 4R layouts in which most dot products are valid), loads with random strides and
//! data rich in special floats (NaN payloads, infinities, denormals, values near 2^-126),
//! stores, and dot products on random operands.
//!
//! The default size is quick. `AMX_DIFF_STEPS=N` runs N instructions per thread (e.g. 2000000
//! for a long run). Without AMX the silicon code path runs on the trap engine (every instruction
//! of the `Hardware` backend trapping to it), so the comparison runs everywhere on x86-64 Linux;
//! the same sequences also run on the emulator alone as a no-panic check.

use amx_runtime::rules::image;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use amx_runtime::Hardware;
use amx_runtime::{Emulator, Fault, TileShape, TileUnit};
use amx_test_support::SplitMix64 as Rng;

/// A 32-bit value that stresses the float paths: specials, denormals, values near 2^-126.
fn special_f32(rng: &mut Rng) -> u32 {
    let sign = (rng.next_u64() as u32) & 0x8000_0000;
    let payload = rng.next_u64() as u32 & 0x007F_FFFF;
    sign | match rng.below(10) {
        0 => 0x7F80_0000 | payload.max(1), // NaN (quiet or signalling)
        1 => 0x7F80_0000,                  // infinity
        2 => payload,                      // denormal or zero
        3 => 0x0080_0000 | payload,        // smallest normal binade
        4 => (0x3F00_0000 + (payload >> 4)) & 0x7FFF_FFFF, // near 1
        5 => 0x2000_0000 | payload,        // tiny products
        _ => rng.next_u64() as u32 & 0x7FFF_FFFF, // anything
    }
}

fn random_memory(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 4);
    while out.len() < len {
        let word = match rng.below(3) {
            0 => rng.next_u64() as u32,
            // Two bf16/fp16 halves built from special fp32 tops.
            1 => (special_f32(rng) >> 16) | (special_f32(rng) & 0xFFFF_0000),
            _ => special_f32(rng),
        };
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn random_image(rng: &mut Rng) -> [u8; 64] {
    let mut shapes = [None; 8];
    if rng.chance(40) {
        // Every tile R x 4R (full tiles one time in three): any three distinct tiles are then a
        // valid dot product (M = N = K = R), which random shapes almost never are.
        let r = if rng.chance(33) {
            16
        } else {
            1 + rng.below(16) as u8
        };
        let shapes = [Some(TileShape::new(r, 4 * u16::from(r))); 8];
        return image::encode(1, 0, &shapes);
    }
    for slot in shapes.iter_mut() {
        if rng.chance(75) {
            let rows = 1 + rng.below(16) as u8;
            let colsb = if rng.chance(85) {
                4 * (1 + rng.below(16) as u16)
            } else {
                1 + rng.below(64) as u16
            };
            *slot = Some(TileShape::new(rows, colsb));
        }
    }
    let start_row = if rng.chance(80) {
        0
    } else {
        rng.below(20) as u8
    };
    let mut img = image::encode(if rng.chance(95) { 1 } else { 0 }, start_row, &shapes);
    if rng.chance(5) {
        // An invalid image: both units must refuse it with #GP and keep their state.
        let at = rng.below(64) as usize;
        img[at] = img[at].wrapping_add(1 + rng.below(200) as u8);
    }
    img
}

/// One random instruction on `u`; returns its outcome for comparison. Without `fp16` the
/// TDPFP16PS draws run TDPBF16PS instead (for a core that does not execute it).
fn step<U: TileUnit + ?Sized>(
    u: &mut U,
    rng: &mut Rng,
    mem: &mut Vec<u8>,
    fp16: bool,
) -> (Result<(), Fault>, Vec<u8>) {
    let t = if rng.chance(97) {
        rng.below(8) as u8
    } else {
        8 + rng.below(4) as u8
    };
    let (c, a, b) = (t, rng.below(8) as u8, rng.below(8) as u8);
    let stride = rng.below(130) as usize;
    match rng.below(13) {
        0 => (u.ldtilecfg(&random_image(rng)), Vec::new()),
        1 => (u.tilezero(t), Vec::new()),
        2 | 3 => {
            *mem = random_memory(rng, 16 * 130 + 64);
            (u.tileloadd(t, mem, stride), Vec::new())
        }
        4 => (u.tileloaddt1(t, mem, stride), Vec::new()),
        5 => {
            let mut out = vec![0x5Au8; 16 * 130 + 64];
            let r = u.tilestored(t, &mut out, stride);
            (r, out)
        }
        6 => (u.tdpbssd(c, a, b), Vec::new()),
        7 => (u.tdpbsud(c, a, b), Vec::new()),
        8 => (u.tdpbusd(c, a, b), Vec::new()),
        9 => (u.tdpbuud(c, a, b), Vec::new()),
        10 => (u.tdpbf16ps(c, a, b), Vec::new()),
        11 if fp16 => (u.tdpfp16ps(c, a, b), Vec::new()),
        11 => (u.tdpbf16ps(c, a, b), Vec::new()),
        _ => {
            if rng.chance(5) {
                u.tilerelease();
            }
            (Ok(()), u.sttilecfg().to_vec())
        }
    }
}

fn steps() -> usize {
    std::env::var("AMX_DIFF_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

/// Whether this core executes TDPFP16PS, tried in a forked child so that a #UD kills only the
/// child (docs/semantics.md F1: some hosts execute it although their CPUID hides AMX-FP16).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn fp16_executes(hw: &Hardware) -> bool {
    if hw.amx_fp16() {
        return true;
    }
    let image = {
        let mut shapes = [None; 8];
        for slot in shapes.iter_mut().take(3) {
            *slot = Some(TileShape::new(16, 64));
        }
        image::encode(1, 0, &shapes)
    };
    // SAFETY: fork in a test process; the child only runs the AMX instructions below (the
    // permission is inherited by fork) and leaves with _exit, running no destructors.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            amx_runtime::intrinsics::_tile_loadconfig(image.as_ptr());
            amx_runtime::intrinsics::_tile_dpfp16ps::<0, 1, 2>();
            libc::_exit(0);
        }
        let mut status = 0;
        pid > 0
            && libc::waitpid(pid, &mut status, 0) == pid
            && libc::WIFEXITED(status)
            && libc::WEXITSTATUS(status) == 0
    }
}

#[test]
fn emulator_and_silicon_agree() {
    let Some(mut hw) = amx_test_support::needs::silicon() else {
        return;
    };
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    let fp16 = fp16_executes(&hw);
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    let fp16 = false;
    if fp16 {
        // SAFETY: the forked probe just executed TDPFP16PS on this CPU.
        unsafe { hw.assume_amx_fp16() };
    } else {
        eprintln!("TDPFP16PS does not execute here: left out of the comparison");
    }
    let mut emu = Emulator::new();
    let (mut r1, mut r2) = (Rng::new(0xA3C5), Rng::new(0xA3C5));
    let (mut m1, mut m2) = (Vec::new(), Vec::new());
    for i in 0..steps() {
        let e = step(&mut emu, &mut r1, &mut m1, fp16);
        let h = step(&mut hw, &mut r2, &mut m2, fp16);
        assert_eq!(e, h, "step {i}: outcomes differ");
        assert_eq!(
            emu.sttilecfg(),
            hw.sttilecfg(),
            "step {i}: configurations differ"
        );
        for t in 0..8 {
            assert_eq!(
                emu.tile_data(t).unwrap(),
                hw.tile_data(t).unwrap(),
                "step {i}: tile {t} differs"
            );
        }
    }
    hw.tilerelease();
}

/// The comparison again in a child process with the trap engine's patching off
/// (`AMX_TRAP_PATCH=0`): every instruction of the silicon code path then takes the signal
/// path, where [`emulator_and_silicon_agree`] ran the hot ones through patched sites.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn emulator_and_silicon_agree_unpatched() {
    if std::env::var_os("AMX_TRAP_PATCH").is_some() {
        // Already chosen for the whole run (or this is the child).
        return;
    }
    amx_test_support::Child::new("emulator_and_silicon_agree")
        .env("AMX_TRAP_PATCH", "0")
        .run()
        .assert_passed();
}

/// The same sequences on the emulator alone: no panic, no overflow, and the state invariants
/// hold after every instruction (a loaded configuration passes the load rules; unconfigured
/// means all-zero configuration and tile data after a release).
#[test]
fn emulator_survives_random_sequences() {
    let mut emu = Emulator::new();
    let mut rng = Rng::new(7);
    let mut mem = Vec::new();
    let mut faults = 0usize;
    for _ in 0..steps() {
        if step(&mut emu, &mut rng, &mut mem, true).0.is_err() {
            faults += 1;
        }
        let cfg = emu.sttilecfg();
        let report = amx_runtime::rules::validate(&cfg, &amx_runtime::PaletteTable::ARCHITECTURAL);
        assert!(
            report.is_loadable(),
            "state holds an image LDTILECFG rejects: {cfg:02x?}"
        );
        assert_eq!(cfg[0] == 0, cfg == [0; 64]);
    }
    // The generator must exercise both paths.
    assert!(
        faults > 0 && faults < steps(),
        "{faults} faults in {} steps",
        steps()
    );
}
