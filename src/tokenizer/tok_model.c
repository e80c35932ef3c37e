/* tok_model.c — model_load: a model file opened with its vocabulary attached; and
 * model_load_random: a model built in memory with the synthetic vocabulary.
 *
 * Lives in the tokenizer room because the arrow runs tokenizer -> model (the
 * vocabulary is read from the model's GGUF file); the model room itself never calls
 * the tokenizer, it only frees it through m->tok_free. Runs once at startup on the
 * loading thread. */
#include "../model/model.h"
#include "../util/common.h"
#include "tokenizer.h"

int model_load(model **out, const char *path, char *err, size_t err_bytes) {
    *out = NULL;
    model *m = NULL;
    int rc = model_open(&m, path, err, err_bytes);
    if (rc) return rc;
    if ((rc = tok_create(&m->tok, &m->gguf, err, err_bytes))) goto fail;
    m->tok_free = tok_destroy;
    /* Padded embeddings (more rows than tokens) are fine; fewer rows are not. */
    if (tok_n_vocab(m->tok) > (int32_t)m->hp.n_vocab) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_FORMAT,
                      "model: vocabulary has %d tokens but token_embd has only %u rows",
                      tok_n_vocab(m->tok), m->hp.n_vocab);
        goto fail;
    }
    *out = m;
    return IFD_OK;
fail:
    model_destroy(m);
    return rc;
}

int model_load_random(model **out, const char *shape, const char *dtype, uint64_t seed,
                      int n_threads, char *err, size_t err_bytes) {
    *out = NULL;
    ggml_type t;
    if (model_random_dtype(dtype, &t))
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "--dtype '%s': expected one of %s",
                        dtype, model_random_dtypes());
    model *m = NULL;
    int rc = model_create_random(&m, shape, t, seed, n_threads, err, err_bytes);
    if (rc) return rc;
    if ((rc = tok_create_synthetic(&m->tok, (int32_t)m->hp.n_vocab, err, err_bytes))) {
        model_destroy(m);
        return rc;
    }
    m->tok_free = tok_destroy;
    *out = m;
    return IFD_OK;
}
