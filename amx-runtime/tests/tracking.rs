//! Configured-state tracking: skipped reloads, counters, one guard per thread, panic safety, and
//! thread isolation, on the emulator everywhere and on the silicon code path where it can run
//! (the silicon, or the trap engine on x86-64 Linux without AMX).

use amx_runtime::rules::image;
use amx_runtime::{
    configure_on, counters, release_on, Backend, ConfigureError, TileConfig, TileShape,
};
use amx_test_support::needs::backends;

fn config(rows: u8, colsb: u16) -> TileConfig {
    TileConfig::builder()
        .tile(0, rows, colsb)
        .tile(1, 16, 64)
        .build()
        .unwrap()
}

#[test]
fn every_palette_0_image_is_the_init_the_thread_holds() {
    // LDTILECFG ignores every byte after palette 0 (L4), so such an image is INIT: on an
    // unconfigured thread there is nothing to load, whatever the other bytes held.
    let mut bytes = [0xFF; 64];
    bytes[0] = 0;
    let init = TileConfig::from_bytes(&bytes).unwrap();
    assert_eq!(init, TileConfig::INIT);
    for backend in backends() {
        std::thread::spawn(move || {
            let start = counters();
            for _ in 0..3 {
                let tiles = configure_on(backend, &init).unwrap();
                assert_eq!(tiles.config(), init, "{backend}");
            }
            let now = counters();
            assert_eq!(now.loads - start.loads, 0, "{backend}");
            assert_eq!(now.skipped - start.skipped, 3, "{backend}");
        })
        .join()
        .unwrap();
    }
}

#[test]
fn reload_only_when_the_config_differs() {
    for backend in backends() {
        std::thread::spawn(move || {
            let (a, b) = (config(16, 64), config(8, 32));
            let start = counters();
            drop(configure_on(backend, &a).unwrap());
            drop(configure_on(backend, &a).unwrap());
            drop(configure_on(backend, &b).unwrap());
            drop(configure_on(backend, &a).unwrap());
            let now = counters();
            assert_eq!(now.loads - start.loads, 3, "{backend}");
            assert_eq!(now.skipped - start.skipped, 1, "{backend}");
            release_on(backend).unwrap();
            drop(configure_on(backend, &a).unwrap());
            let last = counters();
            assert_eq!(
                last.loads - now.loads,
                1,
                "after release the config is loaded again"
            );
            assert_eq!(last.releases - now.releases, 1);
        })
        .join()
        .unwrap();
    }
}

#[test]
fn a_second_guard_on_one_thread_is_busy() {
    for backend in backends() {
        let cfg = config(16, 64);
        let first = configure_on(backend, &cfg).unwrap();
        assert_eq!(
            configure_on(backend, &cfg).unwrap_err(),
            ConfigureError::Busy
        );
        assert_eq!(release_on(backend).unwrap_err(), ConfigureError::Busy);
        drop(first);
        drop(configure_on(backend, &cfg).unwrap());
    }
}

#[test]
fn a_config_too_big_for_the_palette_is_an_error() {
    // The emulator of a VM with 8-row tiles rejects a 16-row configuration before LDTILECFG.
    use amx_runtime::rules::Palette;
    use amx_runtime::{Emulator, Fault, PaletteTable, TileUnit, TmulLimits};
    let small = PaletteTable::one(Palette {
        max_rows: 8,
        ..Palette::PALETTE_1
    });
    let mut emu = Emulator::with_limits(small, TmulLimits::ARCHITECTURAL).unwrap();
    let cfg = config(16, 64);
    assert!(cfg.check_against(&small).is_err());
    assert!(matches!(
        emu.ldtilecfg(cfg.as_bytes()),
        Err(Fault::GeneralProtection(_))
    ));
}

#[test]
fn a_config_checked_against_a_bigger_table_is_refused_not_loaded() {
    // A TileConfig checked against a table with 32-row tiles is valid for that table only; on
    // this CPU's table configure refuses it (as a fault it kept from happening), loads nothing,
    // and the thread keeps its configuration and its guard slot.
    use amx_runtime::rules::Palette;
    use amx_runtime::PaletteTable;
    let big = PaletteTable::one(Palette {
        max_rows: 32,
        ..Palette::PALETTE_1
    });
    // (The emulator, whose tiles hold 16 rows, refuses to model that table.)
    let emulated = amx_runtime::Emulator::with_limits(big, amx_runtime::TmulLimits::ARCHITECTURAL);
    assert_eq!(
        emulated.unwrap_err().to_string(),
        "palette 1 allows tiles of 32 rows x 64 bytes; the emulator holds at most 16 rows x 64 \
         bytes per tile"
    );
    let mut bytes = *config(16, 64).as_bytes();
    bytes[48] = 32; // t0: 32 rows
    let tall = TileConfig::from_bytes_for(&bytes, &big).unwrap();
    assert!(TileConfig::from_bytes(&bytes).is_err());
    for backend in backends() {
        std::thread::spawn(move || {
            let a = config(16, 64);
            drop(configure_on(backend, &a).unwrap());
            let before = counters();
            match configure_on(backend, &tall) {
                Err(e) => assert!(e.to_string().contains("32 rows"), "{backend}: {e}"),
                Ok(_) => panic!("{backend}: a 32-row tile was loaded"),
            }
            assert_eq!(counters().loads, before.loads, "{backend}");
            let tiles = configure_on(backend, &a).unwrap();
            assert_eq!(tiles.config(), a, "{backend}");
            assert_eq!(counters().skipped - before.skipped, 1, "{backend}");
        })
        .join()
        .unwrap();
    }
}

