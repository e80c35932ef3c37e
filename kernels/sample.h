/* sample.h — the device sampling op: for n_rows rows of logits in device memory it
 * writes one token id per row (and, when a row asks, the chosen token's logprob and the
 * top-N logprobs), so forward never has to bring [n_rows][n_vocab] floats to the host.
 *
 * Exactness: for the same logits, parameters, penalty lists, key and position a row's
 * token is exactly the one src/engine/sampler.c's sampler_sample_at returns; the
 * pipeline and its arithmetic are the ones sampler.h spells out (penalties, logit_bias,
 * grammar mask, bans, greedy, temperature, top_k, integer weights, min_p, top_p, one
 * Philox draw).
 * Every sum is a sum of integers, so the block's reduction order does not matter; the
 * float steps are single __fmul_rn / __fadd_rn / __fsub_rn operations. Logprobs are
 * those of src/engine/logprobs.c (log-softmax of the RAW logits, top N by logit desc
 * then id asc): the ids are the same, the values agree within 1e-5 (the normaliser is
 * a double sum in a fixed tree order here, an online sum there).
 *
 * Batch invariance: one block per row; nothing a row computes depends on other rows.
 * Device code; the launcher runs on the thread that drives the device. */
#ifndef INFERD_KERNELS_SAMPLE_H
#define INFERD_KERNELS_SAMPLE_H
#include "devrt.h"

IFD_NS_BEGIN

#define SAMP_MAX_TOP 20          /* top logprobs per row (LOGPROBS_MAX_TOP) */
#define SAMP_MAX_VOCAB (1 << 21) /* SAMPLER_MAX_VOCAB: integer weights stay < 2^63 */
#define SAMP_GREEDY_EPS 1e-5f    /* SAMPLER_GREEDY_EPS */

/* One row's parameters (the host fills an array [n_rows] and uploads it). The lists are
 * slices of the three flat arrays passed to samp_sample: [off, off + n). */
typedef struct samp_row {
    float temperature;        /* < SAMP_GREEDY_EPS (or NaN): greedy */
    int32_t top_k;            /* <= 0 or >= n_vocab: off; 1: greedy */
    float top_p;              /* <= 0 or >= 1: off */
    float min_p;              /* <= 0: off */
    float repetition_penalty; /* 0 or 1: off */
    float presence_penalty;
    float frequency_penalty;
    int32_t n_logprobs;       /* < 0: none; else the top N (clamped to SAMP_MAX_TOP, n_vocab) */
    uint64_t key;             /* the RNG key (ifd_rng.key) */
    uint64_t position;        /* the draw's counter (ifd_rng.ctr) */
    int32_t pen_off, n_pen;   /* penalty entries: the ids of sampler_state.seen */
    int32_t bias_off, n_bias; /* logit_bias entries, applied in list order */
    int32_t ban_off, n_ban;   /* banned ids */
    /* constrained decoding: the row's mask, words [allow_off, allow_off + (n_vocab + 31)
     * / 32) of the flat mask array (bit id: allowed), < 0 none; ids allowed anyway (the
     * stop tokens where a grammar may end): extra[extra_off .. + n_extra) */
    int64_t allow_off;
    int32_t extra_off, n_extra;
} samp_row;

#define SAMP_MAX_EXTRA 65 /* allowed-anyway ids per row */

/* A seen id (prompt or output: repetition_penalty applies) and its count among the
 * generated tokens (presence / frequency apply when > 0). Ids within a row are
 * distinct (sampler_state.seen is). */
typedef struct samp_pen {
    int32_t id;
    int32_t count;
} samp_pen;

typedef struct samp_bias {
    int32_t id;
    float bias;
} samp_bias;

/* Same layout as logprob_entry / inferd_token_logprob. */
typedef struct samp_logprob {
    int32_t id;
    float logprob;
} samp_logprob;

/* Bytes of the work buffer samp_sample needs: one penalized copy per row. */
size_t samp_scratch_bytes(int32_t n_rows, int32_t n_vocab);

/* Sample n_rows rows. logits: [n_rows][n_vocab] f32 (not modified); rows: [n_rows];
 * pen / bias / ban / allow / extra: the flat lists (n_pen_all, n_bias_all, n_ban_all,
 * n_allow_all words, n_extra_all entries; NULL when 0) the rows' slices index; a slice outside its list, or an id outside [0, n_vocab),
 * is skipped. work: samp_scratch_bytes(n_rows, n_vocab) bytes (rows without penalties,
 * bias or bans do not touch theirs). tokens: [n_rows] out. lp: [n_rows][1 + SAMP_MAX_TOP]
 * out, or NULL: lp[r][0] = (token, its logprob), lp[r][1 .. 1 + k] = the top k =
 * min(n_logprobs, SAMP_MAX_TOP, n_vocab) for rows with n_logprobs >= 0 (others
 * untouched). All pointers are device memory. DEV_ERR for a bad size or a missing
 * buffer, else the launch status. */
int samp_sample(dev_stream s, const float *logits, int32_t n_rows, int32_t n_vocab,
                const samp_row *rows, const samp_pen *pen, int32_t n_pen_all,
                const samp_bias *bias, int32_t n_bias_all, const int32_t *ban, int32_t n_ban_all,
                const uint32_t *allow, int64_t n_allow_all, const int32_t *extra, int32_t n_extra_all,
                float *work, int32_t *tokens, samp_logprob *lp);

IFD_NS_END

#endif
