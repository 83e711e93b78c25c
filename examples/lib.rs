//! What the examples share: deterministic input data, best-of timing and the reading of
//! their options. The examples live in
//! a package of their own so that `cargo run --example` builds `amx-runtime`, `amx-gemm` and
//! these few lines, not the workspace's test and measuring tools.

use std::time::Instant;

use amx_gemm::Scalar;

/// `len` values in `lo..hi` as `T` (rounded to it), the same for the same `seed`: a 64-bit
/// xorshift generator, good enough for test data and not meant for anything else.
pub fn values<T: Scalar>(len: usize, seed: u64, (lo, hi): (f64, f64)) -> Vec<T> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = (state >> 11) as f64 / (1u64 << 53) as f64;
            T::from_f64(lo + unit * (hi - lo))
        })
        .collect()
}

/// The best (shortest) time in seconds of `reps` runs of each of `a` and `b`, run in turns so
/// that a change in clock or load affects both alike. The first error of either ends it.
pub fn best_of_interleaved<E>(
    reps: usize,
    mut a: impl FnMut() -> Result<(), E>,
    mut b: impl FnMut() -> Result<(), E>,
) -> Result<(f64, f64), E> {
    let (mut best_a, mut best_b) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        a()?;
        best_a = best_a.min(start.elapsed().as_secs_f64());
        let start = Instant::now();
        b()?;
        best_b = best_b.min(start.elapsed().as_secs_f64());
    }
    Ok((best_a, best_b))
}

/// An example's command-line words read as options: `--name value`, `--name=value`, or a bare
/// `--flag`.
pub struct Flags<I> {
    words: I,
}

impl<I: Iterator<Item = String>> Flags<I> {
    /// The options in `words` (the program's name left out).
    pub fn new(words: I) -> Flags<I> {
        Flags { words }
    }

    /// The next option's name and the value written inside it (`--name=value`), if any.
    pub fn next_flag(&mut self) -> Option<(String, Option<String>)> {
        let flag = self.words.next()?;
        Some(match flag.split_once('=') {
            Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
            None => (flag, None),
        })
    }

    /// Option `name`'s value: `inline` (from [`Flags::next_flag`]) or else the next word; an
    /// error saying the option needs `what` when there is neither.
    pub fn value(
        &mut self,
        name: &str,
        inline: &Option<String>,
        what: &str,
    ) -> Result<String, String> {
        inline
            .clone()
            .or_else(|| self.words.next())
            .ok_or_else(|| format!("{name} needs {what}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_stay_in_range_and_repeat() {
        let v: Vec<i8> = values(1000, 3, (-8.0, 8.0));
        assert!(v.iter().all(|&x| (-8..=8).contains(&x)));
        assert!(v.iter().any(|&x| x < 0) && v.iter().any(|&x| x > 0));
        assert_eq!(v, values::<i8>(1000, 3, (-8.0, 8.0)));
        assert_ne!(v, values::<i8>(1000, 4, (-8.0, 8.0)));
    }

    #[test]
    fn flags_take_inline_and_separate_values() {
        let words = ["--a=1", "--b", "2", "--c"].map(str::to_owned);
        let mut flags = Flags::new(words.into_iter());
        let (name, inline) = flags.next_flag().unwrap();
        assert_eq!(
            (name.as_str(), flags.value(&name, &inline, "x")),
            ("--a", Ok("1".into()))
        );
        let (name, inline) = flags.next_flag().unwrap();
        assert_eq!(
            (name.as_str(), flags.value(&name, &inline, "x")),
            ("--b", Ok("2".into()))
        );
        let (name, inline) = flags.next_flag().unwrap();
        assert_eq!(
            flags.value(&name, &inline, "a value"),
            Err("--c needs a value".into())
        );
        assert!(flags.next_flag().is_none());
    }

    #[test]
    fn interleaved_runs_both_and_stops_at_an_error() {
        let (mut a, mut b) = (0, 0);
        let (ta, tb) = best_of_interleaved::<()>(
            3,
            || {
                a += 1;
                Ok(())
            },
            || {
                b += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((a, b), (3, 3));
        assert!(ta >= 0.0 && tb >= 0.0);
        let r = best_of_interleaved(5, || Ok(()), || Err("no"));
        assert_eq!(r, Err("no"));
    }
}
