//! Interleaved comparisons of whole app runs: every variant (an app under the launcher
//! with some configuration) runs once per repetition, in turn, and a ratio is the median of
//! the per-repetition ratios, so that the drift of a shared machine hits every variant of
//! a repetition alike (see [`crate::paired`]).

use crate::runs::{run, Launch};
use crate::stats::median;
use crate::target::Bins;
use crate::Result;

/// One configuration of a comparison.
pub struct Variant {
    /// Its name in the printout.
    pub name: &'static str,
    /// The run.
    pub launch: Launch,
    /// The RESULT field measured.
    pub field: &'static str,
}

/// The values of every variant of a comparison, one per repetition (the repetitions
/// aligned: value `r` of each variant comes from the same round).
pub struct Samples(pub Vec<Vec<f64>>);

impl Samples {
    /// The median of variant `i`'s values.
    pub fn median(&self, i: usize) -> f64 {
        median(&self.0[i]).unwrap_or(f64::NAN)
    }

    /// The median over repetitions of variant `a`'s value / variant `b`'s value.
    pub fn ratio(&self, a: usize, b: usize) -> f64 {
        let ratios: Vec<f64> = self.0[a]
            .iter()
            .zip(&self.0[b])
            .map(|(x, y)| x / y)
            .collect();
        median(&ratios).unwrap_or(f64::NAN)
    }
}

/// Runs every variant `reps` times, interleaved (each repetition runs them all in turn);
/// returns every value of its field.
pub fn measure(bins: &Bins, variants: &[Variant], reps: usize) -> Result<Samples> {
    let mut samples = vec![Vec::new(); variants.len()];
    for rep in 0..reps {
        for (i, v) in variants.iter().enumerate() {
            let r = run(bins, &v.launch, |_| None)?;
            let value = r.result()?.number(v.field)?;
            println!("rep {rep} {:<48} {} = {value}", v.name, v.field);
            samples[i].push(value);
        }
    }
    Ok(Samples(samples))
}
