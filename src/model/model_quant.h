/* model_quant.h — quantize a loaded model's linear weights in memory (--quantize
 * int8|int4 on load, and `inferd quantize` before it writes a file).
 *
 * The selection: every F32 / F16 / BF16 matrix of the attention and MLP (q k v o gate
 * up down) of each layer not kept, and output.weight when lm_head is asked for and it
 * is not the tied token embedding. Embeddings and norms stay as they are. The
 * converted matrices live in memory the model owns (freed by model_destroy); the
 * mapped file pages of the originals are released (madvise DONTNEED: file-backed,
 * so re-reading them would only fault them in again). A model built in memory
 * (--random-weights) has its one anonymous buffer freed instead, after the matrices
 * left as they are were copied out of it.
 * Runs on the loading thread, before the backend prepares its weights; the model is
 * immutable again afterwards. */
#ifndef INFERD_MODEL_QUANT_H
#define INFERD_MODEL_QUANT_H
#include "../util/layer/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct model_quant_opts {
    int bits;              /* 0 none, 8, 4 */
    int group_size;        /* 32 | 64 | 128 (default 128) */
    bool lm_head;          /* output.weight too (never a tied token_embd) */
    const bool *keep;      /* NULL or [n_layers]: layer left as it is */
    int n_threads;         /* 0: all cores */
    bool requantize;       /* quantized matrices of another type too (dequantized first) */
} model_quant_opts;

/* Convert every F32/F16/BF16 linear weight (q k v o gate up down; output when lm_head)
 * of m to quant_int_type(bits, group_size) in memory the model owns (freed by
 * model_destroy); wmat views rewritten. A matrix whose K is not a multiple of the
 * group, or of another type (a quantized one unless o->requantize; one already of the
 * target type always), stays as it is (counted in m->n_quant_skipped, reported
 * by the caller). bits 0 does nothing. IFD_ERR_INVALID for bits other than 0, 4, 8, a
 * group size other than 32, 64, 128, or a model already quantized. */
int model_quantize(model *m, const model_quant_opts *o, char *err, size_t err_bytes);

/* The same selection converted to type t by its reference quantizer
 * (quant_traits_of(t)->quantize_row: Q8_0, Q4_0, the K-quants once they have one);
 * o->bits and o->group_size are ignored. IFD_ERR_UNSUPPORTED when t has no quantizer. */
int model_quantize_to(model *m, const model_quant_opts *o, ggml_type t, char *err,
                      size_t err_bytes);

/* The row quantizers model_quantize runs: the same bytes as quant.h's
 * quant_quantize_row_int8 / _int4 (the reference), computed without libm calls. */
void model_quant_row_int8(const float *x, void *out, int64_t n, int g);
void model_quant_row_int4(const float *x, void *out, int64_t n, int g);

/* Bytes of the weight matrices by type, for the startup log: token_embd, output when
 * not tied, and the seven matrices of every layer. */
void model_weight_bytes_by_type(const model *m, size_t out[GGML_TYPE_COUNT_]);

/* "a MiB T1 -> b MiB (T2 c MiB, T1 d MiB)" when before differs from after, else
 * "b MiB (T1 d MiB)"; types by descending bytes. before may be NULL. */
void model_weight_bytes_str(const size_t *before, const size_t *after, char *buf, size_t cap);

/* --quantize-keep-layers: "0,1,21" or ranges "0-3,21" -> keep[0..n_layers) (cleared
 * first). IFD_ERR_INVALID, with one line in err, for a malformed list or a layer
 * >= n_layers. list NULL or "" keeps none. */
int model_quant_parse_layers(const char *list, uint32_t n_layers, bool *keep, char *err,
                             size_t err_bytes);

#endif
