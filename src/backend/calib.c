/* calib.c — the calibration pass (calib.h). */
#include "calib.h"

#include <stdlib.h>

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
