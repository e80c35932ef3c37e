/* calib.c — the calibration pass (calib.h). */
#include "calib.h"

#include <math.h>
#include <stdlib.h>

#include "../model/model_awq.h"
#include "../util/common.h"

int backend_calibrate(const model *m, const int32_t *tokens, int64_t n, int32_t window, int32_t bos,
                      int64_t max_tokens, int n_threads,
                      void (*observe)(void *user, const wmat *w, const float *x, int32_t n_rows),
                      void *user, char *err, size_t err_bytes) {
    if (window < 2 || n < 2)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "calibration: the text is too short (%lld tokens)",
                        (long long)n);
    if (max_tokens > 0 && n > max_tokens) n = max_tokens;
    if (window > n) window = (int32_t)n;
    const int32_t bs = 16, n_blocks = (window + bs - 1) / bs;
    backend_config cfg = {.n_threads = n_threads, .block_size = bs, .n_blocks = n_blocks,
                          .max_batch_tokens = window, .max_batch_seqs = 1, .max_logits = 1,
                          .max_seq_len = window, .observe = observe, .observe_user = user};
    backend *b = NULL;
    int rc = backend_create(&b, BACKEND_CPU, m, &cfg, err, err_bytes);
    if (rc) return rc;
    int32_t *ids = malloc((size_t)window * sizeof(int32_t)), *pos = malloc((size_t)window * sizeof(int32_t));
    int32_t *table = malloc((size_t)n_blocks * sizeof(int32_t));
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    if (!ids || !pos || !table || !logits) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "calibration: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < window; i++) pos[i] = i;
    for (int32_t i = 0; i < n_blocks; i++) table[i] = i;
    for (int64_t at = 0; at + 1 < n && rc == IFD_OK; at += window) {
        const int32_t len = (int32_t)(n - at < window ? n - at : window);
        for (int32_t i = 0; i < len; i++) ids[i] = tokens[at + i];
        if (bos >= 0) ids[0] = bos;
        const int32_t seq_start[2] = {0, len}, ctx_len[1] = {len};
        ifd_batch bt = {.n_tokens = len, .token_ids = ids, .positions = pos, .slot_mapping = pos,
                        .n_seqs = 1, .seq_start = seq_start, .context_len = ctx_len,
                        .block_table = table, .max_blocks_per_seq = n_blocks, .n_logits = 0};
        rc = b->ops->forward(b, &bt, logits);
        if (rc) ifd_errf(err, err_bytes, rc, "calibration: forward failed (%d)", rc);
    }
done:
    free(ids), free(pos), free(table), free(logits);
    b->ops->destroy(b);
    return rc;
}

int backend_awq(model *m, const int32_t *tokens, int64_t n, int32_t window, int32_t bos,
                int64_t max_tokens, ggml_type qtype, const bool *keep, int n_threads,
                model_calib *c, char *err, size_t err_bytes) {
    const int64_t used = max_tokens > 0 && n > max_tokens ? max_tokens : n;
    if (model_calib_init(c, m, 64, used) != IFD_OK)
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "calibration: out of memory");
    int rc = backend_calibrate(m, tokens, n, window, bos, max_tokens, n_threads, model_calib_observe, c,
                               err, err_bytes);
    if (rc == IFD_OK) rc = model_awq_apply(m, c, qtype, keep, n_threads, err, err_bytes);
    return rc;
}

int backend_perplexity(const model *m, const int32_t *tokens, int64_t n, int32_t window, int32_t bos,
                       int64_t max_tokens, int n_threads, double *ppl, char *err, size_t err_bytes) {
    if (max_tokens > 0 && n > max_tokens) n = max_tokens;
    if (window < 4 || n < window)
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID,
                        "perplexity: %lld tokens do not fill a window of %d", (long long)n, window);
    const int32_t bs = 16, n_blocks = (window + bs - 1) / bs, first = window / 2;
    const int32_t n_rows = window - 1 - first, V = (int32_t)m->hp.n_vocab;
    backend_config cfg = {.n_threads = n_threads, .block_size = bs, .n_blocks = n_blocks,
                          .max_batch_tokens = window, .max_batch_seqs = 1, .max_logits = n_rows,
                          .max_seq_len = window};
    backend *b = NULL;
    int rc = backend_create(&b, BACKEND_CPU, m, &cfg, err, err_bytes);
    if (rc) return rc;
    int32_t *ids = malloc((size_t)window * sizeof(int32_t)), *pos = malloc((size_t)window * sizeof(int32_t));
    int32_t *table = malloc((size_t)n_blocks * sizeof(int32_t)), *li = malloc((size_t)n_rows * sizeof(int32_t));
    float *logits = malloc((size_t)n_rows * (size_t)V * sizeof(float));
    double nll = 0;
    int64_t count = 0;
    if (!ids || !pos || !table || !li || !logits) {
        rc = ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "perplexity: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < window; i++) pos[i] = i;
    for (int32_t i = 0; i < n_blocks; i++) table[i] = i;
    for (int32_t i = 0; i < n_rows; i++) li[i] = first + i;
    for (int64_t at = 0; at + window <= n && rc == IFD_OK; at += window) {
        for (int32_t i = 0; i < window; i++) ids[i] = tokens[at + i];
        if (bos >= 0) ids[0] = bos;
        const int32_t seq_start[2] = {0, window}, ctx_len[1] = {window};
        ifd_batch bt = {.n_tokens = window, .token_ids = ids, .positions = pos, .slot_mapping = pos,
                        .n_seqs = 1, .seq_start = seq_start, .context_len = ctx_len,
                        .block_table = table, .max_blocks_per_seq = n_blocks, .n_logits = n_rows,
                        .logits_index = li};
        rc = b->ops->forward(b, &bt, logits);
        if (rc) {
            ifd_errf(err, err_bytes, rc, "perplexity: forward failed (%d)", rc);
            break;
        }
        for (int32_t i = 0; i < n_rows; i++) { /* row first + i scores token first + i + 1 */
            const float *r = logits + (size_t)i * (size_t)V;
            float mx = r[0];
            for (int32_t v = 1; v < V; v++) mx = r[v] > mx ? r[v] : mx;
            double se = 0;
            for (int32_t v = 0; v < V; v++) se += exp((double)r[v] - mx);
            const int32_t next = tokens[at + first + i + 1];
            nll += log(se) + mx - r[next];
            count++;
        }
    }
    if (rc == IFD_OK) *ppl = exp(nll / (double)count);
done:
    free(ids), free(pos), free(table), free(li), free(logits);
    b->ops->destroy(b);
    return rc;
}
