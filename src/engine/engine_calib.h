/* engine_calib.h — AWQ calibration of a loaded model before it is quantized, shared by
 * --quantize --calibration on load (engine.c) and `inferd quantize --calibration`. */
#ifndef INFERD_ENGINE_CALIB_H
#define INFERD_ENGINE_CALIB_H
#include "../util/layer/engine.h"

#include <stdbool.h>

#include "../model/model.h"

/* Read and tokenize the text at path with m's vocabulary, collect the activation
 * statistics of its first 2048 tokens (at least 64: IFD_ERR_INVALID) (windows of 256, or the model's context), fold
 * AWQ scales for type qt into the layers not in keep (NULL: all), log what was done.
 * The scaled matrices are f32 copies until model_quantize converts them
 * (model_awq_trim frees them then). */
int engine_calibrate(model *m, const char *path, ggml_type qt, const bool *keep, int n_threads,
                     char *err, size_t err_bytes);

#endif
