//! Pooling a sequence's hidden states into one vector, and L2
//! normalisation: what sentence-transformers' `Pooling` and `Normalize`
//! modules do after the transformer.

use std::str::FromStr;

/// How an input's token rows become its embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean of every token's row (all-MiniLM, E5, most BERT embedders).
    Mean,
    /// The first token's row ([CLS]: BGE).
    Cls,
    /// The last token's row (decoder embedders such as Qwen3-Embedding).
    Last,
    /// No pooling: every token's row.
    None,
}

impl Pooling {
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::None => "none",
        }
    }

    /// The rows this pooling gives for `rows` ([tokens][hidden]).
    pub fn apply(self, rows: &[&[f32]]) -> Vec<Vec<f32>> {
        let Some(first) = rows.first() else {
            return vec![];
        };
        match self {
            Pooling::Cls => vec![first.to_vec()],
            Pooling::Last => vec![rows[rows.len() - 1].to_vec()],
            Pooling::None => rows.iter().map(|r| r.to_vec()).collect(),
            Pooling::Mean => {
                // Summed in f64 so long inputs lose nothing to the order.
                let mut sum = vec![0f64; first.len()];
                for r in rows {
                    for (s, v) in sum.iter_mut().zip(r.iter()) {
                        *s += *v as f64;
                    }
                }
                let n = rows.len() as f64;
                vec![sum.into_iter().map(|s| (s / n) as f32).collect()]
            }
        }
    }
}

impl FromStr for Pooling {
    type Err = String;
    fn from_str(s: &str) -> Result<Pooling, String> {
        match s {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" | "lasttoken" => Ok(Pooling::Last),
            "none" => Ok(Pooling::None),
            other => Err(format!(
                "unknown pooling `{other}` (known: mean, cls, last, none)"
            )),
        }
    }
}

/// Scales `v` to unit L2 length, as `torch.nn.functional.normalize` (which
/// divides by max(norm, 1e-12), so a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|x| (*x as f64) * (*x as f64))
        .sum::<f64>()
        .sqrt();
    let d = norm.max(1e-12);
    for x in v.iter_mut() {
        *x = (*x as f64 / d) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_pooling_picks_what_it_says() {
        let a = [1.0f32, 2.0];
        let b = [3.0f32, 6.0];
        let rows: Vec<&[f32]> = vec![&a, &b];
        assert_eq!(Pooling::Mean.apply(&rows), vec![vec![2.0, 4.0]]);
        assert_eq!(Pooling::Cls.apply(&rows), vec![vec![1.0, 2.0]]);
        assert_eq!(Pooling::Last.apply(&rows), vec![vec![3.0, 6.0]]);
        assert_eq!(Pooling::None.apply(&rows), vec![a.to_vec(), b.to_vec()]);
        assert!(Pooling::Mean.apply(&[]).is_empty());
        assert_eq!("lasttoken".parse::<Pooling>(), Ok(Pooling::Last));
        assert!("max"
            .parse::<Pooling>()
            .unwrap_err()
            .contains("known: mean"));
    }

    #[test]
    fn zero_stays_zero() {
        let mut z = vec![0.0f32; 4];
        normalize(&mut z);
        assert_eq!(z, vec![0.0; 4]);
    }

    proptest! {
        // Any non-tiny vector comes out with unit length and its direction.
        #[test]
        fn normalized_vectors_have_unit_length(v in prop::collection::vec(-100.0f32..100.0, 1..64)) {
            prop_assume!(v.iter().any(|x| x.abs() > 1e-3));
            let mut n = v.clone();
            normalize(&mut n);
            let len: f64 = n.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
            prop_assert!((len - 1.0).abs() < 1e-5, "length {len}");
            for (a, b) in v.iter().zip(n.iter()) {
                prop_assert!(a.signum() == b.signum() || *a == 0.0 || b.abs() < 1e-6);
            }
        }

        // The mean equals a naive mean to f32 rounding, whatever the count.
        #[test]
        fn mean_matches_the_naive_mean(rows in prop::collection::vec(prop::collection::vec(-10.0f32..10.0, 3), 1..40)) {
            let refs: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
            let got = &Pooling::Mean.apply(&refs)[0];
            for j in 0..3 {
                let want = rows.iter().map(|r| r[j]).sum::<f32>() / rows.len() as f32;
                prop_assert!((got[j] - want).abs() < 1e-4, "{} vs {want}", got[j]);
            }
        }
    }
}
