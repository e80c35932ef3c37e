/* layer/engine_model.h — included by engine/engine_model.h, the engine's one door for
 * the in-tree rooms that need its model (server, cli): see ../layering.h. */
#ifndef INFERD_UTIL_LAYER_ENGINE_MODEL_H
#define INFERD_UTIL_LAYER_ENGINE_MODEL_H
#include "../layering.h"
IFD_LAYER(ENGINE_MODEL);
#endif
