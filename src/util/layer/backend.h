/* layer/backend.h — included by every header of src/backend/: the build fails when a room
 * that may not use the backend room includes one (see ../layering.h). */
#ifndef INFERD_UTIL_LAYER_BACKEND_H
#define INFERD_UTIL_LAYER_BACKEND_H
#include "../layering.h"
IFD_LAYER(BACKEND);
#endif
