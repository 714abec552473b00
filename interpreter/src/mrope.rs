//! 3D rotary positions (temporal, height, width) of a multimodal prompt, as
//! Qwen3-VL's `get_rope_index` in transformers computes them.
//!
//! Text tokens get the same position on all three rows, counting on from the
//! previous token. An image's `t * (h/m) * (w/m)` placeholder tokens (`m` the
//! spatial merge size) take `start + (ti, hi, wi)` over the merged grid in
//! (t, h, w) order, where `start` is the position the next text token would
//! have had; text after the image continues at `start + max(h, w) / m` (so
//! positions do not advance one per image token). Decoding after the prompt
//! continues at `seq_len + delta`, `delta = max(position) + 1 - seq_len`.
//!
//! Videos: Qwen3-VL writes `<t seconds><|vision_start|>pads<|vision_end|>`
//! per temporal patch, and `get_rope_index` splits each video grid
//! `[t, h, w]` into `t` grids `[1, h, w]`: every frame is placed like an
//! image (`split_video_grids`), its own run of video tokens.

/// Positions `[3][seq]` and the offset for tokens appended later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MropePositions {
    pub rows: [Vec<i32>; 3],
    pub delta: i64,
}

/// `ids`: the prompt with each image already expanded to its placeholder
/// tokens (`image_token_id`); `grids`: the images' `(t, h, w)` patch grids
/// in prompt order; `merge`: the vision tower's spatial merge size.
/// Consecutive placeholder tokens are split between images by grid size, so
/// images need no separator between them.
pub fn mrope_positions(
    ids: &[i32],
    image_token_id: i32,
    grids: &[[i64; 3]],
    merge: i64,
) -> Result<MropePositions, String> {
    mrope_positions_multi(
        ids,
        &[Placeholders {
            token: image_token_id,
            what: "image",
            grids,
        }],
        merge,
    )
}

/// One kind of visual input: its placeholder token and grids in prompt order.
#[derive(Clone, Copy, Debug)]
pub struct Placeholders<'a> {
    pub token: i32,
    /// "image" or "video frame", for errors.
    pub what: &'static str,
    pub grids: &'a [[i64; 3]],
}

/// Qwen3-VL gives each temporal patch of a video its own `<t seconds>`
/// text and vision start/end tokens, and `get_rope_index` places each as an
/// image of grid `[1, h, w]`: this splits video grids that way.
pub fn split_video_grids(grids: &[[i64; 3]]) -> Vec<[i64; 3]> {
    grids
        .iter()
        .flat_map(|&[t, h, w]| std::iter::repeat_n([1, h, w], t.max(0) as usize))
        .collect()
}

