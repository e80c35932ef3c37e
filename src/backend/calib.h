/* calib.h — a calibration pass: a token stream through the CPU forward in windows, every
 * linear layer's input handed to an observer (model_calib_observe in
 * ../model/model_awq.h collects the AWQ statistics). Main thread; its own backend. */
#ifndef INFERD_BACKEND_CALIB_H
#define INFERD_BACKEND_CALIB_H
#include "../util/layer/backend.h"

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

/* Run tokens[0..n) through m in consecutive windows of `window` tokens (the last one
 * shorter; each window's first token replaced by bos when bos >= 0, as llama.cpp's
 * perplexity does), at most max_tokens tokens in all (0: all), on the fast CPU kernels
 * with n_threads threads. IFD_ERR_INVALID (window < 2, nothing to run), a backend error. */
int backend_calibrate(const model *m, const int32_t *tokens, int64_t n, int32_t window, int32_t bos,
                      int64_t max_tokens, int n_threads,
                      void (*observe)(void *user, const wmat *w, const float *x, int32_t n_rows),
                      void *user, char *err, size_t err_bytes);

#endif

struct model_calib;
/* AWQ on m for quantization to qtype (../model/model_awq.h): statistics over
 * tokens[0..n) (at most max_tokens, windows of `window`), then model_awq_apply on the
 * layers not in keep. c: statistics storage, initialised here (model_calib_free it);
 * it keeps the chosen alphas and scales. */
int backend_awq(model *m, const int32_t *tokens, int64_t n, int32_t window, int32_t bos,
                int64_t max_tokens, ggml_type qtype, const bool *keep, int n_threads,
                struct model_calib *c, char *err, size_t err_bytes);

/* Perplexity of tokens[0..n) (at most max_tokens) under m on the fast CPU kernels, the
 * way `inferd perplexity` and llama.cpp's llama-perplexity score: consecutive windows of
 * `window` tokens, the first replaced by bos (>= 0), each scored on its second half.
 * IFD_ERR_INVALID when no window fits. */
int backend_perplexity(const model *m, const int32_t *tokens, int64_t n, int32_t window, int32_t bos,
                       int64_t max_tokens, int n_threads, double *ppl, char *err, size_t err_bytes);
