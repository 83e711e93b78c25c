//! The software emulator's speed per instruction (wall-clock time, so it runs everywhere), and
//! the pieces the hardware section shares: the bench configurations and data, and the cost of
//! `configure()`.

use std::hint::black_box;
use std::time::Duration;

use amx_runtime::{configure_on, Backend, Emulator, Fault, TileConfig, TileUnit};
use amx_tools::timing::per_call_ns as time_ns;
use amx_tools::Sample;
use serde::{Serialize, Serializer};

use crate::reference::Verdict;

/// A per-call cost in nanoseconds.
pub struct Event {
    pub name: String,
    pub method: String,
    pub ns: Option<Sample>,
    pub reference: &'static str,
}

impl Event {
    /// How the median compares with the reference figure, where there is one.
    pub fn verdict(&self) -> Option<Verdict> {
        crate::reference::check(self.reference, None, self.ns.map(|s| s.median))
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json<'a> {
            name: &'a str,
            method: &'a str,
            ns: Option<Sample>,
            reference: &'a str,
            reference_check: Option<Verdict>,
        }
        Json {
            name: &self.name,
            method: &self.method,
            ns: self.ns,
            reference: self.reference,
            reference_check: self.verdict(),
        }
        .serialize(serializer)
    }
}

/// One emulated instruction's speed.
pub struct EmuRow {
    pub instruction: &'static str,
    pub method: &'static str,
    /// Nanoseconds per instruction.
    pub ns: Option<Sample>,
    /// Arithmetic operations per instruction (2 x M x N x K for a dot product).
    pub ops: Option<f64>,
    /// Why the row has no figure.
    pub error: Option<String>,
}

impl EmuRow {
    /// GOP/s at the median time.
    pub fn gops(&self) -> Option<f64> {
        Some(self.ops? / self.ns?.median)
    }
}

impl Serialize for EmuRow {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json<'a> {
            instruction: &'a str,
            method: &'a str,
            ns: Option<Sample>,
            ops_per_instruction: Option<f64>,
            gops: Option<f64>,
            error: Option<&'a str>,
        }
        Json {
            instruction: self.instruction,
            method: self.method,
            ns: self.ns,
            ops_per_instruction: self.ops,
            gops: self.gops(),
            error: self.error.as_deref(),
        }
        .serialize(serializer)
    }
}

/// `FULL`: palette 1, every tile 16 rows x 64 bytes (any tile may be C, A or B of a dot
/// product). `ALT`: the same with t7 at 8 rows, to alternate with.
pub fn bench_configs() -> Result<(TileConfig, TileConfig), String> {
    let mut full = TileConfig::builder();
    let mut alt = TileConfig::builder();
    for t in 0..8 {
        full = full.tile(t, 16, 64);
        alt = alt.tile(t, if t == 7 { 8 } else { 16 }, 64);
    }
    let full = full.build().map_err(|e| e.to_string())?;
    let alt = alt.build().map_err(|e| e.to_string())?;
    Ok((full, alt))
}

/// 1 KiB of A or B data (`salt` varies it) whose 16-bit halves are normal numbers both as bf16
/// (about 2^-7 to 2) and as fp16 (1 to 2): high bytes 0x3C..0x3F, low bytes varied. As int8 the
/// bytes are what they are.
pub fn bench_data(salt: usize) -> [u8; 1024] {
    std::array::from_fn(|i| {
        if i % 2 == 1 {
            0x3C + ((i / 2 + salt) % 4) as u8
        } else {
            ((i / 2) * 7 + salt * 13) as u8
        }
    })
}

/// `configure_on(backend, ..)` per call: the configuration already loaded (no LDTILECFG), the
/// same through `reconfigure` on a held guard, and alternating two configurations (an
/// LDTILECFG each call).
pub fn configure_costs(
    backend: Backend,
    a: &TileConfig,
    b: &TileConfig,
    target: Duration,
    reps: usize,
) -> Vec<Event> {
    let probe = configure_on(backend, a)
        .and_then(|t| {
            drop(t);
            configure_on(backend, b)
        })
        .map(drop);
    let (mut loaded, mut held, mut loading) = (None, None, None);
    if probe.is_ok() {
        drop(configure_on(backend, a));
        loaded = time_ns(target, reps, || {
            drop(black_box(configure_on(backend, black_box(a))));
        });
        if let Ok(mut tiles) = configure_on(backend, a) {
            held = time_ns(target, reps, || {
                let _ = black_box(tiles.reconfigure(black_box(a)));
            });
        }
        let mut flip = false;
        loading = time_ns(target, reps, || {
            flip = !flip;
            let cfg = if flip { b } else { a };
            drop(black_box(configure_on(backend, black_box(cfg))));
        });
    }
    let failed = match &probe {
        Ok(()) => String::new(),
        Err(e) => format!(" (configure failed: {e})"),
    };
    vec![
        Event {
            name: format!("configure() on {backend}, already loaded"),
            method: format!("the same config again: no LDTILECFG{failed}"),
            ns: loaded,
            reference: "-",
        },
        Event {
            name: format!("reconfigure() on {backend}, already loaded"),
            method: format!("the same config again on a held guard{failed}"),
            ns: held,
            reference: "-",
        },
        Event {
            name: format!("configure() on {backend}, needs LDTILECFG"),
            method: format!("alternating two configs{failed}"),
            ns: loading,
            reference: "LDTILECFG + a few ns",
        },
    ]
}

