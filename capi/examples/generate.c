/* generate.c: the C ABI end to end. Loads a model, checks that tokenizing
 * and detokenizing round-trips, streams a greedy answer to a prompt, then
 * starts a second answer and cancels it from the callback after N pieces.
 *
 *   cc -Icapi/include capi/examples/generate.c target/debug/libmllm.a \
 *      -lm -lpthread -ldl -o generate
 *   ./generate MODEL [PROMPT] [N]
 *
 * Exits 0 when everything behaved, 1 with a message otherwise
 * (capi/tests/c_example.rs builds and runs it on SmolLM2). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mllm.h"

/* What the callbacks share with main. */
struct stream {
    mllm_session *session;
    int pieces;       /* pieces received so far */
    int cancel_after; /* call mllm_cancel at this piece; 0: never */
};

static int on_text(const char *text, void *user) {
    struct stream *s = user;
    fputs(text, stdout);
    fflush(stdout);
    s->pieces++;
    if (s->cancel_after > 0 && s->pieces == s->cancel_after) {
        /* Any thread may cancel; from the callback is the simplest. Returning
         * nonzero here would stop the answer the same way. */
        mllm_cancel(s->session);
    }
    return 0;
}

static const char *reason(mllm_stop_reason r) {
    switch (r) {
    case MLLM_STOP_REASON_EOS: return "eos";
    case MLLM_STOP_REASON_STOP_STRING: return "stop string";
    case MLLM_STOP_REASON_MAX_TOKENS: return "max tokens";
    case MLLM_STOP_REASON_CANCELLED: return "cancelled";
    }
    return "?";
}

static int fail(const char *what, mllm_status st) {
    fprintf(stderr, "%s failed: %s (%d): %s\n", what, mllm_status_string(st), (int)st,
            mllm_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [PROMPT] [N]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    const char *prompt = argc > 2 ? argv[2] : "What is the capital of France? Answer in one sentence.";
    int cancel_after = argc > 3 ? atoi(argv[3]) : 5;
    printf("mllm %s\n", mllm_version());

    mllm_model_options opts = mllm_model_options_default();
    opts.context = 2048; /* a smaller KV cache than the model's 8192 */
    mllm_model *model = NULL;
    mllm_status st = mllm_model_load(path, &opts, &model);
    if (st != MLLM_STATUS_OK) return fail("mllm_model_load", st);

    /* Tokenize and detokenize. */
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    st = mllm_tokenize(model, prompt, false, &ids, &n_ids);
    if (st != MLLM_STATUS_OK) return fail("mllm_tokenize", st);
    char *back = NULL;
    st = mllm_detokenize(model, ids, n_ids, false, &back);
    if (st != MLLM_STATUS_OK) return fail("mllm_detokenize", st);
    int same = strcmp(back, prompt) == 0;
    printf("tokens: %zu (round trip %s)\n", n_ids, same ? "ok" : "differs");
    mllm_string_free(back);
    mllm_tokens_free(ids, n_ids);
    if (!same) return 1;

    mllm_session *session = NULL;
    st = mllm_session_new(model, NULL, &session);
    if (st != MLLM_STATUS_OK) return fail("mllm_session_new", st);
    /* The session keeps the model alive: the model handle can go now. */
    mllm_model_free(model);

    /* A greedy answer, streamed. */
    mllm_generate_params params = mllm_generate_params_default();
    params.temperature = 0.0f;
    params.max_tokens = 64;
    struct stream s = {session, 0, 0};
    mllm_generate_result r;
    printf("answer: ");
    st = mllm_generate(session, prompt, &params, on_text, &s, &r);
    printf("\n");
    if (st != MLLM_STATUS_OK) return fail("mllm_generate", st);
    printf("[prompt %zu tok, generated %zu tok, stop: %s]\n", r.prompt_tokens, r.generated_tokens,
           reason(r.stop_reason));

    /* The next turn of the same conversation, cancelled after N pieces. */
    s.pieces = 0;
    s.cancel_after = cancel_after;
    params.max_tokens = 200;
    printf("cancelled: ");
    st = mllm_generate(session, "Now tell me a long story about Paris.", &params, on_text, &s, &r);
    printf("\n");
    if (st != MLLM_STATUS_OK) return fail("mllm_generate", st);
    printf("[prompt %zu tok (%zu computed), generated %zu tok, %d pieces, stop: %s]\n",
           r.prompt_tokens, r.prompt_computed, r.generated_tokens, s.pieces, reason(r.stop_reason));
    if (r.stop_reason != MLLM_STOP_REASON_CANCELLED || s.pieces != cancel_after) {
        fprintf(stderr, "the answer was not cancelled after %d pieces\n", cancel_after);
        return 1;
    }

    mllm_session_free(session);
    return 0;
}
