//! Medians and spreads of repeated measurements: the one copy every tool, bench and example
//! of the workspace uses.

use serde::Serialize;

/// The median of the finite values among `values`, `None` when there is none. With an even
/// count it is the mean of the two middle values (so the median of `[1, 2, 3, 4]` is 2.5):
/// the convention that does not favour the faster or the slower half of a set of timings.
pub fn median(values: &[f64]) -> Option<f64> {
    Sample::of(values).map(|s| s.median)
}

/// A measurement repeated `samples` times: the median and the extremes, in one unit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// The median (see [`median`] for an even count).
    pub median: f64,
    /// The least value: for times, the run least disturbed by other load.
    pub min: f64,
    /// The greatest value.
    pub max: f64,
    /// How many finite values there were.
    pub samples: usize,
}

impl Sample {
    /// The median and extremes of `values`, non-finite ones dropped; `None` when none is left.
    pub fn of(values: &[f64]) -> Option<Sample> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let (&min, &max) = (v.first()?, v.last()?);
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Sample {
            median,
            min,
            max,
            samples: n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn non_finite_values_are_dropped() {
        let s = Sample::of(&[f64::NAN, 5.0, f64::INFINITY, 1.0, 3.0]).unwrap();
        assert_eq!(
            s,
            Sample {
                median: 3.0,
                min: 1.0,
                max: 5.0,
                samples: 3
            }
        );
        assert_eq!(Sample::of(&[f64::NAN, f64::NEG_INFINITY]), None);
    }
}