#[test]
fn a_panic_inside_a_tile_scope_leaves_the_thread_usable() {
    for backend in backends() {
        std::thread::spawn(move || {
            let cfg = config(16, 64);
            let result = std::panic::catch_unwind(|| {
                let mut tiles = configure_on(backend, &cfg).unwrap();
                tiles.tilezero(0).unwrap();
                panic!("kernel failed");
            });
            assert!(result.is_err());
            let mut tiles = configure_on(backend, &cfg).expect("guard released on unwind");
            assert_eq!(tiles.sttilecfg(), *cfg.as_bytes());
            tiles.tilezero(1).unwrap();
        })
        .join()
        .unwrap();
    }
}

/// Many threads, each with its own configuration, switching many times: each sees only its own
/// through STTILECFG, and its tile data survives the other threads' work.
#[test]
fn threads_see_only_their_own_configuration() {
    for backend in backends() {
        let threads: Vec<_> = (0..16u8)
            .map(|i| {
                std::thread::spawn(move || {
                    let mine = config(1 + i % 16, 4 * (1 + i as u16 % 16));
                    let other = config(16, 64);
                    let row: Vec<u8> = (0..64).map(|b| b ^ i).collect();
                    for round in 0..200 {
                        let cfg = if round % 2 == 0 { mine } else { other };
                        let mut tiles = configure_on(backend, &cfg).unwrap();
                        assert_eq!(tiles.sttilecfg(), *cfg.as_bytes());
                        tiles.tileloadd(1, &row, 0).unwrap();
                        std::thread::yield_now();
                        let mut out = [0u8; 16 * 64];
                        tiles.tilestored(1, &mut out, 64).unwrap();
                        assert!(out.chunks(64).all(|r| r == row.as_slice()));
                        assert_eq!(tiles.sttilecfg()[image::START_ROW], 0);
                        assert_eq!(
                            image::shape(&tiles.sttilecfg(), 0),
                            cfg.tile(0).unwrap_or(TileShape::new(0, 0))
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}

/// `configure` from the destructor of another thread-local, which may run after this library's
/// per-thread state is torn down: an error or a working guard, never a panic (a panic there
/// aborts the process).
#[test]
fn configure_while_the_thread_exits_does_not_panic() {
    use std::sync::Mutex;
    static OUTCOME: Mutex<Vec<String>> = Mutex::new(Vec::new());
    struct ConfigureOnExit;
    impl Drop for ConfigureOnExit {
        fn drop(&mut self) {
            let outcome = match configure_on(Backend::Emulated, &config(16, 64)) {
                Ok(mut tiles) => match tiles.tilezero(0) {
                    Ok(()) => "ok".to_string(),
                    Err(f) => f.to_string(),
                },
                Err(e) => {
                    assert_eq!(e, ConfigureError::ThreadExiting);
                    e.to_string()
                }
            };
            let _ = counters();
            OUTCOME.lock().unwrap().push(outcome);
        }
    }
    thread_local! { static ON_EXIT: ConfigureOnExit = const { ConfigureOnExit }; }
    std::thread::spawn(|| {
        // Registered before the library's state, so on Linux it is destroyed after it.
        ON_EXIT.with(|_| ());
        drop(configure_on(Backend::Emulated, &config(8, 64)).unwrap());
    })
    .join()
    .unwrap();
    let outcome = OUTCOME.lock().unwrap().clone();
    assert_eq!(outcome.len(), 1, "the destructor ran once: {outcome:?}");
    assert!(
        outcome[0] == "ok" || outcome[0].contains("exiting"),
        "{outcome:?}"
    );
    println!("configure during thread exit: {}", outcome[0]);
}

amx_runtime::tilecfg! {
    /// C += A x B on full tiles.
    struct Block;
    palette 1;
    t0 as c: 16x16 i32;
    t1 as a: 16x64 i8;
    t2 as b: 16x64 i8;
}

#[test]
fn typed_instructions_leave_the_tracked_image_the_real_one() {
    for backend in backends() {
        std::thread::spawn(move || {
            // An interrupted load's start_row, through the untyped API: the next instruction
            // leaves 0 (Z4), in the tracked image as in the unit.
            let restart = TileConfig::builder()
                .start_row(3)
                .tile(0, 16, 64)
                .build()
                .unwrap();
            let mut tiles = configure_on(backend, &restart).unwrap();
            assert_eq!(tiles.sttilecfg()[image::START_ROW], 3, "{backend}");
            tiles.tilezero(0).unwrap();
            let tracked = *tiles.config().as_bytes();
            assert_eq!(tracked[image::START_ROW], 0, "{backend}");
            assert_eq!(
                tracked,
                tiles.sttilecfg(),
                "{backend}: tracked vs STTILECFG"
            );
            drop(tiles);
            // A layout has start_row 0 (the macro refuses another), so its typed instructions
            // record nothing; the tracked image stays the one the unit holds through each kind.
            let rows = [1i8; 1024];
            let mut t = amx_runtime::configure_typed_on::<Block>(backend).unwrap();
            t.zero(Block::c);
            t.load(Block::a, &rows, 64).unwrap();
            t.load(Block::b, &rows, 64).unwrap();
            t.tdpbssd(Block::c, Block::a, Block::b);
            let mut out = [0i32; 256];
            t.store(Block::c, &mut out, 16).unwrap();
            assert!(out.iter().all(|&x| x == 64), "{backend}");
            let tracked = *t.untyped().config().as_bytes();
            assert_eq!(tracked[image::START_ROW], 0, "{backend}");
            assert_eq!(
                tracked,
                t.untyped().sttilecfg(),
                "{backend}: tracked vs STTILECFG"
            );
        })
        .join()
        .unwrap();
    }
}
