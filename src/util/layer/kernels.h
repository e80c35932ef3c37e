/* layer/kernels.h — included by every header of src/backend/cpu/ (and cuda/): the
 * kernels are the backend's own; no other room may include them, the engine least of
 * all (DESIGN.md: the engine never calls a kernel). See ../layering.h. */
#ifndef INFERD_UTIL_LAYER_KERNELS_H
#define INFERD_UTIL_LAYER_KERNELS_H
#include "../layering.h"
IFD_LAYER(KERNELS);
#endif
