//! Stop strings with hold-back: text that could still become a stop string
//! is not shown until it cannot, so a stop string is never printed or sent.

/// Emits text while holding back any tail that could still become a stop
/// string, so a stop string is never printed.
pub struct StopFilter {
    stops: Vec<String>,
    pending: String,
    pub emitted: String,
}

impl StopFilter {
    pub fn new(stops: Vec<String>) -> StopFilter {
        StopFilter {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            pending: String::new(),
            emitted: String::new(),
        }
    }

    /// Adds a chunk; returns the text safe to show and whether a stop string appeared.
    pub fn push(&mut self, chunk: &str) -> (String, bool) {
        self.pending.push_str(chunk);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            self.emitted.push_str(&out);
            return (out, true);
        }
        // Longest suffix of `pending` that is a proper prefix of a stop string.
        let mut hold = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if self.pending.ends_with(&s[..i]) {
                    hold = hold.max(i);
                }
            }
        }
        let cut = self.pending.len() - hold;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        self.emitted.push_str(&out);
        (out, false)
    }

    /// The held-back text, at the end of generation.
    pub fn finish(&mut self) -> String {
        let out = std::mem::take(&mut self.pending);
        self.emitted.push_str(&out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::StopFilter;

    #[test]
    fn stop_strings_are_never_shown() {
        let mut f = StopFilter::new(vec!["<|end|>".into(), "\n\nUser:".into()]);
        let mut shown = String::new();
        let mut stopped = false;
        for chunk in ["Hello", " wor", "ld<|e", "nd|> tail"] {
            let (s, st) = f.push(chunk);
            shown.push_str(&s);
            if st {
                stopped = true;
                break;
            }
        }
        assert!(stopped);
        assert_eq!(shown, "Hello world");
    }

    #[test]
    fn held_text_is_released_when_it_cannot_stop() {
        let mut f = StopFilter::new(vec!["<|end|>".into()]);
        let (a, _) = f.push("a <|e");
        assert_eq!(a, "a ");
        let (b, _) = f.push("xample");
        assert_eq!(b, "<|example");
        assert_eq!(f.finish(), "");
    }
}
