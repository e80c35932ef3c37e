/* layer/model.h — included by every header of src/model/: the build fails when a room
 * that may not use the model room includes one (see ../layering.h). */
#ifndef INFERD_UTIL_LAYER_MODEL_H
#define INFERD_UTIL_LAYER_MODEL_H
#include "../layering.h"
IFD_LAYER(MODEL);
#endif
