//! Prompts with images share computed prefixes as text prompts do (issue
//! #31, images keyed by their pixels): a cache holding images gives the
//! text before them to any prompt, and everything up to where the prompts
//! part to a prompt with the same images; a prompt with images takes the
//! text before its images from any cache. Each shared run must give the
//! logits of the prompt computed alone, bit for bit, and the greedy steps
//! after it too (their positions continue after the images). On the tiny
//! Qwen3-VL with its tokenizer and chat template (tests/fixtures/qwen3_vl).

mod common;

use common::*;
use mllm_runtime::images::{self, ImageTokens, Images};
use mllm_runtime::model_files::{self, load_model, ModelFiles};
use mllm_runtime::{Runner, Sequence};

const SYSTEM: &str = "You are a careful assistant. Look at every picture closely, \
    name the colours you see, count the shapes, and answer in one short sentence.";

struct Fixture {
    files: ModelFiles,
    runner: Runner,
    spec: ImageTokens,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
        let files = model_files::open(dir.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let model = load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut runner = Runner::new(model);
        runner.compile_default(1024);
        let spec = ImageTokens::for_files(&files).unwrap_or_else(|e| panic!("{}", e.render(false)));
        assert!(
            runner.chunk_invariant(),
            "this CPU's steps are not chunk-invariant: prompts with images share nothing here"
        );
        Fixture {
            files,
            runner,
            spec,
        }
    }

    fn image(&self, name: &str) -> Images {
        let path = root().join("tests/fixtures/qwen3_vl/run_images").join(name);
        images::from_files(&self.files, &[path.display().to_string()])
            .unwrap_or_else(|e| panic!("{}", e.render(false)))
            .0
    }

    /// The ids of `prompt` after the system prompt, with `names`' images.
    fn ids(&self, prompt: &str, imgs: &Images) -> Vec<u32> {
        let text = images::prompt_text(
            &self.files,
            Some(SYSTEM),
            prompt,
            imgs,
            &self.spec,
            false,
            None,
        )
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let tok = self
            .files
            .tokenizer()
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        tok.encode(&text, false).expect("encode")
    }
}

/// A prompt with its images (`None`: text) and the key of their pixels.
struct Prompt {
    ids: Vec<u32>,
    images: Option<(Images, u64)>,
}

/// Feeds `p` to `seq` (whatever it holds; text as a server's slot does)
/// and takes 3 greedy steps: the logits after the prompt and after each
/// step, and how many of the prompt's ids were computed.
fn run(f: &mut Fixture, seq: &mut Sequence, p: &Prompt) -> (Vec<Vec<f32>>, usize) {
    let fed = match &p.images {
        Some((imgs, key)) => seq
            .feed_images(&mut f.runner, &p.ids, imgs, &f.spec, Some(*key))
            .map(|l| (l, seq.last_computed)),
        None => seq.rewind_for_continuation(&p.ids).and_then(|start| {
            let l = seq.extend(&mut f.runner, &p.ids[start..])?;
            Ok((l, p.ids.len() - start))
        }),
    };
    let (logits, computed) = fed.unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut out = vec![logits];
    for _ in 0..3 {
        let t = mllm_runtime::generation::argmax(out.last().expect("logits")) as u32;
        out.push(
            seq.step(&mut f.runner, t)
                .unwrap_or_else(|e| panic!("{}", e.render(false))),
        );
    }
    (out, computed)
}

fn cold(f: &mut Fixture, p: &Prompt) -> Vec<Vec<f32>> {
    run(f, &mut Sequence::new(None), p).0
}

/// `p` in a sequence that adopted what `donor` shares with it; asserts
/// that at least `least` positions came from the donor and that the
/// logits equal the prompt's alone.
fn shared(f: &mut Fixture, donor: &Sequence, p: &Prompt, least: usize, what: &str) -> usize {
    let key = p.images.as_ref().map(|i| i.1);
    let n = donor.shareable_with(&p.ids, key);
    assert!(
        n >= least,
        "{what}: the donor shares {n} positions, expected at least {least}"
    );
    let mut seq = Sequence::new(None);
    assert!(
        seq.adopt_prefix(donor, n),
        "{what}: adopting {n} positions failed"
    );
    let (got, computed) = run(f, &mut seq, p);
    assert_eq!(
        computed,
        p.ids.len() - n,
        "{what}: computed {computed} of {} ids after sharing {n}",
        p.ids.len()
    );
    let want = cold(f, p);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            max_abs(g, w),
            0.0,
            "{what}: logits {i} differ from the prompt alone"
        );
    }
    n
}

#[test]
fn prompts_with_images_share_prefixes_without_changing_logits() {
    let mut f = Fixture::new();
    let with = |f: &Fixture, q: &str, name: &str, key: u64| {
        let imgs = f.image(name);
        Prompt {
            ids: f.ids(q, &imgs),
            images: Some((imgs, key)),
        }
    };
    let pad = f.spec.image;
    let first_image = |p: &Prompt| {
        p.ids
            .iter()
            .position(|&t| t as i32 == pad)
            .expect("a placeholder")
    };
    let p1 = with(&f, "Describe this image.", "a_160x120.png", 1);
    let p2 = with(&f, "What colour is it?", "a_160x120.png", 1);
    let p3 = with(&f, "Describe this image.", "b_36x90.png", 2);
    let text = Prompt {
        ids: f.ids("What is two plus two?", &Images::none()),
        images: None,
    };
    let (before, after) = {
        let last = p1
            .ids
            .iter()
            .rposition(|&t| t as i32 == pad)
            .expect("a placeholder");
        (first_image(&p1), last + 1)
    };
    assert!(
        before > 20,
        "the system prompt comes before the image ({before} ids)"
    );

    let mut donor = Sequence::new(None);
    run(&mut f, &mut donor, &p1);
    // The same image, another question: everything up to the question.
    let n = shared(&mut f, &donor, &p2, after, "same image");
    assert!(n < p2.ids.len());
    // Another image: the system prompt and the template before the image.
    let n = shared(&mut f, &donor, &p3, before, "other image");
    assert_eq!(n, first_image(&p3).min(before));
    // A text prompt takes the text before the image.
    let n = shared(&mut f, &donor, &text, 20, "text after an image prompt");
    assert!(n <= before);
    // A prompt with an image takes the text from a text prompt's cache.
    let mut text_donor = Sequence::new(None);
    run(&mut f, &mut text_donor, &text);
    shared(&mut f, &text_donor, &p1, 20, "image after a text prompt");

    // One sequence fed one prompt after another keeps what it may.
    let mut seq = Sequence::new(None);
    run(&mut f, &mut seq, &p1);
    for (p, least, what) in [
        (&p3, 20, "its next prompt with another image"),
        (&p1, 20, "back to the first image"),
        (&text, 20, "then text"),
    ] {
        let (got, computed) = run(&mut f, &mut seq, p);
        assert!(
            computed + least <= p.ids.len(),
            "{what}: computed {computed} of {} ids",
            p.ids.len()
        );
        let want = cold(&mut f, p);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                max_abs(g, w),
                0.0,
                "{what}: logits {i} differ from the prompt alone"
            );
        }
    }
}
