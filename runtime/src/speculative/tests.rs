use super::*;

#[test]
fn lookup_continues_the_latest_longest_match() {
    let n = NgramLookup::default();
    // "1 2 3 4 5 6 ... 1 2 3" -> 4 5 6 (the 3-gram, not a 2-gram elsewhere).
    let h = [9, 1, 2, 3, 4, 5, 6, 7, 2, 3, 8, 1, 2, 3];
    assert_eq!(n.lookup(&h, 3), vec![4, 5, 6]);
    // The latest occurrence wins; past the history's end the copy goes on
    // over what it proposed (the period `8 1 2` repeats).
    let h = [1, 2, 7, 1, 2, 8, 1, 2];
    assert_eq!(n.lookup(&h, 5), vec![8, 1, 2, 8, 1]);
    // A loop goes on looping.
    let h = [5, 6, 5, 6, 5, 6];
    assert_eq!(n.lookup(&h, 4), vec![5, 6, 5, 6]);
    assert_eq!(n.lookup(&[4, 5, 6, 7, 4, 5], 2), vec![6, 7]);
    // Nothing of at least `min_n` tokens recurs: nothing proposed.
    assert!(n.lookup(&[1, 2, 3, 4, 1], 4).is_empty());
    assert!(n.lookup(&[], 4).is_empty());
    assert!(n.lookup(&[1, 2, 1, 2], 0).is_empty());
}

#[test]
fn config_is_checked() {
    assert!(SpecConfig::DEFAULT.checked().is_ok());
    let most = mllm_backends::cpu::ROW_INVARIANT_STEP - 1;
    for bad in [
        SpecConfig {
            draft_max: 0,
            ..SpecConfig::DEFAULT
        },
        SpecConfig {
            draft_max: most + 1,
            ..SpecConfig::DEFAULT
        },
        SpecConfig {
            draft_min: 17,
            ..SpecConfig::DEFAULT
        },
        SpecConfig {
            draft_p_min: 1.5,
            ..SpecConfig::DEFAULT
        },
        SpecConfig {
            draft_p_min: f32::NAN,
            ..SpecConfig::DEFAULT
        },
        SpecConfig {
            draft_p_last: -0.1,
            ..SpecConfig::DEFAULT
        },
    ] {
        let e = bad.checked().expect_err("refused");
        assert!(e.message().contains("--draft"), "{}", e.message());
    }
    assert_eq!(SpecType::parse("ngram").unwrap(), SpecType::Ngram);
    assert_eq!(SpecType::parse("draft").unwrap(), SpecType::Draft);
    assert_eq!(SpecType::parse("mtp").unwrap(), SpecType::Mtp);
    assert!(SpecType::parse("eagle")
        .unwrap_err()
        .message()
        .contains("ngram, draft or mtp"));
}

#[test]
fn stats_report_acceptance_and_tokens_per_step() {
    let s = SpecStats {
        steps: 4,
        proposed: 10,
        accepted: 6,
        draft_steps: 0,
    };
    assert!((s.acceptance() - 0.6).abs() < 1e-12);
    assert!((s.tokens_per_step() - 2.5).abs() < 1e-12);
    assert_eq!(SpecStats::default().acceptance(), 0.0);
}

#[test]
fn budgets_follow_the_verdicts_except_a_drafts() {
    let next = |kind, budget, proposed, accepted| next_budget(kind, budget, proposed, accepted, 16);
    for kind in [SpecType::Ngram, SpecType::Mtp] {
        // Everything kept: doubled up to draft_max; a rejection: what was
        // kept plus one; nothing proposed: unchanged.
        assert_eq!(next(kind, 4, 4, 4), 8);
        assert_eq!(next(kind, 12, 12, 12), 16);
        assert_eq!(next(kind, 8, 8, 2), 3);
        assert_eq!(next(kind, 8, 5, 0), 1);
        assert_eq!(next(kind, 5, 0, 0), 5);
    }
    // A draft model stops at its own doubt: always up to draft_max.
    assert_eq!(next(SpecType::Draft, 8, 8, 2), 16);
    assert_eq!(next(SpecType::Draft, 16, 3, 0), 16);
}
