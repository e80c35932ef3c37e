/* model_awq.h — calibration statistics of the linear layers' inputs, activation-aware
 * scaling for weight-only quantization (in the spirit of AWQ), and the per-matrix error
 * of a quantization on calibration activations (the sensitivity report).
 *
 * Statistics: a calibration pass (backend_calibrate in ../backend/calib.h) feeds every
 * linear layer's input rows to model_calib_observe; per layer four inputs are kept
 * (attention in: q/k/v; attention out: o; FFN in: gate/up; FFN out: down), each with
 * per-channel mean |x| and mean x^2 and a sample of whole rows.
 *
 * Scaling: for a matrix W fed by x, W x = (W diag(s)) (x / s) for any positive s. AWQ
 * picks s per input channel so the channels that carry large activations keep more
 * precision after quantization: s = mean|x|^alpha, alpha on a grid (0, 0.05, .., 1) per input
 * chosen by the output error on the sampled input rows X, ||(Q(W s) / s - W) X||^2 over a
 * sample of W's rows (alpha 0 is plain round-to-nearest, so the chosen scales never do
 * worse by this measure). The 1/s goes where the input is made:
 * the RMSNorm weight (q/k/v, gate/up), the V rows (o: one s per KV channel, shared by
 * the query heads of its group), the up rows (down). The scaled model computes the same
 * function as the original (up to f32 rounding) before it is quantized. (AWQ's second
 * step, a clipping range per block, was tried with the diagonal error weighting: lower
 * matrix errors, higher perplexity on held-out text, so it is not done.)
 *
 * Not thread-safe on one model; uses its own worker threads. */
#ifndef INFERD_MODEL_AWQ_H
#define INFERD_MODEL_AWQ_H
#include "../util/layer/model.h"

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

enum { CALIB_ATTN_IN = 0, CALIB_ATTN_OUT = 1, CALIB_FFN_IN = 2, CALIB_FFN_OUT = 3, CALIB_N = 4 };

typedef struct calib_input {
    int32_t n;           /* channels */
    int64_t count;       /* rows seen */
    double *abs_sum;     /* [n] sum of |x| */
    double *sq_sum;      /* [n] sum of x^2 */
    float *rows;         /* [cap][n] a sample of the rows: every stride-th one seen */
    int32_t n_rows, cap;
    int64_t stride;
} calib_input;

typedef struct model_calib {
    const model *m;    /* the model whose wmat views the observer recognises */
    uint32_t n_layers;
    calib_input *in;   /* [n_layers][CALIB_N] */
    /* what model_awq_apply chose: alpha per layer and input (-1: not scaled), and the
     * scales applied (NULL where none), so the error report sees the scaled inputs */
    float *alpha;      /* [n_layers][CALIB_N] */
    float **scale;     /* [n_layers][CALIB_N] -> [n] */
} model_calib;

/* sample_rows: rows kept per input; expected_rows: about how many token rows the pass
 * will feed (sets the sampling stride). IFD_ERR_NOMEM. */
int model_calib_init(model_calib *c, const model *m, int32_t sample_rows, int64_t expected_rows);
void model_calib_free(model_calib *c); /* accepts a zeroed or half-built one */
/* The observer (backend_config.observe): x is [n_rows][w->n_cols], the input of w and
 * of the matrices sharing it; matrices of other models are ignored. */
void model_calib_observe(void *calib, const wmat *w, const float *x, int32_t n_rows);

/* Scale the linear weights of the layers not in keep (NULL: all) for quantization to
 * qtype (a type with a quantizer), as above. The scaled matrices become f32 copies the
 * model owns (quantize them next: model_quantize); layers whose matrices are not
 * F32/F16/BF16, or whose widths the type's block does not divide, are left alone.
 * IFD_ERR_INVALID (no statistics, type without a quantizer), IFD_ERR_NOMEM. */
int model_awq_apply(model *m, model_calib *c, ggml_type qtype, const bool *keep, int n_threads,
                    char *err, size_t err_bytes);
/* Free the f32 copies model_awq_apply made that no weight view uses any more (after
 * model_quantize replaced them). */
void model_awq_trim(model *m);
/* The model_destroy side (frees every copy). */
void model_awq_free(model *m);

/* The matrices of a layer in report order, and their names ("attn_q" ...). */
enum { QM_Q, QM_K, QM_V, QM_O, QM_GATE, QM_UP, QM_DOWN, QM_N };
const char *model_qm_name(int i);
wmat *model_layer_mat(model *m, uint32_t layer, int i);

/* rel[l * QM_N + i] = ||(Q(W) - W) X|| / ||W X|| over the sampled input rows X of matrix i
 * of layer l, W quantized to qtype (its current weights: after model_awq_apply the scaled
 * ones, against the correspondingly scaled inputs); -1 where W cannot be quantized to
 * qtype (type or width). IFD_ERR_INVALID without statistics. */
int model_quant_errors(const model *m, const model_calib *c, ggml_type qtype, int n_threads,
                       double *rel);

#endif
