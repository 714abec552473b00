//! Splitting a thinking model's answer into its reasoning and its content,
//! as it streams: `<think>...</think>` (Qwen3, Qwen3.5, SmolLM3,
//! DeepSeek-R1) goes to the reasoning, the rest to the content, as
//! llama-server's `--reasoning-format deepseek` and vLLM return them. Text
//! that may still turn into a tag is held back until it cannot.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: the answer may still open with `<think>`.
    Start,
    Thinking,
    Content,
}

/// Text to show now, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

/// One answer's splitter.
pub struct ReasoningSplit {
    state: State,
    pending: String,
    /// Whitespace right after a tag is dropped (`<think>\n`, `</think>\n\n`).
    trim: bool,
}

impl ReasoningSplit {
    /// `opened`: the prompt itself ends with `<think>` (templates that
    /// start the reasoning for the model), so the answer starts inside it.
    pub fn new(opened: bool) -> ReasoningSplit {
        ReasoningSplit {
            state: if opened {
                State::Thinking
            } else {
                State::Start
            },
            pending: String::new(),
            trim: true,
        }
    }

    /// Adds generated text; returns what can be shown.
    pub fn push(&mut self, text: &str) -> Split {
        self.pending.push_str(text);
        let mut out = Split::default();
        loop {
            match self.state {
                State::Start => {
                    let t = self.pending.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.pending = rest.to_string();
                        self.state = State::Thinking;
                        self.trim = true;
                        continue;
                    }
                    if OPEN.starts_with(t) {
                        return out;
                    }
                    self.state = State::Content;
                    self.trim = false;
                }
                State::Thinking => {
                    if !self.trim_after_tag() {
                        return out;
                    }
                    if let Some(at) = self.pending.find(CLOSE) {
                        out.reasoning.push_str(&self.pending[..at]);
                        self.pending = self.pending[at + CLOSE.len()..].to_string();
                        self.state = State::Content;
                        self.trim = true;
                        continue;
                    }
                    let keep = partial_suffix(&self.pending, CLOSE);
                    let cut = self.pending.len() - keep;
                    out.reasoning.push_str(&self.pending[..cut]);
                    self.pending.drain(..cut);
                    return out;
                }
                State::Content => {
                    if !self.trim_after_tag() {
                        return out;
                    }
                    out.content.push_str(&self.pending);
                    self.pending.clear();
                    return out;
                }
            }
        }
    }

    /// The text held back, at the end: reasoning never closed stays
    /// reasoning; an answer of only whitespace is content.
    pub fn finish(&mut self) -> Split {
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Thinking => Split {
                reasoning: rest,
                content: String::new(),
            },
            State::Start | State::Content => Split {
                reasoning: String::new(),
                content: if self.trim && self.state == State::Content {
                    rest.trim_start().to_string()
                } else {
                    rest
                },
            },
        }
    }
}

impl ReasoningSplit {
    /// Drops the whitespace right after a tag; false while only
    /// whitespace has come (more may follow).
    fn trim_after_tag(&mut self) -> bool {
        if self.trim {
            self.pending = self.pending.trim_start().to_string();
            if self.pending.is_empty() {
                return false;
            }
            self.trim = false;
        }
        true
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `tag`.
fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| s.ends_with(&tag[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` and returns (reasoning, content) joined.
    fn split(opened: bool, pieces: &[&str]) -> (String, String) {
        let mut s = ReasoningSplit::new(opened);
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            let o = s.push(p);
            r.push_str(&o.reasoning);
            c.push_str(&o.content);
        }
        let o = s.finish();
        (r + &o.reasoning, c + &o.content)
    }

    #[test]
    fn thinking_goes_to_reasoning_wherever_the_pieces_cut() {
        let text = "<think>\nLet me see.</think>\n\nParis.";
        // Every way of cutting the text in two pieces, and one character
        // at a time.
        for cut in 0..=text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(
                split(false, &[a, b]),
                ("Let me see.".into(), "Paris.".into()),
                "cut at {cut}"
            );
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(
            split(false, &pieces),
            ("Let me see.".into(), "Paris.".into())
        );
    }

    #[test]
    fn answers_without_thinking_are_content() {
        assert_eq!(split(false, &["Par", "is."]), ("".into(), "Paris.".into()));
        assert_eq!(
            split(false, &["<thin", "g>"]),
            ("".into(), "<thing>".into())
        );
        assert_eq!(split(false, &["  <"]), ("".into(), "  <".into()));
        // A tag later in the answer is content.
        assert_eq!(
            split(false, &["a <think>b</think>"]),
            ("".into(), "a <think>b</think>".into())
        );
    }

    #[test]
    fn an_opened_prompt_and_unclosed_thinking() {
        assert_eq!(
            split(true, &["\nhmm</th", "ink>ok"]),
            ("hmm".into(), "ok".into())
        );
        assert_eq!(
            split(false, &["<think>still going"]),
            ("still going".into(), "".into())
        );
        // Text that looked like a closing tag is released as reasoning.
        assert_eq!(split(true, &["a</thi", "s"]), ("a</this".into(), "".into()));
    }
}
