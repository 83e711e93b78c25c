//! Medians and spreads of repeated measurements.

use crate::json::Json;

/// A measurement repeated `samples` times: the median and the extremes, in one unit.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub samples: usize,
}

impl Sample {
    /// The median and extremes of `values` (non-finite ones dropped); `None` when none is left.
    pub fn of(values: &[f64]) -> Option<Sample> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Sample {
            median,
            min: v[0],
            max: v[n - 1],
            samples: n,
        })
    }

    /// `{"median": .., "min": .., "max": .., "samples": ..}`.
    pub fn json(&self) -> Json {
        Json::obj()
            .with("median", self.median)
            .with("min", self.min)
            .with("max", self.max)
            .with("samples", self.samples)
    }
}
