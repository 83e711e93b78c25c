//! The reference figures measured on Sapphire Rapids-class silicon, read back from their text ("117-142 TSC
//! (45-55 ns)", "~20 us") so that each measurement says whether it lands within 20% of its
//! reference. The text stays the one source: what the table prints is what is checked.

use serde::{Serialize, Serializer};

/// How far a measurement may stray from its reference range and still agree with it.
pub const TOLERANCE: f64 = 0.20;

/// The unit a reference figure is given in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    /// TSC ticks.
    Tsc,
    /// Nanoseconds.
    Ns,
    /// Microseconds.
    Us,
}

/// A reference range `lo..=hi` (a single value when the text is "~x").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figure {
    pub lo: f64,
    pub hi: f64,
    pub unit: Unit,
}

/// The leading figure of a reference text: `[~]lo[-hi] (TSC|ns|us)`, the rest ignored. `None`
/// for a text without one ("-", "LDTILECFG + a few ns").
pub fn parse(text: &str) -> Option<Figure> {
    let text = text
        .trim_start()
        .strip_prefix('~')
        .unwrap_or(text.trim_start());
    let (range, rest) = text.split_once(' ')?;
    let unit = match rest.split(|c: char| !c.is_ascii_alphabetic()).next()? {
        "TSC" => Unit::Tsc,
        "ns" => Unit::Ns,
        "us" => Unit::Us,
        _ => return None,
    };
    let number = |s: &str| s.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0);
    let (lo, hi) = match range.split_once('-') {
        Some((lo, hi)) => (number(lo)?, number(hi)?),
        None => (number(range)?, number(range)?),
    };
    (lo <= hi).then_some(Figure { lo, hi, unit })
}

/// How a measurement compares with its reference. In JSON:
/// `{"within_20pct": bool, "deviation": x}`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    /// Relative distance from the reference range: 0 inside it, negative below, positive above.
    pub deviation: f64,
}

impl Serialize for Verdict {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json {
            within_20pct: bool,
            deviation: f64,
        }
        Json {
            within_20pct: self.within(),
            deviation: self.deviation,
        }
        .serialize(serializer)
    }
}

impl Verdict {
    /// Whether the measurement agrees with the reference within [`TOLERANCE`].
    pub fn within(&self) -> bool {
        // The epsilon keeps a measurement exactly at the bound (142 x 1.2) inside it despite
        // rounding.
        self.deviation.abs() <= TOLERANCE + 1e-9
    }

    /// "ok", "ok (+12%)" or "OFF (-35%)".
    pub fn text(&self) -> String {
        let pct = (100.0 * self.deviation).round();
        match (self.within(), pct == 0.0) {
            (true, true) => "ok".into(),
            (true, false) => format!("ok ({pct:+}%)"),
            (false, _) => format!("OFF ({pct:+}%)"),
        }
    }
}

/// Compares a measurement, given in TSC ticks and in nanoseconds (either may be missing), with
/// the figure in `reference`. `None` when there is no figure or no measurement in its unit.
pub fn check(reference: &str, tsc: Option<f64>, ns: Option<f64>) -> Option<Verdict> {
    let figure = parse(reference)?;
    let measured = match figure.unit {
        Unit::Tsc => tsc?,
        Unit::Ns => ns?,
        Unit::Us => ns? / 1e3,
    };
    if !measured.is_finite() {
        return None;
    }
    let deviation = if measured < figure.lo {
        (measured - figure.lo) / figure.lo
    } else if measured > figure.hi {
        (measured - figure.hi) / figure.hi
    } else {
        0.0
    };
    Some(Verdict { deviation })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_reference_text_the_report_uses() {
        let tsc = |lo, hi| {
            Some(Figure {
                lo,
                hi,
                unit: Unit::Tsc,
            })
        };
        assert_eq!(parse("117-142 TSC (45-55 ns)"), tsc(117.0, 142.0));
        assert_eq!(
            parse("~190 TSC (with tile work in flight)"),
            tsc(190.0, 190.0)
        );
        assert_eq!(parse("12-14 TSC"), tsc(12.0, 14.0));
        assert_eq!(parse("8.5-9.5 TSC"), tsc(8.5, 9.5));
        assert_eq!(parse("~12-13 TSC"), tsc(12.0, 13.0));
        assert_eq!(parse("~6.5 TSC"), tsc(6.5, 6.5));
        assert_eq!(parse("11.4-13.6 TSC (16 core cycles)"), tsc(11.4, 13.6));
        let us = |x| {
            Some(Figure {
                lo: x,
                hi: x,
                unit: Unit::Us,
            })
        };
        assert_eq!(parse("~20 us"), us(20.0));
        assert_eq!(parse("~0.5 us"), us(0.5));
        assert_eq!(parse("~2.8 us (after >= 5 us idle)"), us(2.8));
        for none in [
            "-",
            "",
            "LDTILECFG + a few ns",
            "~ us",
            "5-3 TSC",
            "1-x TSC",
            "~14%",
        ] {
            assert_eq!(parse(none), None, "{none:?}");
        }
    }

    #[test]
    fn a_measurement_within_20_percent_of_the_range_agrees() {
        let v = |tsc: f64| check("117-142 TSC (45-55 ns)", Some(tsc), None).unwrap();
        assert_eq!(v(130.0).deviation, 0.0);
        assert!(v(117.0 * 0.8).within());
        assert!(!v(117.0 * 0.79).within());
        assert!(v(142.0 * 1.2).within());
        assert!(!v(142.0 * 1.21).within());
        assert_eq!(v(130.0).text(), "ok");
        assert_eq!(v(142.0 * 1.1).text(), "ok (+10%)");
        assert_eq!(v(71.0).text(), "OFF (-39%)");
    }

    #[test]
    fn the_unit_picks_the_measurement() {
        // Microsecond references compare with nanoseconds / 1000; TSC ones need TSC ticks.
        assert!(check("~20 us", Some(1.0), Some(22_000.0)).unwrap().within());
        assert!(!check("~20 us", None, Some(30_000.0)).unwrap().within());
        assert_eq!(check("12-14 TSC", None, Some(5.0)), None);
        assert_eq!(check("-", Some(1.0), Some(1.0)), None);
        assert_eq!(check("12-14 TSC", Some(f64::NAN), None), None);
    }
}
