//! The final hidden states of a sequence's cached positions, kept beside
//! its KV cache when a proposer reads them (Qwen3.5's MTP head takes the
//! target's hidden state at position `i` with the token at `i + 1`). They
//! follow the cache: a rewind cuts them, a step appends its rows.

/// Hidden rows of positions `base..base + len()`, `width` floats each.
#[derive(Clone, Debug, Default)]
pub struct HiddenRows {
    base: usize,
    width: usize,
    data: Vec<f32>,
    /// The lowest position written or cut since `take_changed`.
    changed_from: usize,
}

impl HiddenRows {
    /// The first position with a row (positions before it were adopted
    /// from another cache or computed before the rows were kept).
    pub fn base(&self) -> usize {
        self.base
    }

    /// One past the last position with a row.
    pub fn end(&self) -> usize {
        self.base + self.rows()
    }

    fn rows(&self) -> usize {
        self.data.len().checked_div(self.width).unwrap_or(0)
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// The rows of positions `from..to` (within `base..end`), laid end to
    /// end.
    pub fn range(&self, from: usize, to: usize) -> Option<&[f32]> {
        if from < self.base || to > self.end() || from > to {
            return None;
        }
        self.data
            .get((from - self.base) * self.width..(to - self.base) * self.width)
    }

    /// Forgets the rows of positions `n..`.
    pub fn truncate(&mut self, n: usize) {
        self.changed_from = self.changed_from.min(n);
        if n <= self.base {
            self.data.clear();
            self.base = n;
        } else {
            self.data.truncate((n - self.base) * self.width);
        }
    }

    /// Forgets the rows of positions before `p` (rows a reader no longer
    /// needs; a reader that wants them later starts from `base`).
    pub fn forget_before(&mut self, p: usize) {
        let p = p.min(self.end());
        if p > self.base {
            self.data.drain(..(p - self.base) * self.width);
            self.base = p;
        }
    }

    /// Forgets every row; the next start anywhere.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// The rows `data` (`width` floats each) of positions from `start`.
    /// What the rows held from `start` on is replaced; rows that do not
    /// follow on (a gap before `start`, or another width) start over at
    /// `start`.
    pub fn put(&mut self, start: usize, data: &[f32], width: usize) {
        if width == 0 || !data.len().is_multiple_of(width) {
            return;
        }
        self.truncate(start);
        if start != self.end() || width != self.width {
            self.data.clear();
            self.base = start;
            self.width = width;
        }
        self.data.extend_from_slice(data);
    }

    /// The lowest position written or cut since the last call (a reader
    /// computed from rows before it may keep what it computed).
    pub fn take_changed(&mut self) -> usize {
        let end = self.end();
        std::mem::replace(&mut self.changed_from, end)
    }
}

#[cfg(test)]
mod tests {
    use super::HiddenRows;

    #[test]
    fn rows_follow_the_cache() {
        let mut h = HiddenRows::default();
        h.put(0, &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5], 2);
        assert_eq!((h.base(), h.end()), (0, 3));
        assert_eq!(h.take_changed(), 0);
        assert_eq!(h.take_changed(), 3);
        // A verification step of two rows, one of them taken back.
        h.put(3, &[3.0, 3.5, 4.0, 4.5], 2);
        h.truncate(4);
        assert_eq!(h.range(2, 4), Some(&[2.0, 2.5, 3.0, 3.5][..]));
        assert_eq!(h.take_changed(), 3);
        // A rewind below the reader's rows, then a step from there.
        h.put(1, &[9.0, 9.5], 2);
        assert_eq!(h.end(), 2);
        assert_eq!(h.take_changed(), 1);
        assert_eq!(h.range(0, 2), Some(&[0.0, 0.5, 9.0, 9.5][..]));
        // A gap (positions adopted without rows) starts over.
        h.put(5, &[7.0, 7.5], 2);
        assert_eq!((h.base(), h.end()), (5, 6));
        assert_eq!(h.range(4, 6), None);
        assert_eq!(h.range(5, 6), Some(&[7.0, 7.5][..]));
        // Rows a reader is done with go; the rest stay where they were.
        h.put(6, &[8.0, 8.5, 9.0, 9.5], 2);
        h.forget_before(7);
        assert_eq!((h.base(), h.end()), (7, 8));
        assert_eq!(h.range(7, 8), Some(&[9.0, 9.5][..]));
        h.forget_before(100);
        assert_eq!((h.base(), h.end()), (8, 8));
        h.clear();
        assert_eq!((h.base(), h.end()), (0, 0));
    }
}