/// Times every instruction on a fresh emulator holding `FULL`.
pub fn run(quick: bool) -> Result<(Vec<EmuRow>, Vec<Event>), String> {
    let (full, alt) = bench_configs()?;
    let target = Duration::from_millis(if quick { 2 } else { 20 });
    let reps = if quick { 3 } else { 7 };
    let a = bench_data(0);
    let b = bench_data(1);
    let mut emu = Emulator::new();
    let mut rows = Vec::new();

    // Runs `op` on an emulator holding FULL with data in every tile; a fault is reported in the
    // row rather than raised.
    let mut row = |instruction: &'static str,
                   method: &'static str,
                   ops: Option<f64>,
                   op: &mut dyn FnMut(&mut Emulator) -> Result<(), Fault>| {
        let setup = (|| {
            emu.ldtilecfg(full.as_bytes())?;
            for t in 0..8 {
                emu.tileloadd(t, if t % 2 == 0 { &a } else { &b }, 64)?;
            }
            op(&mut emu)
        })();
        let mut error = setup.err().map(|e| e.to_string());
        let ns = if error.is_none() {
            time_ns(target, reps, || {
                if let Err(e) = op(&mut emu) {
                    error.get_or_insert(e.to_string());
                }
            })
        } else {
            None
        };
        rows.push(EmuRow {
            instruction,
            method,
            ns: if error.is_none() { ns } else { None },
            ops,
            error,
        });
    };

    row("LDTILECFG", "same config again", None, &mut |e| {
        e.ldtilecfg(black_box(full.as_bytes()))
    });
    let mut flip = false;
    row("LDTILECFG", "alternating two configs", None, &mut |e| {
        flip = !flip;
        e.ldtilecfg(black_box(if flip {
            alt.as_bytes()
        } else {
            full.as_bytes()
        }))
    });
    row("STTILECFG", "", None, &mut |e| {
        black_box(e.sttilecfg());
        Ok(())
    });
    row("TILERELEASE", "", None, &mut |e| {
        e.tilerelease();
        Ok(())
    });
    row("TILEZERO", "16x64", None, &mut |e| e.tilezero(black_box(0)));
    row("TILELOADD", "1 KiB, stride 64", None, &mut |e| {
        e.tileloadd(black_box(0), &a, 64)
    });
    row("TILELOADDT1", "1 KiB, stride 64", None, &mut |e| {
        e.tileloaddt1(black_box(0), &a, 64)
    });
    let mut out = [0u8; 1024];
    row("TILESTORED", "1 KiB, stride 64", None, &mut |e| {
        e.tilestored(black_box(0), &mut out, 64)?;
        black_box(&out);
        Ok(())
    });
    // 16 x 16 outputs, K = 64 bytes: 64 int8 or 32 bf16/fp16 products each.
    let int8_ops = Some(2.0 * 16.0 * 16.0 * 64.0);
    let half_ops = Some(2.0 * 16.0 * 16.0 * 32.0);
    const DOT: &str = "16x16 += 16x64 . 16x64";
    row("TDPBSSD", DOT, int8_ops, &mut |e| e.tdpbssd(0, 4, 5));
    row("TDPBSUD", DOT, int8_ops, &mut |e| e.tdpbsud(0, 4, 5));
    row("TDPBUSD", DOT, int8_ops, &mut |e| e.tdpbusd(0, 4, 5));
    row("TDPBUUD", DOT, int8_ops, &mut |e| e.tdpbuud(0, 4, 5));
    row("TDPBF16PS", DOT, half_ops, &mut |e| e.tdpbf16ps(2, 4, 5));
    row("TDPFP16PS", DOT, half_ops, &mut |e| e.tdpfp16ps(2, 4, 5));

    let events = configure_costs(Backend::Emulated, &full, &alt, target, reps);
    Ok((rows, events))
}
