/* layer/engine.h — included by every header of src/engine/: the build fails when a room
 * that may not use the engine room includes one (see ../layering.h). */
#ifndef INFERD_UTIL_LAYER_ENGINE_H
#define INFERD_UTIL_LAYER_ENGINE_H
#include "../layering.h"
IFD_LAYER(ENGINE);
#endif