/// Positions for a prompt with several kinds of placeholders (images and
/// video frames); each kind takes its own grids in order.
pub fn mrope_positions_multi(
    ids: &[i32],
    kinds: &[Placeholders<'_>],
    merge: i64,
) -> Result<MropePositions, String> {
    if merge <= 0 {
        return Err(format!("spatial merge size must be positive, got {merge}"));
    }
    let mut rows: [Vec<i32>; 3] = Default::default();
    let mut next = 0i64; // the position of the next text token
    let mut used = vec![0usize; kinds.len()];
    let mut i = 0;
    while i < ids.len() {
        let Some(kind) = kinds.iter().position(|k| k.token == ids[i]) else {
            for r in rows.iter_mut() {
                r.push(to_i32(next)?);
            }
            next += 1;
            i += 1;
            continue;
        };
        let ph = &kinds[kind];
        let k = used[kind];
        let Some(&[t, h, w]) = ph.grids.get(k) else {
            return Err(format!(
                "token {i} is an {} token ({}) but all {} {} grids are used",
                ph.what,
                ph.token,
                ph.grids.len(),
                ph.what
            ));
        };
        used[kind] += 1;
        let what = ph.what;
        if t <= 0 || h <= 0 || w <= 0 || h % merge != 0 || w % merge != 0 {
            return Err(format!(
                "{what} {k}: grid (t, h, w) = ({t}, {h}, {w}) is not positive with h and w divisible by the merge size {merge}"
            ));
        }
        let (gh, gw) = (h / merge, w / merge);
        // Checked: the grid may come from a file; a count past the prompt is
        // refused below anyway.
        let n = t
            .checked_mul(gh)
            .and_then(|x| x.checked_mul(gw))
            .and_then(|x| usize::try_from(x).ok())
            .ok_or_else(|| format!("{what} {k}: grid {t}x{h}x{w} is too large"))?;
        let run = ids[i..].iter().take_while(|&&x| x == ph.token).count();
        if run < n {
            return Err(format!(
                "{what} {k} (grid {t}x{h}x{w}, merge {merge}) needs {n} {what} tokens at token {i}, found {run}"
            ));
        }
        for ti in 0..t {
            for hi in 0..gh {
                for wi in 0..gw {
                    rows[0].push(to_i32(next + ti)?);
                    rows[1].push(to_i32(next + hi)?);
                    rows[2].push(to_i32(next + wi)?);
                }
            }
        }
        next += h.max(w) / merge;
        i += n;
    }
    for (ph, &k) in kinds.iter().zip(&used) {
        if k < ph.grids.len() {
            return Err(format!(
                "{} {} grids given but only {k} {}s' tokens are in the prompt",
                ph.grids.len(),
                ph.what,
                ph.what
            ));
        }
    }
    let max = rows.iter().flatten().copied().max().unwrap_or(-1) as i64;
    Ok(MropePositions {
        delta: max + 1 - ids.len() as i64,
        rows,
    })
}

fn to_i32(p: i64) -> Result<i32, String> {
    i32::try_from(p).map_err(|_| format!("position {p} does not fit in i32"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_grids_are_errors() {
        let big = 1i64 << 40;
        assert!(mrope_positions(&[9, 9], 9, &[[big, big, big]], 2).is_err());
        assert!(mrope_positions(&[9, 9], 9, &[[-1, 2, 2]], 2).is_err());
        assert!(mrope_positions(&[9, 9], 9, &[[1, 2, 2]], 0).is_err());
    }

    #[test]
    fn text_only_counts_up() {
        let p = mrope_positions(&[5, 6, 7], 9, &[], 2).unwrap();
        assert_eq!(p.rows[0], [0, 1, 2]);
        assert_eq!(p.rows[2], [0, 1, 2]);
        assert_eq!(p.delta, 0);
    }

    #[test]
    fn image_then_text() {
        // 2 text tokens, an image of 4x6 patches (2x3 merged), then text.
        let ids = [1, 2, 9, 9, 9, 9, 9, 9, 3];
        let p = mrope_positions(&ids, 9, &[[1, 4, 6]], 2).unwrap();
        assert_eq!(p.rows[0], [0, 1, 2, 2, 2, 2, 2, 2, 5]);
        assert_eq!(p.rows[1], [0, 1, 2, 2, 2, 3, 3, 3, 5]);
        assert_eq!(p.rows[2], [0, 1, 2, 3, 4, 2, 3, 4, 5]);
        assert_eq!(p.delta, 6 - 9);
    }

    #[test]
    fn adjacent_images_split_by_grid() {
        let ids = [9, 9, 9];
        let p = mrope_positions(&ids, 9, &[[1, 2, 2], [1, 2, 4]], 2).unwrap();
        assert_eq!(p.rows[2], [0, 1, 2]);
        assert_eq!(p.rows[0], [0, 1, 1]);
    }

    #[test]
    fn video_frames_are_images_of_one_frame() {
        // <t> <vs> 2 tokens <ve>, twice; then an image of 2 tokens.
        let ids = [1, 2, 8, 8, 3, 4, 2, 8, 8, 3, 9, 9, 5];
        let frames = split_video_grids(&[[2, 2, 4]]);
        assert_eq!(frames, [[1, 2, 4], [1, 2, 4]]);
        let kinds = [
            Placeholders {
                token: 9,
                what: "image",
                grids: &[[1, 2, 4]],
            },
            Placeholders {
                token: 8,
                what: "video frame",
                grids: &frames,
            },
        ];
        let p = mrope_positions_multi(&ids, &kinds, 2).unwrap();
        assert_eq!(p.rows[0], [0, 1, 2, 2, 4, 5, 6, 7, 7, 9, 10, 10, 12]);
        assert_eq!(p.rows[2], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert!(mrope_positions_multi(&ids[..9], &kinds, 2).is_err());
    }

    #[test]
    fn mismatches_are_errors() {
        assert!(mrope_positions(&[9, 9], 9, &[[1, 2, 2]], 2).is_err());
        assert!(mrope_positions(&[9], 9, &[[1, 2, 2], [1, 2, 2]], 2).is_err());
        assert!(mrope_positions(&[9, 9], 9, &[[1, 2, 4]], 3).is_err());
        assert!(mrope_positions(&[1], 9, &[[1, 2, 2]], 2).is_err());
    }
}
